"""Tileplan: CoSA-style tiling plans for DNN layers on GEMM accelerators."""

__version__ = "0.1.0"

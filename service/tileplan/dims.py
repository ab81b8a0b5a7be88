"""The canonical loop dimensions and tensors every layer is expressed in.

N batch, G groups, K output channels (per group), C input channels (per group), P/Q output rows/cols,
R/S filter rows/cols. W weights, I inputs, O outputs. A matmul Y[M,N] = A[M,K] B[K,N] is the conv with
P=M, C=K, K=N. Groups index all three tensors, which is how a depthwise conv (C=K=1 per group) stays
in one loop nest.
"""

from __future__ import annotations

from typing import Literal

Dim = Literal["N", "G", "K", "C", "P", "Q", "R", "S"]
Tensor = Literal["W", "I", "O"]

# Plain strings, so dictionaries keyed by them are `dict[str, ...]` everywhere; `Dim` and `Tensor` check the
# names where they come in (a Mapping's factors, double-buffered tensors).
DIMS: tuple[str, ...] = ("N", "G", "K", "C", "P", "Q", "R", "S")
TENSORS: tuple[str, ...] = ("W", "I", "O")

# Which dimensions index which tensor. I's P/Q/R/S relation is through the halo (see problem.py).
RELEVANT: dict[str, frozenset[str]] = {
    "W": frozenset({"G", "K", "C", "R", "S"}),
    "I": frozenset({"N", "G", "C", "P", "Q", "R", "S"}),
    "O": frozenset({"N", "G", "K", "P", "Q"}),
}

TENSOR_NAMES: dict[str, str] = {"W": "Weights", "I": "Inputs", "O": "Outputs"}

# What each dimension means, for legends next to loop nests (a matmul's M, K, N appear as P, C, K).
DIM_MEANING: dict[str, str] = {
    "N": "batch",
    "G": "groups",
    "K": "output channels (matmul N)",
    "C": "input channels (matmul K)",
    "P": "output rows (matmul M)",
    "Q": "output columns",
    "R": "filter rows",
    "S": "filter columns",
}

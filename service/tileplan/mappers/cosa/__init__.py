"""The `cosa` mapper: CoSA's MIP (Pyomo + HiGHS) derived from the descriptor, extended with exact
halos, double buffering, padded mapping, dataflow choice and weighted objectives; its answers are
re-ranked with the cost model and checked before they leave."""

from tileplan.mappers.cosa.mapper import CosaMapper

__all__ = ["CosaMapper"]

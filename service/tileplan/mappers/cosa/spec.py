"""Everything the CoSA MIP needs, derived from the descriptor and the problem (nothing hard-coded):
which level keeps which tensor, fan-outs and the dimensions each may unroll, per-tensor capacities
(fixed partitions or a choice among splits of a shared buffer), double-buffering options, and the
factorisations each dimension may use (its exact bound, or a bound padded to fill the array)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from tileplan.cost.gemmini import LibraryTerms, library_terms
from tileplan.cost.model import model_for
from tileplan.cost.params import CostParams
from tileplan.dims import DIMS, TENSORS
from tileplan.hardware import Architecture
from tileplan.problem import Problem, divisors, prime_factors

# Splits offered to a buffer shared by several tensors, in eighths of its capacity; in sixteenths for a buffer all
# three share under timeloop-model's semantics, where eighths left out the plans that give one tensor most of a small
# buffer (7 + 14 + 98 words of a 128-word buffer need 1/16 + 2/16 + 13/16: fuzz1_000 L2, 1.12x timeloop-mapper's cycles
# with eighths). Two tensors keep eighths (Simba's global buffer: its MIP as before).
SPLIT_STEPS = 8
SPLIT_STEPS_TIMELOOP = 16


@dataclass(frozen=True)
class Alternative:
    """One way to factor a dimension: its (possibly padded) bound and that bound's prime factors."""

    bound: int
    factors: tuple[int, ...]


@dataclass
class CosaSpec:
    problem: Problem
    arch: Architecture
    alternatives: dict[str, list[Alternative]]
    # (level, tensor) pairs for on-chip storage, and the capacity choices of each on-chip level:
    # a list of {tensor: bytes} options (one option = a fixed partition or an unshared buffer).
    capacity_options: dict[int, list[dict[str, float]]] = field(default_factory=dict)
    # How the cost model says the hardware executes a mapping, when it is not a plain loop nest.
    library: LibraryTerms | None = None

    @property
    def n_levels(self) -> int:
        return len(self.arch.levels)

    def onchip_keeps(self, tensor: str) -> list[int]:
        return [i for i, lv in enumerate(self.arch.levels[:-1]) if tensor in lv.keeps]

    def outer_onchip(self, tensor: str) -> int:
        """Outermost on-chip level keeping `tensor` (-1: it streams from DRAM to the MACs)."""
        keeps = self.onchip_keeps(tensor)
        return keeps[-1] if keeps else -1

    def spatial_ok(self, level: int, dim: str, factor: int) -> bool:
        lv = self.arch.levels[level]
        # the backing store too, where it feeds several instances (a Timeloop DRAM over Spad[0..5])
        return lv.fanout > 1 and dim in lv.spatial_dims and factor <= lv.fanout

    def halo_pairs(self, axis: int) -> list[tuple[int, int]]:
        """Candidate (output extent, filter extent) pairs of an input tile along one axis."""
        pdim, rdim = ("P", "R") if axis == 0 else ("Q", "S")
        ps = sorted({d for alt in self.alternatives[pdim] for d in divisors(alt.bound)})
        rs = sorted({d for alt in self.alternatives[rdim] for d in divisors(alt.bound)})
        return list(itertools.product(ps, rs))


def build_spec(problem: Problem, arch: Architecture, allow_padding: bool = True) -> CosaSpec:
    problem = problem.for_hardware(arch.hardware.input_tiles)
    alts: dict[str, list[Alternative]] = {}
    fanouts = sorted({lv.fanout for lv in arch.levels if lv.fanout > 1})
    for d in DIMS:
        bound = problem.dims[d]
        options = [Alternative(bound, tuple(prime_factors(bound)))]
        if allow_padding and any(d in lv.spatial_dims and lv.fanout > 1 for lv in arch.levels[:-1]):
            for f in fanouts:
                padded = math.ceil(bound / f) * f
                # Padding pays only when no divisor of the bound is close to filling the fan-out.
                if bound > f and padded != bound and _best_fill(bound, f) < 0.9 * f:
                    if padded not in [o.bound for o in options]:
                        options.append(Alternative(padded, tuple(prime_factors(padded))))
        alts[d] = options
    spec = CosaSpec(
        problem=problem, arch=arch, alternatives=alts,
        library=library_terms(arch, CostParams.for_descriptor(arch.hardware)),
    )
    timeloop = spec.library is None and model_for(arch) == "timeloop"
    for i, lv in enumerate(arch.levels[:-1]):
        kept = [t for t in TENSORS if t in lv.keeps]
        if not kept:
            continue
        assert lv.capacity is not None
        if lv.partition or len(kept) == 1:
            share = lv.partition or {kept[0]: 1.0}
            spec.capacity_options[i] = [{t: lv.capacity * share[t] for t in kept}]
        else:
            steps = SPLIT_STEPS_TIMELOOP if timeloop and len(kept) == 3 else SPLIT_STEPS
            words = int(lv.capacity / lv.word_bytes + 1e-9)
            if timeloop and len(kept) <= words < steps:
                # a buffer of a few words (every element one word under timeloop-model's terms): shares in whole
                # words, which fixed fractions miss (5 words as 2 + 2 + 1: 8 + 8 + 4 of 20 bytes, where sixteenths
                # give 8.75 + 8.75 + 5; the seed-4 fuzz's fuzz4_005 L0 could not unroll C2 over its MACs)
                steps = words
            spec.capacity_options[i] = [
                {t: lv.capacity * s / steps for t, s in zip(kept, split)} for split in _splits(len(kept), steps)
            ]
    return spec


def _best_fill(bound: int, fanout: int) -> int:
    return max(d for d in divisors(bound) if d <= fanout)


def _splits(n: int, steps: int) -> list[tuple[int, ...]]:
    """All ways to give n tensors positive shares of `steps` eighths."""
    return [c for c in itertools.product(range(1, steps), repeat=n) if sum(c) == steps]


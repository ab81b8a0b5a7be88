"""The tile intrinsics are built with TVM's IR builder (fast) and written as TVMScript sources (readable): the two
must be the same functions, or tensorize would match a description other than the one the sources define."""

from __future__ import annotations

import itertools

import pytest
import tvm  # a dependency of Tileplan: never skipped

from tileplan.codegen.targets import gemmini as g

CALLS = [
    (1, 1, 16, 16, 1, 1, 16, 1, 1, 1, 1),  # a matmul tile: unit n, p, r, s
    (1, 4, 16, 16, 3, 3, 16, 1, 1, 1, 1),
    (2, 4, 8, 16, 3, 3, 8, 2, 2, 1, 1),  # strided
    (1, 2, 7, 16, 3, 3, 4, 1, 1, 2, 2),  # dilated
    (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1),  # every axis unit
    (1, 3, 1, 5, 1, 7, 1, 1, 3, 1, 1),
]


def _same(built: tuple[object, object], source: tuple[str, str]) -> None:
    for b, src in zip(built, source):
        parsed = g.parse_source(src)
        tvm.ir.assert_structural_equal(b, parsed)
        assert b.script() == parsed.script()


@pytest.mark.parametrize("shape", CALLS)
@pytest.mark.parametrize("host", [False, True])
def test_tile_call_built_equals_its_source(shape: tuple[int, ...], host: bool) -> None:
    _same(g.tile_call(*shape, host=host), g.tile_call_source(*shape, host=host))


@pytest.mark.parametrize(("n", "p", "q", "k"), [(1, 1, 16, 16), (1, 4, 16, 8), (2, 3, 1, 1), (1, 1, 1, 1)])
@pytest.mark.parametrize("host", [False, True])
def test_tile_init_built_equals_its_source(n: int, p: int, q: int, k: int, host: bool) -> None:
    _same(g.tile_init(n, p, q, k, host=host), g.tile_init_source(n, p, q, k, host=host))


@pytest.mark.parametrize(("host", "full"), list(itertools.product([False, True], [False, True])))
@pytest.mark.parametrize(("n", "p", "q", "k", "scale", "lo"),
                         [(1, 1, 16, 16, 0.0123, -128), (1, 4, 16, 8, 1.0, 0), (2, 3, 1, 1, 3.5e-5, -128)])
def test_tile_store_built_equals_its_source(n: int, p: int, q: int, k: int, scale: float, lo: int, host: bool,
                                            full: bool) -> None:
    _same(g.tile_store(n, p, q, k, scale, lo, host=host, full=full),
          g.tile_store_source(n, p, q, k, scale, lo, host=host, full=full))


def test_a_different_source_is_told_apart() -> None:
    """The comparison can fail: a tile of another shape is not equal."""
    with pytest.raises(ValueError):
        _same(g.tile_call(*CALLS[1]), g.tile_call_source(*CALLS[2]))

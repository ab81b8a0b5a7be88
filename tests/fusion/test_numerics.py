"""An output zero point on chip: the scale unit has no zero point, so the only candidate is an integer offset of
the accumulator (its bias); `numerics.offset_mismatches` counts the accumulators it would requantize wrongly."""

from __future__ import annotations

import numpy as np

from tileplan.fusion import numerics


def host(acc: np.ndarray, m: float, z: int, lo: int = -128, hi: int = 127) -> np.ndarray:
    return np.clip(np.rint(acc.astype(np.float32) * np.float32(m)) + z, lo, hi)


def scale_unit(acc: np.ndarray, m: float, c: int) -> np.ndarray:
    return np.clip(np.rint((acc + c).astype(np.float32) * np.float32(m)), -128, 127)


def test_a_power_of_two_multiplier_has_an_exact_offset() -> None:
    """z / M an integer: acc + z / M scales to exactly acc * M + z, so the offset reproduces the host."""
    bad, c = numerics.offset_mismatches(2.0 ** -7, -128, -128, 127)
    assert bad == 0 and c == -128 * 2 ** 7
    acc = np.arange(-40000, 40000)
    np.testing.assert_array_equal(scale_unit(acc, 2.0 ** -7, c), host(acc, 2.0 ** -7, -128))


def test_a_generic_multiplier_has_none_and_the_count_is_what_the_scale_unit_would_get_wrong() -> None:
    m, z = float(np.float32(0.0116943)), -128  # a MobileNetV2 depthwise's (ReLU6: range [0, x], z = -128)
    bad, c = numerics.offset_mismatches(m, z, -128, 127)
    assert bad > 0
    acc = np.arange(int((-130 - z) / m) - 10, int((130 - z) / m) + 10)
    assert int(np.count_nonzero(scale_unit(acc, m, c) != host(acc, m, z))) == bad
    for other in (c - 1, c + 1):  # the reported offset is the best one
        assert np.count_nonzero(scale_unit(acc, m, other) != host(acc, m, z)) >= bad


def test_the_reason_names_the_mismatches() -> None:
    class Rq:
        multipliers = np.array([0.0116943], np.float32)
        zero_point, lo, hi = -128, -128, 127

    class Spec:
        requant, clamp = Rq(), None

    why = numerics.requant_on_chip("dw", Spec())
    assert why is not None and "output zero point -128" in why and "accumulator offset" in why


def test_the_zoo_mobilenet_v2_multipliers_one_exact_offset_and_one_three_off() -> None:
    """Two expands' multipliers of the zoo's MobileNetV2 (bench/zoo_export.py, z = -128 after the folded ReLU6):
    features.8's has an exact offset (the scale unit then stores the host's int8 for every accumulator, saturated
    ones included), features.10's, 0.07% away, none: its best offset gets 3 accumulators wrong, as a brute-force
    count over every accumulator that can reach the int8 range says."""
    acc = np.arange(-60000, 60000)
    bad, c = numerics.offset_mismatches(0.006855195853859186, -128, -128, 127)
    assert (bad, c) == (0, -18672)
    np.testing.assert_array_equal(scale_unit(acc, 0.006855195853859186, c), host(acc, 0.006855195853859186, -128))
    bad, c = numerics.offset_mismatches(0.006850051693618298, -128, -128, 127)
    assert bad == 3
    assert int(np.count_nonzero(scale_unit(acc, 0.006850051693618298, c)
                                != host(acc, 0.006850051693618298, -128))) == 3


def test_a_multiplier_too_small_to_enumerate_is_not_checked() -> None:
    """A model's huge output scale (3e38) makes M ~1e-40: the accumulators between its rounding steps were
    enumerated from -130 / M to 130 / M (an OverflowError, a 500; at M = 1e-10, 10^12 accumulators: hours). Past
    MAX_OFFSET_SPAN accumulators (or M not a positive finite number) the offset is reported as not checked."""
    import time

    start = time.monotonic()
    for m in (1e-40, 1e-10, 0.0, float("nan"), float("inf"), -0.5):
        assert numerics.offset_mismatches(m, -128, -128, 127) is None, m
    assert time.monotonic() - start < 1
    assert numerics.offset_mismatches(2.0 ** -7, -128, -128, 127) is not None

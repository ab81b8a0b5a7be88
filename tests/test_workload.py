import pytest

from tileplan.errors import InputError
from tileplan.problem import Problem, prime_factors
from tileplan.workload import layer_doc, load_workload, parse_layer, parse_layer_spec


def conv(**kw):
    base = {"op": "conv2d", "in_channels": 64, "out_channels": 256, "in_h": 56, "in_w": 56}
    base.update(kw)
    return parse_layer(base)


def test_contract_defaults_and_dims():
    layer = conv(name="res2_1x1")
    doc = layer_doc(layer)
    assert doc["dims"] == {"N": 1, "G": 1, "K": 256, "C": 64, "P": 56, "Q": 56, "R": 1, "S": 1}
    assert doc["stride"] == [1, 1] and doc["dilation"] == [1, 1] and doc["kernel"] == [1, 1]


def test_matmul_and_dense_alias():
    a = parse_layer({"op": "matmul", "M": 1, "K": 2048, "N": 1000})
    b = parse_layer({"op": "dense", "M": 1, "K": 2048, "N": 1000})
    assert a.dims() == b.dims() == {"N": 1, "G": 1, "K": 1000, "C": 2048, "P": 1, "Q": 1, "R": 1, "S": 1}
    assert Problem.from_layer(a).key() == Problem.from_layer(b).key()


def test_strided_dilated_output_size():
    layer = conv(kernel=3, stride=2, padding=2, dilation=2, in_h=57, in_w=30)
    # (57 + 2*2 - 2*(3-1) - 1) // 2 + 1 = 29; (30 + 4 - 4 - 1) // 2 + 1 = 15
    assert (layer.out_h, layer.out_w) == (29, 15)


def test_depthwise_puts_channels_in_groups():
    layer = conv(in_channels=32, out_channels=32, groups=32, kernel=3, padding=1)
    assert layer.dims() == {"N": 1, "G": 32, "K": 1, "C": 1, "P": 56, "Q": 56, "R": 3, "S": 3}


@pytest.mark.parametrize(
    "fields,loc,msg",
    [
        ({"in_h": 0}, ("layers", 0, "in_h"), "greater than 0"),
        ({"kernel": 9, "in_h": 4, "in_w": 4}, ("layers", 0, "kernel"), "larger than the padded input"),
        ({"groups": 3}, ("layers", 0, "groups"), "3 groups do not divide in_channels=64"),
        ({"stride": [0, 1]}, ("layers", 0, "stride"), "must be positive"),
        ({"padding": -1}, ("layers", 0, "padding"), "must not be negative"),
        ({"kernel": [3, 3, 3]}, ("layers", 0, "kernel"), "Tuple should have at most 2 items"),
    ],
)
def test_impossible_layers_name_the_field(fields, loc, msg):
    base = {"op": "conv2d", "in_channels": 64, "out_channels": 64, "in_h": 56, "in_w": 56}
    base.update(fields)
    with pytest.raises(InputError) as exc:
        parse_layer(base, ("layers", 0))
    assert exc.value.loc[: len(loc)] == loc
    assert msg in str(exc.value)


def test_missing_op_and_unknown_op():
    with pytest.raises(InputError, match=r"op: missing"):
        parse_layer({"M": 1})
    with pytest.raises(InputError, match=r"op"):
        parse_layer({"op": "pool", "M": 1})


def test_cli_spec_forms():
    a = parse_layer_spec("conv2d:in_channels=64,out_channels=64,in_h=56,in_w=56,kernel=3,padding=1")
    b = parse_layer_spec("conv2d:in_channels=64,out_channels=64,in_h=56,in_w=56,kernel=3x3,padding=[1,1]")
    assert a == b and a.out_h == 56


def test_resnet_workload_loads(examples):
    name, layers = load_workload(examples / "workloads/resnet50_unique.yaml")
    assert name == "resnet50" and len(layers) == 24 and sum(layer.count for layer in layers) == 54
    first = Problem.from_layer(layers[0])
    assert first.dims["P"] == 112 and first.macs == 118013952


def test_halo_exact_input_tile():
    p = Problem.from_layer(conv(kernel=3, stride=2, padding=1))
    tile = {"N": 1, "G": 1, "K": 1, "C": 4, "P": 7, "Q": 5, "R": 3, "S": 1}
    # rows: (7-1)*2 + 3 = 15; cols: one tap at stride 2 touches 5 of the 9 columns it spans
    assert p.tile_elements("I", tile) == 4 * 15 * 5


def test_prime_factors():
    assert prime_factors(1000) == [5, 5, 5, 2, 2, 2] and prime_factors(1) == [] and prime_factors(97) == [97]


def test_strided_input_tile_counts_only_touched_rows():
    from tileplan.problem import touched

    assert touched(7, 1, 2, 1) == 7  # 1x1 stride 2 reads every other row
    assert touched(7, 3, 2, 1) == 15  # 3 taps at stride 2 overlap: the span
    assert touched(4, 2, 3, 1) == 8  # 2 taps, stride 3: pairs with gaps
    assert touched(3, 3, 1, 2) == 7  # dilated taps 0,2,4 at stride 1: 0..6 with no gap
    assert touched(2, 2, 5, 2) == 4  # {0,2} and {5,7}


def test_tile_elements_count_what_each_tensors_dimensions_span():
    """Weights and outputs span the product of their own dimensions (RELEVANT), whatever the tile."""
    import math
    import random

    from tileplan.dims import DIMS, RELEVANT
    from tileplan.problem import Problem

    rng = random.Random(15)
    problem = Problem(dims=dict.fromkeys(DIMS, 64))
    for _ in range(200):
        tile = {d: rng.randint(1, 64) for d in DIMS}
        for t in ("W", "O"):
            assert problem.tile_elements(t, tile) == math.prod(tile[d] for d in RELEVANT[t])

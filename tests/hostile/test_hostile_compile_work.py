"""Small, valid models whose compile is hours of work (issue 16's open DoS: one compile holds the compile lane, which
every other owner's compile waits for, until COMPILE_TIME_LIMIT_S; a compile stopped there was the server's fault and
the next identical request ran it again).

1. A 165-byte model: one int8 MaxPool with a 64x64 window over a [1, 64, 1024, 2048] input (2^27 elements, within
   max_tensor_elements): 5.5 * 10^11 compares in the compile-time emulated run (measured ~1.5 * 10^8 a second: an
   hour).
2. A 5 MB model: eight 256-channel 3x3 convolutions over [1, 256, 512, 1024] images: 2.5 * 10^12 MACs to emulate
   (~1.3 * 10^9 a second: half an hour).
3. 300 matrix products of distinct shapes (10 KB): 300 MIP solves (0.4-30 s each).

Each is a 422 at body.model naming the bound (`tileplan.frontend.work`), before anything is stored; the CLI says the
same in one line. Without the emulated run (options.emulate=false) the MAC and host-op bounds do not apply.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tileplan.api.app import create_app
from tileplan.cli import main
from tileplan.errors import InputError
from tileplan.frontend import onnx_import, work, zoo
from tileplan.jobs.compiles import read_model
from tileplan.settings import Settings


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: tuple[Any, ...] | list[Any] = ()) -> bytes:
    from onnx import helper

    graph = helper.make_graph(nodes, "work", inputs, outputs, list(inits))
    return bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())


def _int8(name: str, shape: list[int]) -> Any:
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.INT8, shape)


def _qparams() -> list[Any]:
    from onnx import numpy_helper

    return [numpy_helper.from_array(np.array(0.05, np.float32), "s"), numpy_helper.from_array(np.array(0, np.int8), "z")]


def maxpool_bomb() -> bytes:
    from onnx import helper

    shape = [1, 64, 1024, 2048]
    pool = helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[64, 64], pads=[32, 32, 31, 31])
    return _model([pool], [_int8("x", shape)], [_int8("y", shape)])


def conv_bomb(layers: int = 8) -> bytes:
    from onnx import helper, numpy_helper

    shape = [1, 256, 512, 1024]
    inits, nodes, x = _qparams(), [], "x"
    rng = np.random.default_rng(0)
    for i in range(layers):
        inits.append(numpy_helper.from_array(rng.integers(-3, 4, (256, 256, 3, 3)).astype(np.int8), f"w{i}"))
        nodes.append(helper.make_node("QLinearConv", [x, "s", "z", f"w{i}", "s", "z", "s", "z"], [f"y{i}"],
                                      name=f"conv{i}", kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        x = f"y{i}"
    return _model(nodes, [_int8("x", shape)], [_int8(x, shape)], inits)


def distinct_matmuls(n: int = 300) -> bytes:
    """n matrix products [i + 1, 16] x [16, 16], each on an input of its own: n distinct layers to plan."""
    from onnx import helper, numpy_helper

    inits = [*_qparams(), numpy_helper.from_array(np.eye(16, dtype=np.int8), "w")]
    nodes = [helper.make_node("QLinearMatMul", [f"x{i}", "s", "z", "w", "s", "z", "s", "z"], [f"y{i}"], name=f"mm{i}")
             for i in range(n)]
    return _model(nodes, [_int8(f"x{i}", [i + 1, 16]) for i in range(n)],
                  [_int8(f"y{i}", [i + 1, 16]) for i in range(n)], inits)


BOMBS = {"maxpool": (maxpool_bomb, "max_compile_host_ops"), "conv": (conv_bomb, "max_compile_macs"),
         "layers": (distinct_matmuls, "max_compile_layers")}


# -- the check itself ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_the_intake_check_refuses_each_naming_its_bound(bomb: str) -> None:
    make, bound = BOMBS[bomb]
    t0 = time.perf_counter()
    with pytest.raises(InputError) as err:
        read_model(make(), {}, False)
    assert err.value.loc == ("model",) and err.value.type == "too_costly", err.value
    assert bound in err.value.msg, err.value.msg
    assert time.perf_counter() - t0 < 60


@pytest.mark.parametrize("bomb", ["maxpool", "conv"])
def test_without_the_emulated_run_only_the_planning_bound_applies(bomb: str) -> None:
    make, _ = BOMBS[bomb]
    assert read_model(make(), {}, False, emulate=False) == "work"
    with pytest.raises(InputError, match="max_compile_layers"):
        read_model(distinct_matmuls(), {}, False, emulate=False)


def test_the_counts_are_the_models_work() -> None:
    """MACs and element operations as the bounds count them, on the bombs and on a zoo network (far under them)."""
    w = work.estimate(onnx_import.load_model(conv_bomb(2)).model)
    assert w.macs == 2 * (512 * 1024 * 256) * (256 * 9) and len(w.layers) == 1
    w = work.estimate(onnx_import.load_model(maxpool_bomb()).model)
    assert w.heaviest_host == ((1 << 27) + (1 << 27) * 64 * 64, "pool")  # its input, and each output a window
    assert len(work.estimate(onnx_import.load_model(distinct_matmuls(20)).model).layers) == 20
    net = onnx_import.load_model(zoo.build("resnet18", "qdq")).model
    w = work.check(net)  # (does not raise)
    assert 0 < w.macs < work.MAX_COMPILE_MACS // 50 and 0 < w.host_ops < work.MAX_COMPILE_HOST_OPS // 100
    assert 0 < len(w.layers) < work.MAX_COMPILE_LAYERS // 10


# -- through POST /compile and the CLI ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("hostile_work"), solver_processes=1, wait_limit_s=60)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_compile_refuses_each_with_a_422_and_stores_nothing(client: TestClient, bomb: str) -> None:
    make, bound = BOMBS[bomb]
    r = client.post("/compile", json={"hardware": "gemmini-16x16", "model": base64.b64encode(make()).decode(),
                                      "wait": True})
    assert r.status_code == 422, r.text[:2000]
    d = r.json()["detail"][0]
    assert d["loc"] == ["body", "model"] and d["type"] == "too_costly" and bound in d["msg"], d
    assert client.get("/compiles").json()["compiles"] == []


def test_the_cli_says_so_in_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "pool.onnx"
    path.write_bytes(maxpool_bomb())
    code = main(["compile", str(path), "--hw", "gemmini-16x16", "--out", str(tmp_path / "out")])
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "max_compile_host_ops" in lines[0], err
    assert "--no-emulate" in lines[0] or "emulate" in lines[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_spent_planning_budget_plans_the_rest_with_the_librarys_tiling() -> None:
    """Within max_compile_layers, each distinct layer's search may still take up to options.time_limit_s (a conv of
    prime sizes took 30 s): a service compile's planning stops searching after compile_plan_budget_s and plans the
    layers left with gemmini-auto, saying so, instead of holding the compile lane for layers x time_limit_s."""
    from tileplan.frontend.compile import CompileOptions, compile_model
    from tileplan.hardware.catalog import get_hardware

    result = compile_model(distinct_matmuls(3), get_hardware("gemmini-16x16"),
                           CompileOptions(time_limit_s=2, emulate=False, fusion="off"), plan_budget_s=1e-9)
    said = [n for n in result.summary["notes"] if "planning budget spent" in n]
    assert len(said) == 1 and "2 distinct layer(s) planned by gemmini-auto" in said[0], result.summary["notes"]
    assert "mm1" in said[0] and "mm2" in said[0] and "mm0" not in said[0], said
    assert sorted(op["name"] for op in result.summary["ops"] if op["where"] == "accelerator") == ["mm0", "mm1", "mm2"]

"""Issue 23, cases 1 and 2: a request never makes the server open one of its files, and a calibration upload is
bounded before anything is decompressed or allocated.

Case 1: an ONNX tensor stored as *external data* names a file; the server's working directory holds its own files
(`pyproject.toml` here: the tests run from the repository's root). Every form (relative, absolute, `..`, a symlink,
`file://`), in an initializer, a Constant node's attribute and a subgraph, is refused with a 422 naming the tensor,
by POST /compile and POST /schedule (`model`), before ONNX's checker (which would stat the file) runs.

Case 2: an .npz zip bomb, an .npz of a million samples, a pickled array, a member whose header declares more than
the member holds: each a 422 at `calibration`, with the process's memory untouched.
"""

from __future__ import annotations

import base64
import io
import os
import resource
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tileplan.api.app import create_app
from tileplan.errors import InputError
from tileplan.frontend import zoo
from tileplan.frontend.calibration import read_calibration
from tileplan.frontend.onnx_import import decode
from tileplan.settings import Settings
from tileplan.workload_onnx import load_onnx

ROOT = Path(__file__).resolve().parents[2]
SECRET = (ROOT / "pyproject.toml").read_bytes()


@pytest.fixture(scope="module")
def mlp_model() -> Any:
    import onnx

    return onnx.load_model_from_string(zoo.build("mlp", "qdq"))


def _external(model: Any, location: str, where: str = "initializer") -> bytes:
    """`model` with one tensor's data moved to external data at `location` (nothing is written anywhere)."""
    import onnx
    from onnx import TensorProto, external_data_helper, helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    if where == "initializer":
        t = max(m.graph.initializer, key=lambda t: len(t.raw_data))
    elif where == "constant":
        t = helper.make_tensor("leak", TensorProto.INT8, [64], vals=np.zeros(64, np.int8).tobytes(), raw=True)
        node = helper.make_node("Constant", [], ["leak_out"], name="leak_const", value=t)
        m.graph.node.insert(0, node)
        m.graph.output.append(helper.make_tensor_value_info("leak_out", TensorProto.INT8, [64]))
        t = m.graph.node[0].attribute[0].t  # the graph's copy of the node
    else:  # a tensor inside an If's branch
        t = helper.make_tensor("leak", TensorProto.INT8, [64], vals=np.zeros(64, np.int8).tobytes(), raw=True)
        branch = helper.make_graph([helper.make_node("Identity", ["leak"], ["y"])], "b", [],
                                   [helper.make_tensor_value_info("y", TensorProto.INT8, [64])], [t])
        cond = helper.make_tensor("cond", TensorProto.BOOL, [], [True])
        m.graph.initializer.append(cond)
        m.graph.node.append(helper.make_node("If", ["cond"], ["leak_out"], name="leak_if",
                                             then_branch=branch, else_branch=branch))
        m.graph.output.append(helper.make_tensor_value_info("leak_out", TensorProto.INT8, [64]))
        t = m.graph.node[-1].attribute[0].g.initializer[0]
    size = len(t.raw_data) or 64
    external_data_helper.set_external_data(t, location, offset=0, length=min(size, len(SECRET)))
    t.ClearField("raw_data")
    t.data_location = onnx.TensorProto.EXTERNAL
    return m.SerializeToString()


LOCATIONS = ["pyproject.toml", str(ROOT / "pyproject.toml"), "../main/pyproject.toml", "./pyproject.toml",
             "file://pyproject.toml", "README.md"]


@pytest.mark.parametrize("location", LOCATIONS)
def test_external_data_is_refused_before_any_file_is_touched(mlp_model: Any, location: str) -> None:
    data = _external(mlp_model, location)
    with pytest.raises(InputError) as err:
        decode(data)
    assert err.value.loc[0] == "model" and "external data" in err.value.msg
    with pytest.raises(InputError) as err2:
        load_onnx(data)
    assert "external data" in err2.value.msg


def test_external_data_through_a_symlink_is_refused(mlp_model: Any, tmp_path: Path) -> None:
    link = tmp_path / "weights.bin"
    link.symlink_to(ROOT / "pyproject.toml")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises(InputError, match="external data"):
            decode(_external(mlp_model, "weights.bin"))
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("where", ["constant", "subgraph"])
def test_external_data_anywhere_in_the_model_is_refused(mlp_model: Any, where: str) -> None:
    with pytest.raises(InputError) as err:
        decode(_external(mlp_model, "pyproject.toml", where))
    assert "leak" in err.value.msg and "external data" in err.value.msg


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    data_dir = tmp_path_factory.mktemp("hostile_compile")
    with TestClient(create_app(Settings(data_dir=data_dir, solver_processes=1, wait_limit_s=300))) as c:
        yield c


def _leaked(r: Any) -> bool:
    return SECRET[:200] in r.content or base64.b64encode(SECRET[:60]) in r.content


@pytest.mark.parametrize("location", ["pyproject.toml", "./pyproject.toml", "file://pyproject.toml"])
def test_compile_refuses_external_data_with_a_422_naming_the_tensor(client: TestClient, mlp_model: Any,
                                                                    location: str) -> None:
    data = _external(mlp_model, location)
    name = max(mlp_model.graph.initializer, key=lambda t: len(t.raw_data)).name
    r = client.post("/compile", json={"hardware": "gemmini-16x16", "model": base64.b64encode(data).decode(),
                                      "options": {"time_limit_s": 2}})
    assert r.status_code == 422, r.text
    d = r.json()["detail"][0]
    assert d["loc"][:2] == ["body", "model"] and name in d["msg"] and "external data" in d["msg"]
    assert not _leaked(r)
    r = client.post("/compile", files={"model": ("m.onnx", data)}, data={"request": '{"hardware": "gemmini-16x16"}'})
    assert r.status_code == 422 and not _leaked(r), r.text
    assert client.get("/compiles").json()["compiles"] == []
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "model": base64.b64encode(data).decode()})
    assert r.status_code == 422 and "external data" in r.text and not _leaked(r), r.text


# -- case 2: calibration data ---------------------------------------------------------------------------------


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def _zip_bomb(gib: float = 1.0) -> bytes:
    """An .npz whose one member decompresses to `gib` GiB of zeros (a ~1 MB upload per GiB)."""
    n = int(gib * (1 << 30))
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "|u1", "fortran_order": False, "shape": (n,)})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z, z.open("input.npy", "w", force_zip64=True) as f:
        f.write(header.getvalue())
        chunk = bytes(1 << 24)
        for _ in range(n // len(chunk)):
            f.write(chunk)
    return buf.getvalue()


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_zip_bomb_is_refused_from_its_declared_sizes() -> None:
    bomb = _zip_bomb(1.0)
    assert len(bomb) < 2 * 1024 * 1024
    before = _max_rss_mib()
    with pytest.raises(InputError) as err:
        read_calibration(bomb)
    assert err.value.loc == ("calibration",) and "bytes" in err.value.msg
    assert _max_rss_mib() - before < 64  # nothing of the GiB was decompressed


def test_a_lying_header_is_refused() -> None:
    """A member whose .npy header declares a shape larger than the member holds: refused before the array is
    allocated (numpy would allocate the declared shape first)."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (1 << 28, 4)})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("input.npy", header.getvalue() + bytes(64))
    with pytest.raises(InputError, match="declares"):
        read_calibration(buf.getvalue())


def test_a_million_samples_are_refused() -> None:
    with pytest.raises(InputError, match="samples"):
        read_calibration(_npz({"input": np.zeros((1 << 20, 1), np.float32)}))


def test_pickled_or_object_arrays_are_refused() -> None:
    buf = io.BytesIO()
    np.savez(buf, input=np.array([{"a": 1}, None], dtype=object))
    with pytest.raises(InputError, match="dtype"):
        read_calibration(buf.getvalue())


def test_too_many_members_are_refused() -> None:
    with pytest.raises(InputError, match="arrays"):
        read_calibration(_npz({f"x{i}": np.zeros((2, 1), np.float32) for i in range(300)}))


def test_good_calibration_still_reads() -> None:
    feeds = read_calibration(_npz({"a": np.ones((3, 2, 2), np.float32), "b": np.zeros((3, 4), np.float32)}))
    assert len(feeds) == 3 and feeds[0]["a"].shape == (2, 2) and feeds[2]["b"].shape == (4,)


def test_compile_with_a_zip_bomb_is_a_422_and_the_api_stays_small(client: TestClient) -> None:
    bomb = _zip_bomb(1.0)
    before = _max_rss_mib()
    r = client.post("/compile", files={"model": ("m.onnx", zoo.build("mlp", "float")),
                                       "calibration": ("c.npz", bomb)},
                    data={"request": '{"hardware": "gemmini-16x16", "options": {"quantize": true}}'})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][:2] == ["body", "calibration"]
    assert _max_rss_mib() - before < 128

"""Cases 7, 8, 9 and 11 of issue 16: what storage cannot hold, hardware names and ownership, YAML that refers to
itself, absurd numbers, and coercions that would change a request's meaning. Each is a 4xx naming the field."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from service_procs import FC

from tileplan.api.app import create_app
from tileplan.hardware.catalog import catalog
from tileplan.settings import Settings

TOKENS = {"alice": {"authorization": "Bearer alice-token"}, "bob": {"authorization": "Bearer bob-token"}}


def _client(settings: Settings) -> TestClient:
    """Writing as alice unless a request says otherwise (with tokens configured every write needs one)."""
    return TestClient(create_app(settings), raise_server_exceptions=False, headers=TOKENS["alice"])


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("hostile"), solver_processes=1, max_time_limit_s=30,
                        tokens=["alice-token", "bob-token"])
    with _client(settings) as c:
        yield c


def raw_post(client: TestClient, path: str, body: object, headers: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    """JSON as a client library writes it: non-ASCII text escaped, so lone surrogates travel as `\\udXXX`."""
    return client.post(path, content=json.dumps(body).encode(), headers={"content-type": "application/json",
                                                                         **(headers or {})})


def item(r) -> dict:  # type: ignore[no-untyped-def]
    assert "Traceback" not in r.text
    return r.json()["detail"][0]


def gemmini(**changes: object) -> dict:
    return {**catalog()["gemmini-8x8"].model_dump(mode="json"), **changes}


# -- case 7: text the database cannot store -------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["conv\ud800", "a\x00b"])
def test_unstorable_layer_name_is_refused(client: TestClient, bad: str) -> None:
    r = raw_post(client, "/schedule", {"hardware": "gemmini-16x16", "layers": [{**FC, "name": bad}]})
    assert r.status_code == 422, r.text
    assert item(r)["loc"] == ["body", "layers", 0, "name"] and "cannot be stored" in item(r)["msg"]


def test_unstorable_text_inside_a_yaml_descriptor(client: TestClient) -> None:
    hw = {**gemmini(name="nul-npu"), "description": "line\x00two"}
    r = raw_post(client, "/schedule", {"hardware": hw, "layers": [FC]})
    assert r.status_code == 422 and item(r)["loc"] == ["body", "hardware", "description"], r.text
    yaml_text = "name: nul-npu\ndescription: \"a\\0b\"\n" + "\n".join(
        f"{k}: {json.dumps(v)}" for k, v in gemmini().items() if k not in ("name", "description"))
    r = client.post("/hardware", content=yaml_text.encode(), headers={"content-type": "application/yaml",
                                                                     **TOKENS["alice"]})
    assert r.status_code == 422 and item(r)["loc"][-1] == "description", r.text


def test_unstorable_path_and_query_parameters(client: TestClient) -> None:
    for url, loc in (("/plans?hardware=%00", ["query", "hardware"]), ("/hardware/a%00b", ["path", "name"]),
                     ("/jobs/a%00b", ["path", "job_id"]), ("/plans?op=%00", ["query", "op"])):
        r = client.get(url)
        assert r.status_code == 422 and item(r)["loc"] == loc, (url, r.text)


def test_unstorable_parameters_on_postgresql(fresh_pg: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings = Settings(data_dir=tmp_path, database_url=fresh_pg, solver_processes=1)
    with _client(settings) as c:
        for url in ("/plans?hardware=%00", "/hardware/a%00b", "/jobs/a%00b", "/plans?hardware=x%00&op=conv2d"):
            r = c.get(url)
            assert r.status_code == 422, (url, r.status_code, r.text)
        r = raw_post(c, "/schedule", {"hardware": "gemmini-16x16", "layers": [{**FC, "name": "fc\x00"}]})
        assert r.status_code == 422 and item(r)["loc"] == ["body", "layers", 0, "name"], r.text
        assert c.get("/hardware/gemmini-16x16").status_code == 200


# -- case 8: registered hardware: safe names, an owner, a version, explicit replacement ---------------------------

def test_register_twice_is_a_conflict_and_put_replaces(client: TestClient) -> None:
    first = client.post("/hardware", json=gemmini(name="team-npu"), headers=TOKENS["alice"])
    assert first.status_code == 201 and first.json()["version"] == 1 and first.json()["owner"]
    again = client.post("/hardware", json=gemmini(name="team-npu", description="changed"), headers=TOKENS["alice"])
    assert again.status_code == 409 and "PUT" in item(again)["msg"]
    assert client.get("/hardware/team-npu").json()["description"] == catalog()["gemmini-8x8"].description
    replaced = client.put("/hardware/team-npu", json=gemmini(description="v2"), headers=TOKENS["alice"])
    assert replaced.status_code == 200 and replaced.json()["version"] == 2, replaced.text
    got = client.get("/hardware/team-npu").json()
    assert got["description"] == "v2" and got["version"] == 2 and got["owner"] == first.json()["owner"]
    # only the token that registered it may replace or delete it
    assert client.put("/hardware/team-npu", json=gemmini(), headers=TOKENS["bob"]).status_code == 403
    assert client.delete("/hardware/team-npu", headers=TOKENS["bob"]).status_code == 403
    assert client.delete("/hardware/team-npu", headers=TOKENS["alice"]).status_code == 204


@pytest.mark.parametrize("name", ["a/b", "x" * 100_000, "two\nlines", "", " lead", "../etc"])
def test_hardware_names_are_safe_path_segments(client: TestClient, name: str) -> None:
    r = client.post("/hardware", json=gemmini(name=name), headers=TOKENS["alice"])
    assert r.status_code in (413, 422), (name[:20], r.status_code)
    if r.status_code == 422:
        assert item(r)["loc"][-1] == "name" and len(r.text) < 2000
    assert all(h["name"] != name for h in client.get("/hardware").json()["hardware"])


def test_unknown_hardware_lists_a_bounded_number_of_names(client: TestClient) -> None:
    for i in range(30):
        r = client.post("/hardware", json=gemmini(name=f"npu-{i:02d}-" + "y" * 80), headers=TOKENS["alice"])
        assert r.status_code == 201, r.text
    r = client.post("/schedule", json={"hardware": "no-such-npu", "layers": [FC]})
    assert r.status_code == 422 and item(r)["loc"] == ["body", "hardware"]
    assert "more (GET /hardware)" in item(r)["msg"] and len(r.text) < 4000, len(r.text)


# -- case 9: YAML that refers to itself, absurd numbers -----------------------------------------------------------

RECURSIVE_TIMELOOP = """
architecture:
  version: 0.3
  subtree:
    - &top
      name: System
      local:
        - name: DRAM
          class: DRAM
          attributes: {word-bits: 8}
      subtree: [*top]
"""


def test_recursive_yaml_anchor_is_a_422(client: TestClient) -> None:
    r = client.post("/schedule", json={"hardware": {"name": "loop", "format": "timeloop", "source": RECURSIVE_TIMELOOP},
                                       "layers": [FC]})
    assert r.status_code == 422 and item(r)["loc"] == ["body", "hardware", "source"], r.text
    assert "refers to itself" in item(r)["msg"]


def test_alias_bomb_is_a_422(client: TestClient) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 7):  # 10^7 values from a few hundred bytes
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    r = client.post("/schedule", json={"hardware": {"name": "bomb", "source": "\n".join(lines)}, "layers": [FC]})
    assert r.status_code == 422 and "expands to more than" in item(r)["msg"], r.text


def test_denormal_bandwidth_is_a_422_with_the_bound(client: TestClient) -> None:
    hw = gemmini(name="slow-npu")
    hw["memory_levels"][-1]["bandwidth"] = 1e-320
    r = client.post("/schedule", json={"hardware": hw, "layers": [FC]})
    assert r.status_code == 422, r.text
    assert item(r)["loc"][-3:] == ["memory_levels", len(hw["memory_levels"]) - 1, "bandwidth"]
    assert "0.000001" in item(r)["msg"]


def test_huge_pe_count_is_a_422_with_the_bound(client: TestClient) -> None:
    source = (RECURSIVE_TIMELOOP.replace("- &top", "-").replace("subtree: [*top]", "subtree:\n        - name: PE[0..9999999999999999]\n"
              "          local: [{name: MAC, class: intmac, attributes: {word-bits: 8}}]"))
    r = client.post("/schedule", json={"hardware": {"name": "huge", "format": "timeloop", "source": source},
                                       "layers": [FC]})
    assert r.status_code == 422, r.text
    assert "at most" in item(r)["msg"] and item(r)["loc"][:2] == ["body", "hardware"]


# -- case 11: coercions that change meaning -----------------------------------------------------------------------

def test_boolean_is_not_a_channel_count(client: TestClient) -> None:
    layer = {"op": "conv2d", "in_channels": True, "out_channels": 16, "in_h": 8, "in_w": 8}
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [layer]})
    assert r.status_code == 422 and item(r)["loc"] == ["body", "layers", 0, "in_channels"], r.text
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "layers": [{**layer, "in_channels": 16,
                                                                                  "kernel": [True, 1]}]})
    assert r.status_code == 422 and item(r)["loc"][:4] == ["body", "layers", 0, "kernel"], r.text


def test_unknown_cost_params_are_refused(client: TestClient) -> None:
    hw = gemmini(name="typo-npu", cost_params={"dram_eficiency": 0.5})
    r = client.post("/schedule", json={"hardware": hw, "layers": [FC]})
    assert r.status_code == 422 and item(r)["loc"][-1] == "cost_params" and "dram_eficiency" in item(r)["msg"]
    hw["cost_params"] = {"dram_efficiency": True}
    r = client.post("/schedule", json={"hardware": hw, "layers": [FC]})
    assert r.status_code == 422, r.text


def test_oversized_descriptors_are_refused_before_parsing(client: TestClient) -> None:
    for hw in (gemmini(name="big", description="d" * 300_000),
               {"name": "big", "format": "tileplan", "source": "# " + "x" * 300_000 + "\n"}):
        r = client.post("/schedule", json={"hardware": hw, "layers": [FC]})
        assert r.status_code == 422 and "max_descriptor_bytes" in item(r)["msg"], r.text[:300]
    long = gemmini(name="long-description", description="d" * 20_000)  # under the size bound, over the field's
    r = client.post("/schedule", json={"hardware": long, "layers": [FC]})
    assert r.status_code == 422 and item(r)["loc"] == ["body", "hardware", "description"], r.text[:300]


def test_onnx_model_with_absurd_dimensions_is_a_422(client: TestClient) -> None:
    import base64

    from onnx import TensorProto, helper

    def matmul(rows: int, inner: int) -> str:  # declared, never allocated: the importer reads shapes only
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["a", "b"], ["y"], name="huge_mm")], "huge",
            [helper.make_tensor_value_info("a", TensorProto.FLOAT, [rows, inner]),
             helper.make_tensor_value_info("b", TensorProto.FLOAT, [inner, 1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, 1])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        return base64.b64encode(model.SerializeToString()).decode()

    # a declared tensor past the per-tensor bound: refused as the model is read, naming the input
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "model": matmul(16, 10**9)})
    assert r.status_code == 422, r.text[:300]
    assert item(r)["loc"] == ["body", "model"] and "'a'" in item(r)["msg"] and "per tensor" in item(r)["msg"], \
        r.text[:300]
    # within it, but a layer dimension past max_layer_extent: refused as that layer
    r = client.post("/schedule", json={"hardware": "gemmini-16x16", "model": matmul(1, 3 * 10**6)})
    assert r.status_code == 422, r.text[:300]
    assert item(r)["loc"][:3] == ["body", "layers", 0] and "max_layer_extent" in item(r)["msg"], r.text[:300]


@pytest.mark.parametrize(("body", "headers", "says"), [
    (b'{"hardware": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", {}, "nested"),
    (b'{"hardware": "gemmini-\xff16x16", "layers": []}', {}, "UTF-8"),
    (b'{"hardware": "gemmini-8x8", "layers": [{"op": "matmul", "M": ' + b"9" * 100_000 + b', "K": 8, "N": 8}]}',
     {}, "digits"),
    (__import__("gzip").compress(b'{"hardware": "gemmini-8x8", "layers": []}'), {"content-encoding": "gzip"},
     "Content-Encoding"),
], ids=["deep", "not-utf8", "digits", "gzip"])
def test_a_body_json_cannot_read_says_why(client: TestClient, body: bytes, headers: dict[str, str], says: str) -> None:
    """Bodies the JSON reader fails on other than by syntax (nesting past its recursion limit, bytes that are not
    UTF-8, an integer of 100,000 digits, a compressed body): a 422 `json_invalid` at `body` with the reason, as
    malformed JSON is, not a bare 400 "There was an error parsing the body"."""
    r = client.post("/schedule", content=body, headers={"content-type": "application/json", **headers})
    assert r.status_code == 422, r.text[:300]
    d = item(r)
    assert d["loc"] == ["body"] and d["type"] == "json_invalid" and says in d["msg"], d

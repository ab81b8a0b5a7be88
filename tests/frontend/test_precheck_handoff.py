"""precheck hands the model it decoded to the load_model of the same bytes and input shapes that follows it (the
CLI's compile), instead of load_model decoding them again: the imported model is the same either way, and any
other call decodes its own."""

from __future__ import annotations

import pytest

from tileplan.frontend import onnx_import, zoo


@pytest.fixture(scope="module")
def data() -> bytes:
    return zoo.build("cnn_small", "qdq")


def _imported(data: bytes, shapes: dict[str, list[int]] | None, precheck_shapes: object = "same") -> tuple[bytes, int]:
    """The imported model's bytes and how many times the bytes were decoded."""
    decoded = []
    real = onnx_import.decode

    def counting(d: bytes) -> object:
        decoded.append(d)
        return real(d)

    onnx_import.decode = counting  # type: ignore[assignment]
    try:
        if precheck_shapes is not None:
            onnx_import.precheck(data, shapes if precheck_shapes == "same" else precheck_shapes)  # type: ignore[arg-type]
        imported = onnx_import.load_model(data, shapes)
    finally:
        onnx_import.decode = real  # type: ignore[assignment]
        onnx_import._PRECHECKED.clear()
    return imported.model.SerializeToString(), len(decoded)


def test_the_prechecked_model_is_imported_once_decoded(data):
    alone, n_alone = _imported(data, None, precheck_shapes=None)
    after, n_after = _imported(data, None)
    assert after == alone and (n_alone, n_after) == (1, 1)


def test_other_bytes_or_shapes_are_decoded_again(data):
    alone, _ = _imported(data, None, precheck_shapes=None)
    copy = bytes(bytearray(data))  # equal bytes, another object: decoded again
    onnx_import.precheck(data)
    try:
        assert onnx_import.load_model(copy).model.SerializeToString() == alone
        assert not onnx_import._PRECHECKED  # (handed over at most once)
    finally:
        onnx_import._PRECHECKED.clear()
    name = onnx_import.graph_inputs(onnx_import.decode(data))[0].name
    dims = [d.dim_value for d in onnx_import.graph_inputs(onnx_import.decode(data))[0].type.tensor_type.shape.dim]
    given = {name: dims}
    want, _ = _imported(data, given, precheck_shapes=None)
    got, n = _imported(data, given, precheck_shapes={})
    assert got == want and n == 2  # prechecked without the shapes given to load_model: decoded again
    got, n = _imported(data, given)
    assert got == want and n == 1  # with them: handed over

"""POST /compile's body read and its model checked outside the API process, from a file, never held whole.

A compile request carries up to `max_compile_bytes` (a model as base64 in JSON, or a multipart upload). Held in
the API process, the body, its JSON string, the decoded bytes and ONNX's copies were all in memory at once (a 90 MB
model took the API to 915 MiB), and a 100,000-node model's check stalled /healthz. So the API only streams the
body to a temporary file (hashing it as it goes: an identical body is answered from the compile it made, before
any parse) and everything that reads it runs here, in `ProcessSlots` under the worker memory cap and a time limit:

1. `read_body` (JSON or multipart) -> the request's small fields, with the model's and calibration data's bytes
   written to files of their own;
2. `admit` -> the checks `Compiler` made (options, input shapes, calibration index, the model read as far as
   ONNX alone can), the compile's id, and its row recorded for its owner (`Store.create_compile`, whose quota
   error comes back as `quota` and becomes the API's 409).

Between the two the API validates the small fields and resolves the hardware (the catalog, registered and
inline descriptors: its sandbox), as before.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
from typing import Any

from tileplan.errors import InputError, from_validation_error

Detail = dict[str, Any]
MAX_FIELD_BYTES = 1 << 20  # a multipart text field (the `request` JSON)


def _error(loc: list[Any], msg: str, type_: str = "value_error") -> dict[str, Any]:
    return {"ok": False, "errors": [{"loc": loc, "msg": msg, "type": type_}]}


def _input_error(exc: InputError) -> dict[str, Any]:
    items = getattr(exc, "all_details", None) or [exc.to_detail()]
    return {"ok": False, "errors": [{**d, "loc": ["body", *d["loc"]]} for d in items]}


def _write(path: str, data: bytes) -> str:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


def read_body(path: str, content_type: str) -> dict[str, Any]:
    """In an intake process: the body at `path` -> {"ok": True, "doc": the request's fields without model and
    calibration, "model": path of the model's bytes, "calibration": path or None} or {"ok": False, "errors"}
    (locations under `body`, as the API answers them)."""
    try:
        if content_type.startswith("multipart/form-data"):
            return _multipart(path, content_type)
        return _json_body(path)
    except InputError as exc:
        return _input_error(exc)
    except MemoryError:
        return {"ok": False, "memory": True}


def _json_body(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            doc = json.load(f)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        return _error(["body"], _malformed(exc), "json_invalid")
    if not isinstance(doc, dict):
        return _error(["body"], "expected a JSON object", "model_attributes_type")
    model, calibration = doc.pop("model", None), doc.pop("calibration", None)
    if model is None:
        raise InputError(("model",), "field required: the ONNX model as base64 (or upload it as "
                         "multipart/form-data)", "missing")
    for name, value in (("model", model), ("calibration", calibration)):
        if value is not None and not isinstance(value, str):
            raise InputError((name,), "Input should be a valid string (base64)", "string_type")
    out = {"ok": True, "doc": doc, "model": _write(path + ".model", _base64(model, "model")), "calibration": None}
    del model
    if calibration is not None:
        out["calibration"] = _write(path + ".calibration", _base64(calibration, "calibration"))
    return out


def _malformed(exc: BaseException) -> str:
    # RecursionError: arrays or objects nested deeper than Python's json reads (the API's own bodies say the same)
    return "malformed JSON: nested too deeply" if isinstance(exc, RecursionError) else f"malformed JSON: {exc}"


def _base64(text: str, field: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InputError((field,), "not valid base64", "value_error") from None


def _multipart(path: str, content_type: str) -> dict[str, Any]:
    from python_multipart.exceptions import FormParserError
    from python_multipart.multipart import parse_form

    fields: dict[str, bytes] = {}
    files: dict[str, Any] = {}
    count = 0

    def on_field(field: Any) -> None:
        nonlocal count
        count += 1
        name = (field.field_name or b"").decode("utf-8", "replace")
        if count > 8 or len(field.value or b"") > MAX_FIELD_BYTES:
            raise InputError((name or "body",), "too many or too large form fields", "too_large")
        fields[name] = field.value or b""

    def on_file(file: Any) -> None:
        nonlocal count
        count += 1
        if count > 8:
            raise InputError(("body",), "too many form parts", "too_large")
        files[(file.field_name or b"").decode("utf-8", "replace")] = file

    try:
        with open(path, "rb") as f:
            parse_form({"Content-Type": content_type.encode("latin-1")}, f, on_field, on_file)
    except InputError:
        raise
    except (FormParserError, ValueError, UnicodeEncodeError) as exc:
        return _error(["body"], f"malformed multipart body: {exc}")
    try:
        model = files.get("model")
        if model is None:
            which = "a file part" if "model" in fields else "field required"
            raise InputError(("model",), f"{which}: a file part named `model` with the ONNX model", "missing")
        if "request" in files:  # `curl -F request=@request.json`
            files["request"].file_object.seek(0)
            text = files["request"].file_object.read(MAX_FIELD_BYTES + 1).decode("utf-8", "replace")
        else:
            text = fields.get("request", b"").decode("utf-8", "replace")
        try:
            doc = json.loads(text) if text else {}
        except (ValueError, RecursionError) as exc:
            raise InputError(("request",), _malformed(exc), "json_invalid") from None
        if not isinstance(doc, dict):
            raise InputError(("request",), "expected a JSON object", "model_attributes_type")
        for name in ("model", "calibration"):
            if name in doc:
                raise InputError(("request", name), f"the {name} is the `{name}` file part here, not a field",
                                 "extra_forbidden")
        if "hardware" in fields and "hardware" not in doc:  # the one field a form would most likely give alone
            doc["hardware"] = fields["hardware"].decode("utf-8", "replace")
        if "calibration" in fields:
            raise InputError(("calibration",), "a file part with the .npz of calibration inputs", "value_error")
        out = {"ok": True, "doc": doc, "model": _write(path + ".model", _read(model)), "calibration": None}
        if "calibration" in files:
            out["calibration"] = _write(path + ".calibration", _read(files["calibration"]))
        return out
    finally:
        for file in files.values():
            with contextlib.suppress(Exception):
                file.close()


def _read(file: Any) -> bytes:
    """A part's bytes (the parser keeps a small part in memory, spools a large one to disk: read either way)."""
    file.file_object.seek(0)
    return bytes(file.file_object.read())


def admit(db_url: str, model_path: str, calibration_path: str | None, hardware: dict[str, Any],
          options: dict[str, Any] | None, input_shapes: Any, ops: list[str] | None, limits: dict[str, Any],
          owner: str | None, deadline: float) -> dict[str, Any]:
    """In an intake process: check the request (`check_request`) and record its compile for `owner`:
    {"ok": True, "id", "created", "model_name"}, {"ok": False, "errors"} or {"ok": False, "quota": [used, need,
    quota]} (the owner's stored compiles would go past `limits["quota"]`)."""
    from tileplan.hardware import HardwareDescriptor
    from tileplan.jobs.solve import _process_store, memory_error, out_of_memory
    from tileplan.store.repository import QuotaExceeded

    try:
        with open(model_path, "rb") as f:
            model = f.read()
        calibration = None
        if calibration_path is not None:
            with open(calibration_path, "rb") as f:
                calibration = f.read()
        hw = HardwareDescriptor.model_validate(hardware)
        req = check_request(model, hw, options, input_shapes, calibration, set(ops) if ops is not None else None,
                            limits)
        doc = {"hardware": hardware, "options": req["options"], "input_shapes": req["input_shapes"],
               "calibration": base64.b64encode(calibration).decode() if calibration is not None else None}
        store = _process_store(db_url)
        created = store.create_compile(req["id"], model=model, model_name=req["model_name"], hardware=hw.name,
                                       request=doc, deadline=deadline, owner=owner, quota=limits["quota"])
        return {"ok": True, "id": req["id"], "created": created, "model_name": req["model_name"]}
    except InputError as exc:
        return _input_error(exc)
    except QuotaExceeded as exc:
        return {"ok": False, "quota": [exc.used, exc.need, exc.quota]}
    except Exception as exc:
        if out_of_memory(exc):
            err = memory_error("reading this model")
            return {"ok": False, "errors": [{**err, "loc": ["body", "model"], "type": "too_costly"}]}
        raise


def check_request(model: bytes, hw: Any, options: dict[str, Any] | None, input_shapes: Any,
                  calibration: bytes | None, ops: set[str] | None, limits: dict[str, Any]) -> dict[str, Any]:
    """Validate a request and read the model as far as ONNX can without compiling it. Raises InputError located in
    the request body (`model`, `model.<node>`, `options.*`, `input_shapes.<input>`, `calibration`). `ops`: the
    operators a compile can import; `limits`: max_time_limit_s, max_layer_extent, max_tensor_elements, work
    (`frontend.work.set_limits`' arguments)."""
    from pydantic import ValidationError

    from tileplan.frontend.calibration import calibration_index
    from tileplan.frontend.compile import CompileOptions, model_digest
    from tileplan.frontend.onnx_bytes import set_max_tensor_elements
    from tileplan.frontend.work import set_limits as set_work_limits
    from tileplan.jobs.compiles import input_shapes_of, read_model
    from tileplan.mappers.base import get_mapper

    set_max_tensor_elements(limits["max_tensor_elements"])
    if limits.get("work"):
        set_work_limits(**limits["work"])
    try:
        opts = CompileOptions.model_validate(options or {})
    except ValidationError as exc:
        raise from_validation_error(exc, ("options",)) from None
    if opts.time_limit_s > limits["max_time_limit_s"]:
        raise InputError(("options", "time_limit_s"), f"at most {limits['max_time_limit_s']:g} s on this server",
                         "less_than_equal")
    get_mapper(opts.mapper)  # unknown or not installed -> InputError at options.mapper
    shapes = input_shapes_of(input_shapes, limits["max_layer_extent"], limits["max_tensor_elements"])
    calibration_names = None
    if calibration is not None:
        if not opts.quantize:
            raise InputError(("calibration",), "calibration data is what options.quantize quantizes a float "
                             "model on: give it with options.quantize=true (or leave it out)")
        # the zip's directory and the arrays' headers only: the compile process loads the data
        calibration_names = set(calibration_index(calibration))
    name = read_model(model, shapes, opts.quantize, calibration_names, ops, opts.emulate)
    digest = model_digest(model, hw, opts, shapes or None)
    if calibration is not None:  # other calibration data is another compile
        digest = hashlib.sha256(f"{digest}:{hashlib.sha256(calibration).hexdigest()}".encode()).hexdigest()
    return {"id": digest, "model_name": name, "options": opts.model_dump(mode="json"), "input_shapes": shapes}


def warm(max_tensor_elements: int | None = None) -> None:
    """Intake process initializer: ONNX and the checks imported once."""
    import onnx  # noqa: F401

    import tileplan.frontend.compile
    import tileplan.jobs.compiles  # noqa: F401
    from tileplan.frontend.onnx_bytes import set_max_tensor_elements

    if max_tensor_elements:
        set_max_tensor_elements(max_tensor_elements)

"""Reading users' descriptors and evaluating their mappings, in processes of their own under a time and memory budget.

A Timeloop file, an inline descriptor or a mapping to evaluate costs work that grows with what the user wrote; done in
the API process it stalls every request (the event loop) and grows the API's memory. Here it runs in `ProcessSlots`
with `settings.sandbox_time_limit_s` and `settings.sandbox_memory_mb`: an overrun is a 422 naming the budget, the
process is replaced, the API goes on. Resolved descriptors are kept by the fingerprint of what was sent (bounded by
bytes), so a repeated inline descriptor costs a digest, not a parse; and so are its refusals (an inline descriptor's,
POST /schedule's `model`'s), so the same request refused again costs a digest, not the sandbox's budget again (a
200 KB Timeloop tree of 3,000 levels spent the whole 10 s each time it was sent). A refusal for the budget itself
(`too_costly`: the server's load may have been the cause) is remembered for COSTLY_REFUSAL_S only.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

from tileplan.errors import InputError
from tileplan.hardware import HardwareDescriptor
from tileplan.jobs.bytecache import ByteLRU
from tileplan.jobs.fair import FairShare, current_owner
from tileplan.jobs.slots import ProcessSlots, SlotCrashed, SlotTimeout
from tileplan.settings import Settings

Detail = dict[str, Any]
SANDBOX_NICE = 5
REFUSALS_BYTES = 1 << 20  # remembered refusals: a digest and the error items each, counted as their JSON
COSTLY_REFUSAL_S = 600.0  # how long a refusal for the sandbox's budget is remembered


def _now() -> float:
    return time.monotonic()


def descriptor_from_ref(ref: Any) -> HardwareDescriptor:
    """An inline descriptor: a descriptor object or {name, format, source} with YAML text (never a name, never a
    path: a request must not make the server read its files). Errors are InputErrors under `hardware`."""
    from tileplan.hardware.catalog import load_descriptor
    from tileplan.validation import check_storable

    try:
        check_storable(ref, ("hardware",))
        if isinstance(ref, dict) and "source" in ref:
            if not isinstance(ref["source"], str):
                raise InputError(("hardware", "source"), "must be YAML text")
            fmt = ref.get("format")
            if fmt is not None and not isinstance(fmt, str):
                raise InputError(("hardware", "format"), "must be 'tileplan' or 'timeloop'")
            name = ref.get("name")
            hw = load_descriptor(ref["source"], fmt=fmt, name=str(name) if name else None, source="hardware.source")
        elif isinstance(ref, dict):
            hw = load_descriptor(ref, source="hardware")
        else:
            raise InputError(("hardware",), "a catalog name, a descriptor object, or {name, format, source}")
        check_storable(hw.model_dump(mode="json"), ("hardware",))
        return hw
    except InputError as exc:
        loc = exc.loc if exc.loc[:1] == ("hardware",) else ("hardware", *exc.loc)
        raise InputError(loc, exc.msg, exc.type) from None
    except ModuleNotFoundError as exc:  # an importer this build does not have (e.g. Timeloop YAML)
        raise InputError(("hardware", "format"), f"this server cannot read that format ({exc.name} missing)") from None
    except RecursionError:
        raise InputError(("hardware",), "nested too deeply", "too_deep") from None
    except (ValueError, TypeError) as exc:
        raise InputError(("hardware",), str(exc)) from None


def _errors(exc: InputError) -> list[Detail]:
    return list(getattr(exc, "all_details", None) or [exc.to_detail()])


def read_descriptor(ref: Any) -> dict[str, Any]:
    """In a sandbox process: {"ok": True, "hardware": descriptor JSON} or {"ok": False, "errors": [...]}."""
    try:
        return {"ok": True, "hardware": descriptor_from_ref(ref).model_dump(mode="json")}
    except InputError as exc:
        return {"ok": False, "errors": _errors(exc)}
    except MemoryError:
        return {"ok": False, "memory": True}


def evaluate_in_sandbox(hardware: dict[str, Any], layer: dict[str, Any], mapping: dict[str, Any],
                        executor: str | None, model: str | None = None) -> dict[str, Any]:
    """In a sandbox process: {"ok": True, "evaluation": Evaluation JSON} or {"ok": False, "errors": [...]}."""
    from tileplan.errors import MappingInfeasible
    from tileplan.mapping import parse_mapping
    from tileplan.plan import evaluate
    from tileplan.workload import parse_layer

    try:
        hw = HardwareDescriptor.model_validate(hardware)
        result = evaluate(parse_layer(layer), hw, parse_mapping(mapping, ("mapping",)), executor, model)
        return {"ok": True, "evaluation": result.model_dump(mode="json")}
    except InputError as exc:
        return {"ok": False, "errors": _errors(exc)}
    except MappingInfeasible as exc:
        return {"ok": False, "errors": [{"loc": ["mapping"], "msg": str(exc), "type": "infeasible"}]}
    except MemoryError:
        return {"ok": False, "memory": True}


def model_layers(model_b64: str) -> tuple[list[dict[str, Any]], list[str], str]:
    """The layers of a base64 ONNX model (POST /schedule's `model`) as contract layer documents, the notes on what
    was not planned, and the model's name. Errors are InputErrors under `model`."""
    import base64
    import binascii

    from tileplan.workload_onnx import load_onnx

    try:
        data = base64.b64decode(model_b64, validate=True)
    except (binascii.Error, ValueError):
        raise InputError(("model",), "not valid base64", "value_error") from None
    workload = load_onnx(data)
    return [layer.model_dump(mode="json") for layer in workload.layers], list(workload.notes), workload.name


def read_model_layers(model_b64: str) -> dict[str, Any]:
    """In a sandbox process: {"ok": True, "layers", "notes", "name"} or {"ok": False, "errors": [...]}."""
    try:
        layers, notes, name = model_layers(model_b64)
        return {"ok": True, "layers": layers, "notes": notes, "name": name}
    except InputError as exc:
        return {"ok": False, "errors": _errors(exc)}
    except RecursionError:
        return {"ok": False, "errors": [{"loc": ["model"], "msg": "nested too deeply", "type": "too_deep"}]}
    except MemoryError:
        return {"ok": False, "memory": True}


def _warm() -> None:
    import onnx  # noqa: F401

    import tileplan.hardware.timeloop
    import tileplan.plan
    import tileplan.workload_onnx  # noqa: F401


class Sandbox:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # below the API's CPU priority: a costly evaluation takes what the API leaves, not the other way round
        self.slots = ProcessSlots(settings.sandbox_processes, name="sandbox", nice=SANDBOX_NICE,
                                  memory_bytes=settings.sandbox_memory_mb * 1024 * 1024, warm=_warm)
        # calls take turns round robin by owner (`current_owner`): a call may cost the whole time limit (a 200 KB
        # descriptor of 3,000 levels), so six of one client's at once held another's /evaluate 94 s first come first
        # served; now another owner's call waits for the one running and at most one more
        self.fair = FairShare(settings.sandbox_processes, settings.sandbox_processes)
        # fingerprint of an inline descriptor as sent -> its descriptor JSON (validated again here: cheap, bounded)
        self._descriptors: ByteLRU[str, HardwareDescriptor] = ByteLRU(settings.descriptor_cache_bytes)
        # "descriptor:" / "model:" + the digest of what was sent -> its refusal's items, and until when (None: for
        # as long as it is kept) it holds
        self._refused: ByteLRU[str, tuple[list[Detail], float | None]] = ByteLRU(REFUSALS_BYTES)

    def forget_refusals(self) -> None:
        self._refused.clear()

    async def warm(self) -> None:
        await self.slots.warm()

    def close(self) -> None:
        self.slots.close()

    async def descriptor(self, ref: Any) -> HardwareDescriptor:
        try:
            text = json.dumps(ref, sort_keys=True)
        except (TypeError, ValueError, RecursionError):
            text = ""
        limit = self.settings.max_descriptor_bytes
        if len(text) > limit:  # (JSON text: at least one byte per character)
            loc = ("hardware", "source") if isinstance(ref, dict) and "source" in ref else ("hardware",)
            raise InputError(loc, f"the descriptor is over this server's bound of {limit} bytes "
                             "(max_descriptor_bytes)", "too_large")
        try:
            digest = hashlib.sha256(text.encode()).hexdigest() if text else None
        except UnicodeEncodeError:  # a lone surrogate: refused in the sandbox, with its field
            digest = None
        hit = self._descriptors.get(digest) if digest else None
        if hit is not None:
            return hit
        out = await self._remembered(f"descriptor:{digest}" if digest else None, read_descriptor, ref,
                                     loc=("hardware",), what="reading the descriptor")
        hw = await asyncio.to_thread(HardwareDescriptor.model_validate, out["hardware"])
        if digest:
            self._descriptors.put(digest, hw, 2 * len(json.dumps(out["hardware"])) + 2000)
        return hw

    async def model_layers(self, model_b64: str) -> tuple[list[dict[str, Any]], list[str], str]:
        """POST /schedule's `model` read here, not in the API process (decoding, checks and ONNX's shape inference
        hold the interpreter's lock: a 1.4 MB model of 49,000 nodes held the API's event loop ~1 s)."""
        try:
            key: str | None = "model:" + await asyncio.to_thread(
                lambda: hashlib.sha256(model_b64.encode()).hexdigest())
        except UnicodeEncodeError:  # (a lone surrogate: not base64, said so in the sandbox)
            key = None
        out = await self._remembered(key, read_model_layers, model_b64, loc=("model",), what="reading the model")
        return list(out["layers"]), list(out["notes"]), str(out["name"])

    async def evaluate(self, hardware: HardwareDescriptor, layer: dict[str, Any], mapping: dict[str, Any],
                       executor: str | None, model: str | None = None) -> dict[str, Any]:
        out = await self._run(evaluate_in_sandbox, hardware.model_dump(mode="json"), layer, mapping, executor, model,
                              loc=("mapping",), what="evaluating the mapping")
        return dict(out["evaluation"])

    async def _remembered(self, key: str | None, fn: Any, *args: Any, loc: tuple[str, ...],
                          what: str) -> dict[str, Any]:
        """`_run`, or the refusal remembered under `key` (None: nothing to remember it by) raised again."""
        hit = self._refused.get(key) if key else None
        if hit is not None:
            details, until = hit
            if until is None or _now() < until:
                raise _input_error(details)
            self._refused.pop(key)  # type: ignore[arg-type]
        try:
            return await self._run(fn, *args, loc=loc, what=what)
        except InputError as exc:
            if key:
                details = _errors(exc)
                until = _now() + COSTLY_REFUSAL_S if exc.type == "too_costly" else None
                self._refused.put(key, (details, until), len(json.dumps(details)) + len(key) + 200)
            raise

    async def _run(self, fn: Any, *args: Any, loc: tuple[str, ...], what: str) -> dict[str, Any]:
        s = self.settings
        try:
            async with self.fair.turn(current_owner.get()):
                out: dict[str, Any] = await self.slots.run(fn, *args, timeout=s.sandbox_time_limit_s)
        except SlotTimeout:
            raise InputError(loc, f"{what} took longer than this server's limit of "
                             f"{s.sandbox_time_limit_s:g} s (sandbox_time_limit_s)", "too_costly") from None
        except SlotCrashed:
            raise InputError(loc, f"{what} ended its process (over this server's memory budget of "
                             f"{s.sandbox_memory_mb} MiB?)", "too_costly") from None
        if out.get("memory"):
            raise InputError(loc, f"{what} needed more than this server's memory budget of "
                             f"{s.sandbox_memory_mb} MiB (sandbox_memory_mb)", "too_costly")
        if not out["ok"]:
            raise _input_error(out["errors"])
        return out


def _input_error(errors: list[Detail]) -> InputError:
    """The InputError of a sandbox's error items (the first one's; all of them kept for the answer)."""
    first = errors[0]
    exc = InputError(first["loc"], first["msg"], first["type"])
    exc.all_details = list(errors)  # type: ignore[attr-defined]
    return exc

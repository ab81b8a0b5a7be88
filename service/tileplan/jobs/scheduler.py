"""A schedule request from the outside to cached plans: validate, key, look up, queue what is missing.

`Scheduler.schedule` is what POST /schedule calls. It answers from the cache when every layer is there;
otherwise it records a job over the missing unique layers, hands it to the queue (local pool or
procrastinate) and waits up to the server's wait limit for it. Answers are built as JSON text from the
cached rows, with each asker's own layer (its name) and hardware name echoed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from tileplan.codegen.support import codegen_unsupported
from tileplan.errors import InputError, from_validation_error, shown
from tileplan.hardware import HardwareDescriptor
from tileplan.hardware.catalog import catalog
from tileplan.jobs.base import JobQueue
from tileplan.jobs.bytecache import ByteLRU
from tileplan.jobs.disconnect import ClientGone, Gone, unless_gone
from tileplan.jobs.modules import ModuleBuilder
from tileplan.jobs.sandbox import Sandbox, descriptor_from_ref
from tileplan.mappers.base import available_mappers, get_mapper
from tileplan.plan import ScheduleOptions, baseline_mapper_for, links_for, plan_key
from tileplan.problem import Problem
from tileplan.settings import Settings
from tileplan.store import CachedPlan, Job, Store
from tileplan.store.repository import AsyncPlanReader, iso_utc
from tileplan.validation import check_storable, is_safe_name
from tileplan.workload import Conv2dLayer, MatmulLayer, check_extents, layer_doc, parse_layer

Layer = Conv2dLayer | MatmulLayer
log = logging.getLogger("tileplan.api")

INPUT_ERRORS = {"infeasible", "value_error", "missing", "extra_forbidden", "solve_time_limit", "memory_limit"}
KNOWN_LISTED = 20  # registered names an unknown-hardware 422 lists (then: how many more)
MEMO_ENTRY_BYTES = 600  # a memo entry's parsed layer, key and bookkeeping, besides its echo text
RESCHEDULES = 3  # a waited POST /schedule whose plans were deleted before its answer schedules them again


@dataclass
class Prepared:
    hw: HardwareDescriptor
    layers: list[Layer]
    options: ScheduleOptions
    keys: list[str]
    echoes: list[str]  # each request layer as echoed in its Plan (JSON text)
    unique: list[tuple[str, int]] = field(default_factory=list)  # (key, first index), request order
    baseline_mapper: str | None = None  # who plans the baselines of this request (None: no baselines)
    codegen_unsupported: str | None = None  # options.codegen on hardware without a code generator: why


@dataclass
class Answer:
    status_code: int
    body: str
    job_id: str = ""
    cache_hits: int = 0
    cache_misses: int = 0


class Scheduler:
    def __init__(self, store: Store, queue: JobQueue, settings: Settings, sandbox: Sandbox,
                 reader: AsyncPlanReader | None = None, modules: ModuleBuilder | None = None) -> None:
        self.store = store
        self.sandbox = sandbox
        self.modules = modules
        self.reader = reader
        self.queue = queue
        self.settings = settings
        self._catalog = catalog()  # the catalog files do not change while the server runs
        self._mappers = set(available_mappers())
        # fingerprint of (hardware, options, raw layer) -> (key, echo JSON, parsed layer): parsing and keying a
        # layer is deterministic, and a cached request should cost a dict lookup, not a re-validation. Bounded by
        # bytes (what its entries hold), keyed by digests: never by the documents themselves.
        self._keyed: ByteLRU[bytes, tuple[str, str, Layer]] = ByteLRU(settings.memo_max_bytes)
        self._hw_facts: ByteLRU[str, tuple[str, str | None]] = ByteLRU(1 << 20)  # hardware fingerprint -> facts

    # -- input ----------------------------------------------------------------------------------

    def registered(self, name: str) -> HardwareDescriptor:
        """A catalog or registered name (a lookup; never a path: a request must not make the server read its
        files)."""
        hw = self._catalog.get(name)
        if hw is not None:
            return hw
        doc = self.store.get_hardware(name) if is_safe_name(name) else None
        if doc is None:
            raise InputError(("hardware",), self._unknown(name), "unknown_hardware")
        try:
            return HardwareDescriptor.model_validate(doc)
        except ValidationError as exc:  # registered under looser bounds than this server's (e.g. 13,000 dataflows)
            first = from_validation_error(exc)
            raise InputError(("hardware",), f"the registered descriptor {shown(name)} is not valid on this server "
                             f"({first}); replace it (PUT /hardware/{name}) or delete it", "hardware_invalid") from None

    def _unknown(self, ref: str) -> str:
        """The 422 text of an unknown name: the catalog and the first few registered names, not all of them."""
        names, total = self.store.hardware_names(KNOWN_LISTED)
        more = f" and {total - len(names)} more (GET /hardware)" if total > len(names) else ""
        return f"unknown hardware {shown(ref)}; known: {sorted(self._catalog) + names}{more}"

    def resolve_hardware(self, ref: Any) -> HardwareDescriptor:
        """`hardware` for callers already in a thread (POST /compile's checks): inline descriptors are read in this
        process, bounded by the YAML reader's and the descriptor's limits (tileplan.safe_yaml, hardware.model)."""
        return self.registered(ref) if isinstance(ref, str) else descriptor_from_ref(ref)

    async def hardware(self, ref: Any) -> HardwareDescriptor:
        """What `hardware` names: a catalog name (a dict lookup), a registered name (a store read), or an inline
        descriptor (read in the sandbox, under its budget, or found by fingerprint)."""
        if isinstance(ref, str):
            if ref in self._catalog:
                return self._catalog[ref]
            return await asyncio.to_thread(self.registered, ref)
        return await self.sandbox.descriptor(ref)  # (its size bound is checked there, before any parsing)

    def prepare(self, hardware: Any, hw: HardwareDescriptor, layers: list[Any], options: ScheduleOptions) -> Prepared:
        """`hw`: what `hardware` names (`self.hardware(hardware)`)."""
        s = self.settings
        if len(layers) > s.max_layers:
            raise InputError(("layers",), f"{len(layers)} layers; at most {s.max_layers} per request", "too_many_layers")
        if not layers:
            raise InputError(("layers",), "at least one layer is needed", "too_short")
        if options.time_limit_s > s.max_time_limit_s:
            raise InputError(
                ("options", "time_limit_s"), f"at most {s.max_time_limit_s:g} s on this server", "less_than_equal"
            )
        if options.mapper not in self._mappers:
            get_mapper(options.mapper)  # unknown or not installed -> InputError at options.mapper
        hw_token = hardware if isinstance(hardware, str) and hardware in self._catalog else None
        if hw_token is None:
            hw_token = hashlib.sha256(json.dumps(hw.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()
        facts = self._hw_facts.get(hw_token)
        if facts is None:
            facts = (baseline_mapper_for(hw), codegen_unsupported(hw))
            self._hw_facts.put(hw_token, facts, 200 + len(hw_token))
        opt_token = options.model_dump_json()
        parsed, keys, echoes, unique, seen = [], [], [], [], set()
        memo = self._keyed
        for i, item in enumerate(layers):
            try:
                memo_key: bytes | None = hashlib.sha256(
                    f"{hw_token}\n{opt_token}\n{json.dumps(item, sort_keys=True)}".encode()).digest()
            except (TypeError, ValueError, UnicodeEncodeError):  # unencodable text is refused just below
                memo_key = None
            hit = memo.get(memo_key) if memo_key else None
            if hit is None:
                check_storable(item, ("layers", i))
                layer = parse_layer(item, ("layers", i))
                check_extents(layer, self.settings.max_layer_extent, ("layers", i))
                hit = (plan_key(hw, Problem.from_layer(layer), options),
                       json.dumps(layer_doc(layer), separators=(",", ":")), layer)
                if memo_key:
                    memo.put(memo_key, hit, MEMO_ENTRY_BYTES + 2 * len(hit[1]))
            key, echo, layer = hit
            parsed.append(layer)
            keys.append(key)
            echoes.append(echo)
            if key not in seen:
                seen.add(key)
                unique.append((key, i))
        return Prepared(hw, parsed, options, keys, echoes, unique,
                        baseline_mapper=facts[0] if options.baseline else None,
                        codegen_unsupported=facts[1] if options.codegen else None)

    def fixed_hardware(self, ref: Any) -> bool:
        """Whether `ref` names the same descriptor for as long as the server runs: a catalog name or a descriptor
        given inline (a registered name can be replaced)."""
        return isinstance(ref, dict) or (isinstance(ref, str) and ref in self._catalog)

    async def cached_rows(self, keys: list[str]) -> dict[str, CachedPlan]:
        """The cached plans of `keys` (those there are): batched with concurrent requests' on PostgreSQL."""
        if self.reader is not None:
            return await self.reader.get_plans(keys)
        if self.store.dialect == "sqlite":
            return self.store.get_plans(keys)  # a local indexed read (WAL: never waits for writers)
        return await asyncio.to_thread(self.store.get_plans, keys)

    def plans_version(self) -> object | None:
        """A token that two calls return equal only if no plan was inserted or deleted in between (by any process),
        or None where there is none that costs less than looking the plans up (PostgreSQL: the API's own reads and
        its deletion listener cover it)."""
        if self.reader is not None:
            return None
        return self.store.data_version()

    # -- the request ----------------------------------------------------------------------------

    async def schedule(self, hardware: Any, layers: list[Any], options: ScheduleOptions, *, wait: bool,
                       notes: list[str] | None = None, model: str | None = None, gone: Gone | None = None,
                       owner: str | None = None, attempt: int = 0) -> Answer:
        """`notes`: what the request's reading left out (e.g. the ONNX operators of a model that were not
        planned); they are part of every answer to it, the job's too. `model`: the name of the ONNX model the
        layers come from (the browser view groups a model's layers by it). `gone`: whether the client has left; if
        it leaves while waiting for its job, the job is abandoned (`_abandon`). `owner`: whose share of the solvers
        the layers to solve take (`tileplan.jobs.fair`). A plan deleted (DELETE /plans/{key}, by anyone with a write
        token) between the job's end and its answer is scheduled again, up to RESCHEDULES times (`attempt`)."""
        start = time.perf_counter()
        hw = await self.hardware(hardware)
        p = self.prepare(hardware, hw, layers, options)
        codegen = options.codegen and p.codegen_unsupported is None and self.modules is not None
        wanted = [k for k, _ in p.unique]
        cached = await self.cached_rows(wanted)
        hits = sum(1 for k in p.keys if k in cached)
        if len(cached) == len(p.unique):
            warnings = await self._codegen_warnings(p, wanted, owner) if codegen else []
            rid = "c" + hashlib.sha256("".join(p.keys).encode()).hexdigest()[:31]
            extra = {k: v for k, v in (("notes", notes), ("warnings", warnings)) if v}
            code, body = self._done_answer(rid, p, cached, set(cached), start, extra=extra)
            return Answer(code, body, rid, hits, 0)

        job_id = uuid.uuid4().hex
        request = {
            "hardware": p.hw.model_dump(mode="json"),
            "hardware_name": p.hw.name,
            "layers": [layer.model_dump(mode="json") for layer in p.layers],
            "echoes": p.echoes,
            # the solvers build modules only where there is a code generator (codegen is not part of the key)
            "options": p.options.model_dump(mode="json") | {"codegen": codegen},
            "keys": p.keys,
            "cached": sorted(cached),
            "notes": list(notes or []),
            "model": model,
            "baseline_mapper": p.baseline_mapper,
            "codegen_unsupported": p.codegen_unsupported,
        }
        missing = [k for k, _ in p.unique if k not in cached]
        deadline = time.time() + self.settings.job_time_limit_s
        await asyncio.to_thread(
            self.store.create_job, job_id, hardware=p.hw.name, request=request, layers=p.unique,
            cached=set(cached), deadline=deadline, owner=owner,
        )
        await self.queue.submit(job_id, missing, owner)
        misses = len(p.keys) - hits
        limit = self.settings.wait_limit_s if wait else 0.0
        try:
            st = None
            if limit > 0:
                waiting = self.queue.wait(job_id, limit)
                st = await (unless_gone(gone, waiting) if gone else waiting)
        except (asyncio.CancelledError, ClientGone):  # the client left before its answer: nobody can learn the job id
            await asyncio.shield(self._abandon(job_id))
            raise
        if st is not None and st[0] in ("done", "failed"):
            job = await asyncio.to_thread(self.store.get_job, job_id)
            if job is not None:
                built: list[str] = []
                if codegen and job.status == "done":  # solved ones have theirs; cached ones may not
                    built = await self._codegen_warnings(p, wanted, owner)
                code, body = await self.job_answer(job, start=start, for_post=True, warnings=built)
                if code == 410 and attempt < RESCHEDULES:  # a plan was deleted since it was solved: solve it again
                    log.info("event=plans_deleted_while_answering job=%s attempt=%d", job_id, attempt + 1)
                    return await self.schedule(hardware, layers, options, wait=wait, notes=notes, model=model,
                                               gone=gone, owner=owner, attempt=attempt + 1)
                return Answer(code, body, job_id, hits, misses)
        if codegen and cached:
            assert self.modules is not None
            self.modules.in_background(list(cached), owner)  # the layers being solved get theirs from the solver
        body = json.dumps({
            "id": job_id, "status": st[0] if st else "queued",
            "progress": {"done": st[1] if st else len(cached), "total": st[2] if st else len(p.unique)},
            "links": {"self": f"/jobs/{job_id}"},
        })
        return Answer(202, body, job_id, hits, misses)

    async def _abandon(self, job_id: str) -> None:
        """Fail a job whose asker disconnected while waiting, and stop the layers no other job needs."""
        err = {"loc": [], "msg": "the client disconnected before the plans were ready", "type": "cancelled"}
        try:
            if await asyncio.to_thread(self.store.fail_job, job_id, err):
                await self.queue.cancel(job_id)
        except Exception:
            log.warning("event=abandon_failed job=%s", job_id, exc_info=True)

    async def job_answer(self, job: Job, *, start: float | None = None, for_post: bool = False,
                         warnings: list[str] | None = None) -> tuple[int, str]:
        """GET /jobs/{id} (and a waited POST /schedule): the job, with its plans once done.

        A failed job is a 200 to GET /jobs; to POST /schedule it is a 422 when the layers are at fault
        (infeasible on this hardware) and a 500 (with the reasons, never a traceback) otherwise. Times are
        UTC with their offset; a done job's summary says how long it took (`seconds`: created to finished)."""
        req = job.request
        head: dict[str, Any] = {
            "id": job.id, "status": job.status,
            "progress": {"done": job.done, "failed": job.failed, "total": job.total},
            "created_at": iso_utc(job.created_at), "updated_at": iso_utc(job.updated_at),
            "finished_at": iso_utc(job.finished_at) if job.finished_at else None,
            "links": {"self": f"/jobs/{job.id}"},
        }
        if req.get("notes"):
            head["notes"] = req["notes"]
        if job.status == "failed":
            head["errors"] = job.errors
            head["detail"] = [
                {**e, "loc": ["body", *e.get("loc", [])]} for e in job.errors
            ] or [{"loc": [], "msg": "the job failed", "type": "job_failed"}]
            input_fault = job.errors and all(e.get("type") in INPUT_ERRORS for e in job.errors)
            return (422 if input_fault else 500) if for_post else 200, json.dumps(head)
        if job.status != "done":
            return 200, json.dumps(head)
        keys: list[str] = req["keys"]
        rows = await asyncio.to_thread(self.store.get_plans, list(dict.fromkeys(keys)))
        if len(rows) < len(set(keys)):  # a plan was deleted since: the job's answer is gone with it
            head.update(status="expired", detail=[{"loc": [], "msg": "a plan of this job was deleted", "type": "gone"}])
            return 410, json.dumps(head)
        p = Prepared(
            hw=None, layers=[parse_layer(x) for x in req["layers"]], options=None, keys=keys,  # type: ignore[arg-type]
            echoes=req["echoes"], baseline_mapper=req.get("baseline_mapper"),
            codegen_unsupported=req.get("codegen_unsupported"),
        )
        seconds = None
        if start is None and job.finished_at is not None:
            seconds = (_aware(job.finished_at) - _aware(job.created_at)).total_seconds()
        extra: dict[str, Any] = {k: head[k] for k in ("progress", "created_at", "finished_at", "notes") if k in head}
        if warnings:
            extra["warnings"] = warnings
        return self._done_answer(
            job.id, p, rows, set(req.get("cached", [])), start, hw_name=req["hardware_name"], extra=extra,
            seconds=seconds, for_post=for_post,
        )

    def _done_answer(
        self, rid: str, p: Prepared, rows: dict[str, CachedPlan], cached: set[str], start: float | None,
        *, hw_name: str | None = None, extra: dict[str, Any] | None = None, seconds: float | None = None,
        for_post: bool = True,
    ) -> tuple[int, str]:
        """The answer of a request whose plans are all there: 200, or (to POST /schedule) 422 with the plans when
        codegen was asked of hardware without a code generator (the plans are solved and kept; `detail` says
        why there is no module; GET /jobs/{id} says it as a warning)."""
        name = hw_name or p.hw.name
        plans = ",".join(
            _with_asker_links(rows[k], k, echo).to_json(cached=k in cached, hardware=name, layer=echo)
            for k, echo in zip(p.keys, p.echoes)
        )
        summary = summarize(p, rows, cached)
        if start is not None:
            seconds = time.perf_counter() - start
        if seconds is not None:
            summary["seconds"] = round(seconds, 6)
        links = json.dumps({"self": f"/jobs/{rid}"}) if not rid.startswith("c") else "{}"
        more = dict(extra or {})
        code = 200
        if p.codegen_unsupported and for_post:
            code = 422
            more["detail"] = [{"loc": ["body", "options", "codegen"], "msg": p.codegen_unsupported,
                               "type": "codegen_unsupported"}]
        elif p.codegen_unsupported:
            more["warnings"] = [f"options.codegen: {p.codegen_unsupported}", *more.get("warnings", [])]
        tail = "".join(f",{json.dumps(k)}:{json.dumps(v)}" for k, v in more.items())
        return code, (
            f'{{"id":{json.dumps(rid)},"status":"done","plans":[{plans}],"summary":{json.dumps(summary)},'
            f'"links":{links}{tail}}}'
        )

    async def _codegen_warnings(self, p: Prepared, keys: list[str], owner: str | None = None) -> list[str]:
        """Build the modules `codegen` asked for; a plan whose module could not be built gets a warning (its
        plan stands; GET /plans/{key}/module answers the reason)."""
        assert self.modules is not None
        await self.modules.ensure_many(keys, owner)
        out = []
        for key, i in p.unique:
            module = await asyncio.to_thread(self.store.get_module, key)
            if module is None or not module.ok:
                why = module.error if module is not None else "the build did not finish; GET its module to retry"
                out.append(f"layers[{i}]: no module: {why}")
        return out


def summarize(p: Prepared, rows: dict[str, CachedPlan], cached: set[str]) -> dict[str, Any]:
    """Totals over the request, each layer weighted by its `count` (occurrences in the network)."""
    cycles = energy = base = 0.0
    have_base = True
    for layer, key in zip(p.layers, p.keys):
        row = rows[key]
        cycles += row.cycles * layer.count
        energy += row.energy_pj * layer.count
        if row.baseline_cycles is None:
            have_base = False
        else:
            base += row.baseline_cycles * layer.count
    unique = list(dict.fromkeys(p.keys))
    return {
        "layers": len(p.keys),
        "unique_layers": len(unique),
        "cached": sum(1 for k in p.keys if k in cached),
        "solved": sum(1 for k in unique if k not in cached),
        "cycles": cycles,
        "energy_pj": energy,
        "baseline_cycles": base if have_base else None,
        "baseline_mapper": p.baseline_mapper if have_base else None,
        "speedup": (base / cycles) if have_base and cycles else None,
    }


def _aware(ts: datetime) -> datetime:
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)  # SQLite hands back naive datetimes, written in UTC


def _with_asker_links(row: CachedPlan, key: str, echo: str) -> CachedPlan:
    """`row` with links that keep the asker's layer name when it is not the name the plan was cached under
    (so following them, a module or the plan itself carries the asker's name)."""
    if echo == row.layer:
        return row
    asked = json.loads(echo).get("name", "")
    if asked == json.loads(row.layer).get("name", ""):
        return row
    stored = '"links":' + json.dumps(links_for(key), separators=(",", ":"))
    named = '"links":' + json.dumps(links_for(key, asked), separators=(",", ":"))
    return replace(row, doc=row.doc.replace(stored, named, 1))


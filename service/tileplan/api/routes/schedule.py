"""POST /schedule and GET /jobs/{id}."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from tileplan.api.answers import AnswerFromCache, KeptAnswer, KeptAnswers, split_at_seconds
from tileplan.api.auth import caller_of, require_read, require_write
from tileplan.api.errors import ApiError
from tileplan.api.schemas import ERRORS, ErrorBody, JobAccepted, JobView, ScheduleDone, ScheduleRequest
from tileplan.errors import InputError, shown

router = APIRouter(tags=["schedule"], dependencies=[Depends(require_read)])


async def kept_answer(request: Request) -> bytes | None:
    """A request body answered wholly from the cache before answers with the same bytes, while its plans are still
    the rows it was built from (`tileplan.api.answers`): raised as the answer before FastAPI validates the body.
    Otherwise the body's digest (None: not kept, too long), to keep this answer under."""
    state = request.app.state
    kept: KeptAnswers = state.kept_answers
    digest = kept.digest(await request.body())
    if digest is None:
        return None
    entry = kept.get(digest)
    if entry is None:
        return digest
    start = time.perf_counter()
    if not kept.watched:  # (watched: a deleted plan would have dropped the entry already)
        version = state.scheduler.plans_version()  # read before the lookup: a commit after it changes the next one
        if version is None or version != entry.checked:
            rows = await state.scheduler.cached_rows(list(entry.keys))
            if tuple(rows[k].seq if k in rows else -1 for k in entry.keys) != entry.seqs:
                kept.drop(digest)  # a plan was deleted (or deleted and solved again) since: answer the ordinary way
                return digest
            entry.checked = version
    state.metrics.cache_hits.inc(entry.layers)
    body = entry.body(time.perf_counter() - start)
    raise AnswerFromCache(Response(body, status_code=200, media_type="application/json"))


@router.post(
    "/schedule",
    response_model=None,
    dependencies=[Depends(require_write)],  # (before kept_answer: a kept answer is a write's answer too)
    responses={
        200: {"model": ScheduleDone, "description": "Every plan, from the cache or solved within the wait limit"},
        202: {"model": JobAccepted, "description": "Still solving: poll `links.self`"},
        500: {"model": ErrorBody, "description": "The solver failed (reasons per layer)"},
        **ERRORS,
        422: {"model": ErrorBody, "description": (
            "Invalid input; `loc` names the field. With `options.codegen` on hardware that has no code generator "
            "(`type` codegen_unsupported) the body also carries the plans, which are solved and cached")},
    },
)
async def schedule(body: ScheduleRequest, request: Request,
                   digest: bytes | None = Depends(kept_answer, use_cache=False)) -> Response:
    """Plans for `layers` on `hardware`. Equivalent layers (however written) share a cache key and are
    solved once, even when listed twice or asked for by many clients at once."""
    if body.model is not None and body.layers is not None:
        raise InputError(("model",), "give `layers` or `model`, not both", "value_error")
    layers, notes, model = ((body.layers, [], None) if body.model is None
                            else await request.app.state.scheduler.sandbox.model_layers(body.model))
    if layers is None:
        raise InputError(("layers",), "field required (or `model`: a base64 ONNX model)", "missing")
    state = request.app.state
    limit = state.scheduler.settings.max_layers
    if body.model is not None and len(layers) > limit:  # (prepare's own check would name `layers`, not sent)
        raise InputError(("model",), f"the model has {len(layers)} layers (convolutions and matrix products); at "
                         f"most {limit} per request", "too_many_layers")
    answer = await state.scheduler.schedule(body.hardware, layers, body.options, wait=body.wait,
                                            notes=[f"model: {n}" for n in notes], model=model,
                                            gone=request.is_disconnected, owner=caller_of(request).owner)
    state.metrics.cache_hits.inc(answer.cache_hits)
    state.metrics.cache_misses.inc(answer.cache_misses)
    if digest is not None and answer.status_code == 200 and answer.cache_misses == 0 and model is None \
            and not body.options.codegen and state.scheduler.fixed_hardware(body.hardware):
        await _keep(state, digest, body, layers, answer.body)
    return Response(answer.body, status_code=answer.status_code, media_type="application/json")


async def _keep(state: Any, digest: bytes, body: ScheduleRequest, layers: list[dict[str, Any]], answer: str) -> None:
    parts = split_at_seconds(answer)
    if parts is None:
        return
    hw = await state.scheduler.hardware(body.hardware)  # a catalog name, or an inline one found by fingerprint
    p = state.scheduler.prepare(body.hardware, hw, layers, body.options)  # keyed before: a memo lookup per layer
    keys = [k for k, _ in p.unique]
    generation = state.kept_answers.generation
    version = state.scheduler.plans_version()
    rows = await state.scheduler.cached_rows(keys)
    if len(rows) == len(keys):
        state.kept_answers.put(digest, KeptAnswer(tuple(keys), tuple(rows[k].seq for k in keys), *parts,
                                                  layers=len(p.keys), checked=version), generation)


@router.get("/jobs/{job_id}", response_model=None, responses={200: {"model": JobView}, 404: {"model": ErrorBody}})
async def get_job(job_id: str, request: Request) -> Response:
    """A job's status and progress (layers done / total); its plans once done, its errors if failed."""
    state = request.app.state
    job = await asyncio.to_thread(state.store.get_job, job_id) if len(job_id) <= 32 else None
    if job is None:
        raise ApiError(404, ["path", "job_id"], f"no job {shown(job_id)}", "not_found")
    code, body = await state.scheduler.job_answer(job)
    return Response(body, status_code=code, media_type="application/json")

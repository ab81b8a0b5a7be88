"""Answers of POST /schedule that came wholly from the plan cache, kept as bytes.

A build farm sends the same request body again and again. Once such a body has been answered from the cache, its
answer is the same bytes every time except `summary.seconds`, as long as the plans it was built from are still
the rows it was built from (plans are only ever inserted or deleted). So the answer is kept, keyed by a digest of
the request body, and a repeated body skips FastAPI's body validation, keying its layers and assembling the JSON.

Whether its plans are still there: on PostgreSQL every deletion is announced on commit (`pg_notify`, see
`Store.delete_plan`) and each API process listens (`watch_deletions`), forgetting the answers that hold a deleted
plan, so a kept answer costs no query at all. On SQLite a hit first reads the file's `data_version` (no table is
touched): while nothing was committed since the entry's last check, its plans are the same rows. Otherwise (and on
PostgreSQL while the listener is not connected) the hit looks up its plans' row numbers (`seq`: a plan deleted
and solved again is a new row) in one batched query. A plan deleted since drops the entry and the request goes the
ordinary way.

Only answers that cannot change while the server runs are kept: catalog hardware or a descriptor given in the
body (a registered name can be replaced), layers rather than a model, no code generation (its warnings depend on
module builds). Bounded by bytes, least recently used first out.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import dataclass, field

from fastapi import Response

from tileplan.jobs.bytecache import ByteLRU

log = logging.getLogger("tileplan.api")

MAX_BYTES = 32 << 20  # all kept answers together
MAX_BODY = 256 << 10  # longer request bodies are not kept (hashing them costs about what it saves)
ENTRY_BYTES = 300  # an entry's bookkeeping besides its keys and answer bytes


@dataclass
class KeptAnswer:
    keys: tuple[str, ...]  # the request's unique plan keys
    seqs: tuple[int, ...]  # their rows' `seq` when the answer was built
    head: bytes  # the answer up to summary.seconds' value
    tail: bytes  # and after it
    layers: int  # plans in the answer (cache hits it counts)
    # the store's version token (`Scheduler.plans_version`) read before the last lookup that found `seqs`; a hit
    # seeing the same token needs no lookup. None: look up
    checked: object = field(default=None, compare=False)

    @property
    def size(self) -> int:
        return ENTRY_BYTES + len(self.head) + len(self.tail) + 72 * len(self.keys)

    def body(self, seconds: float) -> bytes:
        return self.head + json.dumps(round(seconds, 6)).encode() + self.tail


class AnswerFromCache(Exception):  # (not an error: the answer, raised past FastAPI's body validation)
    """Raised by the route's dependency when a kept answer is still good; the app answers with `response`."""

    def __init__(self, response: Response) -> None:
        self.response = response


class KeptAnswers:
    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: ByteLRU[bytes, KeptAnswer] = ByteLRU(max_bytes, on_evict=self._unindex)
        self._by_key: dict[str, set[bytes]] = {}  # plan key -> digests of the answers holding it
        # True while every deletion reaches `forget` (PostgreSQL's listener is connected): hits need no lookup
        self.watched = False
        self.generation = 0  # bumped by every `forget`/`clear`: an answer built across one is not kept

    @staticmethod
    def digest(raw: bytes) -> bytes | None:
        return hashlib.sha256(raw).digest() if len(raw) <= MAX_BODY else None

    def get(self, digest: bytes) -> KeptAnswer | None:
        return self._entries.get(digest)

    def put(self, digest: bytes, entry: KeptAnswer, generation: int | None = None) -> None:
        """Keep `entry`, unless a plan was deleted since `generation` (read before its plans were looked up)."""
        if entry.size > self.max_bytes or (generation is not None and generation != self.generation):
            return
        self.drop(digest)
        for key in entry.keys:
            self._by_key.setdefault(key, set()).add(digest)
        self._entries.put(digest, entry, entry.size)  # may evict older answers (`_unindex`)

    def drop(self, digest: bytes) -> None:
        old = self._entries.pop(digest)
        if old is not None:
            self._unindex(digest, old)

    def _unindex(self, digest: bytes, entry: KeptAnswer) -> None:
        for key in entry.keys:
            held = self._by_key.get(key)
            if held is not None:
                held.discard(digest)
                if not held:
                    del self._by_key[key]

    def forget(self, key: str) -> None:
        """Plan `key` was deleted: drop every answer that holds it."""
        self.generation += 1
        for digest in list(self._by_key.get(key, ())):
            self.drop(digest)

    def clear(self) -> None:
        self.generation += 1
        self._entries.clear()
        self._by_key.clear()

    def __len__(self) -> int:
        return len(self._entries)


def split_at_seconds(body: str) -> tuple[bytes, bytes] | None:
    """(head, tail) of an answer around its summary's `seconds` value (the answer's last `"seconds": ` after
    `"summary":`; a plan's solver info has one too, before it), or None when it has none."""
    at = body.find('"summary":')
    if at < 0:
        return None
    at = body.find('"seconds": ', at)
    if at < 0:
        return None
    start = at + len('"seconds": ')
    end = start
    while end < len(body) and body[end] not in ",}":
        end += 1
    return body[:start].encode(), body[end:].encode()


async def watch_deletions(url: str, kept: KeptAnswers, retry_s: float = 1.0) -> None:
    """Listen for deleted plans on PostgreSQL (`Store.delete_plan` notifies on commit) and forget the answers that
    hold them; `kept.watched` says whether hits may skip their lookup. Runs until cancelled; on a lost connection
    every kept answer is dropped (deletions may have been missed) and hits look up their plans until it is back."""
    import psycopg

    from tileplan.store.repository import PLAN_DELETED

    conninfo = url.replace("postgresql+psycopg://", "postgresql://", 1)
    while True:
        try:
            async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
                await conn.execute(f"LISTEN {PLAN_DELETED}")
                kept.clear()  # anything kept before listening may hold a plan deleted meanwhile
                kept.watched = True
                async for note in conn.notifies():
                    kept.forget(note.payload)
        except asyncio.CancelledError:
            kept.watched = False
            raise
        except Exception as exc:  # noqa: BLE001 - the database may be away for a while: look up on every hit
            log.warning("event=plan_watch_lost reason=%s", exc)
        kept.watched = False
        kept.clear()
        await asyncio.sleep(retry_s)

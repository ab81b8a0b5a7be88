"""Answers of POST /schedule that came wholly from the plan cache, kept as bytes.

A build farm sends the same request body again and again. Once such a body has been answered from the cache, its
answer is the same bytes every time except `summary.seconds`, as long as the plans it was built from are still
the rows it was built from. So the answer is kept, keyed by a digest of the request body, and a repeated body
costs one batched lookup of its plans' row numbers (`seq`: a re-solved plan is a new row) instead of FastAPI's
body validation, keying its layers and assembling the JSON. A plan deleted or replaced since drops the entry and
the request goes the ordinary way.

Only answers that cannot change while the server runs are kept: catalog hardware or a descriptor given in the
body (a registered name can be replaced), layers rather than a model, no code generation (its warnings depend on
module builds). Bounded by bytes, least recently used first out.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass

from fastapi import Response

MAX_BYTES = 32 << 20  # all kept answers together
MAX_BODY = 256 << 10  # longer request bodies are not kept (hashing them costs about what it saves)
ENTRY_BYTES = 300  # an entry's bookkeeping besides its keys and answer bytes


@dataclass(frozen=True)
class KeptAnswer:
    keys: tuple[str, ...]  # the request's unique plan keys
    seqs: tuple[int, ...]  # their rows' `seq` when the answer was built
    head: bytes  # the answer up to summary.seconds' value
    tail: bytes  # and after it
    layers: int  # plans in the answer (cache hits it counts)

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
        self._entries: OrderedDict[bytes, KeptAnswer] = OrderedDict()
        self._bytes = 0

    @staticmethod
    def digest(raw: bytes) -> bytes | None:
        return hashlib.sha256(raw).digest() if len(raw) <= MAX_BODY else None

    def get(self, digest: bytes) -> KeptAnswer | None:
        entry = self._entries.get(digest)
        if entry is not None:
            self._entries.move_to_end(digest)
        return entry

    def put(self, digest: bytes, entry: KeptAnswer) -> None:
        if entry.size > self.max_bytes:
            return
        self.drop(digest)
        self._entries[digest] = entry
        self._bytes += entry.size
        while self._bytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self._bytes -= old.size

    def drop(self, digest: bytes) -> None:
        old = self._entries.pop(digest, None)
        if old is not None:
            self._bytes -= old.size

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

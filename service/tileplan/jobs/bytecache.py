"""A least-recently-used map bounded by the bytes its entries hold (as the caller sizes them), not their number:
a few large entries cannot grow the process the way many small ones are allowed to."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ByteLRU(Generic[K, V]):
    def __init__(self, max_bytes: int, on_evict: Callable[[K, V], None] | None = None) -> None:
        """`on_evict(key, value)` is told of every entry that leaves to make room (not of `pop` or `clear`), for
        callers that index the entries elsewhere."""
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._on_evict = on_evict

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: K) -> V | None:
        hit = self._items.get(key)
        if hit is None:
            return None
        self._items.move_to_end(key)
        return hit[0]

    def put(self, key: K, value: V, size: int) -> None:
        """Keep `value` (about `size` bytes); an entry larger than the whole budget is not kept."""
        old = self._items.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        if size > self.max_bytes:
            return
        self._items[key] = (value, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            gone_key, (gone_value, gone) = self._items.popitem(last=False)
            self.bytes -= gone
            if self._on_evict is not None:
                self._on_evict(gone_key, gone_value)

    def pop(self, key: K) -> V | None:
        """Remove `key`'s entry; its value, or None if it was not kept."""
        old = self._items.pop(key, None)
        if old is None:
            return None
        self.bytes -= old[1]
        return old[0]

    def clear(self) -> None:
        self._items.clear()
        self.bytes = 0

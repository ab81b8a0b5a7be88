"""The byte-bounded LRU every in-process cache of the service is built on (layer memo, descriptors, renamed
modules, kept answers)."""

from tileplan.jobs.bytecache import ByteLRU


def test_least_recently_used_leave_first_and_are_announced() -> None:
    gone: list[tuple[str, int]] = []
    lru: ByteLRU[str, int] = ByteLRU(10, on_evict=lambda k, v: gone.append((k, v)))
    lru.put("a", 1, 4)
    lru.put("b", 2, 4)
    assert lru.get("a") == 1  # "a" is now the most recent
    lru.put("c", 3, 4)  # 12 bytes > 10: the least recently used ("b") leaves
    assert gone == [("b", 2)]
    assert lru.get("b") is None and lru.get("a") == 1 and lru.get("c") == 3
    assert lru.bytes == 8 and len(lru) == 2


def test_an_entry_larger_than_the_budget_is_not_kept_and_replacing_recounts() -> None:
    lru: ByteLRU[str, str] = ByteLRU(10)
    lru.put("big", "x", 11)
    assert lru.get("big") is None and lru.bytes == 0
    lru.put("k", "v1", 6)
    lru.put("k", "v2", 3)  # the same key again: its old size is given back
    assert lru.get("k") == "v2" and lru.bytes == 3


def test_pop_and_clear_give_the_bytes_back_without_announcing() -> None:
    gone: list[str] = []
    lru: ByteLRU[str, int] = ByteLRU(10, on_evict=lambda k, v: gone.append(k))
    lru.put("a", 1, 5)
    lru.put("b", 2, 5)
    assert lru.pop("a") == 1 and lru.pop("a") is None
    assert lru.bytes == 5
    lru.clear()
    assert lru.bytes == 0 and len(lru) == 0 and gone == []

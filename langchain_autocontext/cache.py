"""A small bounded LRU cache behind a lock: the token counter's, the media readers',
the engine's and the view's memos share it."""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from typing import Generic, TypeVar

from cachetools import LRUCache

#: The type of an :class:`_LRU`'s values.
_V = TypeVar("_V")


class _LRU(Generic[_V]):
    """``cachetools.LRUCache`` behind a lock, counting hits and misses (for ``cache_info``);
    ``_V``: the values' type."""

    __slots__ = ("_data", "_lock", "hits", "misses")

    def __init__(self, maxsize: int) -> None:
        self._data: LRUCache[Hashable, _V] = LRUCache(maxsize)
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def maxsize(self) -> int:
        return int(self._data.maxsize)

    def get(self, key: Hashable) -> _V | None:
        return self.get_many((key,))[0]

    def get_many(self, keys: Sequence[Hashable]) -> list[_V | None]:
        """The values of ``keys`` (``None`` where absent), each marked as recently used."""
        get = self._data.get
        with self._lock:
            out = [get(key) for key in keys]
            hits = sum(v is not None for v in out)
            self.hits += hits
            self.misses += len(out) - hits
        return out

    def count_hits(self, hits: int) -> None:
        """Count ``hits`` answered before the cache (by an identity memo of its values)."""
        if hits:
            with self._lock:
                self.hits += hits

    def put(self, key: Hashable, value: _V) -> None:
        with self._lock:
            self._data[key] = value

    def pop(self, key: Hashable) -> _V | None:
        """Drop ``key``; its value, or ``None`` when absent."""
        with self._lock:
            return self._data.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._data)

"""A bounded, thread-safe memo that computes each key once: the reports of models sharing a shape share one fit search.

A scan's fine-tunes often differ only in fields no figure reads (rope_theta, token ids, names), so their estimates
and fit matrices are one pure computation; `Memo.get` runs it for the first and hands the others its result.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class Memo(Generic[T]):
    """Up to `size` results, least recently used dropped first; a key being computed is computed by one thread."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.computed = 0
        """How many times `compute` ran (what the tests count)."""
        self._done: OrderedDict[Hashable, T] = OrderedDict()
        self._lock = threading.Lock()
        self._computing: dict[Hashable, threading.Lock] = {}

    def get(self, key: Hashable, compute: Callable[[], T]) -> T:
        """The result for `key`, from `compute()` the first time; threads asking for a key in flight wait for it."""
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key]
            gate = self._computing.setdefault(key, threading.Lock())
        with gate:
            with self._lock:
                if key in self._done:
                    return self._done[key]
            try:
                value = compute()
            except BaseException:
                with self._lock:
                    self._computing.pop(key, None)
                raise
            with self._lock:
                self.computed += 1
                self._done[key] = value
                self._computing.pop(key, None)
                while len(self._done) > self.size:
                    self._done.popitem(last=False)
        return value

    def clear(self) -> None:
        """Forget every result."""
        with self._lock:
            self._done.clear()

"""The machine's memory, shared by the jobs the local executor runs at once.

Each job's push runs its own preflight (`pipeline/preflight.py`) against the memory it may use. With
`serve --workers 2`, each counted the whole machine: two jobs that each fit only alone ran at once,
and the OOM killer ended one. Now the executor reserves a job's estimate (the preflight's own, read
from the commit's safetensors headers) from one budget before its push starts, and gives the push
that reservation as its limit (`HFEXPORT_MEMORY_LIMIT_MB`). A job that does not fit beside those
running goes back to the queue, its attempt not counted (`Busy`), until one of them ends.
"""

from __future__ import annotations

import itertools
import math
import threading
from dataclasses import dataclass, field


class Busy(Exception):
    """The job does not fit beside the jobs running now: queue it again after `retry_in_s`, its
    attempt not counted (it never ran)."""

    def __init__(self, message: str, retry_in_s: float):
        super().__init__(message)
        self.retry_in_s = retry_in_s


@dataclass
class MemoryBudget:
    """`total` bytes of memory, reserved by the jobs running at once."""

    total: int
    _held: dict[int, int] = field(default_factory=dict)
    _ids: itertools.count = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def reserve(self, estimate: int | None) -> tuple[int, int] | None:
        """Reserve a job's `estimate` (bytes); None when it does not fit beside the reservations held.
        An unknown estimate (no safetensors headers), or one over `total`, reserves all of it: that
        job runs alone (and its own preflight then says what does not fit).

        Returns:
            (the reservation's id for `release`, the bytes the job may use), or None.
        """
        want = self.total if estimate is None or estimate > self.total else estimate
        with self._lock:
            if want > self.total - sum(self._held.values()):
                return None
            reservation = next(self._ids)
            self._held[reservation] = want
        return reservation, want

    def release(self, reservation: int) -> None:
        with self._lock:
            self._held.pop(reservation, None)

    @property
    def held(self) -> int:
        with self._lock:
            return sum(self._held.values())


def limit_mb(allowed: int) -> str:
    """`allowed` bytes as `HFEXPORT_MEMORY_LIMIT_MB` reads them, rounded up: a limit a megabyte
    under the estimate it was reserved for would make the push's preflight skip the backend."""
    return str(math.ceil(allowed / 1_000_000))

"""Warm pushes kept ready: the next job's `hfexport push` process, started before the job exists.

Every job of the local executor is a fresh `hfexport push` (a crash, a leak or an OOM kill costs
that job alone). Such a process spends seconds importing torch, transformers and the exporters
before its first request to the Hub, and its first backend worker as long again. A warm push
(`entrypoints/warm_push.py`) has done both while the service waited, then runs the job's `push`
arguments read from its stdin. The executor keeps one such process ready per job slot
(`WarmPushes`), replacing each once its job has ended. Its cost while idle is the memory of the
imports (~0.4 GB here) plus one waiting worker's (~0.5 GB).
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable


class WarmPushes:
    """Warm push processes kept ready for the next jobs: `take()` hands one over (or starts one that
    warms while its job waits on its stdin); `refill()`, called once a job has ended, starts the
    next — not while a job runs, whose export would share the cores with the imports."""

    def __init__(self, start: Callable[[], subprocess.Popen], ready: int = 1):
        self._start = start
        self._ready: list[subprocess.Popen] = []
        self._wanted = ready
        self._lock = threading.Lock()
        self._closed = False

    def take(self) -> tuple[subprocess.Popen, bool]:
        """A push process for a job, and whether it had been started before the job (warm)."""
        with self._lock:
            alive = [p for p in self._ready if p.poll() is None]
            if alive:
                self._ready = alive[1:]
                return alive[0], True
            self._ready = []
        return self._start(), False

    def refill(self) -> None:
        """Start warm processes up to the number wanted."""
        with self._lock:
            while not self._closed and len(self._ready) < self._wanted:
                self._ready.append(self._start())

    def close(self) -> None:
        """End the waiting processes (their stdin closes: each exits without running anything)."""
        with self._lock:
            self._closed, ready, self._ready = True, self._ready, []
        for process in ready:
            if process.stdin is not None:
                process.stdin.close()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()

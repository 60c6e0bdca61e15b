"""Where each running job is: the stage its push last said (`onnx: exporting`) and since when, for
the request page. In memory only, as the requesters' tokens are: a restart's running jobs start again."""

from __future__ import annotations

import threading
import time


class JobStages:
    """The stage of each running job by its id, and when it was reached."""

    def __init__(self) -> None:
        self._stages: dict[int, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def set(self, job_id: int, stage: str) -> None:
        with self._lock:
            self._stages[job_id] = (stage, time.time())

    def get(self, job_id: int) -> tuple[str, float] | None:
        with self._lock:
            return self._stages.get(job_id)

    def drop(self, job_id: int) -> None:
        with self._lock:
            self._stages.pop(job_id, None)

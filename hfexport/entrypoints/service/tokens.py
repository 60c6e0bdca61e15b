"""The requesters' tokens, held in memory only while their jobs wait: the request page puts one
for each request, the workers run its job with it, and a restart loses them all (`TOKEN_LOST`).
No module here writes one anywhere."""

from __future__ import annotations

import threading

TOKEN_LOST = (
    "The service restarted while this request waited, and a requester's token is never stored: "
    "ask again on the request page."
)


class RequestTokens:
    """The requesters' tokens by job id, in memory only, for the workers to run each job with."""

    def __init__(self) -> None:
        self._tokens: dict[int, str] = {}
        self._lock = threading.Lock()

    def put(self, job_id: int, token: str) -> None:
        with self._lock:
            self._tokens[job_id] = token

    def get(self, job_id: int) -> str | None:
        with self._lock:
            return self._tokens.get(job_id)

    def move(self, job_id: int, to: int) -> None:
        """The job was superseded by `to` (the branch moved on): the request follows it."""
        with self._lock:
            if job_id in self._tokens:
                self._tokens[to] = self._tokens.pop(job_id)

    def drop(self, job_id: int) -> None:
        with self._lock:
            self._tokens.pop(job_id, None)

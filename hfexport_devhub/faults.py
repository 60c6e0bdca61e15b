"""Fault injection, for reliability tests: a share of requests fails the way real networks and
busy servers fail — 5xx, 429 with Retry-After, dropped connections (before or after the server
acted on the request), and added latency."""

from __future__ import annotations

import asyncio
import math
import random
import threading
from dataclasses import dataclass, field

KINDS = ("500", "503", "429", "drop", "drop-after")


@dataclass
class Faults:
    rate: float = 0.0
    kinds: tuple[str, ...] = KINDS
    retry_after_s: float = 1.0
    latency_ms: int = 0
    seed: int | None = None
    injected: dict[str, int] = field(default_factory=dict)

    def __post_init__(self):
        self._random = random.Random(self.seed)
        self._lock = threading.Lock()
        self._pending_drop: set[int] = set()

    def configure(self, **values) -> None:
        for key, value in values.items():
            setattr(self, key, tuple(value) if key == "kinds" else value)
        self._random = random.Random(self.seed)

    def _roll(self, path: str) -> str | None:
        if path.startswith("/_devhub") or self.rate <= 0:
            return None
        with self._lock:
            if self._random.random() >= self.rate:
                return None
            kind = self._random.choice(self.kinds)
            self.injected[kind] = self.injected.get(kind, 0) + 1
            return kind

    async def before(self, path: str):
        """An ASGI app answering in place of the real handler, or None to go on."""
        if self.latency_ms:
            await asyncio.sleep(self.latency_ms / 1000)
        kind = self._roll(path)
        if kind is None:
            return None
        if kind == "drop-after":
            self._pending_drop.add(id(asyncio.current_task()))
            return None
        return _reply(kind, self.retry_after_s)

    def drop_after(self, path: str) -> bool:
        task = id(asyncio.current_task())
        if task in self._pending_drop:
            self._pending_drop.discard(task)
            return True
        return False


async def drop_connection(send) -> None:
    """Close the connection without a byte of response, as a dying proxy or server does.

    ASGI has no verb for it, so reach the transport through uvicorn's `send` (a bound method of
    its request cycle). Elsewhere, fall back to a response cut off mid-body."""
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is not None:
        transport.abort()
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"100000")]})
    await send({"type": "http.response.body", "body": b"{", "more_body": True})
    raise ConnectionAbortedError("devhub fault injection: connection dropped")


def _reply(kind: str, retry_after_s: float):
    async def app(scope, receive, send):
        if kind == "drop":
            await drop_connection(send)
            return
        status = int(kind)
        headers = [(b"content-type", b"application/json")]
        if status == 429:
            # As the Hub answers: Retry-After, and the IETF draft's RateLimit headers (seconds to the reset).
            headers.append((b"retry-after", str(retry_after_s).encode()))
            headers.append((b"ratelimit", f'"api";r=0;t={math.ceil(retry_after_s)}'.encode()))
            headers.append((b"ratelimit-policy", b'"fixed window";"api";q=1000;w=300'))
        body = b'{"error": "devhub fault injection"}'
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app

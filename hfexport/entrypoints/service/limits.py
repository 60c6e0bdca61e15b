"""The connection limits uvicorn lacks, for a service on the open internet with no proxy in front.

uvicorn resets a connection's keep-alive timer on every byte it receives and has no deadline for a
request's head, so a client that trickles header bytes holds a connection (and a file descriptor)
for as long as it likes, without knowing the webhook's secret. 1,100 of them exhaust the 1,024
descriptors a process gets by default, and `/healthz` stops answering. `guarded_http` is uvicorn's
own h11 protocol with the two limits added:

- a head deadline: a connection whose request line and headers have not all arrived within
  `header_timeout_s` of its opening (or of its previous response, on a kept-alive connection) is
  closed;
- a connection cap: past `max_connections` open, each new connection closes the oldest one still
  waiting for its head — the service's descriptors stay bounded, and a real request (the Hub's
  webhook, a health check) is served while a flood of half-sent requests is shed.

A request's body has its own deadline and size limit in the handlers that read one (the webhook,
the request page's form): `body.read_body` within `body.BODY_DEADLINE_S`.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0
# Under the usual 1,024 descriptors, leaving room for the queue's database, logs and workers.
MAX_CONNECTIONS = 800


class _GuardedH11Protocol(H11Protocol):
    header_timeout_s: float = HEADER_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._waiting_since = 0.0
        self._arm()
        if len(self.connections) > self.max_connections:
            # Every connection of this server is one of ours (`guarded_http` is its only protocol).
            ours = [c for c in self.connections if isinstance(c, _GuardedH11Protocol) and c is not self]
            waiting = [c for c in ours if getattr(c, "_head_timer", None) is not None]
            if waiting:
                min(waiting, key=lambda c: c._waiting_since)._close_late()

    def _arm(self) -> None:
        self._disarm()
        self._waiting_since = self.loop.time()
        self._head_timer = self.loop.call_later(self.header_timeout_s, self._close_late)

    def _disarm(self) -> None:
        if getattr(self, "_head_timer", None) is not None:
            self._head_timer.cancel()  # type: ignore[union-attr]
            self._head_timer = None

    def _close_late(self) -> None:
        """The head did not arrive in time (or a newer connection needs the slot): close."""
        self._disarm()
        if not self.transport.is_closing():
            self.transport.close()

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle:  # a request's head has arrived whole: it is being served
            self._disarm()

    def on_response_complete(self) -> None:
        # Kept alive, the next request's head has the same deadline (armed first: a pipelined
        # request that `super()` serves at once disarms it).
        self._arm()
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def guarded_http(header_timeout_s: float = HEADER_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS) -> type:
    """uvicorn's h11 protocol with a head deadline and a connection cap (`uvicorn.run(..., http=...)`).

    Args:
        header_timeout_s: seconds a connection has to send a request's whole head.
        max_connections: open connections past which the oldest still waiting for its head is closed.

    Returns:
        The protocol class.
    """
    return type(
        "GuardedH11Protocol",
        (_GuardedH11Protocol,),
        {"header_timeout_s": header_timeout_s, "max_connections": max_connections},
    )

"""A request's body, bounded in size and time: what the webhook and the request page's form read.

A handler awaits `read_body` within `BODY_DEADLINE_S` (a body trickled byte by byte holds a
connection no longer than that, `asyncio.wait_for`) and refuses a size over its limit. Apart from
`limits.py`, whose uvicorn protocol only `serve` needs: importing the service package (as
`push --from-webhook-env` does for the webhook's parser) stays free of uvicorn (~17 ms).
"""

from __future__ import annotations

from starlette.requests import Request

BODY_DEADLINE_S = 10.0


async def read_body(request: Request, limit: int) -> tuple[bytes, int]:
    """A request's body, at most its first `limit` bytes, and the size sent: read a little past the
    limit (8×) so the sender hears the refusal, not a reset; the handler refuses a size over it."""
    body, size = b"", 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= limit:
            body += chunk
        elif size > 8 * limit:
            break
    return body, size

"""Talking to the Hub reliably: one retry policy for every call hfexport makes through `HfApi`.

The client retries a few calls itself (uploads); most it does not. Here 429 and 5xx answers and
dropped connections are retried with exponential backoff. A 429 waits what the Hub says: the
seconds to its window's reset in the `RateLimit` header (read by huggingface_hub's own
`parse_ratelimit_headers`), else `Retry-After` — not the backoff's few seconds, which would spend
the next attempts inside the same window. Anything else (401, 404, a bad request) is an answer, not
a glitch, and is raised at once.

`HFEXPORT_HUB_RETRIES` sets the number of attempts (default 8).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from ..errors import HubUnavailableError
from ..settings import hub_retries

T = TypeVar("T")


def _transport_errors() -> tuple[type[Exception], ...]:
    """Connection-level failures of the HTTP library the client uses (httpx2 in huggingface_hub
    2.x, httpx before): refused, reset, timed out, closed mid-response."""
    import importlib

    errors = []
    for name in ("httpx2", "httpx"):
        try:
            errors.append(importlib.import_module(name).TransportError)
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def refused(error: BaseException) -> int | None:
    """401 or 403 when `error` is the Hub refusing the token (wrong, expired, or without access to
    the repo), else None: the one reading of it every caller turns into its own `AuthError`."""
    status = getattr(getattr(error, "response", None), "status_code", None)
    return status if status in (401, 403) else None


# The longest a rate limit is waited out in one go: the Hub's windows are five minutes.
MAX_RATE_LIMIT_WAIT_S = 330.0


def _retryable(e: BaseException) -> tuple[bool, float | None]:
    """Whether `e` is worth another attempt, and how long the Hub asked to wait first (or None)."""
    from huggingface_hub.errors import HfHubHTTPError
    from huggingface_hub.utils import parse_ratelimit_headers

    if isinstance(e, HfHubHTTPError) and e.response is not None:
        status, headers = e.response.status_code, e.response.headers
        if status == 429 and (limit := parse_ratelimit_headers(headers)) is not None:
            return True, min(MAX_RATE_LIMIT_WAIT_S, float(limit.reset_in_seconds))
        if status == 429 or status >= 500:
            retry_after = headers.get("retry-after")
            try:
                return True, min(MAX_RATE_LIMIT_WAIT_S, float(retry_after)) if retry_after else None
            except ValueError:
                return True, None
        return False, None
    if isinstance(e, (*_transport_errors(), ConnectionError)):
        return True, None
    # The client wraps upload failures (a dropped LFS part) in RuntimeError/OSError with the cause attached.
    cause = e.__cause__ or e.__context__
    if isinstance(e, (RuntimeError, OSError, ValueError)) and cause is not None and cause is not e:
        return _retryable(cause)
    return False, None


def retry(
    what: str,
    fn: Callable[[], T],
    attempts: int | None = None,
    base_s: float = 0.25,
    max_s: float = 8.0,
    before_retry: Callable[[], T | None] | None = None,
) -> T:
    """`fn()`, retried on transient Hub failures; `what` names the step in the final error.

    `before_retry()` runs before each new attempt of a step that is not idempotent (opening a PR,
    commenting): it looks for what the failed attempt may have done anyway (a dropped reply) and
    returns that instead of doing it twice, or None to try again.
    """
    attempts = attempts or hub_retries()
    for attempt in range(1, attempts + 1):
        try:
            if attempt > 1 and before_retry is not None:
                done = before_retry()
                if done is not None:
                    return done
            return fn()
        except Exception as e:
            transient, retry_after = _retryable(e)
            if not transient:
                raise
            if attempt == attempts:
                raise HubUnavailableError(
                    f"The Hub kept failing while trying to {what} ({attempts} attempts; last: {type(e).__name__}).",
                    "Retry later; nothing half-done was left behind (a rerun picks up where this stopped).",
                ) from e
            time.sleep(retry_after if retry_after is not None else min(max_s, base_s * 2 ** (attempt - 1)))
    raise AssertionError("unreachable")

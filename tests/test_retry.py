"""hfexport/hub/retry.py on its own: which Hub answers are retried, and how long each is waited out."""

from __future__ import annotations

import pytest

from hfexport.hub.retry import MAX_RATE_LIMIT_WAIT_S, _retryable, refused


def _error(status: int, headers: dict[str, str]):
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError

    request = httpx2.Request("GET", "http://127.0.0.1/api/models/org/name")
    return HfHubHTTPError("answer", response=httpx2.Response(status, headers=headers, request=request))


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        # The Hub's rate limit: its RateLimit header's seconds to the reset win over Retry-After.
        (429, {"ratelimit": '"api";r=0;t=55', "ratelimit-policy": '"fixed window";"api";q=500;w=300'}, (True, 55.0)),
        (429, {"ratelimit": '"api";r=0;t=55', "retry-after": "3"}, (True, 55.0)),
        (429, {"retry-after": "7"}, (True, 7.0)),
        (429, {"retry-after": "86400"}, (True, MAX_RATE_LIMIT_WAIT_S)),  # never a day in one wait
        (429, {}, (True, None)),  # the backoff's own schedule
        (503, {"retry-after": "2"}, (True, 2.0)),
        (500, {}, (True, None)),
        (404, {"retry-after": "2"}, (False, None)),  # an answer, not a glitch
        (401, {}, (False, None)),
    ],
)
def test_a_hub_answer_is_retried_after_what_the_hub_asks(status, headers, expected):
    assert _retryable(_error(status, headers)) == expected


@pytest.mark.parametrize(("status", "expected"), [(401, 401), (403, 403), (404, None), (429, None), (500, None)])
def test_a_refused_token_is_read_off_the_hubs_answer_once_for_every_caller(status, expected):
    """`refused`: the one reading of "the Hub refused the token" that resolve, the state read, the
    writes, `doctor` and the request page each turn into their own error."""
    assert refused(_error(status, {})) == expected
    assert refused(ValueError("no response at all")) is None

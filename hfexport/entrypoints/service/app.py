"""The HTTP app of `hfexport serve` (starlette): the webhook, the status page, the jobs' JSON and,
with `--request-page`, the request form (`request_page.py`). It queues; the workers run."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from .body import BODY_DEADLINE_S, read_body
from .config import ServiceConfig
from .events import MAX_JSON_DEPTH, BadPayload, IgnoredEvent, nesting_depth, parse_event
from .queue import JobQueue
from .request_page import RequestPage
from .status_page import render as render_status
from .tokens import RequestTokens

if TYPE_CHECKING:
    from .workers import QueueWorkers

log = logging.getLogger("hfexport.serve")
MAX_PAYLOAD_BYTES = 1 << 20


def _refused(config: ServiceConfig, request: Request, readers: bool = False) -> JSONResponse | None:
    """401/403 unless the request carries the webhook secret (or, to read, the read token)."""
    secret = request.headers.get("x-webhook-secret")
    auth = request.headers.get("authorization", "")
    if readers and auth.startswith("Basic "):  # a browser: the token or the secret as the password
        try:
            password = base64.b64decode(auth[6:], validate=True).decode().partition(":")[2]
        except (ValueError, UnicodeDecodeError):
            password = ""
        if config.read_token and hmac.compare_digest(password.encode(), config.read_token.encode()):
            return None
        secret = password
    if readers and config.read_token:
        if auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].encode(), config.read_token.encode()):
            return None
    if config.secret is None:  # a page-only service: nothing to compare with
        return JSONResponse(
            {"error": "this service takes no webhooks: it was started without --secret (HFEXPORT_WEBHOOK_SECRET)"},
            status_code=403 if readers else 404,
        )
    if secret is None:
        return JSONResponse({"error": "missing X-Webhook-Secret"}, status_code=401)
    if not hmac.compare_digest(secret.encode(), config.secret.encode()):
        return JSONResponse({"error": "wrong X-Webhook-Secret"}, status_code=403)
    return None


def retry_check(config: ServiceConfig, job_id: int) -> str:
    """What the status page's retry form for `job_id` carries: keyed by the service's secret or
    read token, so a form on another site (which the browser would send with the operator's Basic
    credentials) cannot make it."""
    key = (config.secret or config.read_token or "").encode()
    return hmac.new(key, f"retry {job_id}".encode(), hashlib.sha256).hexdigest()[:32]


def create_app(config: ServiceConfig, queue: JobQueue, workers: QueueWorkers | None = None) -> Starlette:
    async def webhook(request: Request) -> JSONResponse:
        if (answer := _refused(config, request)) is not None:
            return answer
        try:
            body, size = await asyncio.wait_for(read_body(request, MAX_PAYLOAD_BYTES), BODY_DEADLINE_S)
        except asyncio.TimeoutError:
            return JSONResponse({"error": f"the body did not arrive within {BODY_DEADLINE_S:g} s"}, status_code=408)
        if size > MAX_PAYLOAD_BYTES:
            return JSONResponse({"error": f"payload over {MAX_PAYLOAD_BYTES} bytes"}, status_code=413)
        try:
            payload = json.loads(body)
            if nesting_depth(payload) > MAX_JSON_DEPTH:
                raise BadPayload(f"nested deeper than {MAX_JSON_DEPTH} levels")
            repo_id, head = parse_event(payload, config.watch, config.branch)
        except (ValueError, RecursionError, BadPayload) as e:
            reason = f"nested deeper than {MAX_JSON_DEPTH} levels" if isinstance(e, RecursionError) else e
            return JSONResponse({"error": f"invalid payload: {reason}"}, status_code=400)
        except IgnoredEvent as e:
            log.info(json.dumps({"msg": "ignored", "reason": str(e)}))
            return JSONResponse({"ignored": str(e)})
        if queue.full(repo_id):
            return JSONResponse(
                {"error": f"the queue is full for {repo_id}; retry later"},
                status_code=503,
                headers={"Retry-After": "60"},
            )
        job_id, created = queue.enqueue(repo_id, head, config.plan_for(repo_id))
        log.info(json.dumps({"msg": "queued" if created else "duplicate", "job": job_id, "repo": repo_id, "sha": head}))
        return JSONResponse({"job": job_id, "queued": created}, status_code=202 if created else 200)

    def health_problems() -> list[str]:
        problems = [f"{name} has stopped" for name in (workers.dead() if workers else [])]
        if not queue.writable():
            problems.append("the queue cannot be written (locked, full disk or I/O error)")
        return problems

    def healthz(request: Request) -> JSONResponse:
        """503 with the problems when a worker has stopped or the queue cannot be written: a
        service that would take webhooks and never run them is not healthy."""
        problems = health_problems()
        if problems:
            return JSONResponse({"ok": False, "problems": problems}, status_code=503)
        return JSONResponse({"ok": True, "jobs": queue.active()})

    def status_page(request: Request) -> Response:
        """The operator's page (`status_page.py`). A browser asks for the read token (or the
        webhook secret) as the password of HTTP Basic authentication; any user name."""
        if _refused(config, request, readers=True) is not None:
            return Response(
                "the read token (--read-token) or the webhook secret, as the password",
                status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="hfexport", charset="UTF-8"'},
            )
        page = render_status(
            queue.repos(), queue.counts(), health_problems(), retry_check=lambda n: retry_check(config, n)
        )
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    async def jobs(request: Request) -> JSONResponse:
        if (answer := _refused(config, request, readers=True)) is not None:
            return answer
        return JSONResponse({"jobs": [j.to_dict() for j in queue.list()]})

    async def job(request: Request) -> JSONResponse:
        if (answer := _refused(config, request, readers=True)) is not None:
            return answer
        found = queue.get(int(request.path_params["job_id"]))
        if found is None:
            return JSONResponse({"error": "no such job"}, status_code=404)
        return JSONResponse(found.to_dict())

    async def retry(request: Request) -> Response:
        """An operator's retry of a failed job: from the status page's button (its form's check
        value, made for this job with the service's own key), or an API client's header credentials."""
        if (answer := _refused(config, request, readers=True)) is not None:
            return answer
        job_id = int(request.path_params["job_id"])
        try:
            body, _ = await asyncio.wait_for(read_body(request, 4096), BODY_DEADLINE_S)
        except asyncio.TimeoutError:
            return JSONResponse({"error": f"the body did not arrive within {BODY_DEADLINE_S:g} s"}, status_code=408)
        check = parse_qs(body.decode("latin-1")).get("check", [""])[0]
        by_header = "x-webhook-secret" in request.headers or request.headers.get("authorization", "").startswith(
            "Bearer "
        )
        if not by_header and not hmac.compare_digest(check.encode(), retry_check(config, job_id).encode()):
            return JSONResponse({"error": "retry from the status page's own button"}, status_code=403)
        why_not = queue.retry(job_id)
        log.info(json.dumps({"msg": "retry", "job": job_id, **({"refused": why_not} if why_not else {})}))
        if why_not:
            return JSONResponse({"error": why_not}, status_code=409)
        if by_header:
            return JSONResponse({"job": job_id, "queued": True})
        return RedirectResponse("/", status_code=303)

    routes = [
        Route("/", status_page),
        Route("/jobs/{job_id:int}/retry", retry, methods=["POST"]),
        Route("/webhook", webhook, methods=["POST"]),
        Route("/healthz", healthz),
        Route("/jobs", jobs),
        Route("/jobs/{job_id:int}", job),
    ]
    if config.request_page:
        tokens = workers.tokens if workers else RequestTokens()
        stages = workers.stages if workers else None
        routes += RequestPage(config.plan, queue, tokens, billed=config.requests_billed, stages=stages).routes()
    return Starlette(routes=routes)

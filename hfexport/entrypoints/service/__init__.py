"""`hfexport serve`: the Hub webhook receiver.

    GET  /          the status page (HTML; the read token or secret as a Basic-auth password)
    POST /webhook   a Hub webhook (JSON; the secret in X-Webhook-Secret)
    GET  /healthz   liveness and queue counts
    GET  /jobs      recent jobs;  GET /jobs/{id}  one job
    GET|POST /request, GET /request/{key}   (with --request-page) a form to ask for an export, and
                    the request's page (`request_page.py`)

What triggers work: a `repo.content` update of the `main` branch of a watched model repo
(`watch.py`: ids, `org/*`, the most downloaded of a tag), and the reconcile pass that queues each
watched repo's head on start and on a schedule, for the webhooks that never arrived. Our
own PR refs (`refs/pr/N`) and discussion events never do, so the bot's PRs cannot loop. Events
are deduplicated by (repo, head sha, plan) in the durable queue (`queue.py`): a replay is
harmless. QueueWorkers run the jobs with bounded concurrency, retrying with backoff.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import hmac
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from ...messages import JobPlan
from ...pipeline.resolve import is_repo_id
from ...redact import without_local_paths
from .body import BODY_DEADLINE_S, read_body
from .budget import Busy
from .executors import Executor, JobFailed
from .outcome import JobOutcome
from .queue import JobQueue
from .request_page import TOKEN_LOST, RequestPage, RequestTokens
from .status_page import render as render_status
from .watch import Watch

log = logging.getLogger("hfexport.serve")
MAX_PAYLOAD_BYTES = 1 << 20
MIN_SECRET_LENGTH = 16
MAX_JSON_DEPTH = 32
# A Hub repo id: namespace/name, each starting with a letter or digit (never a flag, never a path).
SHA = re.compile(r"[0-9a-f]{40}")
# How a push that ended on the Hub's rate limit says so (huggingface_hub's 429 message).
_RATE_LIMITED = re.compile(r"\b429\b|Too Many Requests|rate limit", re.I)


@dataclass
class ServiceConfig:
    secret: str
    # Repos acted on; a set of ids and patterns is read as one `Watch`.
    watch: Watch
    plan: JobPlan  # what every watched repo gets
    workers: int = 1
    # A transient failure (the Hub down, 5xx, 429) is retried after backoff_s, then 4x longer each
    # time up to max_backoff_s: 30 s, 2 min, 8 min, 32 min, then hourly — ten attempts span ~5.7 h,
    # so an outage of minutes to hours loses no commit (and a webhook re-sent after that re-queues it).
    max_attempts: int = 10
    backoff_s: float = 30.0
    max_backoff_s: float = 3600.0
    # PR writes (a job that opens or updates a PR) for the whole fleet on this queue: a token bucket.
    writes_per_hour: float = 300.0
    writes_burst: int = 20
    branch: str = "main"
    bot_names: set[str] = field(default_factory=set)
    # Who may read /jobs and / besides the webhook's sender: `Authorization: Bearer <read_token>`,
    # or the read token as a Basic-auth password (a browser).
    read_token: str | None = None
    # Finished jobs (done, failed, superseded) are deleted this long after they ended.
    keep_s: float = 30 * 86400
    # `/request`: a form where anyone with a Hub token asks for an export (`request_page.py`).
    request_page: bool = False
    # Each request runs as an HF Job under its requester's token (`--executor hf-jobs`): on their
    # account and bill, which the form says before they ask.
    requests_billed: bool = False

    def plan_for(self, repo_id: str) -> JobPlan:
        """The plan of a job of `repo_id`: `plan`, into the repo its watch pattern names, if any."""
        into = self.watch.destination(repo_id)
        return dataclasses.replace(self.plan, into=into) if into else self.plan

    def retry_delay(self, attempts: int) -> float:
        """Seconds before a job that failed transiently on its `attempts`-th attempt runs again."""
        return min(self.backoff_s * 4 ** (attempts - 1), self.max_backoff_s)

    def __post_init__(self) -> None:
        if not isinstance(self.watch, Watch):
            self.watch = Watch(frozenset(self.watch))
        if len(self.secret) < MIN_SECRET_LENGTH:
            raise ValueError(f"the webhook secret must be at least {MIN_SECRET_LENGTH} characters")


class IgnoredEvent(Exception):
    """A well-formed event that is not ours to act on (the reason is returned to the Hub)."""


class BadPayload(Exception):
    pass


def parse_event(payload: object, watch: Watch, branch: str = "main") -> tuple[str, str]:
    """`(repo id, head sha)` of an event that should trigger an export.

    Raises:
        BadPayload: not a Hub webhook payload.
        IgnoredEvent: a valid event we do not act on, with the reason.
    """
    if not isinstance(payload, dict):
        raise BadPayload("the payload is not a JSON object")
    event, repo = payload.get("event"), payload.get("repo")
    if not isinstance(event, dict) or not isinstance(repo, dict) or not isinstance(repo.get("name"), str):
        raise BadPayload("missing event{action,scope} or repo{name}")
    if event.get("scope") != "repo.content" or event.get("action") != "update":
        raise IgnoredEvent(f"scope {event.get('scope')!r} / action {event.get('action')!r} is not a content update")
    if repo.get("type", "model") != "model":
        raise IgnoredEvent(f"{repo.get('type')} repos are not exported")
    name = repo["name"]
    if not isinstance(name, str) or "/" not in name or not is_repo_id(name):
        raise BadPayload(f"repo name {name[:100]!r} is not a Hub repo id (namespace/name)")
    if not watch.matches(name):
        raise IgnoredEvent(f"{name} is not watched")
    refs = payload.get("updatedRefs")
    branch_ref = f"refs/heads/{branch}"
    if isinstance(refs, list) and refs:
        updates = [r for r in refs if isinstance(r, dict) and r.get("ref") == branch_ref and r.get("newSha")]
        if not updates:
            # Our own PR commits arrive as refs/pr/N updates: never a trigger.
            raise IgnoredEvent(
                f"no update of {branch_ref} (refs: {[r.get('ref') for r in refs if isinstance(r, dict)]})"
            )
        head = updates[-1]["newSha"]
    else:
        head = repo.get("headSha")
    if not isinstance(head, str) or not SHA.fullmatch(head):
        raise BadPayload("no 40-hex head sha for the branch")
    return name, head


def _depth(value: object) -> int:
    """How deeply `value` nests lists and objects (iteratively: a hostile payload sets the depth)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


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
    if secret is None:
        return JSONResponse({"error": "missing X-Webhook-Secret"}, status_code=401)
    if not hmac.compare_digest(secret.encode(), config.secret.encode()):
        return JSONResponse({"error": "wrong X-Webhook-Secret"}, status_code=403)
    return None


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
            if _depth(payload) > MAX_JSON_DEPTH:
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
        page = render_status(queue.repos(), queue.counts(), health_problems())
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

    routes = [
        Route("/", status_page),
        Route("/webhook", webhook, methods=["POST"]),
        Route("/healthz", healthz),
        Route("/jobs", jobs),
        Route("/jobs/{job_id:int}", job),
    ]
    if config.request_page:
        tokens = workers.tokens if workers else RequestTokens()
        routes += RequestPage(config.plan, queue, tokens, billed=config.requests_billed).routes()
    return Starlette(routes=routes)


def branch_head(token: str | None, branch: str) -> Callable[[str], str | None]:
    """`QueueWorkers.head` on the Hub: a repo's `branch` commit now (`HfApi.model_info`), or None
    when the Hub cannot say (unreachable, no such repo or branch): the job then runs as queued."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)

    def head(repo_id: str) -> str | None:
        try:
            return api.model_info(repo_id, revision=branch).sha
        except Exception as e:  # any answer but a commit: not a reason to stop a worker
            log.warning(json.dumps({"msg": "branch head unknown", "repo": repo_id, "error": type(e).__name__}))
            return None

    return head


PRUNE_EVERY_S = 3600.0


class QueueWorkers:
    """`config.workers` threads that claim jobs from the queue and run them on the executor, each
    renewing its job's lease while the executor runs (so a long export is never claimed twice).

    The newest commit wins: a claimed job first asks `head` for its repo's branch head now, and if
    the branch has moved on the job ends `superseded` and the head's job is queued instead (or
    found: one per commit) — a retry, a late or re-sent webhook, or a second worker never points
    a PR back at an older commit. `head` answers None where it cannot tell (the job then runs)."""

    def __init__(
        self,
        config: ServiceConfig,
        queue: JobQueue,
        executor: Executor,
        idle_s: float = 0.5,
        head: Callable[[str], str | None] | None = None,
    ):
        self.config, self.queue, self.executor, self.idle_s = config, queue, executor, idle_s
        self.head = head or (lambda repo_id: None)
        self.tokens = RequestTokens()  # the tokens of jobs asked for on the request page
        self._stop = threading.Event()
        self._prune_lock, self._next_prune = threading.Lock(), 0.0
        self._threads = [
            threading.Thread(target=self._loop, name=f"worker-{i}", daemon=True) for i in range(config.workers)
        ]

    def start(self) -> QueueWorkers:
        try:
            recovered = self.queue.recover()
        except Exception:  # a locked database: those jobs are claimed again when their leases run out
            log.exception(json.dumps({"msg": "recovery deferred to the leases"}))
            recovered = 0
        if recovered:
            log.info(json.dumps({"msg": "recovered", "jobs": recovered}))
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)

    def dead(self) -> list[str]:
        """The worker threads that have stopped while the service runs (none should, ever)."""
        if self._stop.is_set():
            return []
        return [t.name for t in self._threads if t.ident is not None and not t.is_alive()]

    def _prune(self) -> None:
        """Delete the finished jobs past `config.keep_s`, once an hour (by this process's monotonic clock)."""
        now = time.monotonic()
        with self._prune_lock:
            if now < self._next_prune:
                return
            self._next_prune = now + PRUNE_EVERY_S
        pruned = self.queue.prune(self.config.keep_s)
        if pruned:
            log.info(json.dumps({"msg": "pruned", "jobs": pruned}))

    def _loop(self) -> None:
        errors = 0
        while not self._stop.is_set():
            try:
                self._prune()
                self._once()
                errors = 0
            except Exception:  # a database error (locked past its timeout, full disk): wait, then go on
                errors += 1
                log.exception(json.dumps({"msg": "worker error", "in_a_row": errors}))
                self._stop.wait(min(60.0, self.idle_s * 2**errors))

    def _once(self) -> None:
        claimed = self.queue.claim()
        if claimed is None:
            self._stop.wait(self.idle_s)
            return
        job, token = claimed
        done = threading.Event()
        heartbeat = threading.Thread(target=self._heartbeat, args=(job.id, token, done), daemon=True)
        heartbeat.start()
        try:
            self._run(job, token)
        finally:
            done.set()
            heartbeat.join()

    def _heartbeat(self, job_id: int, token: str, done: threading.Event) -> None:
        while not done.wait(self.queue.lease_s / 3):
            try:
                renewed = self.queue.renew(job_id, token)
            except Exception:  # a locked database: the next beat tries again, within the lease
                log.exception(json.dumps({"msg": "lease renewal failed", "job": job_id}))
                continue
            if not renewed:
                log.warning(json.dumps({"msg": "lease lost", "job": job_id}))
                return

    def _run(self, job, token: str) -> None:
        started = time.perf_counter()
        head = self.head(job.repo_id)
        if head is not None and head != job.head_sha:
            newer, _ = self.queue.enqueue(job.repo_id, head, job.plan, is_head=True)
            self.queue.supersede(job.id, token, head, newer)
            self.tokens.move(job.id, newer)
            log.info(json.dumps({"msg": "superseded", "job": job.id, "sha": job.head_sha, "head": head, "by": newer}))
            return
        wait = self.queue.take_write(self.config.writes_per_hour, self.config.writes_burst)
        if wait > 0:  # the fleet's PR writes are paced (or paused by a 429): back in the queue until due
            self.queue.release(job.id, token, wait)
            log.info(json.dumps({"msg": "paced", "job": job.id, "wait_s": round(wait, 1)}))
            return
        log.info(
            json.dumps(
                {"msg": "running", "job": job.id, "repo": job.repo_id, "sha": job.head_sha, "attempt": job.attempts}
            )
        )
        # A request runs with its requester's token or not at all; a watched repo's job with the
        # service's own (no request's token is ever lent to it: their plans differ, `JobPlan.requester`).
        lent = self.tokens.get(job.id) if job.plan.requester else None
        if job.plan.requester and lent is None:
            self.queue.fail(job.id, token, TOKEN_LOST, None)
            log.warning(json.dumps({"msg": "failed", "job": job.id, "error": "the requester's token is gone"}))
            return
        try:
            outcome = JobOutcome.of(self.executor.run(dataclasses.replace(job, hub_token=lent)))
        except Busy as e:  # the machine's memory is held by the jobs running: back in the queue
            self.queue.release(job.id, token, e.retry_in_s)
            log.info(json.dumps({"msg": "waiting for memory", "job": job.id, "why": str(e)}))
            return
        except JobFailed as e:
            retry_in = (
                self.config.retry_delay(job.attempts)
                if e.retryable and job.attempts < self.config.max_attempts
                else None
            )
            if e.retryable and _RATE_LIMITED.search(str(e)):  # the Hub's rate limit: every worker waits
                self.queue.pause_writes(self.config.retry_delay(job.attempts))
            self.queue.fail(job.id, token, without_local_paths(str(e)), retry_in, transient=e.retryable)
            if retry_in is None:
                self.tokens.drop(job.id)
            log.warning(json.dumps({"msg": "failed", "job": job.id, "error": str(e), "retry_in_s": retry_in}))
            return
        except Exception as e:  # an executor bug must not kill the worker
            retry_in = self.config.backoff_s if job.attempts < self.config.max_attempts else None
            self.queue.fail(job.id, token, f"{type(e).__name__}: {without_local_paths(str(e))}", retry_in)
            if retry_in is None:
                self.tokens.drop(job.id)
            log.exception("executor error")
            return
        outcome = outcome.timed(time.perf_counter() - started)
        self.queue.finish(job.id, token, outcome)
        self.tokens.drop(job.id)
        log.info(json.dumps({"msg": "done", "job": job.id, **outcome.to_dict()}))

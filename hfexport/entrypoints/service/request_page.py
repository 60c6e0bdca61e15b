"""`GET|POST /request`: a page where anyone with a Hub token asks for an export, and a page per
request to watch it — for the users with no runner of their own (`serve --request-page`).

The form names a model repo, the backends (of those the service exports) and where the files go:
a pull request on the repo, or a repo of the user's own (`push --into`). The user's token proves
who asks and is the token the job runs with: the PR is theirs, the derived repo is written in
their namespace, and the service's own token is lent to no one. The token is checked with the Hub
(`whoami`) before anything is queued, kept in this process's memory only for the job's run
(`RequestTokens`: never in the queue's database, a log or a page) and dropped once the job ends.
A service restart forgets it: the request's page (its key's digest is kept in the queue's
database) then says to ask again, and its job fails for good without running (`TOKEN_LOST`). A
request's job is never merged into another's (`JobPlan.requester` is part of its dedup key), so a
token runs only the job it was given for.

Who may ask how much (issue 56, row 10): a client address may submit `SUBMITS_PER_CLIENT` forms a
minute, checked before the Hub is asked anything (a flood of bad tokens costs no `whoami`); one
requester may have `MAX_PER_REQUESTER` jobs waiting or running; requests fill at most half of the
queue, the rest staying the watched repos'.

Bad input re-renders the form with what is wrong and how to fix it (HTTP 400) and queues nothing.
A request answers with a redirect to its own page, `/request/<key>`, whose key (random, 128 bits)
is the only way to it; the page refreshes itself until the job ends, then links the PR or the
repo. Server-rendered HTML, no script, every value escaped; the form is urlencoded (no multipart
parser needed), read up to `MAX_FORM_BYTES`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import html
import json
import logging
import os
import secrets
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from ...backends import get_backend
from ...errors import ConfigError
from ...hub.retry import refused
from ...hub.state import OwnRepo, namespaces
from ...messages import JobPlan
from ...pipeline.fetch import weights_in
from ...pipeline.resolve import is_repo_id
from .body import BODY_DEADLINE_S, read_body
from .executors import NO_PICKLES
from .outcome import JobOutcome, Superseded
from .queue import Job, JobQueue, JobStatus
from .signin import (
    COOKIE,
    SESSION_TTL_S,
    SIGNIN_COOKIE,
    STATE_TTL_S,
    Session,
    Sessions,
    SignInFailed,
    authorize_url,
    callback_url,
    oauth_app,
    signed_in,
)
from .stages import JobStages
from .tokens import RequestTokens

if TYPE_CHECKING:
    from huggingface_hub import HfApi

log = logging.getLogger("hfexport.serve")
MAX_FORM_BYTES = 64 * 1024
REFRESH_S = 3
SUBMITS_PER_CLIENT = 10  # forms a client address may submit in `SUBMIT_WINDOW_S`
SUBMIT_WINDOW_S = 60.0
MAX_CLIENTS_TRACKED = 10_000  # the least recently seen addresses go first
MAX_PER_REQUESTER = 3


class SubmitLimits:
    """At most `SUBMITS_PER_CLIENT` submissions per client address in any `SUBMIT_WINDOW_S`."""

    def __init__(self, clock=time.monotonic) -> None:
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()
        self.clock = clock

    def allow(self, client: str) -> bool:
        now = self.clock()
        with self._lock:
            times = self._seen.pop(client, None) or deque()
            while times and now - times[0] >= SUBMIT_WINDOW_S:
                times.popleft()
            allowed = len(times) < SUBMITS_PER_CLIENT
            if allowed:
                times.append(now)
            self._seen[client] = times
            while len(self._seen) > MAX_CLIENTS_TRACKED:
                self._seen.popitem(last=False)
        return allowed


def client_of(request: Request) -> str:
    """Who submits: the address the Space's proxy saw (the first `X-Forwarded-For` hop) where the
    service runs in a Space (`SPACE_HOST`), else the connection's own address."""
    forwarded = request.headers.get("x-forwarded-for", "") if os.environ.get("SPACE_HOST") else ""
    return forwarded.split(",")[0].strip() or (request.client.host if request.client else "?")


class RequestError(Exception):
    """What is wrong with a request, and how to fix it (shown above the form)."""

    def __init__(self, cause: str, fix: str):
        super().__init__(cause)
        self.cause, self.fix = cause, fix


@dataclass(frozen=True)
class Requested:
    """A request as submitted, checked by `check`."""

    repo_id: str
    backends: tuple[str, ...]
    into: str | None
    token: str


def read_form(body: bytes) -> dict[str, str]:
    """The submitted fields (the first value of each; `backends`: every one, comma-joined)."""
    try:
        fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True, max_num_fields=32)
    except ValueError:  # more fields than the form has: none is read (the form says what is missing)
        fields = {}
    one = {name: values[0].strip() for name, values in fields.items() if values}
    one["backends"] = ",".join(fields.get("backends", []))
    return one


def shown(fields: dict[str, str]) -> dict[str, str]:
    """The fields to fill the form with again: never the token."""
    return {name: value for name, value in fields.items() if name != "token"}


def requested(fields: dict[str, str], offered: tuple[str, ...], session: Session | None = None) -> Requested:
    """The request the fields make: with the token pasted, or the signed-in `session`'s.

    Raises:
        RequestError: a field missing or malformed.
    """
    repo_id, to_repo = fields.get("repo", ""), fields.get("destination") == "repo"
    into = fields.get("into", "") if to_repo else ""
    if not is_repo_id(repo_id) or "/" not in repo_id:
        raise RequestError(f"{repo_id[:100]!r} is not a model repo id.", "Name it as it is on the Hub: org/model.")
    backends = tuple(name for name in offered if name in fields.get("backends", "").split(","))
    if not backends:
        raise RequestError("No format was chosen.", f"Tick at least one of {', '.join(offered)}.")
    if to_repo:
        try:
            OwnRepo.checked(into, repo_id)
        except ConfigError as e:
            raise RequestError(e.cause, e.fix) from None
    if session is not None and not fields.get("token"):
        if not hmac.compare_digest(fields.get("form_key", ""), session.form_key):
            raise RequestError("This form is not from your signed-in page.", "Reload the page and submit it again.")
        return Requested(repo_id, backends, into or None, session.token)
    if not fields.get("token"):
        raise RequestError("No Hub token was given.", "Sign in, or paste a token of yours with write access.")
    return Requested(repo_id, backends, into or None, fields["token"])


def check(api: HfApi, request: Requested) -> tuple[str, str]:
    """The model's head commit and the token's user, once the Hub says the token is valid, may
    write where the files go and can read the model.

    Raises:
        RequestError: the Hub refused the token, the namespace is not the token's, or the model
            cannot be read with it.
    """
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    try:
        me = api.whoami(token=request.token)
    except HfHubHTTPError as e:
        if refused(e):
            raise RequestError("The Hub refused this token (wrong or expired).", "Paste a valid one.") from None
        raise RequestError(f"The Hub did not answer ({e.__class__.__name__}).", "Ask again in a minute.") from None
    if request.into and request.into.split("/")[0] not in namespaces(me):
        raise RequestError(
            f"This token belongs to {me['name']}, which cannot publish into {request.into.split('/')[0]}/.",
            f"Publish into {me['name']}/… or an organisation of yours.",
        )
    try:
        info = api.model_info(request.repo_id, token=request.token)
    except RepositoryNotFoundError:
        raise RequestError(
            f"There is no model repo {request.repo_id} that this token can read.", "Check the repo id."
        ) from None
    except HfHubHTTPError as e:
        raise RequestError(f"The Hub did not answer ({e.__class__.__name__}).", "Ask again in a minute.") from None
    assert info.sha is not None  # the Hub names the commit of every repo it answers for
    # What the job would refuse, said now: weights this service never loads.
    safe, pickled = weights_in([s.rfilename for s in info.siblings or []])
    if pickled and not safe:
        raise RequestError(f"{request.repo_id} has pickled weights only ({', '.join(pickled[:3])}).", NO_PICKLES)
    return info.sha, str(me["name"])


def already_proposed(api: HfApi, queue: JobQueue, request: Requested, sha: str, requester: str) -> None:
    """Refuse a pull request that would duplicate one this service made or is making: a job of the
    same model's PR (asked for here by anyone, or a watched repo's) waiting or running, or done with
    a PR still open whose formats include the ones asked for. The service trusts its own records
    here, never a PR's text (anyone can write a look-alike): its jobs say which PRs it opened. A
    requester's own earlier PR is no duplicate: their job updates it (it is theirs on the Hub).

    Raises:
        RequestError: naming the open PR (its link), or the job in the way.
    """
    from huggingface_hub.errors import HfHubHTTPError

    if request.into is not None:
        return  # a repo of the requester's own duplicates no one's PR
    for job in queue.pull_request_jobs(request.repo_id):
        if job.plan.requester == requester:
            continue
        if job.status in (JobStatus.QUEUED, JobStatus.RUNNING):
            raise RequestError(
                f"A pull request with exports of {request.repo_id} is being made now (job {job.id}, {job.status}).",
                "Ask again once it is open, to find it linked here, or ask for a repo of your own instead.",
            )
        result = job.result if isinstance(job.result, JobOutcome) else None
        if result is None or not result.pr_url or not set(request.backends) <= set(job.plan.backends):
            continue
        try:
            num = int(result.pr_url.rstrip("/").rsplit("/", 1)[-1])
            details = api.get_discussion_details(request.repo_id, num, token=request.token)
        except (ValueError, HfHubHTTPError):
            continue  # gone, or not readable with this token: not a PR anyone can be pointed to
        if details.status in ("open", "draft"):  # a PR opened by a commit stays a draft until published
            held = "this commit" if job.head_sha == sha else f"commit {job.head_sha[:12]}"
            raise RequestError(
                f"Pull request #{num} on {request.repo_id} already proposes these exports (of {held}): {result.pr_url}",
                "Comment or react there so its maintainers see it is wanted, or ask for a repo of your own instead.",
            )


def _traced(fields: dict[str, str], cause: str) -> dict[str, str]:
    """A refused request as the operator's log keeps it: the repo ids asked for and why not. A field
    that is no repo id (a token pasted in the wrong box) is written nowhere, in the cause neither;
    the token's own field never is."""
    traced, why = {}, cause
    for name in ("repo", "into"):
        value = fields.get(name, "")
        if not value:
            continue
        if is_repo_id(value):
            traced[name] = value
        else:
            traced[name] = "(not a repo id)"
            why = why.replace(value[:100], "…")
    return {**traced, "why": why}


def plan_of(request: Requested, requester: str, task: str = "auto") -> JobPlan:
    return JobPlan(request.backends, task, False, request.into, requester)


# ── Pages ────────────────────────────────────────────────────────────────────

_STYLE = (
    "<style>body{font:15px system-ui,sans-serif;margin:2em auto;max-width:44em;color:#222;padding:0 1em}"
    "label{display:block;margin:.8em 0 .2em;font-weight:600}input[type=text],input[type=password]{width:100%;"
    "padding:.45em;font:inherit;box-sizing:border-box}fieldset{border:1px solid #ddd;margin:1em 0}"
    ".error{background:#fbe3e3;border-left:4px solid #d43c3c;padding:.6em .8em}.fix{color:#555}"
    "button{font:inherit;padding:.5em 1.4em;margin-top:1em}.state{font-weight:700}"
    ".button{display:inline-block;background:#ffd21e;color:#222;padding:.45em 1em;border-radius:6px;"
    "text-decoration:none;font-weight:600}</style>"
)


def _page(title: str, body: str, refresh: bool = False) -> str:
    meta = f'<meta http-equiv="refresh" content="{REFRESH_S}">' if refresh else ""
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f'<meta name="viewport" content="width=device-width">{meta}{_STYLE}</head><body>{body}</body></html>'
    )


def render_form(
    offered: tuple[str, ...],
    shown: dict[str, str] | None = None,
    error: RequestError | None = None,
    session: Session | None = None,
    sign_in: bool = False,
    billed: bool = False,
) -> str:
    """The request form; `shown`: the fields as submitted (never the token), `error`: what was
    wrong; `session`: the signed-in user (no token asked), `sign_in`: offer "Sign in with Hugging
    Face"; `billed`: each request runs as an HF Job on the requester's account (said before they ask)."""
    e, shown = html.escape, shown or {}
    to_repo = shown.get("destination") == "repo"
    # Ticked: what was asked (the form shown again), else ONNX alone where offered — the format the
    # ecosystem's loaders read, and no pickled program (.pt2) nobody asked for; a user ticks the rest.
    asked = set(shown.get("backends", "").split(",")) - {""}
    ticked = asked or ({"onnx"} if "onnx" in offered else set(offered))
    boxes = "".join(
        f'<label style="font-weight:400"><input type="checkbox" name="backends" value="{e(name)}"'
        f"{' checked' if name in ticked else ''}> {e(get_backend(name).title or name)}</label>"
        for name in offered
    )
    problem = (
        f'<p class="error" role="alert">{e(error.cause)} <span class="fix">{e(error.fix)}</span></p>' if error else ""
    )
    if session is not None:
        who = (
            f'<p id="signed-in">Signed in as <b>{e(session.name)}</b> · <a href="/request/logout">sign out</a></p>'
            f'<input type="hidden" name="form_key" value="{e(session.form_key)}">'
        )
    else:
        offer = (
            '<p><a id="sign-in" class="button" href="/request/login">Sign in with Hugging Face</a> '
            "or paste a token:</p>"
            if sign_in
            else ""
        )
        who = (
            f'{offer}<label for="token">Your Hub token (write access)</label>'
            '<input type="password" id="token" name="token" autocomplete="off" aria-describedby="token-hint"'
            f"{'' if sign_in else ' required'}>"
            '<p class="fix" id="token-hint">The job runs with it, and it is forgotten once the job ends: never '
            "stored or shown.</p>"
        )
    return _page(
        "hfexport: ask for an export",
        "<h1>Ask for an export</h1>"
        "<p>hfexport exports the model, reloads every file on its runtime and checks it against the original "
        "model, then publishes what passed.</p>"
        f'{problem}<form method="post" action="/request">'
        '<label for="repo">Model repo</label>'
        f'<input type="text" id="repo" name="repo" placeholder="org/model" value="{e(shown.get("repo", ""))}" required>'
        f"<fieldset><legend>Formats</legend>{boxes}</fieldset>"
        "<fieldset><legend>Where the files go</legend>"
        '<label style="font-weight:400"><input type="radio" name="destination" value="pr"'
        f"{'' if to_repo else ' checked'}> a pull request on the model repo</label>"
        '<label style="font-weight:400"><input type="radio" name="destination" value="repo"'
        f"{' checked' if to_repo else ''}> a repo of mine</label>"
        '<label for="into" style="font-weight:400">Its name</label>'
        '<input type="text" id="into" name="into" placeholder="yourname/model-ONNX" aria-describedby="into-hint" '
        f'value="{e(shown.get("into", ""))}">'
        '<p class="fix" id="into-hint">namespace/name, in your namespace or an organisation of yours: '
        "created if missing, updated in place by each request.</p>"
        f"</fieldset>{who}{_BILLED if billed else ''}"
        "<button type=submit>Export</button></form>",
    )


_BILLED = (
    '<p class="fix" id="billed"><b>Billed to you:</b> this service runs each export as a Hugging Face Job '
    "under your account, with your token: the job's hardware is charged to your account, as any Job you "
    "start yourself.</p>"
)


def _for(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


def render_request(
    job: Job | None,
    into: str | None,
    token_lost: bool,
    stage: tuple[str, float] | None = None,
    ahead: int | None = None,
    now: float | None = None,
) -> str:
    """A request's page: its job's state — queued (for how long, how many jobs before it), running
    (for how long, at which stage: `stage`, what its push last said and when) — and once it ends
    what it published (the link, each file with its figures) or why it failed and what to do."""
    e, now = html.escape, time.time() if now is None else now
    if job is None:
        return _page("hfexport: no such request", "<h1>No such request</h1><p><a href=/request>Ask for one</a>.</p>")
    where = f"into <code>{e(into)}</code>" if into else "as a pull request on it"
    lines = [f"<h1>{e(job.repo_id)}</h1>", f"<p>Commit <code>{e(job.head_sha[:12])}</code>, {where}.</p>"]
    result = job.result if isinstance(job.result, JobOutcome) else JobOutcome()
    link = result.url
    finished = job.status in (JobStatus.DONE, JobStatus.FAILED, JobStatus.SUPERSEDED)
    lines.append(f'<p>State: <span class="state" id="state">{e(str(job.status))}</span></p>')
    if job.status == JobStatus.QUEUED:
        waited = f"Waiting for {_for(now - job.created_at)}"
        before = "" if ahead is None else f"; {ahead} job{'s' * (ahead != 1)} before it" if ahead else "; next to run"
        lines.append(f'<p id="progress">{waited}{before}.</p>')
    elif job.status == JobStatus.RUNNING:
        began = job.started_at or job.updated_at
        at = f": {e(stage[0])} (for {_for(now - stage[1])})" if stage else ""
        lines.append(f'<p id="progress">Running for {_for(now - began)}{at}.</p>')
    if job.status == JobStatus.DONE:
        action = str(result.action or "")
        lines.append(
            f'<p id="outcome">{e(action)}: <a id="link" href="{e(link)}">{e(link)}</a></p>'
            if link
            else f'<p id="outcome">{e(action)}: nothing to publish.</p>'
        )
        if result.made:
            took = f" in {_for(result.seconds)}" if result.seconds else ""
            made = "".join(f"<li>{e(line)}</li>" for line in result.made)
            lines.append(f'<p>Validated and published{took}:</p><ul id="made">{made}</ul>')
    elif job.status == JobStatus.FAILED:
        cause, _, fix = (job.error or "failed").partition("\nfix: ")
        lines.append(f'<p class="error" id="outcome" role="alert">{e(cause)}</p>')
        if fix:
            lines.append(f'<p class="fix" id="fix">{e(fix)}</p>')
    elif job.status == JobStatus.SUPERSEDED:
        lines.append('<p id="outcome">A newer commit of the model was exported instead.</p>')
    elif token_lost:
        lines.append('<p class="error">The service restarted and no longer holds your token: ask again.</p>')
    if finished or token_lost:
        lines.append('<p><a href="/request">Ask for another export</a></p>')
    return _page(f"hfexport: {job.repo_id}", "".join(lines), refresh=not finished)


def new_key() -> str:
    return secrets.token_urlsafe(16)


# ── The routes ───────────────────────────────────────────────────────────────


class RequestPage:
    """`/request` (the form, and its submission), `/request/{key}` (a request's page), and where
    the Hub offers it "Sign in with Hugging Face" (`/request/login`, `/callback`, `/logout`).

    Args:
        plan: the service's: its backends are the form's formats, its task the jobs'.
        queue: where a request becomes a job.
        tokens: where its token waits for the worker that runs it.
        stages: where the workers say each running job's stage.
    """

    def __init__(
        self,
        plan: JobPlan,
        queue: JobQueue,
        tokens: RequestTokens,
        *,
        billed: bool = False,
        stages: JobStages | None = None,
    ):
        self.offered, self.task, self.queue, self.tokens = tuple(plan.backends), plan.task, queue, tokens
        self.stages = stages  # where each running job is (the workers'); None: not said
        self.app, self.sessions, self.billed, self.limits = oauth_app(), Sessions(), billed, SubmitLimits()

    def routes(self) -> list[Route]:
        return [
            Route("/request", self.form),
            Route("/request", self.submit, methods=["POST"]),
            Route("/request/login", self.login),
            Route("/request/callback", self.callback),
            Route("/request/logout", self.logout),
            Route("/request/{key}", self.page),
        ]

    def _session(self, request: Request) -> Session | None:
        return self.sessions.get(request.cookies.get(COOKIE)) if self.app is not None else None

    def form(self, request: Request) -> HTMLResponse:
        text = render_form(
            self.offered, session=self._session(request), sign_in=self.app is not None, billed=self.billed
        )
        return HTMLResponse(text, headers=_NO_STORE)

    async def submit(self, request: Request) -> Response:
        from huggingface_hub import HfApi

        session = self._session(request)
        try:
            body, size = await asyncio.wait_for(read_body(request, MAX_FORM_BYTES), BODY_DEADLINE_S)
        except TimeoutError:
            return HTMLResponse("The form did not arrive in time.", status_code=408)
        fields = read_form(body)
        status = 400
        try:
            if size > MAX_FORM_BYTES:
                raise RequestError(f"The form sent more than {MAX_FORM_BYTES} bytes.", "Send the fields alone.")
            if not self.limits.allow(client_of(request)):  # before the Hub is asked anything
                status = 429
                raise RequestError("Too many requests from your address this minute.", "Ask again in a minute.")
            asked = requested(fields, self.offered, session)
            if self.queue.full(asked.repo_id):
                raise RequestError("The queue is full for that namespace.", "Ask again in a few minutes.")
            sha, requester = await asyncio.to_thread(check, HfApi(), asked)
            await asyncio.to_thread(already_proposed, HfApi(), self.queue, asked, sha, requester)
            if (why := self.queue.requests_full(requester, MAX_PER_REQUESTER)) is not None:
                status = 429
                raise RequestError(f"Not now: {why}.", "Ask again once one of them has finished.")
        except RequestError as e:
            log.info(json.dumps({"msg": "refused", "status": status, **_traced(fields, e.cause)}))
            text = render_form(self.offered, shown(fields), e, session, self.app is not None, self.billed)
            return HTMLResponse(text, status_code=status, headers=_NO_STORE)
        job_id, _ = self.queue.enqueue(asked.repo_id, sha, plan_of(asked, requester, self.task))
        self.tokens.put(job_id, asked.token)
        key = new_key()
        self.queue.remember_page(_digest(key), job_id)
        log.info(
            json.dumps({"msg": "requested", "job": job_id, "repo": asked.repo_id, "into": asked.into, "by": requester})
        )
        return RedirectResponse(f"/request/{key}", status_code=303)

    def page(self, request: Request) -> HTMLResponse:
        job_id = self.queue.page_job(_digest(request.path_params["key"]))
        found = self.queue.get(job_id) if job_id is not None else None
        # Superseded (the branch moved on): the request is the newer commit's job now.
        while found is not None and isinstance(found.result, Superseded):
            found = self.queue.get(found.result.job)
        if found is None:
            return HTMLResponse(render_request(None, None, False), status_code=404, headers=_NO_STORE)
        lost = found.status in (JobStatus.QUEUED, JobStatus.RUNNING) and self.tokens.get(found.id) is None
        stage = self.stages.get(found.id) if self.stages is not None else None
        ahead = self.queue.position(found.id) if found.status == JobStatus.QUEUED else None
        return HTMLResponse(render_request(found, found.plan.into, lost, stage, ahead), headers=_NO_STORE)

    def login(self, request: Request) -> Response:
        if self.app is None:
            return HTMLResponse("This service offers no sign-in: paste a token.", status_code=404)
        started = self.sessions.start()
        try:
            target = authorize_url(self.app, callback_url(str(request.base_url)), started)
        except Exception as e:  # the Hub's OpenID configuration unreadable: said, not a 500
            return HTMLResponse(f"Sign-in is unavailable ({html.escape(type(e).__name__)}): paste a token.", 502)
        response = RedirectResponse(target, status_code=302, headers=_NO_STORE)
        # This browser's proof that it started the sign-in the callback finishes.
        response.set_cookie(SIGNIN_COOKIE, started.nonce, STATE_TTL_S, path="/request", httponly=True, samesite="lax")
        return response

    async def callback(self, request: Request) -> Response:
        code, state = request.query_params.get("code", ""), request.query_params.get("state", "")
        verifier = self.sessions.take(state, request.cookies.get(SIGNIN_COOKIE)) if self.app and code else None
        if self.app is None or verifier is None:
            return HTMLResponse(
                "This sign-in was not started in this browser, or has expired: sign in again.", status_code=400
            )
        try:
            redirect_uri = callback_url(str(request.base_url))
            name, token = await asyncio.to_thread(signed_in, self.app, code, redirect_uri, verifier)
        except SignInFailed as e:
            return HTMLResponse(f"Sign-in failed: {html.escape(str(e))}. Sign in again.", status_code=502)
        except Exception as e:  # the Hub unreachable, or answering something else than JSON
            return HTMLResponse(f"Sign-in failed ({html.escape(type(e).__name__)}). Sign in again.", 502)
        response = RedirectResponse("/request", status_code=303, headers=_NO_STORE)
        secure = request.url.scheme == "https" or "SPACE_HOST" in os.environ
        session_id = self.sessions.open(name, token)
        response.set_cookie(
            COOKIE, session_id, SESSION_TTL_S, path="/request", httponly=True, samesite="lax", secure=secure
        )
        response.delete_cookie(SIGNIN_COOKIE, path="/request")
        log.info(json.dumps({"msg": "signed in", "user": name}))
        return response

    def logout(self, request: Request) -> Response:
        self.sessions.close(request.cookies.get(COOKIE))
        response = RedirectResponse("/request", status_code=303, headers=_NO_STORE)
        response.delete_cookie(COOKIE, path="/request")
        return response


_NO_STORE = {"Cache-Control": "no-store"}


def _digest(key: str) -> str:
    """What the queue keeps of a request's key: its digest (the key itself opens the page)."""
    return hashlib.sha256(key.encode()).hexdigest()

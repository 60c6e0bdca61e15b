"""Stage 7 — publish: one pull request per repo, opened once, updated when the model changes.

Publishing is three steps, so that the Hub is read once and every rule lives in one pure function:

    state = read_state(api, repo_id, sha)          # the Hub, read once (no writes)
    decision = decide(state, request, report=...)  # pure: state + what was asked → what to do
    result = apply(api, state, decision, report)   # the writes, and only those

`decide` runs twice per push with the same state: before the export (report=None), to skip the
work when there is nothing to do, and after it, to choose between opening, updating, reporting a
failure or finding the base already up to date.

Our PRs are recognised by a hidden marker in their description or latest update comment:

    <!-- hfexport {"source_sha": "...", "plan": "<plan digest>", "request": "...", "nonce": "..."} -->

The rules (see `decide`):
- the owner opted out (`hfexport: false` in the card metadata, or `.hfexport.yaml`) → nothing;
- our open PR already holds this source sha and plan → nothing to do (no upload, no commit);
- our latest PR was closed by a maintainer → left alone unless `force` (then reopened and updated);
- every backend failed → no PR; one discussion (opened or updated) with the error report;
- our PR holds an older sha or plan → a new commit on `refs/pr/N` replacing the artifacts, and a
  comment saying what changed;
- the base already holds these exact files and our card section (our PR was merged) → nothing;
- otherwise → one commit with `create_pr=True` holding the artifacts and the card change.

Every Hub call goes through `retry`: 429 and 5xx answers and dropped connections are retried with
backoff. Steps that are not idempotent (opening a PR, commenting) look, before a retry, for what
the failed attempt may have done anyway, by the nonce.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends import BACKENDS
from ..errors import AuthError
from ..report import REPORT_FILE, PublishAction, PublishResult, Report, markdown_table
from ..versions import installed
from .card import START, opted_out, render_card
from .retry import retry

PR_TITLE = "Add verified exports (hfexport)"
DISCUSSION_TITLE = "hfexport: exports of this model failed"
_MARKER = re.compile(r"<!-- hfexport (\{.*?\}) -->")

Log = Callable[[str], None]


# ── What we know of the Hub ──────────────────────────────────────────────────


@dataclass(frozen=True)
class RemoteFile:
    """A file at the base revision, with what identifies its content."""

    path: str
    size: int
    blob_id: str
    lfs_sha256: str | None = None


@dataclass
class OurThread:
    """A PR or discussion we opened, with the latest marker it carries."""

    num: int
    status: str
    is_pull_request: bool
    state: dict  # the latest marker: source_sha, plan, request, nonce
    nonces: set[str]

    @property
    def is_open(self) -> bool:
        return self.status in ("open", "draft")


@dataclass
class HubState:
    """Everything publishing reads from the Hub, read once by `read_state`."""

    repo_id: str
    sha: str
    endpoint: str
    opted_out: bool
    me: str | None = None
    readme: str | None = None
    threads: list[OurThread] = field(default_factory=list)  # newest first
    base_files: dict[str, RemoteFile] = field(default_factory=dict)
    pr_files: list[str] = field(default_factory=list)  # the files on our latest PR

    @property
    def latest_pr(self) -> OurThread | None:
        return next((t for t in self.threads if t.is_pull_request), None)

    @property
    def discussions(self) -> list[OurThread]:
        return [t for t in self.threads if not t.is_pull_request]

    def url(self, num: int) -> str:
        return f"{self.endpoint}/{self.repo_id}/discussions/{num}"


def read_state(api, repo_id: str, sha: str) -> HubState:
    """Read what publishing needs, once: the opt-out and card, who we are, our PRs and
    discussions, the files at `sha` and on our latest PR.

    Raises:
        AuthError: the token is missing or refused (a PR needs one).
        HubUnavailableError: the Hub kept failing after retries.
    """
    import yaml

    readme = _read_file(api, repo_id, "README.md", sha)
    settings = _read_file(api, repo_id, ".hfexport.yaml", sha)
    try:
        data = yaml.safe_load(settings) if settings else None
    except yaml.YAMLError:
        data = None
    owner_opted_out = opted_out(readme) or (isinstance(data, dict) and bool(data.get("opt_out")))
    state = HubState(repo_id, sha, api.endpoint, owner_opted_out, readme=readme)
    if owner_opted_out:
        return state
    state.me = _whoami(api)
    state.threads = _our_threads(api, repo_id, state.me)
    state.base_files = _files(api, repo_id, sha)
    latest = state.latest_pr
    if latest is not None:
        listed = retry("list the pull request's files", lambda: api.list_repo_files(repo_id, revision=f"refs/pr/{latest.num}"))
        state.pr_files = list(listed)
    return state


def request_key(backends: list[str], task: str) -> str:
    """What the user asked for that, with the source sha, decides the plan: checked before the
    plan exists, so an unchanged rerun needs neither a download nor transformers."""
    return hashlib.sha256(json.dumps([sorted(backends), task, installed("hfexport")]).encode()).hexdigest()[:16]


# ── The rules ────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Decision:
    """What to do. With `action` one of opted-out, unchanged, closed-respected, up-to-date there is
    nothing to write; opened, updated and discussion are carried out by `apply`."""

    action: PublishAction
    thread: OurThread | None = None  # the PR to update, or the discussion to comment on
    stale: tuple[str, ...] = ()  # files of ours on the PR that this export no longer produces

    @property
    def writes(self) -> bool:
        return self.action in (PublishAction.OPENED, PublishAction.UPDATED, PublishAction.DISCUSSION)


def decide(state: HubState, request: str, report: Report | None = None, *, force: bool = False) -> Decision | None:
    """The rules of the module docstring, on `state` only (no Hub call).

    Before the export (`report` None) it returns the outcomes that need none, or None: export.
    After it, it always returns a decision.
    """
    if state.opted_out:
        return Decision(PublishAction.OPTED_OUT)
    latest = state.latest_pr
    if latest is not None and latest.state.get("source_sha") == state.sha:
        same_plan = report is not None and latest.state.get("plan") == report.plan_digest
        if latest.is_open and (same_plan or latest.state.get("request") == request):
            return Decision(PublishAction.UNCHANGED, latest)
    if latest is not None and latest.status == "closed" and not force:
        return Decision(PublishAction.CLOSED_RESPECTED, latest)
    if report is None:
        return None
    if not report.succeeded:
        open_ones = [d for d in state.discussions if d.is_open]
        return Decision(PublishAction.DISCUSSION, open_ones[0] if open_ones else None)
    if latest is not None and latest.status in ("open", "draft", "closed"):
        keep = set(_paths(report))
        ours = tuple(f"{b.subfolder}/" for b in BACKENDS.values())
        stale = tuple(p for p in state.pr_files if p.startswith(ours) and p not in keep)
        return Decision(PublishAction.UPDATED, latest, stale)
    if _already_on_base(state, report):
        return Decision(PublishAction.UP_TO_DATE, latest)
    return Decision(PublishAction.OPENED)


def _already_on_base(state: HubState, report: Report) -> bool:
    """Whether every artifact is already at the base sha byte for byte (by hash), with our card section."""
    if not state.readme or START not in state.readme:
        return False
    out = Path(report.out_dir)
    for b in report.succeeded:
        for f in b.files:
            remote = state.base_files.get(f"{b.subfolder}/{f.path}")
            if remote is None or remote.size != f.size:
                return False
            content = (out / b.subfolder / f.path).read_bytes()
            if remote.lfs_sha256 is not None:
                same = hashlib.sha256(content).hexdigest() == remote.lfs_sha256
            else:
                same = _git_blob_sha1(content) == remote.blob_id
            if not same:
                return False
    return True


# ── The writes ───────────────────────────────────────────────────────────────


def apply(
    api,
    state: HubState,
    decision: Decision,
    report: Report | None,
    *,
    request: str,
    dry_run: bool = False,
    log: Log = lambda message: None,
) -> PublishResult:
    """Carry out `decision` on the Hub (nothing when `dry_run`).

    Raises:
        AuthError: the token cannot open PRs or discussions here.
        HubUnavailableError: the Hub kept failing after retries.
    """
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete
    from huggingface_hub.errors import HfHubHTTPError

    repo_id, nonce = state.repo_id, secrets.token_hex(8)
    num = decision.thread.num if decision.thread else None
    if not decision.writes:
        log(_explain(decision, state))
        url = state.url(num) if num is not None else None
        return PublishResult(decision.action, repo_id, num, url, report=report)
    if decision.action == PublishAction.DISCUSSION:
        return _report_failure(api, state, decision, report, nonce, dry_run, log)

    out = Path(report.out_dir)
    files = [*_paths(report), REPORT_FILE, "README.md"]
    card = render_card(state.readme, repo_id, report)
    description = _description(report, marker(state.sha, report.plan_digest, nonce, request))
    if dry_run:
        return PublishResult(PublishAction.DRY_RUN, repo_id, num, None, None, files, description, card, report)

    def operations(stale: tuple[str, ...]) -> list[Any]:
        # Fresh objects each attempt: the client marks an operation as used once committed.
        adds = [
            CommitOperationAdd(f"{b.subfolder}/{f.path}", str(out / b.subfolder / f.path))
            for b in report.succeeded
            for f in b.files
        ]
        adds.append(CommitOperationAdd(REPORT_FILE, report.to_json().encode()))
        adds.append(CommitOperationAdd("README.md", card.encode()))
        return adds + [CommitOperationDelete(p) for p in stale]

    if decision.action == PublishAction.UPDATED:
        if decision.thread.status == "closed":
            retry("reopen the pull request", lambda: api.change_discussion_status(repo_id, num, "open"))
        commit = retry(
            "push the new exports to the pull request",
            lambda: api.create_commit(
                repo_id, operations(decision.stale), commit_message=f"Update exports to {state.sha[:12]}",
                commit_description=description, revision=f"refs/pr/{num}",
            ),
        )
        _comment_once(api, repo_id, num, nonce, _update_comment(decision.thread.state, report, description))
        log(f"updated PR #{num}: {state.url(num)}")
        return PublishResult(PublishAction.UPDATED, repo_id, num, state.url(num), commit.oid, files, description, card, report)

    def open_pr() -> tuple[int, str | None]:
        try:
            info = api.create_commit(
                repo_id, operations(()), commit_message=PR_TITLE, commit_description=description,
                create_pr=True, revision="main",
            )
        except HfHubHTTPError as e:
            _raise_auth(e, repo_id)
            raise
        return int(info.pr_num), info.oid

    def opened_anyway() -> tuple[int, None] | None:
        # A dropped reply may hide a PR that was in fact opened: look for our nonce.
        found = [t for t in _our_threads(api, repo_id, state.me) if t.is_pull_request and nonce in t.nonces]
        return (found[0].num, None) if found else None

    num, commit_oid = retry("open the pull request", open_pr, before_retry=opened_anyway)
    log(f"opened PR #{num}: {state.url(num)}")
    return PublishResult(PublishAction.OPENED, repo_id, num, state.url(num), commit_oid, files, description, card, report)


def _explain(decision: Decision, state: HubState) -> str:
    num = decision.thread.num if decision.thread else None
    return {
        PublishAction.OPTED_OUT: "the repo opts out of hfexport: nothing to do",
        PublishAction.UNCHANGED: f"PR #{num} already holds these exports: {state.url(num or 0)}",
        PublishAction.CLOSED_RESPECTED: f"PR #{num} was closed by a maintainer; not reopening it "
        f"(force it with --force, or force=True in Python): {state.url(num or 0)}",
        PublishAction.UP_TO_DATE: "the repo already holds these exact exports and card section: nothing to do",
    }[decision.action]


def _report_failure(api, state: HubState, decision: Decision, report: Report, nonce: str, dry_run: bool, log: Log) -> PublishResult:
    """No export worked: open (or update) one discussion with the errors instead of a PR."""
    repo_id = state.repo_id
    text = "\n".join(
        [f"hfexport could not produce any working export of commit `{state.sha[:12]}`:", ""]
        + [f"- **{b.backend}**: {b.status} — {b.error}" for b in report.backends]
        + ["", marker(state.sha, report.plan_digest, nonce)]
    )
    if dry_run:
        return PublishResult(PublishAction.DRY_RUN, repo_id, description=text, report=report)

    def post() -> int:
        if decision.thread is not None:
            api.comment_discussion(repo_id, decision.thread.num, text)
            return decision.thread.num
        return api.create_discussion(repo_id, DISCUSSION_TITLE, description=text).num

    def posted_anyway() -> int | None:
        found = [t.num for t in _our_threads(api, repo_id, state.me) if not t.is_pull_request and nonce in t.nonces]
        return found[0] if found else None

    num = retry("report the failure in a discussion", post, before_retry=posted_anyway)
    log(f"every backend failed: reported in discussion #{num}: {state.url(num)}")
    return PublishResult(PublishAction.DISCUSSION, repo_id, num, state.url(num), description=text, report=report)


# ── Texts ────────────────────────────────────────────────────────────────────


def marker(source_sha: str, plan_digest: str, nonce: str, request: str | None = None) -> str:
    state = {"source_sha": source_sha, "plan": plan_digest, "request": request, "nonce": nonce}
    return "<!-- hfexport " + json.dumps(state) + " -->"


def _description(report: Report, hidden: str) -> str:
    lines = [
        f"This PR adds exports of this model at commit `{report.source.sha[:12]}`, each reloaded on its runtime "
        "and checked against the original model on another input shape.",
        "",
        *markdown_table(report, ["backend", "outcome", "max_abs_diff", "folder", "files"]),
        "",
        "The model card gains an *Exports* section (how to load each one) and format tags.",
        "",
        hidden,
    ]
    return "\n".join(lines)


def _update_comment(previous: dict, report: Report, description: str) -> str:
    old = (previous.get("source_sha") or "?")[:12]
    new = report.source.sha[:12]
    what = f"the model moved from `{old}` to `{new}`" if previous.get("source_sha") != report.source.sha else "the export plan changed"
    return f"Updated: {what}; the exports were redone and re-validated.\n\n" + description


# ── Hub reads and writes (each through retry) ────────────────────────────────


def _paths(report: Report) -> list[str]:
    return [p for b in report.succeeded for p in b.paths]


def _our_threads(api, repo_id: str, me: str) -> list[OurThread]:
    """Our PRs and discussions, newest first, each with the latest marker it carries (one listing)."""
    found = []
    for d in retry("list pull requests and discussions", lambda: list(api.get_repo_discussions(repo_id, author=me))):
        details = retry("read a pull request", lambda: api.get_discussion_details(repo_id, d.num))
        markers = []
        for event in details.events:
            for raw in _MARKER.findall(getattr(event, "content", None) or ""):
                try:
                    parsed = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(parsed, dict):
                    markers.append(parsed)
        if markers:
            nonces = {m.get("nonce") for m in markers}
            found.append(OurThread(d.num, details.status, details.is_pull_request, markers[-1], nonces))
    return sorted(found, key=lambda t: t.num, reverse=True)


def _files(api, repo_id: str, revision: str) -> dict[str, RemoteFile]:
    from huggingface_hub.hf_api import RepoFile

    entries = retry("list the repo's files", lambda: list(api.list_repo_tree(repo_id, revision=revision, recursive=True)))
    return {
        e.path: RemoteFile(e.path, e.size, e.blob_id, e.lfs.sha256 if e.lfs is not None else None)
        for e in entries
        if isinstance(e, RepoFile)
    }


def _read_file(api, repo_id: str, path: str, revision: str) -> str | None:
    from huggingface_hub.errors import EntryNotFoundError

    def download():
        try:
            local = api.hf_hub_download(repo_id, path, revision=revision)
        except EntryNotFoundError:
            return None
        return Path(local).read_text(encoding="utf-8", errors="replace")

    return retry(f"read {path}", download)


def _whoami(api) -> str:
    from huggingface_hub.errors import HfHubHTTPError

    def ask():
        try:
            return api.whoami()["name"]
        except HfHubHTTPError as e:
            if e.response is not None and e.response.status_code in (401, 403):
                raise AuthError(
                    "The Hub refused the token (missing, wrong or expired): opening a pull request needs one.",
                    "Pass a token with write access to pull requests (--token or token=, or set HF_TOKEN).",
                ) from None
            raise

    return retry("check the token", ask)


def _raise_auth(e, repo_id: str) -> None:
    status = e.response.status_code if e.response is not None else None
    if status in (401, 403):
        raise AuthError(f"The Hub refused to open a pull request on {repo_id} (HTTP {status}).", "Use a token that can open pull requests there.") from None


def _comment_once(api, repo_id: str, num: int, nonce: str, text: str) -> None:
    def commented_anyway() -> bool | None:
        details = api.get_discussion_details(repo_id, num)
        return True if any(nonce in (getattr(e, "content", "") or "") and e.type == "comment" for e in details.events[1:]) else None

    retry("comment on the pull request", lambda: api.comment_discussion(repo_id, num, text), before_retry=commented_anyway)


def _git_blob_sha1(content: bytes) -> str:
    """The git object id of a regular (non-LFS) file, as the Hub reports it in `blob_id`."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()

"""Stage 7 — publish: one pull request per repo, opened once, updated when the model changes.

Our PRs are recognised by a hidden marker in their description or latest update comment:

    <!-- hfexport {"source_sha": "...", "plan": "<plan digest>", "nonce": "..."} -->

Lifecycle (see `publish()`):
- our open PR already holds this source sha and plan → nothing to do (no upload, no commit);
- our open PR holds an older one → a new commit on `refs/pr/N` replacing the artifacts, and a
  comment saying what changed;
- our latest PR was closed by a maintainer → left alone unless `force` (then reopened and updated);
- no PR yet → one commit with `create_pr=True` holding the artifacts and the card change;
- every backend failed → no PR; one discussion (opened or updated) with the error report;
- the owner opted out (`hfexport: false` in the card metadata) → nothing.

Every Hub call goes through `hub.retry`: 429 and 5xx answers and dropped connections are retried
with backoff (honouring Retry-After). Steps that are not idempotent (opening a PR, commenting)
look first for what an earlier, seemingly failed attempt may already have done, by the nonce.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .card import opted_out, render_card
from .errors import AuthError
from .hub import retry
from .package import REPORT_FILE, Report

PR_TITLE = "Add verified exports (hfexport)"
DISCUSSION_TITLE = "hfexport: exports of this model failed"
_MARKER = re.compile(r"<!-- hfexport (\{.*?\}) -->")


@dataclass
class PublishResult:
    """What `publish` did. `action` is one of: opened, updated, unchanged, up-to-date (main already
    holds these exports, e.g. after our PR was merged), closed-respected, opted-out, discussion, dry-run."""

    action: str
    repo_id: str
    pr_num: int | None = None
    pr_url: str | None = None
    commit: str | None = None
    files: list[str] = field(default_factory=list)
    description: str | None = None
    card: str | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


# ── reading our state on the Hub ─────────────────────────────────────────────


def marker(source_sha: str, plan_digest: str, nonce: str, request: str | None = None) -> str:
    state = {"source_sha": source_sha, "plan": plan_digest, "request": request, "nonce": nonce}
    return "<!-- hfexport " + json.dumps(state) + " -->"


def request_key(backends: list[str], task: str) -> str:
    """What the user asked for that, with the source sha, decides the plan: checked before the
    plan exists, so an unchanged rerun needs neither a download nor transformers."""
    from . import __version__

    return hashlib.sha256(json.dumps([sorted(backends), task, __version__]).encode()).hexdigest()[:16]


@dataclass
class OurPR:
    num: int
    status: str
    is_pull_request: bool
    state: dict  # the latest marker: source_sha, plan, nonce
    nonces: set[str]


def _our_discussions(api, repo_id: str, me: str, pull_requests: bool) -> list[OurPR]:
    """Our PRs (or discussions), newest first, each with the latest marker it carries."""
    kind = "pull_request" if pull_requests else "discussion"

    def listing():
        return list(api.get_repo_discussions(repo_id, author=me, discussion_type=kind))

    found = []
    for d in retry("list pull requests", listing):
        details = retry("read a pull request", lambda: api.get_discussion_details(repo_id, d.num))
        markers = [json.loads(m) for e in details.events if getattr(e, "content", None) for m in _MARKER.findall(e.content)]
        if markers:
            found.append(OurPR(d.num, details.status, details.is_pull_request, markers[-1], {m.get("nonce") for m in markers}))
    return sorted(found, key=lambda p: p.num, reverse=True)


def _read_file(api, repo_id: str, path: str, revision: str) -> str | None:
    from huggingface_hub.errors import EntryNotFoundError

    def download():
        try:
            local = api.hf_hub_download(repo_id, path, revision=revision)
        except EntryNotFoundError:
            return None
        return Path(local).read_text(encoding="utf-8", errors="replace")

    return retry(f"read {path}", download)


def opted_out_on_hub(api, repo_id: str, revision: str) -> bool:
    """The owner's opt-out: `hfexport: false` in the card metadata, or a `.hfexport.yaml` holding `opt_out: true`."""
    import yaml

    if opted_out(_read_file(api, repo_id, "README.md", revision)):
        return True
    config = _read_file(api, repo_id, ".hfexport.yaml", revision)
    try:
        data = yaml.safe_load(config) if config else None
    except yaml.YAMLError:
        return False
    return isinstance(data, dict) and bool(data.get("opt_out"))


# ── Stage 7: publish ─────────────────────────────────────────────────────────


def find_existing(
    api, repo_id: str, me: str, source_sha: str, plan_digest: str | None = None, request: str | None = None
) -> tuple[OurPR | None, bool]:
    """`(our newest PR, whether it already holds exactly this sha and plan)` — the plan known by its
    digest, or before planning by the request that leads to it."""
    prs = _our_discussions(api, repo_id, me, pull_requests=True)
    latest = prs[0] if prs else None
    if latest is None or latest.state.get("source_sha") != source_sha:
        return latest, False
    if plan_digest is not None and latest.state.get("plan") == plan_digest:
        return latest, True
    return latest, request is not None and latest.state.get("request") == request


def settled(
    api, repo_id: str, source_sha: str, plan_digest: str | None = None, *, request: str | None = None,
    force: bool = False, log=lambda m: None,
) -> tuple[PublishResult | None, OurPR | None]:
    """The outcomes that need no export: the repo opted out, our open PR already holds this sha
    and plan, or a maintainer closed our PR (and `force` is off). Returns that outcome (or `None`:
    go ahead) and our newest PR."""
    if opted_out_on_hub(api, repo_id, source_sha):
        log("the repo opts out of hfexport: nothing to do")
        return PublishResult("opted-out", repo_id), None
    latest, same = find_existing(api, repo_id, _whoami(api), source_sha, plan_digest, request)
    if latest is None:
        return None, None
    url = _pr_url(api, repo_id, latest.num)
    if latest.status in ("open", "draft") and same:
        log(f"PR #{latest.num} already holds these exports: {url}")
        return PublishResult("unchanged", repo_id, latest.num, url), latest
    if latest.status == "closed" and not force:
        log(f"PR #{latest.num} was closed by a maintainer; not reopening it (use --force to override): {url}")
        return PublishResult("closed-respected", repo_id, latest.num, url), latest
    return None, latest


def publish(
    api,
    repo_id: str,
    report: Report,
    *,
    force: bool = False,
    dry_run: bool = False,
    request: str | None = None,
    log: Callable[[str], None] = lambda message: None,
) -> PublishResult:
    """Open or update our PR on `repo_id` with the exports in `report.out_dir`.

    Args:
        api: an `HfApi` holding the token (never printed).
        report: the packaged exports (see `package.py`).
        force: reopen and update a PR a maintainer closed.
        dry_run: compute everything, write nothing to the Hub.
        request: `request_key(...)` of what was asked, recorded so the next run can skip planning.

    Raises:
        AuthError: the token is missing or cannot open PRs here.
        hub.HubUnavailableError: the Hub kept failing after retries.
    """
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete
    from huggingface_hub.errors import HfHubHTTPError

    source_sha = report.source["sha"]
    early, latest = settled(api, repo_id, source_sha, report.plan_digest, request=request, force=force, log=log)
    if early is not None:
        return early
    me = _whoami(api)
    readme = _read_file(api, repo_id, "README.md", source_sha)

    nonce = secrets.token_hex(8)
    if not report.succeeded:
        return _report_failure(api, repo_id, me, report, nonce, dry_run, log)

    out = Path(report.out_dir)
    operations: list[Any] = []
    files = []
    for b in report.succeeded:
        for f in b.files:
            path = f"{b.subfolder}/{f['path']}"
            files.append(path)
            operations.append(lambda path=path, local=out / b.subfolder / f["path"]: CommitOperationAdd(path, str(local)))
    files.append(REPORT_FILE)
    report_bytes = (json.dumps(report.to_dict(), indent=2) + "\n").encode()
    operations.append(lambda: CommitOperationAdd(REPORT_FILE, report_bytes))
    card = render_card(readme, repo_id, report)
    operations.append(lambda: CommitOperationAdd("README.md", card.encode()))
    files.append("README.md")
    description = _description(report, marker(source_sha, report.plan_digest, nonce, request))
    if dry_run:
        return PublishResult("dry-run", repo_id, latest.num if latest else None, None, None, files, description, card)

    def build_operations(stale: list[str]) -> list[Any]:
        # Fresh objects each attempt: the client marks an operation as used once committed.
        return [make() for make in operations] + [CommitOperationDelete(p) for p in stale]

    reusable = latest is not None and latest.status in ("open", "draft", "closed")
    if reusable:
        num = latest.num
        if latest.status == "closed":
            retry("reopen the pull request", lambda: api.change_discussion_status(repo_id, num, "open"))
        revision = f"refs/pr/{num}"
        stale = _stale_exports(api, repo_id, revision, set(files), report)
        commit = retry(
            "push the new exports to the pull request",
            lambda: api.create_commit(
                repo_id, build_operations(stale), commit_message=f"Update exports to {source_sha[:12]}",
                commit_description=description, revision=revision,
            ),
        )
        _comment_once(api, repo_id, num, nonce, _update_comment(latest.state, report, description))
        url = _pr_url(api, repo_id, num)
        log(f"updated PR #{num}: {url}")
        return PublishResult("updated", repo_id, num, url, commit.oid, files, description, card)

    if _already_on_base(api, repo_id, source_sha, report, readme):
        # Our PR was merged (or the owner added the same files): a new PR would only restamp the card.
        log("the repo already holds these exact exports and card section: nothing to do")
        return PublishResult("up-to-date", repo_id, latest.num if latest else None)

    def open_pr():
        # A dropped reply may hide a PR that was in fact opened: look for our nonce first.
        for pr in _our_discussions(api, repo_id, me, pull_requests=True):
            if nonce in pr.nonces:
                return pr.num, None
        try:
            info = api.create_commit(
                repo_id, build_operations([]), commit_message=PR_TITLE, commit_description=description,
                create_pr=True, revision="main",
            )
        except HfHubHTTPError as e:
            _raise_auth(e, repo_id)
            raise
        return int(info.pr_num), info.oid

    num, commit_oid = retry("open the pull request", open_pr)
    url = _pr_url(api, repo_id, num)
    log(f"opened PR #{num}: {url}")
    return PublishResult("opened", repo_id, num, url, commit_oid, files, description, card)


def _already_on_base(api, repo_id: str, revision: str, report: Report, readme: str | None) -> bool:
    """Whether every artifact is already at `revision` byte for byte (by hash), with our card section."""
    import hashlib

    from huggingface_hub.hf_api import RepoFile

    from .card import START
    from .hub import git_blob_sha1

    if not readme or START not in readme:
        return False
    local = {
        f"{b.subfolder}/{f['path']}": Path(report.out_dir) / b.subfolder / f["path"] for b in report.succeeded for f in b.files
    }
    remote = {
        e.path: e for e in retry("compare with the repo's files", lambda: api.get_paths_info(repo_id, list(local), revision=revision))
        if isinstance(e, RepoFile)
    }
    for path, file in local.items():
        entry = remote.get(path)
        if entry is None or entry.size != file.stat().st_size:
            return False
        content = file.read_bytes()
        expected = entry.lfs.sha256 if entry.lfs is not None else entry.blob_id
        actual = hashlib.sha256(content).hexdigest() if entry.lfs is not None else git_blob_sha1(content)
        if expected != actual:
            return False
    return True


def _whoami(api) -> str:
    from huggingface_hub.errors import HfHubHTTPError

    def ask():
        try:
            return api.whoami()["name"]
        except HfHubHTTPError as e:
            if e.response is not None and e.response.status_code in (401, 403):
                raise AuthError(
                    "The Hub refused the token (missing, wrong or expired): opening a pull request needs one.",
                    "Pass --token or set HF_TOKEN to a token with write access to pull requests.",
                ) from None
            raise

    return retry("check the token", ask)


def _raise_auth(e, repo_id: str) -> None:
    status = e.response.status_code if e.response is not None else None
    if status in (401, 403):
        raise AuthError(f"The Hub refused to open a pull request on {repo_id} (HTTP {status}).", "Use a token that can open pull requests there.") from None


def _pr_url(api, repo_id: str, num: int) -> str:
    return f"{api.endpoint}/{repo_id}/discussions/{num}"


def _stale_exports(api, repo_id: str, revision: str, keep: set[str], report: Report) -> list[str]:
    """Files an earlier export left in our folders that this one no longer produces."""
    from .backends import BACKENDS

    ours = tuple(f"{b.subfolder}/" for b in BACKENDS.values())
    listed = retry("list the pull request's files", lambda: api.list_repo_files(repo_id, revision=revision))
    return [p for p in listed if p.startswith(ours) and p not in keep]


def _comment_once(api, repo_id: str, num: int, nonce: str, text: str) -> None:
    def comment():
        details = api.get_discussion_details(repo_id, num)
        if any(nonce in (getattr(e, "content", "") or "") and e.type == "comment" for e in details.events[1:]):
            return  # an earlier attempt got through
        api.comment_discussion(repo_id, num, text)

    retry("comment on the pull request", comment)


def _description(report: Report, hidden: str) -> str:
    lines = [
        f"This PR adds exports of this model at commit `{report.source['sha'][:12]}`, each reloaded on its runtime "
        "and checked against the original model on another input shape.",
        "",
        "| backend | status | max abs diff | files |",
        "|---|---|---|---|",
    ]
    for b in report.backends:
        diff = (b.validation or {}).get("max_abs_diff")
        lines.append(
            f"| {b.backend} | {b.status} | {f'{diff:.2e}' if isinstance(diff, float) else '-'} | "
            f"{len(b.files)} in `{b.subfolder}/` |" if b.ok else f"| {b.backend} | {b.status} | - | {(b.error or '')[:300]} |"
        )
    lines += ["", "The model card gains an *Exports* section (how to load each one) and format tags.", "", hidden]
    return "\n".join(lines)


def _update_comment(previous: dict, report: Report, description: str) -> str:
    old = previous.get("source_sha", "?")[:12]
    new = report.source["sha"][:12]
    what = f"the model moved from `{old}` to `{new}`" if previous.get("source_sha") != report.source["sha"] else "the export plan changed"
    return f"Updated: {what}; the exports were redone and re-validated.\n\n" + description


def _report_failure(api, repo_id: str, me: str, report: Report, nonce: str, dry_run: bool, log) -> PublishResult:
    """No export worked: open (or update) one discussion with the errors instead of a PR."""
    text = "\n".join(
        [f"hfexport could not produce any working export of commit `{report.source['sha'][:12]}`:", ""]
        + [f"- **{b.backend}**: {b.status} — {b.error}" for b in report.backends]
        + ["", marker(report.source["sha"], report.plan_digest, nonce)]
    )
    if dry_run:
        return PublishResult("dry-run", repo_id, description=text)

    def ensure():
        ours = _our_discussions(api, repo_id, me, pull_requests=False)
        for d in ours:
            if nonce in d.nonces:
                return d.num
        open_ones = [d for d in ours if d.status == "open"]
        if open_ones:
            api.comment_discussion(repo_id, open_ones[0].num, text)
            return open_ones[0].num
        return api.create_discussion(repo_id, DISCUSSION_TITLE, description=text).num

    num = retry("report the failure in a discussion", ensure)
    url = _pr_url(api, repo_id, num)
    log(f"every backend failed: reported in discussion #{num}: {url}")
    return PublishResult("discussion", repo_id, num, url, description=text)

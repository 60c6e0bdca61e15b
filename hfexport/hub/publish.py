"""Stage 7 — publish: one pull request per repo, opened once, filled by every runner, updated when
the model changes, and never touching a file hfexport did not write.

Publishing is three steps, so that the Hub is read once and every rule lives in one pure function:

    state = read_state(api, repo_id, sha)                 # the Hub, read once (no writes)
    decision = decide(state, backends, request, report=...)  # pure: state + what was asked → what to do
    result = apply(api, state, decision, report)          # the writes, and only those

`decide` runs twice per push with the same state: before the export (report=None), to skip the
work when there is nothing to do, and after it. A write that finds the PR moved meanwhile (another
runner committed: HTTP 412 on our `parent_commit`) raises `PublishConflict`; `push` reads the state
again and decides again, so concurrent runners converge on one PR holding all their backends.

What is ours. The report we publish (`hfexport-report.json`, on our PR and, once merged, on the
base) lists every file we wrote with its content (sha256 and git blob id): a path is ours only
while the tree we write onto holds exactly that content there — never a folder prefix, never the
path alone. A path we would write that the tree holds with other content belongs to someone else
(the owner's own `onnx/model.onnx`, a maintainer's tuned graph over ours after a merge): that
backend goes to `hfexport/<folder>/` instead, and the PR and card say so. Deletions are limited to
paths that are ours by that rule.

Every write starts from the content it replaces. A new PR branches from the commit we read
(`parent_commit`), and just before it is opened the base's head is compared with that commit on
every path the PR writes (its files, the card, the report, `.hfexport.yaml`): if the owner touched
one while we exported, `BaseMoved` makes `push` read the new head and decide again. An update
commits onto the PR's head as we read it (412 → `PublishConflict`), its card rendered from the
PR head's README, so a maintainer's edit on the PR branch stays.

State. Each backend in the published report carries the commit and the plan digest it was built
from. Our hidden marker, in our PR's description and update comments, carries per backend the
sha and the request that produced it:

    <!-- hfexport {"v": 2, "nonce": "...", "backends": {"onnx": {"sha": "...", "request": "..."}}} -->

Only markers in events authored by our own account count; a malformed one, or one of another
version, is ignored with a warning.

The rules (see `decide`):
- the owner opted out (`hfexport: false` in the card metadata, or `.hfexport.yaml`) → nothing;
- our latest PR was closed by a maintainer → left alone unless `force` (then reopened and updated);
  a PR we closed ourselves (superseded by an older one of ours after a race) does not count;
- our open PR holds exports of a newer commit of the branch (this sha is in that commit's
  history: a retry, a late webhook, a slow runner) → nothing, unless `force`: a PR is never moved
  back to an older commit;
- every backend asked for is on our open PR at this sha, for this request → nothing to do;
- every backend was skipped here (no GPU for executorch-cuda) → nothing;
- every backend failed → no PR; one discussion (opened or updated) with the error report;
- otherwise the PR's content is recomputed: backends asked for that changed are replaced, the
  others' files stay, backends built from another commit or plan are removed; unchanged → no
  commit, no comment; changed → one commit and one comment on our PR, or a new PR;
- the base already holds these exact files and our card section (our PR was merged) → nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from ..backends import get_backend
from ..errors import TOKEN_FIX, AuthError
from ..table import markdown_table, markdown_variant_table
from ..report import REPORT_FILE, ArtifactFile, BackendResult, PublishAction, PublishResult, Report, Status
from ..messages import ExportRequest
from ..versions import installed
from .card import START, RenderedCard, opted_out, render_card
from .retry import retry

PR_TITLE = "Add verified exports (hfexport)"  # where no format is named (a PR with none published)


def pr_title(published: Report | None) -> str:
    """The PR's title: the formats it adds, each with its precisions — "Add ONNX (fp32, int8) and
    torch.export (.pt2) exports, verified (hfexport)"."""
    formats = []
    for b in published.succeeded if published is not None else []:
        kinds = [b.dtype.replace("float", "fp") if b.dtype else "fp32"]
        kinds += [v.kind for v in b.variants if v.ok and v.published_files]
        title = get_backend(b.backend).title or b.backend
        formats.append(f"{title} ({', '.join(dict.fromkeys(kinds))})" if len(kinds) > 1 else title)
    if not formats:
        return PR_TITLE
    listed = formats[0] if len(formats) == 1 else f"{', '.join(formats[:-1])} and {formats[-1]}"
    return f"Add {listed} exports, verified (hfexport)"


BASE_BRANCH = "main"  # where our PRs go (the client opens create_pr commits against it only)
SETTINGS_FILE = ".hfexport.yaml"
DISCUSSION_TITLE = "hfexport: exports of this model failed"
MARKER_VERSION = 2
# Where a backend's files go when the owner already has files at its usual paths.
OWN_FOLDER = "hfexport"
_MARKER = re.compile(r"<!-- hfexport (.*?) -->", re.S)

Log = Callable[[str], None]


class PublishConflict(Exception):
    """The PR moved while we wrote (another runner committed first): read the state and decide again."""


class BaseMoved(Exception):
    """The base branch moved since we read it, touching a path our new PR writes: read its new
    head and decide again (our PR would otherwise undo those commits, or conflict with them)."""

    def __init__(self, head: str, paths: list[str]):
        super().__init__(f"main moved to {head[:12]} while this run exported, changing {', '.join(paths)}")
        self.head = head
        self.paths = paths


# ── What we know of the Hub ──────────────────────────────────────────────────


@dataclass(frozen=True)
class RemoteFile:
    """A file at the base revision, with what identifies its content."""

    path: str
    size: int
    blob_id: str
    lfs_sha256: str | None = None

    def holds(self, recorded: ArtifactFile) -> bool:
        """Whether this file holds the content we recorded (a manifest from before content ids: its size)."""
        if recorded.sha256 is None:
            return self.size == recorded.size
        if self.lfs_sha256 is not None:
            return self.lfs_sha256 == recorded.sha256
        return self.blob_id == recorded.git_oid


class ThreadStatus(StrEnum):
    """A discussion's or PR's status, as the Hub reports it (huggingface_hub's `DiscussionStatus`)."""

    OPEN = "open"
    DRAFT = "draft"
    CLOSED = "closed"
    MERGED = "merged"


@dataclass(frozen=True)
class BackendMark:
    """What our marker records of one backend on a thread: the source sha it was exported from and
    the `request_key` of what was asked."""

    sha: str
    request: str


@dataclass(frozen=True)
class Marker:
    """One marker of ours, parsed: the nonce of the run that wrote it, and its backends."""

    nonce: str
    backends: dict[str, BackendMark]

    def render(self) -> str:
        """Versioned JSON in an HTML comment (`-->` cannot occur inside JSON strings we write: none
        of the values holds it)."""
        backends = {name: asdict(mark) for name, mark in self.backends.items()}
        return "<!-- hfexport " + json.dumps({"v": MARKER_VERSION, "nonce": self.nonce, "backends": backends}) + " -->"

    @classmethod
    def parse(cls, raw: str) -> Marker | None:
        """A marker of ours, or None for anything else (malformed, another version, wrong types)."""
        try:
            data = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(data, dict) or data.get("v") != MARKER_VERSION or not isinstance(data.get("nonce"), str):
            return None
        backends = data.get("backends")
        if not isinstance(backends, dict) or not all(
            isinstance(k, str) and isinstance(v, dict) and all(isinstance(v.get(f), str) for f in ("sha", "request"))
            for k, v in backends.items()
        ):
            return None
        return cls(data["nonce"], {k: BackendMark(v["sha"], v["request"]) for k, v in backends.items()})


@dataclass
class OurThread:
    """A PR or discussion we opened, with the state its latest marker of ours carries."""

    num: int
    status: ThreadStatus
    is_pull_request: bool
    backends: dict[str, BackendMark]  # from its latest marker of ours
    nonces: set[str]
    closed_by_us: bool = False  # we closed it ourselves: superseded by an older PR of ours

    @property
    def is_open(self) -> bool:
        return self.status in (ThreadStatus.OPEN, ThreadStatus.DRAFT)


@dataclass
class OurPullRequest:
    """Our latest PR, read whole: its head commit, its files, its card and the report we published there."""

    thread: OurThread
    head: str
    tree: dict[str, RemoteFile]
    report: Report | None
    readme: str | None = None


@dataclass
class HubState:
    """Everything publishing reads from the Hub, read once by `read_state`."""

    repo_id: str
    sha: str  # the commit the exports are built from
    endpoint: str
    opted_out: bool
    base: str = ""  # the commit a new PR branches from (its card, files and report are read here)
    me: str | None = None
    readme: str | None = None  # the base's card
    settings: dict = field(default_factory=dict)  # the repo's .hfexport.yaml (opt_out, variants)
    threads: list[OurThread] = field(default_factory=list)  # newest first
    base_files: dict[str, RemoteFile] = field(default_factory=dict)
    base_report: Report | None = None  # ours, merged into the base earlier
    pr: OurPullRequest | None = None
    # A commit our open PR's exports were built from that is newer than `sha` (has it in its history).
    newer_held: str | None = None

    def __post_init__(self) -> None:
        self.base = self.base or self.sha

    @property
    def tree(self) -> dict[str, RemoteFile]:
        """The files our next commit lands on: our PR's head where we have one, else the base."""
        return self.pr.tree if self.pr is not None else self.base_files

    def ours(self, path: str) -> bool:
        """Whether `path` holds, in `tree`, content one of our reports recorded writing there."""
        remote = self.tree.get(path)
        if remote is None:
            return False
        if path == REPORT_FILE:
            return (self.pr.report if self.pr is not None else self.base_report) is not None
        return any(
            remote.holds(f) for f in _recorded(self.pr.report if self.pr else None, self.base_report).get(path, ())
        )

    def owners(self, path: str) -> bool:
        """Whether `path` exists in `tree` with content we did not write: never written, never deleted."""
        return path in self.tree and not self.ours(path)

    @property
    def discussions(self) -> list[OurThread]:
        return [t for t in self.threads if not t.is_pull_request]

    def url(self, num: int) -> str:
        return f"{self.endpoint}/{self.repo_id}/discussions/{num}"


def read_state(api, repo_id: str, sha: str, log: Log = lambda message: None, *, base: str | None = None) -> HubState:
    """Read what publishing needs, once: the opt-out and card, who we are, our PRs and
    discussions, the files at `base` (default `sha`; our report there), and our latest PR whole
    (its files with their content ids, its card, its report).

    Raises:
        AuthError: the token is missing or refused (a PR needs one).
        HubUnavailableError: the Hub kept failing after retries.
    """
    base = base or sha
    readme = _read_file(api, repo_id, "README.md", base)
    settings = _read_settings(_read_file(api, repo_id, SETTINGS_FILE, base))
    owner_opted_out = opted_out(readme) or bool(settings.get("opt_out"))
    state = HubState(repo_id, sha, api.endpoint, owner_opted_out, base=base, readme=readme, settings=settings)
    if owner_opted_out:
        return state
    # No token (a dry run of a public repo): no identity, so no PR of ours to find — the dry run
    # shows the PR a first run would open.
    state.me = _whoami(api) if api.token or _saved_token() else None
    state.threads = _our_threads(api, repo_id, state.me, log) if state.me else []
    state.base_files = _tree(api, repo_id, base)[1]
    if REPORT_FILE in state.base_files:
        state.base_report = _read_report(api, repo_id, base, log)
    latest = next((t for t in state.threads if t.is_pull_request and not t.closed_by_us), None)
    if latest is not None and latest.status != ThreadStatus.MERGED:
        head, tree = _tree(api, repo_id, f"refs/pr/{latest.num}")
        report = _read_report(api, repo_id, head, log) if REPORT_FILE in tree else None
        card = _read_file(api, repo_id, "README.md", head) if "README.md" in tree else None
        state.pr = OurPullRequest(latest, head, tree, report, card)
        state.newer_held = _newer_than(api, repo_id, sha, {mark.sha for mark in latest.backends.values()})
    return state


def _newer_than(api, repo_id: str, sha: str, held: set[str]) -> str | None:
    """The commit among `held` (what our PR's exports were built from) that is on the branch now
    and has `sha` in its history, or None: then our PR holds a newer commit than `sha`. A commit
    the branch no longer holds (the owner force-pushed it away, withdrawing its weights) is never
    newer: the PR follows the branch back. Only Hub commits compare (a local folder's digest has no
    history); a commit the Hub no longer has is passed over."""
    from huggingface_hub.errors import RevisionNotFoundError

    candidates = sorted(h for h in held if h != sha and _SHA.fullmatch(h))
    if not candidates or not _SHA.fullmatch(sha):
        return None
    branch = set(
        retry(
            f"read the history of {BASE_BRANCH}",
            lambda: [commit.commit_id for commit in api.list_repo_commits(repo_id, revision=BASE_BRANCH)],
        )
    )
    for candidate in candidates:
        if candidate not in branch:
            continue
        try:
            history = retry(
                f"read the history of {candidate[:12]}",
                lambda c=candidate: [commit.commit_id for commit in api.list_repo_commits(repo_id, revision=c)],
            )
        except RevisionNotFoundError:
            continue
        if sha in history:
            return candidate
    return None


_SHA = re.compile(r"[0-9a-f]{40}")


def _read_settings(text: str | None) -> dict:
    """The repo's `.hfexport.yaml` as a mapping ({} when absent or not a mapping)."""
    from .frontmatter import load_yaml

    try:
        data = load_yaml(text) if text else None
    except ValueError:
        data = None
    return data if isinstance(data, dict) else {}


def request_key(backend: str, request: ExportRequest) -> str:
    """What the user asked for of one backend (`request`: task, variants, quality thresholds) that,
    with the source sha, decides its export: checked before the plan exists, so an unchanged rerun
    needs neither a download nor transformers."""
    asked = [backend, request.to_dict(), installed("hfexport")]
    return hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:16]


# ── The rules ────────────────────────────────────────────────────────────────

# The outcomes that are a backend's answer for a commit; skipped, crashed and timeout are not.
DONE = (Status.OK, Status.FAILED)


@dataclass(frozen=True)
class Decision:
    """What to do. With `action` one of opted-out, unchanged, closed-respected, up-to-date there is
    nothing to write; opened, updated and discussion are carried out by `apply`."""

    action: PublishAction
    thread: OurThread | None = None  # the PR to update, or the discussion to comment on
    published: Report | None = None  # the report the PR will hold: every backend on it, with repo folders
    uploads: tuple[tuple[Path, str], ...] = ()  # (local file, path in the repo)
    deletes: tuple[str, ...] = ()  # files of ours on the PR that it no longer holds
    markers: dict[str, BackendMark] = field(default_factory=dict)  # per backend, for our marker
    notes: tuple[str, ...] = ()  # said in the PR and the card (e.g. exports moved beside the owner's)
    changed: tuple[str, ...] = ()  # backends whose files this commit replaces or removes

    @property
    def writes(self) -> bool:
        return self.action in (PublishAction.OPENED, PublishAction.UPDATED, PublishAction.DISCUSSION)


def decide(
    state: HubState,
    backends: list[str],
    request: ExportRequest,
    report: Report | None = None,
    *,
    force: bool = False,
) -> Decision | None:
    """The rules of the module docstring, on `state` only (no Hub call).

    Before the export (`report` None) it returns the outcomes that need none, or None: export.
    After it, it always returns a decision.
    """
    if state.opted_out:
        return Decision(PublishAction.OPTED_OUT)
    pr = state.pr
    if pr is not None and pr.thread.status == ThreadStatus.CLOSED and not force:
        return Decision(PublishAction.CLOSED_RESPECTED, pr.thread)
    if pr is not None and pr.thread.is_open and state.newer_held and not force:
        return Decision(PublishAction.NEWER_HELD, pr.thread)
    if report is None:
        if (
            not force
            and pr is not None
            and pr.thread.is_open
            and all(pr.thread.backends.get(b) == BackendMark(state.sha, request_key(b, request)) for b in backends)
        ):
            return Decision(PublishAction.UNCHANGED, pr.thread)
        return None
    if all(b.status not in DONE for b in report.backends):  # skipped, killed or stopped: no answer to publish
        return Decision(PublishAction.NOTHING_RAN)
    if not report.succeeded:
        open_ones = [d for d in state.discussions if d.is_open]
        return Decision(PublishAction.DISCUSSION, open_ones[0] if open_ones else None)

    previous = pr.report if pr is not None else state.base_report
    published, uploads, notes, changed = _merge(state, report, previous)
    # A backend counts as done for this commit once it exported (or failed validating, as a rerun
    # would): one skipped, crashed or stopped carries no mark, so the next run tries it again.
    markers = {
        b.backend: (pr.thread.backends.get(b.backend) if pr and b.backend not in report.plan.backends else None)
        or BackendMark(b.source_sha or state.sha, request_key(b.backend, request))
        for b in published.backends
        if b.status in DONE
    }
    kept = _manifest(published)
    # Our old files go, except in a folder where someone replaced one of them: theirs may need the rest.
    shared = {
        p for b in (previous.backends if previous else []) if any(state.owners(q) for q in b.paths) for p in b.paths
    }
    deletes = tuple(sorted(p for p in (_manifest(previous) - kept - shared) & set(state.tree) if state.ours(p)))
    if pr is not None:
        if not uploads and not deletes and _same(published, previous) and pr.thread.is_open:
            return Decision(PublishAction.UNCHANGED, pr.thread)
        return Decision(PublishAction.UPDATED, pr.thread, published, tuple(uploads), deletes, markers, notes, changed)
    if not deletes and _already_on_base(state, uploads):
        return Decision(PublishAction.UP_TO_DATE)
    return Decision(PublishAction.OPENED, None, published, tuple(uploads), deletes, markers, notes, changed)


def _merge(
    state: HubState, report: Report, previous: Report | None
) -> tuple[Report, list[tuple[Path, str]], tuple[str, ...], tuple[str, ...]]:
    """The report the PR should hold after this run: what this run built and changed, what the PR
    already holds for this commit and plan, and nothing built from another commit or plan."""
    before = {b.backend: b for b in (previous.backends if previous else [])}
    asked = {b.backend: b for b in report.backends}

    def current(b: BackendResult) -> bool:
        return b.source_sha == state.sha and b.plan_digest == report.plan.backend_digest(b.backend)

    published, uploads, notes, rebuilt = [], [], [], []
    for name in [*asked, *(n for n in before if n not in asked)]:
        new, old = asked.get(name), before.get(name)
        if new is not None and new.ok and not (old is not None and old.ok and current(old) and _same_files(old, new)):
            folder = _placement(state, new)
            if folder is None:
                notes.append(
                    f"The repo already has its own files at `{new.subfolder}/` and `{OWN_FOLDER}/{new.subfolder}/`: "
                    f"the {name} export is left out of this PR."
                )
                continue
            local = Path(report.out_dir) / new.subfolder
            uploads += [(local / f.path, f"{folder}/{f.path}") for f in new.files]
            published.append(dataclasses.replace(new.public(), subfolder=folder))
            rebuilt.append(name)
        elif old is not None and current(old):
            published.append(old)  # unchanged, or built by another runner: its files stay
        elif new is not None and new.status != Status.CRASHED and new.status != Status.TIMEOUT:
            published.append(new.public())  # failed or skipped here: shown with its reason, no files
        # else killed or stopped here: the machine's doing, not the model's — not published (a rerun retries it)
        # else: built from another commit or plan, and not rebuilt by this run: removed
    # Every backend moved beside the owner's files says so, whichever run built it.
    notes += [
        f"The repo's own files in `{b.subfolder[len(OWN_FOLDER) + 1 :]}/` are kept as they are; the {b.backend} export "
        f"is in `{b.subfolder}/`."
        for b in published
        if b.subfolder.startswith(f"{OWN_FOLDER}/")
    ]
    plan = dataclasses.replace(report.plan, backends=[b.backend for b in published])
    merged = Report(source=report.source, plan=plan, backends=published, created_at=report.created_at)
    after = {b.backend: b for b in published}
    changed = tuple(
        n for n in dict.fromkeys([*asked, *before]) if n in rebuilt or _key(after.get(n)) != _key(before.get(n))
    )
    return merged, uploads, tuple(notes), changed


def _placement(state: HubState, backend: BackendResult) -> str | None:
    """The backend's usual folder, or `hfexport/<folder>` when the owner has files at its paths,
    or None when both are taken."""
    for folder in (backend.subfolder, f"{OWN_FOLDER}/{backend.subfolder}"):
        if not any(state.owners(f"{folder}/{f.path}") for f in backend.files):
            return folder
    return None


def _same_files(a: BackendResult, b: BackendResult) -> bool:
    """The same paths with the same content (by size alone where a report predates content ids)."""
    x, y = {f.path: f for f in a.files}, {f.path: f for f in b.files}
    return x.keys() == y.keys() and all(
        x[p].size == y[p].size and (None in (x[p].sha256, y[p].sha256) or x[p].sha256 == y[p].sha256) for p in x
    )


def _key(b: BackendResult | None) -> tuple | None:
    """What a reader of the PR sees of a backend: its outcome, what it was built from, where it is."""
    return None if b is None else (str(b.status), b.source_sha, b.plan_digest, b.subfolder)


def _same(a: Report, b: Report | None) -> bool:
    """Whether two reports show the same backends, built from the same commit and plan, in the same places."""
    return {x.backend: _key(x) for x in a.backends} == {x.backend: _key(x) for x in (b.backends if b else [])}


def _manifest(report: Report | None) -> set[str]:
    return {p for b in (report.backends if report else []) for p in b.paths}


def _recorded(*reports: Report | None) -> dict[str, list[ArtifactFile]]:
    """Per repo path, the files our reports say we wrote there."""
    found: dict[str, list[ArtifactFile]] = {}
    for report in reports:
        for b in report.backends if report else []:
            for f in b.files:
                found.setdefault(f"{b.subfolder}/{f.path}", []).append(f)
    return found


def _already_on_base(state: HubState, uploads: list[tuple[Path, str]]) -> bool:
    """Whether every file is already at the base sha byte for byte (by hash), with our card section."""
    if not state.readme or START not in state.readme:
        return False
    for local, path in uploads:
        remote = state.base_files.get(path)
        if remote is None or remote.size != local.stat().st_size or not remote.holds(ArtifactFile.of(path, local)):
            return False
    return True


# ── The writes ───────────────────────────────────────────────────────────────


def apply(
    api,
    state: HubState,
    decision: Decision,
    report: Report | None,
    *,
    dry_run: bool = False,
    log: Log = lambda message: None,
) -> PublishResult:
    """Carry out `decision` on the Hub (nothing when `dry_run`).

    Raises:
        PublishConflict: the PR moved meanwhile (read the state again and decide again).
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

    published = decision.published
    # The card we replace: the PR head's when we update our PR (a maintainer's edits there stay).
    current = state.pr.readme if decision.action == PublishAction.UPDATED and state.pr is not None else state.readme
    rendered = render_card(current, repo_id, published, decision.notes, set(state.tree))
    if current is not None and not _is_utf8(current):
        # The Hub takes only UTF-8 cards (its client refuses others): a Latin-1 one stays as it is.
        rendered = RenderedCard(
            current,
            (
                "The card (README.md) is not UTF-8 text, so this PR leaves it as it is: saved as UTF-8, "
                "the next run adds the hfexport section and tags",
            ),
        )
    card = rendered.text
    files = [path for _, path in decision.uploads] + [REPORT_FILE] + (["README.md"] if card != current else [])
    for warning in rendered.warnings:
        log(f"warning: {warning}")
    description = _description(published, decision.notes + rendered.warnings, Marker(nonce, decision.markers).render())
    if dry_run:
        title = pr_title(published)
        return PublishResult(PublishAction.DRY_RUN, repo_id, num, None, None, files, description, card, report, title)

    def operations() -> list[Any]:
        # Fresh objects each attempt: the client marks an operation as used once committed.
        adds = [CommitOperationAdd(path, str(local)) for local, path in decision.uploads]
        adds.append(CommitOperationAdd(REPORT_FILE, published.to_json().encode()))
        if "README.md" in files:
            adds.append(CommitOperationAdd("README.md", encode_text(card)))
        return adds + [CommitOperationDelete(p) for p in decision.deletes]

    if decision.action == PublishAction.UPDATED:
        details = _check_unchanged(api, repo_id, decision.thread)
        if decision.thread.status == ThreadStatus.CLOSED:
            retry("reopen the pull request", lambda: api.change_discussion_status(repo_id, num, ThreadStatus.OPEN))

        def commit():
            try:
                return api.create_commit(
                    repo_id,
                    operations(),
                    commit_message=f"Update exports to {state.sha[:12]}",
                    commit_description=description,
                    revision=f"refs/pr/{num}",
                    parent_commit=state.pr.head,
                )
            except HfHubHTTPError as e:
                if e.response is not None and e.response.status_code == 412:
                    raise PublishConflict(f"PR #{num} moved while this run committed to it") from None
                raise

        info = retry("push the new exports to the pull request", commit)
        _comment_once(api, repo_id, num, nonce, _update_comment(decision, state, description))
        _retitle(api, state, details, pr_title(published), description)
        log(f"updated PR #{num} ({', '.join(decision.changed) or 'card'}): {state.url(num)}")
        return PublishResult(
            PublishAction.UPDATED, repo_id, num, state.url(num), info.oid, files, description, card, report
        )

    # The PR branches from the commit we read; if the owner touched a path it writes since, decide again.
    head, tree = _tree(api, repo_id, BASE_BRANCH)
    if head != state.base:
        touched = sorted(
            p
            for p in {*files, *decision.deletes, SETTINGS_FILE}
            if _content(tree.get(p)) != _content(state.base_files.get(p))
        )
        if touched:
            raise BaseMoved(head, touched)

    def open_pr() -> tuple[int, str | None]:
        try:
            info = api.create_commit(
                repo_id,
                operations(),
                commit_message=pr_title(published),
                commit_description=description,
                create_pr=True,
                revision=BASE_BRANCH,
                parent_commit=state.base,
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
    # Two runners may have opened a PR each at the same moment: the older one stays, ours steps aside.
    older = [
        t.num
        for t in _our_threads(api, repo_id, state.me)
        if t.is_pull_request and t.is_open and not t.closed_by_us and t.num < num
    ]
    if older:
        keep = max(older)
        retry(
            "close the duplicate pull request",
            lambda: api.change_discussion_status(
                repo_id,
                num,
                "closed",
                comment=f"Superseded by #{keep}, opened at the same moment: these exports go there.",
            ),
        )
        raise PublishConflict(f"PR #{keep} was opened by another run at the same moment; adding these exports to it")
    log(f"opened PR #{num}: {state.url(num)}")
    return PublishResult(
        PublishAction.OPENED, repo_id, num, state.url(num), commit_oid, files, description, card, report
    )


def _retitle(api, state: HubState, details, title: str, description: str) -> None:
    """Our PR's title and description say what it holds now: both rewritten after an update (the
    description is the PR's first comment, ours; a maintainer's comments are never touched).
    `details`: the PR as `_check_unchanged` read it before the commit (which changes neither)."""
    num = details.num
    if details.title != title:
        retry("retitle the pull request", lambda: api.rename_discussion(state.repo_id, num, title))
    first = next((e for e in details.events if e.type == "comment"), None)
    if first is not None and first.author == state.me and first.content != description:
        retry(
            "rewrite the pull request's description",
            lambda: api.edit_discussion_comment(state.repo_id, num, first.id, description),
        )


def _check_unchanged(api, repo_id: str, thread: OurThread):
    """Read our PR again right before committing to it: a maintainer may have merged or closed it
    while we exported. Then this run's decision is stale.

    Returns:
        The PR's details as read (`_retitle` rewrites its title and description from them).

    Raises:
        PublishConflict: its status changed (decide again: a merged PR gets a new one, a closed
            PR is left alone).
    """
    details = retry(f"read the status of PR #{thread.num}", lambda: api.get_discussion_details(repo_id, thread.num))
    if details.status != thread.status:
        raise PublishConflict(f"PR #{thread.num} was {details.status} while this run exported")
    return details


def _explain(decision: Decision, state: HubState) -> str:
    num = decision.thread.num if decision.thread else None
    return {
        PublishAction.OPTED_OUT: "the repo opts out of hfexport: nothing to do",
        PublishAction.UNCHANGED: f"PR #{num} already holds these exports: {state.url(num or 0)}",
        PublishAction.CLOSED_RESPECTED: f"PR #{num} was closed by a maintainer; not reopening it "
        f"(force it with --force, or force=True in Python): {state.url(num or 0)}",
        PublishAction.NEWER_HELD: f"PR #{num} holds exports of {(state.newer_held or '')[:12]}, a newer commit than "
        f"{state.sha[:12]}: not moved back to it (force it with --force): {state.url(num or 0)}",
        PublishAction.UP_TO_DATE: "the repo already holds these exact exports and card section: nothing to do",
        PublishAction.NOTHING_RAN: "no backend could run on this machine (see the reasons above): nothing to publish",
    }[decision.action]


def _report_failure(
    api, state: HubState, decision: Decision, report: Report, nonce: str, dry_run: bool, log: Log
) -> PublishResult:
    """No export worked: open (or update) one discussion with the errors instead of a PR."""
    repo_id = state.repo_id
    text = "\n".join(
        [f"hfexport could not produce any working export of commit `{state.sha[:12]}`:", ""]
        + [f"- **{b.backend}**: {b.status} — {b.public().error}" for b in report.backends]
        + ["", Marker(nonce, {}).render()]
    )
    if dry_run:
        return PublishResult(PublishAction.DRY_RUN, repo_id, description=text, report=report, title=DISCUSSION_TITLE)

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


def _description(published: Report, notes: tuple[str, ...], hidden: str) -> str:
    lines = [
        f"This PR adds exports of this model at commit `{published.source.sha[:12]}`, each reloaded on its runtime "
        "and checked against the original model on another input shape.",
        "",
        *markdown_table(published, ["backend", "outcome", "source", "max_abs_diff", "folder", "files"]),
        *(["", *(f"- {note}" for note in notes)] if notes else []),
        *(
            [
                "",
                "Variants (judged against the original model in float32; a failed one is not in this PR):",
                "",
                *variants,
            ]
            if (
                variants := markdown_variant_table(
                    published, ["backend", "variant", "file", "share", "quality", "speed", "outcome"]
                )
            )
            else []
        ),
        "",
        "The model card gains an *Exports* section (how to load each one) and format tags. hfexport only "
        "ever changes the files its own report lists.",
        "",
        hidden,
    ]
    return "\n".join(lines)


def _update_comment(decision: Decision, state: HubState, description: str) -> str:
    old = {mark.sha for mark in decision.thread.backends.values()}
    if old and old != {state.sha}:
        what = f"the model moved from `{sorted(old)[0][:12]}` to `{state.sha[:12]}`"
    else:
        what = f"{', '.join(decision.changed) or 'the card'} changed"
    return f"Updated: {what}; the exports were redone and re-validated.\n\n" + description


# ── Hub reads and writes (each through retry) ────────────────────────────────


def _our_threads(api, repo_id: str, me: str, log: Log = lambda message: None) -> list[OurThread]:
    """Our PRs and discussions, newest first (one listing), each with the state of the latest
    marker in an event authored by us; other people's markers, and malformed ones, are ignored."""
    found = []
    listed = retry("list pull requests and discussions", lambda: list(api.get_repo_discussions(repo_id, author=me)))
    for d in listed:
        details = retry("read a pull request", lambda: api.get_discussion_details(repo_id, d.num))
        if details.author != me:
            continue
        markers: list[Marker] = []
        closed_by = None
        for event in details.events:
            if event.type == "status-change":
                closed_by = event.author if getattr(event, "new_status", None) == ThreadStatus.CLOSED else None
            content = getattr(event, "content", None) or ""
            for raw in _MARKER.findall(content):
                parsed = Marker.parse(raw) if event.author == me else None
                if parsed is None:
                    who = "" if event.author == me else f" by {event.author}"
                    log(
                        f"warning: ignored a marker{who} on #{d.num} that is not a valid hfexport v{MARKER_VERSION} "
                        "marker of ours"
                    )
                    continue
                markers.append(parsed)
        if markers:
            found.append(
                OurThread(
                    d.num,
                    ThreadStatus(details.status),
                    details.is_pull_request,
                    markers[-1].backends,
                    {m.nonce for m in markers},
                    closed_by_us=details.status == ThreadStatus.CLOSED and closed_by == me,
                )
            )
    return sorted(found, key=lambda t: t.num, reverse=True)


def _read_report(api, repo_id: str, revision: str, log: Log) -> Report | None:
    text = _read_file(api, repo_id, REPORT_FILE, revision)
    try:
        return Report.from_dict(json.loads(text)) if text else None
    except (ValueError, KeyError, TypeError) as e:
        log(
            f"warning: {REPORT_FILE} at {revision[:12]} is not a report hfexport can read ({type(e).__name__}); ignored"
        )
        return None


def _tree(api, repo_id: str, revision: str) -> tuple[str, dict[str, RemoteFile]]:
    """The commit `revision` points at, and its files with their content ids (one call)."""
    info = retry(f"read {revision}", lambda: api.model_info(repo_id, revision=revision, files_metadata=True))
    return info.sha, {
        s.rfilename: RemoteFile(s.rfilename, s.size or 0, s.blob_id or "", s.lfs.sha256 if s.lfs is not None else None)
        for s in info.siblings or []
    }


def _content(remote: RemoteFile | None) -> str | None:
    """What identifies a file's content: an LFS file's sha256, else its git blob id."""
    return None if remote is None else remote.lfs_sha256 or remote.blob_id


def _read_file(api, repo_id: str, path: str, revision: str) -> str | None:
    from huggingface_hub.errors import EntryNotFoundError

    def download():
        try:
            local = api.hf_hub_download(repo_id, path, revision=revision)
        except EntryNotFoundError:
            return None
        # The owner's bytes as they are: CRLF line ends stay (no newline translation), and bytes
        # that are not UTF-8 (a Latin-1 card) come back unchanged through `encode_text`.
        return Path(local).read_bytes().decode("utf-8", "surrogateescape")

    return retry(f"read {path}", download)


def _is_utf8(text: str) -> bool:
    """Whether `text`, read by `_read_file`, was UTF-8 (no byte came back as a surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encode_text(text: str) -> bytes:
    """A file's text read by `_read_file` as bytes again: the bytes that were not UTF-8, unchanged."""
    return text.encode("utf-8", "surrogateescape")


def _saved_token() -> str | None:
    from huggingface_hub import get_token

    return get_token()


def _whoami(api) -> str:
    from huggingface_hub.errors import HfHubHTTPError

    def ask():
        try:
            return api.whoami()["name"]
        except HfHubHTTPError as e:
            if e.response is not None and e.response.status_code in (401, 403):
                raise AuthError(
                    "The Hub refused the token (wrong or expired): opening a pull request needs one.", TOKEN_FIX
                ) from None
            raise

    return retry("check the token", ask)


def _raise_auth(e, repo_id: str) -> None:
    status = e.response.status_code if e.response is not None else None
    if status in (401, 403):
        raise AuthError(f"The Hub refused to open a pull request on {repo_id} (HTTP {status}).", TOKEN_FIX) from None


def _comment_once(api, repo_id: str, num: int, nonce: str, text: str) -> None:
    def commented_anyway() -> bool | None:
        details = api.get_discussion_details(repo_id, num)
        return (
            True
            if any(nonce in (getattr(e, "content", "") or "") and e.type == "comment" for e in details.events[1:])
            else None
        )

    retry(
        "comment on the pull request", lambda: api.comment_discussion(repo_id, num, text), before_retry=commented_anyway
    )

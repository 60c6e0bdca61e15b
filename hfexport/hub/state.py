"""The Hub as publishing reads it: the repo's state, read once, typed to the leaves.

`read_state` is the only reader: the opt-out, the card and `.hfexport.yaml`, who we are, our PRs
and discussions with the markers we left on them (one listing), the files at the base with their
content ids, and our latest PR whole. `hub/decide.py` takes the `HubState` it returns and decides
without another call; `hub/publish.py` writes. Every read goes through `retry`.

What is ours is decided here (`HubState.ours`): a path holding, in the tree our next commit lands
on, content one of our published reports recorded writing there — never a folder prefix, never
the path alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..card.frontmatter import load_yaml
from ..card.section import opted_out
from ..errors import AuthError, ConfigError, token_fix
from ..report import REPORT_FILE, ArtifactFile, Report
from .retry import refused, retry

if TYPE_CHECKING:
    from huggingface_hub import HfApi

BASE_BRANCH = "main"  # where our PRs go (the client opens create_pr commits against it only)
SETTINGS_FILE = ".hfexport.yaml"
MARKER_VERSION = 2
MARKER = re.compile(r"<!-- hfexport (.*?) -->", re.S)

Log = Callable[[str], None]


# ── Where the exports go ─────────────────────────────────────────────────────


@dataclass(frozen=True)
class PullRequest:
    """The default destination: one pull request on the model's own repo, read by its loaders
    from `main` once merged."""

    repo_id: str


@dataclass(frozen=True)
class OwnRepo:
    """A repo of the user's own whose `main` holds the exports of `source_id`, with the files its
    loaders read beside them and a card naming its base model: created when missing, updated in
    place by one commit when the source changes (`hfexport push SOURCE --into REPO_ID`). For a
    model whose owner may never merge a PR: the loaders read `main`."""

    repo_id: str
    source_id: str

    @classmethod
    def checked(cls, into: str, source_id: str) -> OwnRepo:
        """The repo `into` names, checked as the place for `source_id`'s exports: the one check of
        every way to name it (`push --into`, the request form, a watch's `-> template`, the Action's
        `into` input), in words none of them owns.

        Raises:
            ConfigError: `into` is no `namespace/name` repo id, or it names the source itself.
        """
        from huggingface_hub.errors import HFValidationError
        from huggingface_hub.utils import validate_repo_id

        try:
            validate_repo_id(into)
        except HFValidationError as e:
            raise ConfigError(
                f"{into[:100]!r} is not a repo id to publish into: {e}",
                "Name a repo as namespace/name: you/model-ONNX.",
            ) from None
        if "/" not in into:
            raise ConfigError(
                f"{into!r} names no namespace.", f"Name it as namespace/name: yourname/{into} or yourorg/{into}."
            )
        if into.lower() == source_id.lower():
            raise ConfigError(
                f"{into!r} names the source repo {source_id} itself.",
                "Publish to it as a pull request instead, or name a repo of your own (you/model-ONNX).",
            )
        return cls(into, source_id)


# Each destination is a value `read_state`, `decide` and `apply` take; publish.py maps it to its writes.
Destination = PullRequest | OwnRepo


def source_of(destination: Destination) -> str:
    """The repo the exports are made from (for a PR, the one written to)."""
    return destination.source_id if isinstance(destination, OwnRepo) else destination.repo_id


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
    the `mark_key` of what was asked."""

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

    destination: Destination
    sha: str  # the commit the exports are built from
    endpoint: str
    opted_out: bool
    base: str = ""  # the commit a new PR branches from (its card, files and report are read here)
    me: str | None = None
    readme: str | None = None  # the base's card
    settings: dict[str, Any] = field(default_factory=dict)  # the repo's .hfexport.yaml (opt_out, variants)
    threads: list[OurThread] = field(default_factory=list)  # newest first
    base_files: dict[str, RemoteFile] = field(default_factory=dict)
    base_report: Report | None = None  # ours, merged into the base earlier
    pr: OurPullRequest | None = None
    # A commit our open PR's exports were built from that is newer than `sha` (has it in its history).
    newer_held: str | None = None
    # A derived repo's: whether it exists yet (`base` is then its head), the source's card (its
    # license is copied), and who may see each, read at every push: the source's visibility and
    # gating, and the derived repo's (`decide.derived_refusal`: never more visible than its source).
    exists: bool = True
    source_readme: str | None = None
    source_private: bool = False
    source_gated: str | bool = False  # "auto", "manual" or False, as the Hub says
    repo_private: bool = False
    repo_gated: str | bool = False

    def __post_init__(self) -> None:
        self.base = self.base or self.sha

    @property
    def repo_id(self) -> str:
        """The repo written to."""
        return self.destination.repo_id

    @property
    def derived(self) -> bool:
        """Whether the exports go to a repo of their own (`OwnRepo`), not a PR on the source."""
        return isinstance(self.destination, OwnRepo)

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
            remote.holds(f) for f in recorded(self.pr.report if self.pr else None, self.base_report).get(path, ())
        )

    def owners(self, path: str) -> bool:
        """Whether `path` exists in `tree` with content we did not write: never written, never deleted."""
        return path in self.tree and not self.ours(path)

    @property
    def discussions(self) -> list[OurThread]:
        return [t for t in self.threads if not t.is_pull_request]

    def url(self, num: int) -> str:
        return f"{self.endpoint}/{self.repo_id}/discussions/{num}"

    @property
    def repo_url(self) -> str:
        """The page of the repo written to."""
        return f"{self.endpoint}/{self.repo_id}"


def read_state(
    api: HfApi, destination: Destination, sha: str, log: Log = lambda message: None, *, base: str | None = None
) -> HubState:
    """Read what publishing needs for `destination`, once: the opt-out and card, who we are, our PRs and
    discussions, the files at `base` (default `sha`; our report there), and our latest PR whole
    (its files with their content ids, its card, its report). For a `OwnRepo`, the source's
    opt-out, card and settings at `sha`, then the derived repo's `main` as it is now (`base`
    unused: its head is read each time).

    Raises:
        AuthError: the token is missing or refused (a PR needs one).
        HubUnavailableError: the Hub kept failing after retries.
    """
    base, repo_id = base or sha, destination.repo_id
    if isinstance(destination, OwnRepo):
        base = sha  # the source's card and settings are read at the commit exported
    readme = read_file(api, source_of(destination), "README.md", base)
    settings = _read_settings(read_file(api, source_of(destination), SETTINGS_FILE, base))
    owner_opted_out = opted_out(readme) or bool(settings.get("opt_out"))
    state = HubState(destination, sha, api.endpoint, owner_opted_out, base=base, readme=readme, settings=settings)
    if owner_opted_out:
        return state
    if isinstance(destination, OwnRepo):
        return _read_derived(api, state, log)
    # No token (a dry run of a public repo): no identity, so no PR of ours to find — the dry run
    # shows the PR a first run would open.
    state.me = whoami(api) if api.token or saved_token() else None
    state.threads = our_threads(api, repo_id, state.me, log) if state.me else []
    state.base_files = read_tree(api, repo_id, base)[1]
    if REPORT_FILE in state.base_files:
        state.base_report = read_report(api, repo_id, base, log)
    latest = next((t for t in state.threads if t.is_pull_request and not t.closed_by_us), None)
    if latest is not None and latest.status != ThreadStatus.MERGED:
        head, tree = read_tree(api, repo_id, f"refs/pr/{latest.num}")
        report = read_report(api, repo_id, head, log) if REPORT_FILE in tree else None
        card = read_file(api, repo_id, "README.md", head) if "README.md" in tree else None
        state.pr = OurPullRequest(latest, head, tree, report, card)
        state.newer_held = _newer_than(api, repo_id, sha, {mark.sha for mark in latest.backends.values()})
    return state


def _read_derived(api: HfApi, state: HubState, log: Log) -> HubState:
    """The derived repo's `main` as it is now: its head, files, card and our report there; or
    that it does not exist yet (then whether the source is private, as it will be)."""
    from huggingface_hub.errors import RepositoryNotFoundError

    source_id = source_of(state.destination)
    state.source_readme, state.readme = state.readme, None
    who = whoami_info(api, state.repo_id) if api.token or saved_token() else None  # a dry run may have none
    state.me = who["name"] if who else None
    source = retry("read the source repo", lambda: api.model_info(source_id))
    state.source_private, state.source_gated = bool(source.private), source.gated or False
    try:
        state.base, state.base_files = read_tree(api, state.repo_id, BASE_BRANCH)
    except RepositoryNotFoundError:
        state.exists = False
        namespace = state.repo_id.split("/")[0]
        if who is not None and namespace not in namespaces(who):  # refused now, before any export
            raise AuthError(
                f"This token belongs to {who['name']}, which cannot create {state.repo_id}: {namespace} is neither "
                "its user nor one of its organisations.",
                token_fix(state.repo_id),
            ) from None
        return state
    derived = retry(f"read {state.repo_id}", lambda: api.model_info(state.repo_id))
    state.repo_private, state.repo_gated = bool(derived.private), derived.gated or False
    if "README.md" in state.base_files:
        state.readme = read_file(api, state.repo_id, "README.md", state.base)
    if REPORT_FILE in state.base_files:
        state.base_report = read_report(api, state.repo_id, state.base, log)
    report = state.base_report
    if report is not None and report.source.ref == source_id:  # a newer commit's exports are never replaced
        held = {report.source.sha, *(b.source_sha for b in report.backends if b.source_sha)}
        state.newer_held = _newer_than(api, source_id, state.sha, held)
    return state


def _newer_than(api: HfApi, repo_id: str, sha: str, held: set[str]) -> str | None:
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

    def history(revision: str) -> list[str]:
        return [commit.commit_id for commit in api.list_repo_commits(repo_id, revision=revision)]

    for candidate in candidates:
        if candidate not in branch:
            continue
        try:
            held_history = retry(f"read the history of {candidate[:12]}", lambda: history(candidate))
        except RevisionNotFoundError:
            continue
        if sha in held_history:
            return candidate
    return None


_SHA = re.compile(r"[0-9a-f]{40}")


def _read_settings(text: str | None) -> dict[str, Any]:
    """The repo's `.hfexport.yaml` as a mapping ({} when absent or not a mapping)."""

    try:
        data = load_yaml(text) if text else None
    except ValueError:
        data = None
    return data if isinstance(data, dict) else {}


def recorded(*reports: Report | None) -> dict[str, list[ArtifactFile]]:
    """Per repo path, the files our reports say we wrote there."""
    found: dict[str, list[ArtifactFile]] = {}
    for report in reports:
        for b in report.backends if report else []:
            for f in b.files:
                found.setdefault(f"{b.subfolder}/{f.path}", []).append(f)
        for f in report.copied if report else []:  # a derived repo's: at its root
            found.setdefault(f.path, []).append(f)
    return found


# ── Hub reads (each through retry) ───────────────────────────────────────────


def our_threads(api: HfApi, repo_id: str, me: str, log: Log = lambda message: None) -> list[OurThread]:
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
            for raw in MARKER.findall(content):
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


def read_report(api: HfApi, repo_id: str, revision: str, log: Log) -> Report | None:
    text = read_file(api, repo_id, REPORT_FILE, revision)
    try:
        return Report.from_dict(json.loads(text)) if text else None
    except (ValueError, KeyError, TypeError) as e:
        log(
            f"warning: {REPORT_FILE} at {revision[:12]} is not a report hfexport can read ({type(e).__name__}); ignored"
        )
        return None


def read_tree(api: HfApi, repo_id: str, revision: str) -> tuple[str, dict[str, RemoteFile]]:
    """The commit `revision` points at, and its files with their content ids (one call)."""
    info = retry(f"read {revision}", lambda: api.model_info(repo_id, revision=revision, files_metadata=True))
    assert info.sha is not None  # the Hub names the commit of every revision it answers for
    return info.sha, {
        s.rfilename: RemoteFile(s.rfilename, s.size or 0, s.blob_id or "", s.lfs.sha256 if s.lfs is not None else None)
        for s in info.siblings or []
    }


def content_id(remote: RemoteFile | None) -> str | None:
    """What identifies a file's content: an LFS file's sha256, else its git blob id."""
    return None if remote is None else remote.lfs_sha256 or remote.blob_id


def read_file(api: HfApi, repo_id: str, path: str, revision: str) -> str | None:
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


def is_utf8(text: str) -> bool:
    """Whether `text`, read by `read_file`, was UTF-8 (no byte came back as a surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encode_text(text: str) -> bytes:
    """A file's text read by `read_file` as bytes again: the bytes that were not UTF-8, unchanged."""
    return text.encode("utf-8", "surrogateescape")


def saved_token() -> str | None:
    from huggingface_hub import get_token

    return get_token()


def whoami(api: HfApi, into: str | None = None) -> str:
    """The token's user name (`into`: the repo of one's own it will write, for the fix when refused)."""
    return whoami_info(api, into)["name"]


def namespaces(info: dict) -> set[str]:
    """The namespaces a token may create repos in, from its `whoami` answer: its user's and its organisations'."""
    return {info["name"], *(org.get("name") for org in info.get("orgs") or [] if isinstance(org, dict))}


def whoami_info(api: HfApi, into: str | None = None) -> dict:
    """The Hub's `whoami` answer for the token (as `whoami`)."""
    from huggingface_hub.errors import HfHubHTTPError

    def ask():
        try:
            return api.whoami()
        except HfHubHTTPError as e:
            if refused(e):
                what = f"writing to {into}" if into else "opening a pull request"
                raise AuthError(
                    f"The Hub refused the token (wrong or expired): {what} needs one.", token_fix(into)
                ) from None
            raise

    return retry("check the token", ask)

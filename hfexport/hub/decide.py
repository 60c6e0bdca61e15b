"""The rules of publishing, as one pure function: the Hub's state and what was asked → what to do.

`decide` reads only its arguments (a `HubState` from `hub/state.py`, the backends and request,
the report once exported) and returns a `Decision`, which `hub/publish.py` carries out. It runs
twice per push on the same state: before the export (report None), to skip the work when there is
nothing to do, and after it. The rules, in order:

- the owner opted out (`hfexport: false` in the card metadata, or `.hfexport.yaml`) → nothing;
- our latest PR was closed by a maintainer → left alone unless `force` (then reopened and updated);
  a PR we closed ourselves (superseded by an older one of ours after a race) does not count;
- our open PR holds exports of a newer commit of the branch (this sha is in that commit's
  history: a retry, a late webhook, a slow runner) → nothing, unless `force`: a PR is never moved
  back to an older commit;
- every backend asked for is on our open PR at this sha, for this request → nothing to do;
- (a derived repo) it holds another source's exports, or is more visible than its source (public
  for a private source, open for a gated one) → refused (`derived_refusal`); its exports are of a
  newer commit of the source → nothing, unless `force`;
- every backend was skipped here (no GPU for executorch-cuda) → nothing;
- every backend failed → no PR; one discussion (opened or updated) with the error report;
- otherwise the PR's content is recomputed: backends asked for that changed are replaced, the
  others' files stay, backends built from another commit or plan are removed; unchanged → no
  commit, no comment; changed → one commit and one comment on our PR, or a new PR;
- the base already holds these exact files and our card section (our PR was merged) → nothing.

A derived repo (`OwnRepo`, `push --into`) has no PR: its `main` is the base and our commit
lands there. Every backend failed → nothing published; otherwise the same merge, plus the source's
support files (config, tokenizer) its loaders read at the root, and one commit (`created` for a new
repo, `updated`), or nothing when its `main` already holds these exports of this commit.

A path we would write that the tree holds with other content belongs to someone else (the owner's
own `onnx/model.onnx`, a maintainer's tuned graph over ours after a merge): that backend goes to
`hfexport/<folder>/` instead, and the PR and card say so. Deletions are limited to paths that are
ours (`HubState.ours`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import overload

from ..card.section import START
from ..errors import ConfigError
from ..messages import ExportRequest
from ..report import REPORT_FILE, ArtifactFile, BackendResult, PublishAction, Report, Status
from ..versions import installed
from .state import BackendMark, HubState, OurThread, ThreadStatus, source_of

# Where a backend's files go when the owner already has files at its usual paths.
OWN_FOLDER = "hfexport"


def mark_key(backend: str, request: ExportRequest) -> str:
    """What the user asked for of one backend (`request`: task, variants, quality thresholds) that,
    with the source sha, decides its export: checked before the plan exists, so an unchanged rerun
    needs neither a download nor transformers."""
    asked = [backend, request.to_dict(), installed("hfexport")]
    return hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest()[:16]


# The outcomes that are a backend's answer for a commit; skipped, crashed and timeout are not.
DONE = (Status.OK, Status.FAILED)


@dataclass(frozen=True)
class Decision:
    """What to do. With `action` one of opted-out, unchanged, closed-respected, up-to-date,
    nothing-ran, not-published there is nothing to write; opened, created, updated and discussion
    are carried out by `apply`."""

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
        return self.action in (
            PublishAction.OPENED,
            PublishAction.CREATED,
            PublishAction.UPDATED,
            PublishAction.DISCUSSION,
        )


@overload
def decide(
    state: HubState, backends: list[str], request: ExportRequest, report: Report, *, force: bool = False
) -> Decision: ...


@overload
def decide(
    state: HubState, backends: list[str], request: ExportRequest, report: None = None, *, force: bool = False
) -> Decision | None: ...


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
    if state.derived and (refusal := derived_refusal(state)) is not None:
        raise refusal
    if state.derived and state.newer_held and not force:
        return Decision(PublishAction.NEWER_HELD)
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
            and all(pr.thread.backends.get(b) == BackendMark(state.sha, mark_key(b, request)) for b in backends)
        ):
            return Decision(PublishAction.UNCHANGED, pr.thread)
        return None
    if all(b.status not in DONE for b in report.backends):  # skipped, killed or stopped: no answer to publish
        return Decision(PublishAction.NOTHING_RAN)
    if not report.succeeded and state.derived:  # nothing worth a repo of its own
        return Decision(PublishAction.NOT_PUBLISHED)
    if not report.succeeded:
        open_ones = [d for d in state.discussions if d.is_open]
        return Decision(PublishAction.DISCUSSION, open_ones[0] if open_ones else None)

    previous = pr.report if pr is not None else state.base_report
    published, uploads, notes, changed = _merge(state, report, previous)
    if state.derived:
        copied, copies, kept_theirs = _copies(state, report)
        published = dataclasses.replace(published, copied=copied)
        uploads += copies
        notes += tuple(f"The repo's own `{path}` is kept as it is (the source's differs)." for path in kept_theirs)
    # A backend counts as done for this commit once it exported (or failed validating, as a rerun
    # would): one skipped, crashed or stopped carries no mark, so the next run tries it again.
    markers = {
        b.backend: (pr.thread.backends.get(b.backend) if pr and b.backend not in report.plan.backends else None)
        or BackendMark(b.source_sha or state.sha, mark_key(b.backend, request))
        for b in published.backends
        if b.status in DONE
    }
    kept = manifest(published)
    # Our old files go, except in a folder where someone replaced one of them: theirs may need the rest.
    shared = {
        p for b in (previous.backends if previous else []) if any(state.owners(q) for q in b.paths) for p in b.paths
    }
    deletes = tuple(sorted(p for p in (manifest(previous) - kept - shared) & set(state.tree) if state.ours(p)))
    if pr is not None and not uploads and not deletes and _same(published, previous) and pr.thread.is_open:
        return Decision(PublishAction.UNCHANGED, pr.thread)
    if state.derived and not uploads and not deletes and _same(published, previous):
        return Decision(PublishAction.UP_TO_DATE)
    if pr is None and not state.derived and not deletes and _already_on_base(state, uploads):
        return Decision(PublishAction.UP_TO_DATE)
    # Our PR gets one more commit; without one (or after a merge), a new PR opens. A derived repo's
    # main gets the commit, creating the repo first where there is none.
    if state.derived:
        action, thread = (PublishAction.UPDATED if state.exists else PublishAction.CREATED), None
    else:
        action, thread = (PublishAction.UPDATED, pr.thread) if pr is not None else (PublishAction.OPENED, None)
    return Decision(
        action,
        thread,
        published=published,
        uploads=tuple(uploads),
        deletes=deletes,
        markers=markers,
        notes=notes,
        changed=changed,
    )


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
            local = Path(report.out_dir or ".") / new.subfolder  # a packaged report names its folder
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


def derived_refusal(state: HubState) -> ConfigError | None:
    """Why the exports of `state`'s source may not go to its derived repo, or None: the repo holds
    another source's exports (a derived repo has one source), or it is more visible than its source
    — public for a private source, open for a gated one (a new repo is created private then)."""
    source, repo = source_of(state.destination), state.repo_id
    if not state.exists:
        return None
    theirs = state.base_report.source.ref if state.base_report is not None else None
    if theirs is not None and theirs != source:
        return ConfigError(
            f"{repo} holds the exports of {theirs}, not {source}: a derived repo follows one source",
            f"Push {source} into a repo of its own (--into {repo.split('/')[0]}/{source.split('/')[1]}-ONNX), "
            f"or delete {repo} first if it should follow {source} from now on.",
        )
    if state.source_private and not state.repo_private:
        return ConfigError(
            f"{source} is private and {repo} is public: its exports would show a private model to everyone",
            f"Make {repo} private (its Settings page on the Hub), or push into a new repo: one is created private.",
        )
    if state.source_gated and not (state.repo_private or state.repo_gated):
        return ConfigError(
            f"{source} is gated (access {state.source_gated}) and {repo} is neither gated nor private: its "
            "weights, exported, would reach anyone without the source's access conditions",
            f"Gate {repo} or make it private (its Settings page on the Hub), or push into a new repo: one is "
            "created private.",
        )
    return None


def _copies(state: HubState, report: Report) -> tuple[list[ArtifactFile], list[tuple[Path, str]], list[str]]:
    """A derived repo's copies of the source's support files (config, tokenizer, processor,
    sentence-transformers' module folders: what `package` put beside the exports): those it holds
    as we wrote them, those to write (missing, or ours and changed in the source), and those the
    repo's owner wrote that differ (kept)."""
    folder = Path(report.out_dir or ".")
    exports = tuple(f"{b.subfolder}/" for b in report.backends)
    copied, uploads, theirs = [], [], []
    for local in sorted(folder.rglob("*")):
        path = local.relative_to(folder).as_posix()
        if (
            local.is_symlink()
            or not local.is_file()
            or path == REPORT_FILE
            or local.name.startswith(".")
            or path.startswith(exports)
        ):
            continue
        entry, remote = ArtifactFile.of(path, local), state.tree.get(path)
        if remote is not None and not remote.holds(entry) and state.owners(path):
            theirs.append(path)
            continue
        copied.append(entry)
        if remote is None or not remote.holds(entry):
            uploads.append((local, path))
    return copied, uploads, theirs


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


def manifest(report: Report | None) -> set[str]:
    """Every repo path a report lists."""
    return {p for b in (report.backends if report else []) for p in b.paths}


def _already_on_base(state: HubState, uploads: list[tuple[Path, str]]) -> bool:
    """Whether every file is already at the base sha byte for byte (by hash), with our card section."""
    if not state.readme or START not in state.readme:
        return False
    for local, path in uploads:
        remote = state.base_files.get(path)
        if remote is None or remote.size != local.stat().st_size or not remote.holds(ArtifactFile.of(path, local)):
            return False
    return True

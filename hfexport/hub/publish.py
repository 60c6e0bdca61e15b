"""Stage 7 — publish: one pull request per repo, opened once, filled by every runner, updated when
the model changes, and never touching a file hfexport did not write.

Publishing is three steps, one module each, so that the Hub is read once and every rule lives in
one pure function:

    state = read_state(api, PullRequest(repo_id), sha)     # hub/state.py: the Hub, read once
    decision = decide(state, backends, request, report=...)  # hub/decide.py: pure
    result = apply(api, state, decision, report)           # here: the writes, and only those

A write that finds the PR moved meanwhile (another runner committed: HTTP 412 on our
`parent_commit`) raises `PublishConflict`; `push` reads the state again and decides again, so
concurrent runners converge on one PR holding all their backends.

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
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backends import get_backend
from ..card.section import RenderedCard, derived_card, derived_library, render_card
from ..errors import AuthError, token_fix
from ..messages import PublishResult
from ..report import REPORT_FILE, PublishAction, Report
from ..table import markdown_table, markdown_variant_table
from .decide import Decision
from .retry import refused, retry
from .state import (
    BASE_BRANCH,
    SETTINGS_FILE,
    Destination,
    HubState,
    Log,
    Marker,
    OurThread,
    OwnRepo,
    PullRequest,
    ThreadStatus,
    content_id,
    encode_text,
    is_utf8,
    our_threads,
    read_tree,
    source_of,
)

if TYPE_CHECKING:
    from huggingface_hub import DiscussionWithDetails, HfApi
    from huggingface_hub.errors import HfHubHTTPError

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


DISCUSSION_TITLE = "hfexport: exports of this model failed"


class PublishConflict(Exception):
    """The PR moved while we wrote (another runner committed first): read the state and decide again."""


class BaseMoved(Exception):
    """The base branch moved since we read it, touching a path our new PR writes: read its new
    head and decide again (our PR would otherwise undo those commits, or conflict with them)."""

    def __init__(self, head: str, paths: list[str]):
        super().__init__(f"main moved to {head[:12]} while this run exported, changing {', '.join(paths)}")
        self.head = head
        self.paths = paths


# ── The writes ───────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Change:
    """One commit's content, rendered from a decision: the card, the files and the description."""

    decision: Decision
    published: Report  # the report the commit writes
    card: str  # the README it writes (the one read, where unchanged)
    writes_card: bool
    description: str
    nonce: str

    @property
    def files(self) -> list[str]:
        """Every path the commit writes (deletions aside)."""
        uploads = [path for _, path in self.decision.uploads]
        return uploads + [REPORT_FILE] + (["README.md"] if self.writes_card else [])

    def result(self, action: PublishAction, repo_id: str, report: Report | None, **where: Any) -> PublishResult:
        """What `push` answers for this change (`where`: `pr_num`, `pr_url`, `commit`, `title`)."""
        return PublishResult(
            action, repo_id, files=self.files, description=self.description, card=self.card, report=report, **where
        )

    def operations(self) -> list[Any]:
        """The client's operations; fresh objects each attempt (the client marks one used once committed)."""
        from huggingface_hub import CommitOperationAdd, CommitOperationDelete

        adds = [CommitOperationAdd(path, str(local)) for local, path in self.decision.uploads]
        adds.append(CommitOperationAdd(REPORT_FILE, self.published.to_json().encode()))
        if self.writes_card:
            adds.append(CommitOperationAdd("README.md", encode_text(self.card)))
        return adds + [CommitOperationDelete(p) for p in self.decision.deletes]


def apply(
    api: HfApi,
    state: HubState,
    decision: Decision,
    report: Report | None,
    *,
    dry_run: bool = False,
    log: Log = lambda message: None,
) -> PublishResult:
    """Carry out `decision` on the Hub (nothing when `dry_run`), through the writes of
    `state.destination`.

    Raises:
        PublishConflict: the PR moved meanwhile (read the state again and decide again).
        BaseMoved: the base moved on a path a new PR writes (read it again and decide again).
        AuthError: the token cannot open PRs or discussions here.
        HubUnavailableError: the Hub kept failing after retries.
    """
    nonce = secrets.token_hex(8)
    num = decision.thread.num if decision.thread else None
    if not decision.writes:
        log(_explain(decision, state))
        url = state.url(num) if num is not None else None
        repo_url = state.repo_url if state.derived and state.exists else None
        return PublishResult(decision.action, state.repo_id, num, url, report=report, repo_url=repo_url)
    if decision.action == PublishAction.DISCUSSION:
        assert report is not None  # a discussion reports an export's failures
        return _report_failure(api, state, decision, report, nonce, dry_run, log)
    change = _render(state, decision, nonce, log)
    if dry_run:
        title = pr_title(change.published)
        return change.result(PublishAction.DRY_RUN, state.repo_id, report, pr_num=num, title=title)
    write = _WRITES[type(state.destination)]
    return write(api, state, change, report, log)


def _render(state: HubState, decision: Decision, nonce: str, log: Log) -> Change:
    """The card, files and description a decision writes."""
    published = decision.published
    assert published is not None  # every writing decision but a discussion carries its report
    # The card we replace: the PR head's when we update our PR (a maintainer's edits there stay).
    current = state.pr.readme if decision.action == PublishAction.UPDATED and state.pr is not None else state.readme
    notes, source = decision.notes, source_of(state.destination)
    files = set(state.tree) | {f.path for f in published.copied}
    if state.derived:
        if current is None:
            library = derived_library(published, state.repo_id, files)
            current = derived_card(state.repo_id, source, state.endpoint, state.source_readme, library)
        notes = (f"Exports of [{source}]({state.endpoint}/{source}) at commit `{state.sha[:12]}`.", *notes)
    rendered = render_card(current, state.repo_id, published, notes, files, on_pr=not state.derived)
    if current is not None and not is_utf8(current):
        # The Hub takes only UTF-8 cards (its client refuses others): a Latin-1 one stays as it is.
        rendered = RenderedCard(
            current,
            (
                "The card (README.md) is not UTF-8 text, so this PR leaves it as it is: saved as UTF-8, "
                "the next run adds the hfexport section and tags",
            ),
        )
    for warning in rendered.warnings:
        log(f"warning: {warning}")
    subject = f"This commit adds exports of {source}" if state.derived else "This PR adds exports of this model"
    hidden = Marker(nonce, decision.markers).render()
    description = _description(published, decision.notes + rendered.warnings, hidden, subject)
    return Change(decision, published, rendered.text, rendered.text != current, description, nonce)


# ── A pull request on the model's repo ───────────────────────────────────────


def _to_pull_request(api: HfApi, state: HubState, change: Change, report: Report | None, log: Log) -> PublishResult:
    """Update our PR, or open one."""
    if change.decision.action == PublishAction.UPDATED:
        return _update_pr(api, state, change, report, log)
    return _open_pr(api, state, change, report, log)


def _update_pr(api: HfApi, state: HubState, change: Change, report: Report | None, log: Log) -> PublishResult:
    """One commit onto our PR's head as we read it, one comment, and its title and description rewritten."""

    decision, repo_id = change.decision, state.repo_id
    assert decision.thread is not None and state.pr is not None  # an update names our PR, read whole
    num, head = decision.thread.num, state.pr.head
    details = _check_unchanged(api, repo_id, decision.thread)
    if decision.thread.status == ThreadStatus.CLOSED:
        retry("reopen the pull request", lambda: api.change_discussion_status(repo_id, num, "open"))

    message, moved = f"Update exports to {state.sha[:12]}", f"PR #{num}"
    info = retry(
        "push the new exports to the pull request",
        lambda: _commit_onto(api, repo_id, change, message, f"refs/pr/{num}", head, moved),
    )
    _comment_once(api, repo_id, num, change.nonce, _update_comment(decision, state, change.description))
    _retitle(api, state, details, pr_title(change.published), change.description)
    return change.result(PublishAction.UPDATED, repo_id, report, pr_num=num, pr_url=state.url(num), commit=info.oid)


def _open_pr(api: HfApi, state: HubState, change: Change, report: Report | None, log: Log) -> PublishResult:
    """A new PR branched from the commit we read, unless the base moved on a path it writes; a
    second PR opened at the same moment by another runner steps aside for the older one."""
    from huggingface_hub.errors import HfHubHTTPError

    repo_id, me, title = state.repo_id, state.me or "", pr_title(change.published)
    head, tree = read_tree(api, repo_id, BASE_BRANCH)
    if head != state.base:
        touched = sorted(
            p
            for p in {*change.files, *change.decision.deletes, SETTINGS_FILE}
            if content_id(tree.get(p)) != content_id(state.base_files.get(p))
        )
        if touched:
            raise BaseMoved(head, touched)

    def open_pr() -> tuple[int, str | None]:
        try:
            info = api.create_commit(
                repo_id,
                change.operations(),
                commit_message=title,
                commit_description=change.description,
                create_pr=True,
                revision=BASE_BRANCH,
                parent_commit=state.base,
            )
        except HfHubHTTPError as e:
            _raise_auth(e, repo_id, "open a pull request on")
            raise
        assert info.pr_num is not None  # the Hub answers a create_pr commit with its PR
        return int(info.pr_num), info.oid

    def opened_anyway() -> tuple[int, None] | None:
        # A dropped reply may hide a PR that was in fact opened: look for our nonce.
        found = [t for t in our_threads(api, repo_id, me) if t.is_pull_request and change.nonce in t.nonces]
        return (found[0].num, None) if found else None

    num, commit_oid = retry("open the pull request", open_pr, before_retry=opened_anyway)
    # Two runners may have opened a PR each at the same moment: the older one stays, ours steps aside.
    older = [
        t.num
        for t in our_threads(api, repo_id, me)
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
    return change.result(PublishAction.OPENED, repo_id, report, pr_num=num, pr_url=state.url(num), commit=commit_oid)


# ── A derived repo of the user's own ─────────────────────────────────────────


def _to_repo(api: HfApi, state: HubState, change: Change, report: Report | None, log: Log) -> PublishResult:
    """One commit onto the derived repo's `main` as we read it, creating the repo first where
    there is none (private where the source is)."""
    from huggingface_hub.errors import HfHubHTTPError

    repo_id, action = state.repo_id, change.decision.action
    if not state.exists:
        try:
            retry(
                f"create {repo_id}",
                # Never more visible than its source: private for a private or gated one.
                lambda: api.create_repo(repo_id, private=bool(state.source_private or state.source_gated) or None),
            )
        except HfHubHTTPError as e:
            if e.response is not None and e.response.status_code == 409:  # another run created it: read it again
                raise PublishConflict(f"{repo_id} was created by another run meanwhile") from None
            _raise_auth(e, repo_id, "create", into=True)
            raise

    message = f"Exports of {source_of(state.destination)} at {state.sha[:12]} (hfexport)"
    parent = state.base if state.exists else None
    info = retry(
        f"commit the exports to {repo_id}",
        lambda: _commit_onto(api, repo_id, change, message, BASE_BRANCH, parent, repo_id, into=True),
    )
    return change.result(action, repo_id, report, commit=info.oid, repo_url=state.repo_url)


def _commit_onto(
    api: HfApi,
    repo_id: str,
    change: Change,
    message: str,
    revision: str,
    parent: str | None,
    what: str,
    into: bool = False,
) -> Any:
    """One commit of `change` onto `revision` as we read it (`parent`; None: a new repo's first).

    Raises:
        PublishConflict: `what` (the PR, the repo) moved meanwhile (HTTP 412).
        AuthError: the token may not write there.
    """
    from huggingface_hub.errors import HfHubHTTPError

    try:
        return api.create_commit(
            repo_id,
            change.operations(),
            commit_message=message,
            commit_description=change.description,
            revision=revision,
            parent_commit=parent,
        )
    except HfHubHTTPError as e:
        if e.response is not None and e.response.status_code == 412:
            raise PublishConflict(f"{what} moved while this run committed to it") from None
        _raise_auth(e, repo_id, "write to", into)
        raise


# Per destination, its writes: adding one is a function and a line here.
_WRITES: dict[type[Destination], Callable[[HfApi, HubState, Change, Report | None, Log], PublishResult]] = {
    PullRequest: _to_pull_request,
    OwnRepo: _to_repo,
}


def _retitle(api: HfApi, state: HubState, details: DiscussionWithDetails, title: str, description: str) -> None:
    """Our PR's title and description say what it holds now: both rewritten after an update (the
    description is the PR's first comment, ours; a maintainer's comments are never touched).
    `details`: the PR as `_check_unchanged` read it before the commit (which changes neither)."""
    from huggingface_hub import DiscussionComment

    num = details.num
    if details.title != title:
        retry("retitle the pull request", lambda: api.rename_discussion(state.repo_id, num, title))
    first = next((e for e in details.events if isinstance(e, DiscussionComment)), None)
    if first is not None and first.author == state.me and first.content != description:
        retry(
            "rewrite the pull request's description",
            lambda: api.edit_discussion_comment(state.repo_id, num, first.id, description),
        )


def _check_unchanged(api: HfApi, repo_id: str, thread: OurThread) -> DiscussionWithDetails:
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
    derived = {
        PublishAction.OPTED_OUT: f"{source_of(state.destination)} opts out of hfexport: nothing to do",
        PublishAction.UP_TO_DATE: f"{state.repo_id} already holds these exports of {state.sha[:12]}: nothing to do",
        PublishAction.NEWER_HELD: f"{state.repo_id} holds exports of {(state.newer_held or '')[:12]}, a newer "
        f"commit than {state.sha[:12]}: not moved back to it (force it with --force)",
    }
    if state.derived and decision.action in derived:
        return derived[decision.action]
    return {
        PublishAction.OPTED_OUT: "the repo opts out of hfexport: nothing to do",
        PublishAction.UNCHANGED: f"PR #{num} already holds these exports: {state.url(num or 0)}",
        PublishAction.CLOSED_RESPECTED: f"PR #{num} was closed by a maintainer; not reopening it "
        f"(force it with --force, or force=True in Python): {state.url(num or 0)}",
        PublishAction.NEWER_HELD: f"PR #{num} holds exports of {(state.newer_held or '')[:12]}, a newer commit than "
        f"{state.sha[:12]}: not moved back to it (force it with --force): {state.url(num or 0)}",
        PublishAction.UP_TO_DATE: "the repo already holds these exact exports and card section: nothing to do",
        PublishAction.NOTHING_RAN: "no backend could run on this machine (see the reasons above): nothing to publish",
        PublishAction.NOT_PUBLISHED: f"every backend failed: nothing was written to {state.repo_id}",
    }[decision.action]


def _report_failure(
    api: HfApi, state: HubState, decision: Decision, report: Report, nonce: str, dry_run: bool, log: Log
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
        mine = our_threads(api, repo_id, state.me or "")
        found = [t.num for t in mine if not t.is_pull_request and nonce in t.nonces]
        return found[0] if found else None

    num = retry("report the failure in a discussion", post, before_retry=posted_anyway)
    log(f"every backend failed: reported in discussion #{num}: {state.url(num)}")
    return PublishResult(PublishAction.DISCUSSION, repo_id, num, state.url(num), description=text, report=report)


# ── Texts ────────────────────────────────────────────────────────────────────


def _description(published: Report, notes: tuple[str, ...], hidden: str, subject: str) -> str:
    """`subject`: "This PR adds exports of this model", or a derived repo's commit's, naming the source."""
    lines = [
        f"{subject} at commit `{published.source.sha[:12]}`, each reloaded on its runtime "
        "and checked against the original model on another input shape.",
        "",
        *markdown_table(published, ["backend", "outcome", "source", "max_abs_diff", "folder", "files"]),
        *(["", *(f"- {note}" for note in notes)] if notes else []),
        *(
            [
                "",
                "Variants (judged against the original model in float32; a failed one is not published):",
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
    old = {mark.sha for mark in decision.thread.backends.values()} if decision.thread else set()
    if old and old != {state.sha}:
        what = f"the model moved from `{sorted(old)[0][:12]}` to `{state.sha[:12]}`"
    else:
        what = f"{', '.join(decision.changed) or 'the card'} changed"
    return f"Updated: {what}; the exports were redone and re-validated.\n\n" + description


# ── Writes that look for a dropped reply's effect before retrying ───────────


def _raise_auth(e: HfHubHTTPError, repo_id: str, what: str, into: bool = False) -> None:
    """An AuthError where the Hub refused the token, with the fix for the destination (`into`: a repo
    of one's own, not a PR)."""
    if status := refused(e):
        raise AuthError(
            f"The Hub refused to {what} {repo_id} (HTTP {status}).", token_fix(repo_id if into else None)
        ) from None


def _comment_once(api: HfApi, repo_id: str, num: int, nonce: str, text: str) -> None:
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

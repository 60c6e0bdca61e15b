"""The publishing rules (`hub/decide.py`) on hand-built states: pure, no Hub, milliseconds each.

The scenarios over HTTP (tests/test_publish.py) prove the rules against the emulator; these pin
each rule alone, so a change to one names the rule it broke.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hfexport.card.section import START
from hfexport.errors import ConfigError
from hfexport.hub.decide import OWN_FOLDER, decide, mark_key
from hfexport.hub.state import (
    BackendMark,
    HubState,
    OurPullRequest,
    OurThread,
    OwnRepo,
    PullRequest,
    RemoteFile,
    ThreadStatus,
)
from hfexport.messages import ExportRequest
from hfexport.report import ArtifactFile, BackendResult, ExportPlan, PublishAction, Report, Source, Status

SHA = "a" * 40
REQUEST = ExportRequest("auto")


def _report(tmp_path: Path, status: Status = Status.OK, sha: str = SHA) -> Report:
    folder = tmp_path / "onnx"
    folder.mkdir(exist_ok=True)
    (folder / "model.onnx").write_bytes(b"graph of " + sha.encode())
    plan = ExportPlan(
        "feature-extraction", "BertModel", "BertModel", "bert", "single", "text", False, "single", ["onnx"]
    )
    files = [ArtifactFile.of("model.onnx", folder / "model.onnx")] if status == Status.OK else []
    backend = BackendResult(
        "onnx", status, "onnx", files=files, source_sha=sha, plan_digest=plan.backend_digest("onnx")
    )
    return Report(Source("hub", "org/model", sha), plan, [backend], out_dir=str(tmp_path))


def _state(**kwargs: object) -> HubState:
    return HubState(PullRequest("org/model"), SHA, "http://hub", False, me="bot", **kwargs)  # type: ignore[arg-type]


def _remote(path: str, local: Path) -> RemoteFile:
    f = ArtifactFile.of(path, local)
    return RemoteFile(path, f.size, f.git_oid or "")


def _our_pr(
    status: ThreadStatus, report: Report | None = None, marks: dict[str, BackendMark] | None = None
) -> OurPullRequest:
    thread = OurThread(3, status, True, marks or {}, {"n"})
    tree = {p: RemoteFile(p, 1, "x") for b in (report.backends if report else []) for p in b.paths}
    return OurPullRequest(thread, "b" * 40, tree, report)


def test_an_opted_out_repo_gets_nothing_whatever_was_asked() -> None:
    state = HubState(PullRequest("org/model"), SHA, "http://hub", True)
    assert decide(state, ["onnx"], REQUEST, force=True).action == PublishAction.OPTED_OUT


def test_a_pr_a_maintainer_closed_is_left_alone_unless_forced(tmp_path: Path) -> None:
    state = _state(pr=_our_pr(ThreadStatus.CLOSED))
    assert decide(state, ["onnx"], REQUEST).action == PublishAction.CLOSED_RESPECTED
    forced = decide(state, ["onnx"], REQUEST, _report(tmp_path), force=True)
    assert forced.action == PublishAction.UPDATED and forced.thread is not None and forced.thread.num == 3


def test_a_rerun_of_the_same_commit_and_request_needs_no_export() -> None:
    marks = {"onnx": BackendMark(SHA, mark_key("onnx", REQUEST))}
    state = _state(pr=_our_pr(ThreadStatus.OPEN, marks=marks))
    assert decide(state, ["onnx"], REQUEST).action == PublishAction.UNCHANGED
    # Another request (variants asked) is another export.
    assert decide(state, ["onnx"], ExportRequest("auto", variants=["int8"])) is None


def test_a_pr_holding_a_newer_commit_is_never_moved_back() -> None:
    state = _state(pr=_our_pr(ThreadStatus.OPEN), newer_held="c" * 40)
    assert decide(state, ["onnx"], REQUEST).action == PublishAction.NEWER_HELD
    assert decide(state, ["onnx"], REQUEST, force=True) is None


def test_every_backend_failing_opens_a_discussion_not_a_pr(tmp_path: Path) -> None:
    decision = decide(_state(), ["onnx"], REQUEST, _report(tmp_path, Status.FAILED))
    assert decision.action == PublishAction.DISCUSSION and not decision.uploads


@pytest.mark.parametrize("status", [Status.SKIPPED, Status.CRASHED])
def test_no_backend_answering_publishes_nothing(tmp_path: Path, status: Status) -> None:
    assert decide(_state(), ["onnx"], REQUEST, _report(tmp_path, status)).action == PublishAction.NOTHING_RAN


def test_a_first_run_opens_a_pr_with_the_files_and_a_mark_per_backend(tmp_path: Path) -> None:
    decision = decide(_state(), ["onnx"], REQUEST, _report(tmp_path))
    assert decision.action == PublishAction.OPENED
    assert [path for _, path in decision.uploads] == ["onnx/model.onnx"]
    assert decision.markers == {"onnx": BackendMark(SHA, mark_key("onnx", REQUEST))}


def test_the_owners_own_file_at_our_path_sends_the_export_beside_it(tmp_path: Path) -> None:
    owners = tmp_path / "owners.onnx"
    owners.write_bytes(b"the owner's tuned graph")
    state = _state(base_files={"onnx/model.onnx": _remote("onnx/model.onnx", owners)})
    decision = decide(state, ["onnx"], REQUEST, _report(tmp_path))
    assert [path for _, path in decision.uploads] == [f"{OWN_FOLDER}/onnx/model.onnx"]
    assert decision.notes and "kept as they are" in decision.notes[0]
    assert not decision.deletes  # never the owner's file


def test_a_merged_pr_whose_files_are_on_main_is_up_to_date(tmp_path: Path) -> None:
    report = _report(tmp_path)
    on_main = {"onnx/model.onnx": _remote("onnx/model.onnx", tmp_path / "onnx" / "model.onnx")}
    state = _state(base_files=on_main, base_report=report, readme=f"card\n{START}\n")
    assert decide(state, ["onnx"], REQUEST, report).action == PublishAction.UP_TO_DATE


def test_a_new_commit_replaces_our_files_and_deletes_only_what_still_holds_ours(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    old = _report(tmp_path / "old", sha="d" * 40)
    stale = tmp_path / "old" / "onnx" / "stale.onnx"
    stale.write_bytes(b"a file a former export wrote")
    edited = tmp_path / "old" / "onnx" / "edited.onnx"
    edited.write_bytes(b"ours once")
    old.backends[0].files += [ArtifactFile.of("stale.onnx", stale), ArtifactFile.of("edited.onnx", edited)]
    pr = _our_pr(ThreadStatus.OPEN, old, {"onnx": BackendMark("d" * 40, "r")})
    for name in ("model.onnx", "stale.onnx"):  # still our content: ours to replace or delete
        pr.tree[f"onnx/{name}"] = _remote(f"onnx/{name}", tmp_path / "old" / "onnx" / name)
    state = _state(pr=pr)  # onnx/edited.onnx holds other content now (a maintainer's edit): kept
    decision = decide(state, ["onnx"], REQUEST, _report(tmp_path))
    assert decision.action == PublishAction.UPDATED and decision.changed == ("onnx",)
    assert decision.deletes == ()  # the folder holds someone's edit: its other files stay too
    del pr.tree["onnx/edited.onnx"]
    assert decide(state, ["onnx"], REQUEST, _report(tmp_path)).deletes == ("onnx/stale.onnx",)


# ── a derived repo (`push --into`) ───────────────────────────────────────────


def _derived(**kwargs: object) -> HubState:
    return HubState(OwnRepo("me/model-ONNX", "org/model"), SHA, "http://hub", False, me="me", **kwargs)  # type: ignore[arg-type]


def test_a_derived_repo_that_does_not_exist_is_created_with_the_exports_and_the_loaders_files(tmp_path: Path) -> None:
    report = _report(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    decision = decide(_derived(exists=False), ["onnx"], REQUEST, report)
    assert decision.action == PublishAction.CREATED and decision.thread is None
    assert {path for _, path in decision.uploads} == {"onnx/model.onnx", "config.json"}
    assert decision.published is not None and [f.path for f in decision.published.copied] == ["config.json"]
    # A sentence-transformers module's folder is copied too; the exports' own folder is not a copy.
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    again = decide(_derived(exists=False), ["onnx"], REQUEST, report)
    assert again.published is not None
    assert [f.path for f in again.published.copied] == ["1_Pooling/config.json", "config.json"]


def test_a_derived_repo_holding_these_exports_of_this_commit_gets_nothing(tmp_path: Path) -> None:
    report = _report(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    first = decide(_derived(exists=False), ["onnx"], REQUEST, report)
    assert first.published is not None
    tree = {path: _remote(path, local) for local, path in first.uploads}
    state = _derived(base_files=tree, base_report=first.published, readme=f"# card\n{START}\n")
    assert decide(state, ["onnx"], REQUEST, report).action == PublishAction.UP_TO_DATE
    # A new commit of the source (same files): one more commit, naming it.
    moved = _report(tmp_path, sha="c" * 40)
    again = decide(dataclasses.replace(state, sha="c" * 40), ["onnx"], REQUEST, moved)
    assert again.action == PublishAction.UPDATED and again.published is not None
    assert again.published.backends[0].source_sha == "c" * 40


def test_a_derived_repos_own_replacement_of_a_copied_file_is_kept_and_said(tmp_path: Path) -> None:
    report = _report(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "bert"}')
    (tmp_path / "theirs.json").write_text('{"theirs": true}')
    state = _derived(base_files={"config.json": _remote("config.json", tmp_path / "theirs.json")})
    decision = decide(state, ["onnx"], REQUEST, report)
    assert decision.action == PublishAction.UPDATED
    assert "config.json" not in {path for _, path in decision.uploads}
    assert any("`config.json` is kept" in note for note in decision.notes), decision.notes


def test_a_derived_repo_gets_nothing_when_every_backend_failed(tmp_path: Path) -> None:
    decision = decide(_derived(exists=False), ["onnx"], REQUEST, _report(tmp_path, Status.FAILED))
    assert decision.action == PublishAction.NOT_PUBLISHED and not decision.writes


def test_a_derived_repo_of_another_source_is_refused_with_the_fix(tmp_path: Path) -> None:
    """Issue 56, row 9: one source per derived repo; `evil/bert --into` acme's is refused."""
    theirs = dataclasses.replace(_report(tmp_path), source=Source("hub", "acme/bert", SHA))
    with pytest.raises(ConfigError) as refused:
        decide(_derived(base_report=theirs), ["onnx"], REQUEST)
    assert "holds the exports of acme/bert, not org/model" in refused.value.cause
    assert "--into me/model-ONNX" in refused.value.fix


@pytest.mark.parametrize(
    ("source", "repo", "allowed"),
    [
        ({"source_private": True}, {}, False),  # row 5: a private source into a public repo
        ({"source_private": True}, {"repo_private": True}, True),
        ({"source_gated": "manual"}, {}, False),  # row 6: a gated source into an open repo
        ({"source_gated": "auto"}, {"repo_gated": "auto"}, True),
        ({"source_gated": "auto"}, {"repo_private": True}, True),
        ({}, {}, True),
    ],
)
def test_a_derived_repo_is_never_more_visible_than_its_source(tmp_path: Path, source, repo, allowed) -> None:
    state = _derived(base_report=_report(tmp_path), **source, **repo)
    if allowed:
        assert decide(state, ["onnx"], REQUEST) is None  # export
    else:
        with pytest.raises(ConfigError) as refused:
            decide(state, ["onnx"], REQUEST)
        assert "Make me/model-ONNX private" in refused.value.fix or "Gate me/model-ONNX" in refused.value.fix
    # A new derived repo is never refused: it is created private (hub/publish.py).
    assert decide(_derived(exists=False, **source), ["onnx"], REQUEST) is None


def test_a_derived_repo_holding_a_newer_commits_exports_is_not_moved_back(tmp_path: Path) -> None:
    """Row 11: the older of two racing pushes reads the newer one's commit and leaves it."""
    state = _derived(base_report=_report(tmp_path, sha="b" * 40), newer_held="b" * 40)
    assert decide(state, ["onnx"], REQUEST).action == PublishAction.NEWER_HELD
    assert decide(state, ["onnx"], REQUEST, force=True) is None

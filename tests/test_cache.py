"""hfexport/pipeline/cache.py: a kept export is reused for another commit of the same content, a
failed one never is, nor one whose files are not those it was sealed with; a request exported
before finds its export without a plan."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hfexport.messages import ExportRequest
from hfexport.pipeline.cache import by_request, cached, export_key, remember, seal
from hfexport.pipeline.fetch import FetchedModel
from hfexport.report import REPORT_FILE, BackendResult, ExportPlan, Report, Source, Split, Status


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HFEXPORT_CACHE", str(tmp_path / "cache"))


def _kept(folder, status: Status) -> None:
    plan = ExportPlan(
        "feature-extraction", "BertModel", "BertModel", "bert", "single", "text", False, Split.SINGLE, ["onnx"]
    )
    backend = BackendResult("onnx", status, "onnx", source_sha="a" * 40)
    folder.mkdir(parents=True)
    (folder / REPORT_FILE).write_text(Report(Source("hub", "o/m", "a" * 40), plan, [backend]).to_json())
    (folder / "onnx").mkdir()
    (folder / "onnx" / "model.onnx").write_bytes(b"the graph as exported")
    seal(folder)


def test_a_kept_export_is_reused_as_built_from_the_new_commit(tmp_path):
    _kept(tmp_path / "ok", Status.OK)
    moved = Source("hub", "o/m", "b" * 40)
    report = cached(tmp_path / "ok", moved)
    assert report is not None and report.source == moved and report.out_dir == str(tmp_path / "ok")
    assert [b.source_sha for b in report.backends] == ["b" * 40]


@pytest.mark.parametrize("change", ["rewritten", "added", "removed", "report", "linked", "unsealed"])
def test_an_export_whose_files_are_not_the_sealed_ones_is_not_reused(tmp_path, change):
    """Issue 56, row 3: a repo's code (or anything else) that rewrote a kept graph or its report,
    planted a file or a link, or removed one, gets the entry exported again, never handed on."""
    folder = tmp_path / "kept"
    _kept(folder, Status.OK)
    assert cached(folder, Source("hub", "o/m", "b" * 40)) is not None
    graph = folder / "onnx" / "model.onnx"
    if change == "rewritten":
        graph.write_bytes(b"another graph")
    elif change == "added":
        (folder / "onnx" / "model_q4.onnx").write_bytes(b"planted")
    elif change == "removed":
        graph.unlink()
    elif change == "report":
        (folder / REPORT_FILE).write_text((folder / REPORT_FILE).read_text().replace('"o/m"', '"evil/m"'))
    elif change == "linked":
        graph.unlink()
        graph.symlink_to(tmp_path / "elsewhere")
        (tmp_path / "elsewhere").write_bytes(b"the graph as exported")
    else:
        (tmp_path / "cache" / "seals" / "kept.json").unlink()
    assert cached(folder, Source("hub", "o/m", "b" * 40)) is None


def test_nothing_or_a_failure_is_not_reused(tmp_path):
    assert cached(tmp_path / "missing", Source("hub", "o/m", "b" * 40)) is None
    _kept(tmp_path / "failed", Status.FAILED)
    assert cached(tmp_path / "failed", dataclasses.replace(Source("hub", "o/m", "b" * 40))) is None


def _fetched(content: str) -> FetchedModel:
    return FetchedModel(Source("hub", "o/m", "a" * 40), Path("/nowhere"), ("model.safetensors",), True, content)


def test_a_request_finds_its_export_and_another_request_does_not(tmp_path, monkeypatch):
    monkeypatch.setenv("HFEXPORT_CACHE", str(tmp_path))
    key = export_key(_fetched("c1"), ["onnx", "dynamo"], ExportRequest("auto", ["int8"]), False)
    _kept(tmp_path / "exports" / "c1-plan", Status.OK)
    assert by_request(key, Source("hub", "o/m", "b" * 40)) is None  # not remembered yet
    remember(key, tmp_path / "exports" / "c1-plan")
    report = by_request(key, Source("hub", "o/m", "b" * 40))
    assert report is not None and report.out_dir == str(tmp_path / "exports" / "c1-plan")
    # The same request in another order is the same; other content, backends, variants, task or trust are not.
    assert export_key(_fetched("c1"), ["dynamo", "onnx"], ExportRequest("auto", ["int8"]), False) == key
    others = [
        export_key(_fetched("c2"), ["onnx", "dynamo"], ExportRequest("auto", ["int8"]), False),
        export_key(_fetched("c1"), ["onnx"], ExportRequest("auto", ["int8"]), False),
        export_key(_fetched("c1"), ["onnx", "dynamo"], ExportRequest("auto", []), False),
        export_key(_fetched("c1"), ["onnx", "dynamo"], ExportRequest("fill-mask", ["int8"]), False),
        export_key(_fetched("c1"), ["onnx", "dynamo"], ExportRequest("auto", ["int8"]), True),
    ]
    assert key not in others and len(set(others)) == len(others)


def test_an_export_made_without_the_browsers_runtimes_is_not_handed_to_a_run_that_runs_them(tmp_path, monkeypatch):
    """The web checks' verdicts are part of an export (its report rows, its card cells): with them
    off (`HFEXPORT_WEB_CHECKS=0`), or on another onnxruntime-web, both keys differ."""
    from hfexport.pipeline.cache import export_dir

    plan = ExportPlan(
        "feature-extraction", "BertModel", "BertModel", "bert", "single", "text", False, Split.SINGLE, ["onnx"]
    )
    request = ExportRequest("auto", ["int8"])
    keys = {}
    for checks, package in (("1", None), ("0", None), ("1", tmp_path / "nowhere")):
        monkeypatch.setenv("HFEXPORT_WEB_CHECKS", checks)
        if package is None:
            monkeypatch.delenv("HFEXPORT_ONNXRUNTIME_WEB", raising=False)
        else:
            monkeypatch.setenv("HFEXPORT_ONNXRUNTIME_WEB", str(package))
        keys[checks, package] = (
            export_key(_fetched("c1"), ["onnx"], request, False),
            export_dir(_fetched("c1"), plan),
        )
    assert len({k for k, _ in keys.values()}) == 3 and len({d for _, d in keys.values()}) == 3, keys


def test_a_remembered_failure_or_a_name_outside_the_cache_is_not_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("HFEXPORT_CACHE", str(tmp_path))
    _kept(tmp_path / "exports" / "failed", Status.FAILED)
    remember("k1", tmp_path / "exports" / "failed")
    assert by_request("k1", Source("hub", "o/m", "b" * 40)) is None
    (tmp_path / "requests" / "k2").write_text("../../elsewhere")
    assert by_request("k2", Source("hub", "o/m", "b" * 40)) is None


def test_the_cache_is_bounded_least_recently_used_first_and_an_export_in_use_stays(tmp_path, monkeypatch):
    """Three kept exports of 1 MB each, a bound of 2.5 MB: the one used least recently goes, its
    request entry with it; an export a push is publishing from (`in_use`) stays whatever its age;
    the half-written folder of a killed run goes, a running one's stays."""
    import os
    import subprocess
    import time

    from hfexport.pipeline.cache import evict, in_use

    monkeypatch.setenv("HFEXPORT_CACHE", str(tmp_path))
    exports = tmp_path / "exports"
    for age, name in enumerate(["newest", "middle", "oldest"]):
        _kept(exports / name, Status.OK)
        (exports / name / "onnx.bin").write_bytes(b"\0" * 1_000_000)
        with in_use(exports / name):  # used `age` hours ago
            pass
        past = time.time() - 3600 * (age + 1)
        os.utime(exports / name / ".in-use", (past, past))
    remember("k-oldest", exports / "oldest")
    dead = subprocess.Popen(["true"])
    dead.wait()
    (exports / f".oldest.partial-{dead.pid}-x").mkdir()
    (exports / f".newest.partial-{os.getpid()}-y").mkdir()
    with in_use(exports / "oldest"):  # a push publishes from the oldest: it stays, the next goes
        removed = evict(2_500_000)
    assert sorted(p.name for p in removed) == [f".oldest.partial-{dead.pid}-x", "middle"], removed
    assert sorted(p.name for p in exports.iterdir()) == [f".newest.partial-{os.getpid()}-y", "newest", "oldest"]
    assert [p.name for p in evict(1_500_000)] == ["newest"]  # the push just used the oldest: now the newest
    assert (tmp_path / "requests" / "k-oldest").exists()  # its export stays, so does its request
    assert [p.name for p in evict(0)] == ["oldest"] and not (tmp_path / "requests" / "k-oldest").exists()

"""hfexport/pipeline/cache.py: a kept export is reused for another commit of the same content, a
failed one never is."""

from __future__ import annotations

import dataclasses

from hfexport.pipeline.cache import cached
from hfexport.report import REPORT_FILE, BackendResult, ExportPlan, Report, Source, Split, Status


def _kept(folder, status: Status) -> None:
    plan = ExportPlan(
        "feature-extraction", "BertModel", "BertModel", "bert", "single", "text", False, Split.SINGLE, ["onnx"]
    )
    backend = BackendResult("onnx", status, "onnx", source_sha="a" * 40)
    folder.mkdir()
    (folder / REPORT_FILE).write_text(Report(Source("hub", "o/m", "a" * 40), plan, [backend]).to_json())


def test_a_kept_export_is_reused_as_built_from_the_new_commit(tmp_path):
    _kept(tmp_path / "ok", Status.OK)
    moved = Source("hub", "o/m", "b" * 40)
    report = cached(tmp_path / "ok", moved)
    assert report is not None and report.source == moved and report.out_dir == str(tmp_path / "ok")
    assert [b.source_sha for b in report.backends] == ["b" * 40]


def test_nothing_or_a_failure_is_not_reused(tmp_path):
    assert cached(tmp_path / "missing", Source("hub", "o/m", "b" * 40)) is None
    _kept(tmp_path / "failed", Status.FAILED)
    assert cached(tmp_path / "failed", dataclasses.replace(Source("hub", "o/m", "b" * 40))) is None

"""The export cache: `push` keeps each export under a key of what decides it — the model's content,
the plan and the runtimes' versions — so a README-only commit, a rerun after a failed upload or a
second runner on the same weights reuses the files instead of exporting again. Failures are never
cached (a rerun retries them)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from ..report import REPORT_FILE, ExportPlan, Report, Source
from ..settings import cache_dir
from ..versions import runtime_versions
from .fetch import FetchedModel

# The runtimes whose version changes what an export holds (torch and transformers are pinned with hfexport).
_KEYED_RUNTIMES = ("executorch", "onnx", "onnxscript", "onnxruntime")


def export_dir(fetched: FetchedModel, plan: ExportPlan) -> Path:
    """Where the export of `fetched` by `plan` is kept (`settings.cache_dir()/exports/<key>`)."""
    versions = runtime_versions(_KEYED_RUNTIMES)
    digest = hashlib.sha256(json.dumps(versions, sort_keys=True).encode()).hexdigest()[:8]
    return cache_dir() / "exports" / f"{fetched.content_digest[:24]}-{plan.digest()}-{digest}"


def cached(out_dir: Path, source: Source) -> Report | None:
    """The export kept in `out_dir` as built from `source` (the same files: `source` holds the same
    content), or None when there is none or it failed."""
    report = Report.load(out_dir) if (out_dir / REPORT_FILE).exists() else None
    if report is None or not report.ok:
        return None
    backends = [dataclasses.replace(b, source_sha=source.sha) for b in report.backends]
    return dataclasses.replace(report, source=source, backends=backends, out_dir=str(out_dir))

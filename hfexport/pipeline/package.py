"""Stage 6 — package: lay the validated exports out as loaders expect, with one report beside them.

Layout (each folder loads with `ExportedModel.from_pretrained(out, subfolder=...)`):

    out/
      hfexport-report.json
      dynamo/               model.pt2 (decode.pt2 for a decoder LLM; encoder.pt2, decode.pt2 for encoder-decoders)
      onnx/                 model.onnx + model.onnx.data
      executorch/xnnpack/   model.pte
      executorch/cuda/      model.pte (+ .ptd)

Everything is written into a staging folder beside `out` and moved into place at the end, so a run
that fails or is interrupted never leaves a folder that looks complete. A backend that failed
validation keeps no files: only its entry in the report, with the error.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from ..errors import OutputDirError
from ..report import REPORT_FILE, ArtifactFile, BackendResult, ExportPlan, Report, Source
from ..sandbox.crossing import repo_root, within
from .fetch import SUPPORT_FILES
from .plan import module_folders

# ── Stage 6: package ─────────────────────────────────────────────────────────


@contextmanager
def staging_folder(out_dir: Path):
    """A fresh folder beside `out_dir` for the run to write into; removed on any failure.

    Raises:
        OutputDirError: `out_dir` exists, is not empty and is not an earlier hfexport output.
    """
    out_dir = Path(out_dir).resolve()
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir()) and not (out_dir / REPORT_FILE).exists())):
        raise OutputDirError(
            f"{out_dir} exists and is not an earlier hfexport output; it would be overwritten.",
            "Pass an empty or new output folder (--out on the command line, out= in Python).",
        )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # Named with this process's id: a run killed before its end leaves it, and `cache.evict` can
    # then tell it from one still being written.
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-{os.getpid()}-", dir=out_dir.parent))
    try:
        yield staging
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def package(
    staging: Path,
    out_dir: Path,
    source: Source,
    plan: ExportPlan,
    results: list[BackendResult],
    model_dir: Path | None = None,
) -> Report:
    """Drop failed backends' files, write the report, copy the model's own support files from
    `model_dir` beside them (`support_files`), and move `staging` to `out_dir`."""
    out_dir = Path(out_dir).resolve()
    if model_dir is not None:
        root = repo_root(Path(model_dir))
        for name in support_files(Path(model_dir), plan.trust_remote_code):
            # A link is followed only into the model's own files (the Hub client's snapshot links
            # into its blobs), never out of them: `/proc/self/environ` or a saved login is no config.
            origin = within(Path(model_dir) / name, root)
            if origin is not None:
                (staging / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(origin, staging / name)
    for result in results:
        result.source_sha, result.plan_digest = source.sha, plan.backend_digest(result.backend)
        if not result.ok:
            shutil.rmtree(staging / result.subfolder, ignore_errors=True)
            result.files = []
        else:  # the content each file holds: publishing owns a path only while it still holds it
            folder = staging / result.subfolder
            result.files = [ArtifactFile.of(f.path, folder / f.path) for f in result.files]
    _prune_empty_dirs(staging)
    report = Report(source=source, plan=plan, backends=results)
    # The report as published: no local path in it (out_dir is set on the returned object only).
    (staging / REPORT_FILE).write_text(report.to_json())
    if out_dir.exists():  # an earlier hfexport output (checked in staging_folder): replace it whole
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        os.replace(out_dir, old)
        os.replace(staging, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(staging, out_dir)
    report.out_dir = str(out_dir)
    return report


def support_files(model_dir: Path, code: bool = False) -> list[str]:
    """The model's files beside its weights that its loaders read from the repo's root — config,
    tokenizer, processor, generation config, sentence-transformers' modules (and the repo's code,
    with `code`) —, so the output folder loads as the repo does: `AutoTokenizer.from_pretrained(out)`
    beside `from_pretrained(out, subfolder="onnx")`. Never the card or our report."""
    patterns = [*SUPPORT_FILES, *(["*.py"] if code else [])]
    found = {p.name for pattern in patterns for p in model_dir.glob(pattern) if p.is_file()}
    # Each sentence-transformers module's folder whole: without `1_Pooling/config.json`,
    # sentence-transformers cannot load the folder (nor a derived repo made from it).
    found |= {
        str(p.relative_to(model_dir))
        for folder in module_folders(model_dir)
        for p in (model_dir / folder).rglob("*")
        if p.is_file()
    }
    # Not a sharded checkpoint's index: it names weights the folder does not hold.
    return sorted(n for n in found - {REPORT_FILE, "README.md"} if not n.endswith(".index.json"))


def _prune_empty_dirs(root: Path) -> None:
    for folder in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()

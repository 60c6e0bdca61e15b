"""The one entry point for the export job: `hfexport.export(source, ...)`, chaining the stages

    resolve → fetch → plan → export (+ validate, in each backend's process) → package

Each stage is a module with a small dataclass contract the next one reads; `publish.py` (the PR)
reads the `Report` this returns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from .backends import parse_backends
from .export import DEFAULT_TIMEOUT_S, Progress, run_backends
from .fetch import fetch
from .package import Report, package, staging_folder
from .plan import ExportPlan, make_plan
from .resolve import resolve


def export(
    source: str,
    out: str | Path | None = None,
    *,
    backends: str | list[str] | None = None,
    revision: str | None = None,
    task: str = "auto",
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
    token: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: Progress | None = None,
    adjust_plan: Callable[[ExportPlan], ExportPlan] | None = None,
) -> Report:
    """Export a model folder or Hub repo to every backend, validate each export, and write them out.

    Args:
        source: a local model folder, or a Hub repo id (downloaded at the sha `revision` resolves to).
        out: output folder (default `./hfexport-out/<name>`); replaced whole if it is an earlier output.
        backends: names or `"dynamo,onnx"`; default dynamo, onnx and executorch.
        revision: branch, tag or sha of a Hub repo.
        task: `"auto"` or a name from `hfexport.plan.TASKS`.
        allow_pickle: accept pickled weights when no safetensors exist.
        trust_remote_code: accept a model whose code lives in its repo.
        token: Hub token (default: the client's, e.g. `HF_TOKEN`). Never printed or recorded.
        timeout_s: per backend.
        progress: `progress(backend, message)` callback.
        adjust_plan: edit the plan before exporting (e.g. `lambda p: replace(p, sample=Shape(1, 8))`).

    Returns:
        The `Report` (also written to `<out>/hfexport-report.json`). `report.ok` is False if any
        backend that ran failed; its files are then absent and its entry holds the error.

    Raises:
        HfExportError subclasses for bad input, before anything is written.
    """
    names = parse_backends(backends)
    resolved = resolve(source, revision=revision, token=token)
    fetched = fetch(resolved, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code, token=token)
    plan = make_plan(fetched.model_dir, names, task=task, trust_remote_code=trust_remote_code)
    if adjust_plan is not None:
        plan = adjust_plan(dataclasses.replace(plan))
    out_dir = Path(out) if out is not None else Path("hfexport-out") / Path(resolved.ref).name
    with staging_folder(out_dir) as staging:
        results = run_backends(fetched, plan, staging, timeout_s=timeout_s, progress=progress)
        return package(staging, out_dir, resolved, plan, results)

"""The variant pass of one backend's export, in its worker: each variant the plan asks for is
derived by its recipe (`Variant.make`, named in `hfexport/variants.py`), judged against the eager
model on inputs no trace or calibration saw, timed against the fp32 program, and packaged beside it
— or reported failed and kept out of the folder. `rejudge_published` judges a generation variant
again on its file as the loaders run it.
"""

from __future__ import annotations

import traceback
from pathlib import Path

from typing import TYPE_CHECKING, Any

from ..report import Shape, VariantResult, describe_error

if TYPE_CHECKING:
    from collections.abc import Callable

    from .splits import Exporting, ExportSplit


def _reported(figures: dict[str, float]) -> dict:
    """Quality figures as the report keeps them: 6 decimals, a non-finite one as its text (JSON has no NaN)."""
    import math

    return {k: round(v, 6) if math.isfinite(v) else str(v) for k, v in figures.items()}


def rejudge_published(
    variant: VariantResult, split: ExportSplit, run, model, traced: dict, prompt: dict, out_dir: Path
) -> None:
    """A generation variant judged again on its published file (renamed for the loaders): its
    figures are replaced by that file's, and a file that now misses its thresholds is removed."""
    from ..report import Status
    from ..variants import misses
    from .validate import generation_quality

    try:
        figures = generation_quality(model, split, run, traced, prompt)
        missed = misses(figures, variant.thresholds)
    except Exception as e:
        missed = [f"{type(e).__name__}: {describe_error(e)}"]
        figures = {}
    variant.quality = _reported(figures) or variant.quality
    if missed:
        if variant.file:
            (out_dir / variant.file).unlink(missing_ok=True)
        variant.status, variant.file = Status.FAILED, None
        variant.error = "as published for the loaders: " + ", ".join(missed) + " (not published)"


# Calibration and sensitivity inputs: a shape and seeds of their own, never the validation inputs'.
CALIBRATION = Shape(batch=4, sequence=16)


def run_variants(
    split: ExportSplit,
    exporting: Exporting,
    model: Any,
    loaded: Any,
    out_dir: Path,
    sample: dict,
    other: dict,
    *,
    calibration: list[dict],
    stage: Callable[[str], None],
) -> list[VariantResult]:
    """Derive each variant the plan asks for and this backend offers (`hfexport.variants`), judge it
    against eager fp32 on the validation inputs (another shape than trace and calibration), time
    it against the fp32 artifact on the same runtime, and keep its file only if it passed.

    An export of several components (an encoder-decoder's encoder, prefill and decode; an image-text
    model's vision encoder, token embeddings and decoder) gets the variants that transform each
    saved program (`Variant.per_component`), gathered in a folder of their own (`onnx/quantized/`)
    that `ExportedModel` loads as it loads the fp32 one."""
    import shutil
    import tempfile

    import torch
    from transformers.exporters import ExportedModel

    from ..report import Status
    from ..variants import VARIANTS, VariantJob, misses, thresholds_for, variants_of
    from .validate import generation_quality, greedy_loop, paired_speedup, quality_figures

    plan, backend = split.plan, exporting.backend
    wanted = variants_of(backend.name, plan.variants)
    single = not split.generates
    components = list(split.components)

    def make_config():
        return split.program_config(exporting, sample)

    def export(of_model, inputs: dict, config):
        return split.export_program(exporting, of_model, inputs, config)

    base_bytes = sum(p.stat().st_size for p in out_dir.iterdir() if p.is_file() and p.suffix != ".json")
    if single:
        with torch.inference_mode():
            reference = model(**other)
    results = []
    shared = tempfile.TemporaryDirectory(prefix="variants-shared-")  # what several variants of this export use
    for variant in wanted:
        stage(f"variant {variant.kind}")
        thresholds = thresholds_for(variant.kind, plan.min_quality)
        outcome = VariantResult(variant.kind, Status.FAILED, thresholds=thresholds)
        if not single and not variant.generation:
            outcome.status, outcome.error = (
                Status.SKIPPED,
                f"no {variant.kind} variant of {backend.name} generation exports yet",
            )
            results.append(outcome)
            continue
        if single and not variant.single:
            outcome.status, outcome.error = Status.SKIPPED, f"{variant.kind} is for decoder LLMs (generation exports)"
            results.append(outcome)
            continue
        if len(components) > 1 and not variant.per_component:
            each = ", ".join(str(v.kind) for v in VARIANTS.values() if v.backend == backend.name and v.per_component)
            outcome.status, outcome.error = (
                Status.SKIPPED,
                (
                    f"{variant.kind} re-exports the model as one program; an export of several components "
                    f"({', '.join(components)}) gets the variants derived from each saved program "
                    f"({each or 'none on ' + backend.name})"
                ),
            )
            results.append(outcome)
            continue
        with tempfile.TemporaryDirectory(prefix=f"variant-{variant.kind}-") as work_name:
            work = Path(work_name)

            def job_for(component: str) -> VariantJob:
                (work / component).mkdir()
                return VariantJob(
                    model,
                    dict(sample),
                    calibration,
                    out_dir,
                    work / component,
                    make_config,
                    export,
                    component,
                    shared_dir=Path(shared.name),
                )

            try:
                if len(components) == 1:
                    job = job_for(components[0])
                    folder, options = variant.make(job), job.options
                else:
                    folder, options = _derive_per_component(variant, job_for, components, out_dir, work)
                outcome.kept_in_float = list(options.get("kept_in_float", []))
                outcome.runtime_ops = list(options.get("runtime_ops", []))
                candidate: Any = ExportedModel.from_pretrained(folder, device=backend.runner_device)
                if single:
                    dtype = options.get("float_inputs")  # a float16 program takes float16 pixels/audio
                    feed = {
                        k: v.to(getattr(torch, dtype)) if dtype and v.is_floating_point() else v
                        for k, v in other.items()
                    }
                    with torch.inference_mode():
                        figures = quality_figures(plan.task, reference, candidate(**feed), other)
                    speedup = paired_speedup(loaded, candidate, other, feed)
                else:  # judged on the tokens it generates, timed over the whole greedy loop
                    traced = {name: set(r.metadata.kwargs) for name, r in candidate.runners.items()}

                    def runner(of):
                        return lambda component, **kwargs: of.runners[component](**kwargs)

                    dtype = getattr(torch, options.get("float_inputs", "float32"))
                    figures = generation_quality(model, split, runner(candidate), traced, other, cache_dtype=dtype)
                    n = plan.validation.new_tokens
                    speedup = paired_speedup(
                        lambda: greedy_loop(split, runner(loaded), traced, other, model.config, n),
                        lambda: greedy_loop(
                            split, runner(candidate), traced, other, model.config, n, cache_dtype=dtype
                        ),
                        {},
                    )
                candidate = None  # the program released before the next variant loads
                outcome.quality = _reported(figures)
                outcome.speedup = round(speedup, 3)
                if len(components) == 1:
                    file = variant.file_for(components[0])
                    packed = variant.package(folder, work, components[0], file)
                    outcome.size = sum(p.stat().st_size for p in packed)
                else:  # the folder as a whole, its programs laid out as the fp32 ones are
                    if backend.layout is not None:
                        backend.layout(folder, components, None)
                    file = f"{variant.folder}/{components[0]}{exporting.exporter.program_suffix}"
                    packed = [folder.rename(work / variant.folder)]
                    outcome.size = sum(p.stat().st_size for p in packed[0].iterdir() if p.suffix != ".json")
                outcome.size_share = round(outcome.size / base_bytes, 4) if base_bytes else None
                missed = misses(figures, thresholds)
                if missed:
                    outcome.error = "below its quality thresholds: " + ", ".join(missed) + " (not published)"
                else:
                    for path in packed:
                        shutil.move(path, out_dir / path.name)
                    outcome.file = file
                    outcome.status = Status.OK
            except Exception as e:  # a variant's failure is its own: the fp32 export stands
                outcome.error = f"{type(e).__name__}: {describe_error(e)}"
                traceback.print_exc()
        results.append(outcome)
    shared.cleanup()
    return results


def _derive_per_component(variant, job_for, components: list[str], out_dir: Path, work: Path) -> tuple[Path, dict]:
    """`variant` of each component's program, gathered in one folder beside the fp32 export's
    manifest and configs, which `ExportedModel` loads as it loads the fp32 export. Returns the
    folder and the options of all components (nodes kept in float, runtime operators)."""
    import shutil

    gathered = work / "gathered"
    gathered.mkdir()
    programs = tuple(f"{component}." for component in components)
    for path in out_dir.iterdir():
        if path.is_file() and not path.name.startswith(programs):  # export.json, config.json, generation_config.json
            shutil.copy(path, gathered / path.name)
    options: dict = {"kept_in_float": [], "runtime_ops": []}
    for component in components:
        job = job_for(component)
        folder = variant.make(job)
        for path in folder.iterdir():
            if path.name.startswith(f"{component}."):
                shutil.copy(path, gathered / path.name)
        options["kept_in_float"] += job.options.get("kept_in_float", [])
        options["runtime_ops"] = sorted({*options["runtime_ops"], *job.options.get("runtime_ops", [])})
    return gathered, options

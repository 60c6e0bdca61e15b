"""The variant pass of one backend's export, in its worker: each variant the plan asks for is
derived by its recipe (`Variant.make`, named in `hfexport/variants.py`), judged against the eager
model on inputs no trace or calibration saw, timed against the fp32 program, and packaged beside it
— or reported failed and kept out of the folder. `rejudge_published` judges a generation variant
again on its file as the loaders run it.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import describe_error
from ..report import Figure, Shape, Status, VariantResult
from ..variants import VARIANTS, Derived, VariantJob, misses, thresholds_for, variants_of, why_not
from .caches import conform
from .memory import return_freed
from .validate import generation_quality, greedy_loop, paired_speedup, quality_figures

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..variants import Derived, Variant
    from .inputs import Judged
    from .splits import Exporting, ExportSplit
    from .validate import Reference


# Calibration and sensitivity inputs: a shape and seeds of their own, never the validation inputs'.
CALIBRATION = Shape(batch=4, sequence=16)


def reported(figures: dict[str, float]) -> dict:
    """Quality figures as the report keeps them: 6 decimals, a non-finite one as its text (JSON has no NaN)."""
    import math

    return {k: round(v, 6) if math.isfinite(v) else str(v) for k, v in figures.items()}


def rejudge_published(
    variant: VariantResult,
    split: ExportSplit,
    run,
    reference: Reference,
    traced: dict,
    prompt: dict,
    judged: Judged,
    out_dir: Path,
) -> None:
    """A generation variant judged again on its published file (renamed for the loaders): its
    figures are replaced by that file's, and a file that now misses its thresholds is removed."""

    try:
        figures = generation_quality(reference, split, run, traced, prompt, judged)
        missed = misses(figures, variant.thresholds)
    except Exception as e:
        missed = [f"{type(e).__name__}: {describe_error(e)}"]
        figures = {}
    variant.quality = reported(figures) or variant.quality
    if missed:
        for file in variant.published_files:
            (out_dir / file).unlink(missing_ok=True)
        variant.status, variant.file, variant.files = Status.FAILED, None, []
        variant.error = "as published for the loaders: " + ", ".join(missed) + " (not published)"


def run_variants(
    split: ExportSplit,
    exporting: Exporting,
    reference: Reference,
    load_exported: Callable[[], Any],
    out_dir: Path,
    sample: dict,
    other: dict,
    *,
    judged: Judged | None,
    calibration: list[dict],
    stage: Callable[[str], None],
) -> list[VariantResult]:
    """Derive each variant the plan asks for and this backend offers (`hfexport.variants`), judge it
    against eager fp32 on the validation inputs (another shape than trace and calibration), time
    it against the fp32 artifact on the same runtime, and keep its file only if it passed.

    An export of several components (an encoder-decoder's encoder and decoder; an image-text
    model's vision encoder, token embeddings and decoder) gets the variants that transform each
    saved program (`Variant.per_component`), gathered in a folder of their own (`onnx/quantized/`)
    that `ExportedModel` loads as it loads the fp32 one."""
    import tempfile

    plan, backend = split.plan, exporting.backend
    judge = _Judge(split, reference, load_exported, other, judged, backend.runner_device)
    base_bytes = fp32_bytes(out_dir, [])
    results = []
    shared = tempfile.TemporaryDirectory(prefix="variants-shared-")  # what several variants of this export use
    context = _Attempts(split, exporting, reference, out_dir, sample, calibration, judge, base_bytes, Path(shared.name))
    for variant in variants_of(backend.name, plan.variants, split.generates):
        return_freed()  # what validation or the last variant freed: each variant starts near the floor
        stage(f"variant {variant.kind}")
        outcome = VariantResult(variant.kind, Status.FAILED, thresholds=thresholds_for(variant.kind, plan.min_quality))
        skipped = why_skipped(variant, split, backend.name)
        if skipped:
            outcome.status, outcome.error = Status.SKIPPED, skipped
            results.append(outcome)
            continue
        with tempfile.TemporaryDirectory(prefix=f"variant-{variant.kind}-") as work_name:
            attempt = 0
            while _attempt(variant, attempt, Path(work_name), outcome, context):
                attempt += 1  # the recipe's next, slower and more accurate settings
        results.append(outcome)
    shared.cleanup()
    return results


@dataclass
class _Attempts:
    """What every attempt at a variant shares: the export it derives from and the judge."""

    split: ExportSplit
    exporting: Exporting
    reference: Reference
    out_dir: Path
    sample: dict
    calibration: list[dict]
    judge: _Judge
    base_bytes: int
    shared_dir: Path


def _attempt(variant: Variant, attempt: int, work_dir: Path, outcome: VariantResult, context: _Attempts) -> bool:
    """Make `variant` with its recipe's `attempt`-th settings, judge it, and publish it if it meets
    its floors (into `outcome`). True: it missed them and slower, more accurate settings exist (try
    those next); False: done, published or not."""
    import shutil

    split, exporting, reference, sample = context.split, context.exporting, context.reference, context.sample
    components, backend = list(split.components), exporting.backend
    work = work_dir / f"attempt-{attempt}"
    work.mkdir()

    def job_for(component: str) -> VariantJob:
        (work / component).mkdir()
        return VariantJob(
            reference.model,  # on the meta device unless a variant needs it (`Variant.needs_model`)
            dict(sample),
            context.calibration,
            context.out_dir,
            work / component,
            lambda: split.program_config(exporting, sample),
            lambda of_model, inputs, config: split.export_program(exporting, of_model, inputs, config),
            component,
            shared_dir=context.shared_dir,
            attempt=attempt,
            fast_only=split.generates and Figure.DECODE_SPEEDUP in outcome.thresholds,
        )

    try:
        if len(components) == 1:
            derived = variant.make(job_for(components[0]))
        else:
            derived = _derive_per_component(variant, job_for, components, context.out_dir, work)
        outcome.kept_in_float, outcome.runtime_ops = list(derived.kept_in_float), list(derived.runtime_ops)
        outcome.settings = derived.settings
        figures, ratios = context.judge(derived)
        speedup = ratios[len(ratios) // 2]
        outcome.quality, outcome.speedup = reported(figures), round(speedup, 3)
        outcome.speedup_range = [round(ratios[0], 2), round(ratios[-1], 2)]
        gated = {**figures, Figure.DECODE_SPEEDUP: speedup} if split.generates else figures
        missed = misses(gated, outcome.thresholds)
        if missed and derived.more_accurate:
            print(f"{variant.kind} ({derived.settings}) missed {', '.join(missed)}: trying more accurate settings")
            shutil.rmtree(work)
            return True
        if len(components) == 1 or split.loaders:
            # Each program a file beside the fp32 ones (`decode_quantized.onnx`), which the
            # loaders' layout then names as theirs (`decoder_model_merged_quantized.onnx`).
            files = [variant.file_for(c) for c in components]
            assert variant.package is not None, f"{variant.backend}'s {variant.kind} is laid out by its backend's job"
            packed = [p for c, f in zip(components, files) for p in variant.package(derived.folder, work, c, f)]
            file, outcome.files = files[0], files if len(files) > 1 else []
            outcome.size = sum(p.stat().st_size for p in packed)
        else:  # the folder as a whole, its programs laid out as the fp32 ones are
            if backend.layout is not None:
                backend.layout(derived.folder, components, None)
            file = f"{variant.folder}/{components[0]}{exporting.exporter.program_suffix}"
            packed = [derived.folder.rename(work / variant.folder)]
            outcome.size = sum(p.stat().st_size for p in packed[0].iterdir() if p.suffix != ".json")
        outcome.size_share = round(outcome.size / context.base_bytes, 4) if context.base_bytes else None
        if missed:
            outcome.error = "below its quality thresholds: " + ", ".join(missed) + " (not published)"
            if derived.slower_not_made:
                outcome.error += "; its more accurate settings decode slower than fp32 on ONNX Runtime's CPU kernels"
        else:
            for path in packed:
                shutil.move(path, context.out_dir / path.name)
            outcome.file, outcome.status = file, Status.OK
    except Exception as e:  # a variant's failure is its own: the fp32 export stands
        outcome.error = f"{type(e).__name__}: {describe_error(e)}"
        traceback.print_exc()
    return False


def fp32_bytes(out_dir: Path, variants: list[VariantResult]) -> int:
    """The bytes of the fp32 programs in `out_dir`: every file but the descriptors and the variants'."""
    theirs = {f for v in variants for f in v.published_files}
    programs = [p for p in out_dir.iterdir() if p.is_file() and p.suffix != ".json" and p.name not in theirs]
    return sum(p.stat().st_size for p in programs)


def rebase_shares(variants: list[VariantResult], out_dir: Path) -> None:
    """Each variant's share of the fp32 programs' bytes as published: the loaders' layout rewrites
    the fp32 graphs (without the exporter's debug records) after the variants were sized."""
    base = fp32_bytes(out_dir, variants)
    for variant in variants:
        if variant.size and base:
            variant.size_share = round(variant.size / base, 4)


def why_skipped(variant: Variant, split: ExportSplit, backend: str) -> str | None:
    """Why `variant` is not derived from this split's export, or None: it is."""

    why = why_not(variant, split.generates, backend)
    if why is not None:
        return why
    if len(split.components) > 1 and not variant.per_component:
        each = ", ".join(str(v.kind) for v in VARIANTS.values() if v.backend == backend and v.per_component)
        return (
            f"{variant.kind} re-exports the model as one program; an export of several components "
            f"({', '.join(split.components)}) gets the variants derived from each saved program "
            f"({each or 'none on ' + backend})"
        )
    return None


class _Judge:
    """A derived variant's quality against eager fp32 and its speed against the fp32 program, on the
    validation inputs: one forward for a single graph, the whole greedy loop for generation."""

    def __init__(
        self,
        split: ExportSplit,
        reference: Reference,
        load_exported: Callable[[], Any],
        other: dict,
        judged: Judged | None,
        device: str | None,
    ):
        self.split, self.reference, self.other, self.device = split, reference, other, device
        self.judged = judged  # a generation variant's teacher-forced set (`inputs.Judged`)
        self.load_exported = load_exported  # the fp32 program, loaded again for each variant's timing

    def __call__(self, derived: Derived) -> tuple[dict[str, float], list[float]]:
        import torch
        from transformers.exporters import ExportedModel

        split, reference, other = self.split, self.reference, self.other
        # The recipe's float graph is freed by now, not yet handed back: the candidate and the fp32
        # program (for the paired timing) are loaded where it was.
        return_freed()
        candidate = ExportedModel.from_pretrained(derived.folder, device=self.device)
        dtype = getattr(torch, derived.float_inputs or "float32")  # a float16 program takes float16 pixels/audio
        if not split.generates:
            feed = {k: v.to(dtype) if v.is_floating_point() else v for k, v in other.items()}
            with torch.inference_mode():
                figures = quality_figures(split.plan.task, reference.forward(other), candidate(**feed), other)
            return figures, paired_speedup(self.load_exported(), candidate, other, feed)
        traced = {name: set(r.metadata.kwargs) for name, r in candidate.runners.items()}

        def runner(of):
            return lambda component, **kwargs: of.runners[component](**conform(of.runners[component], kwargs))

        n = split.plan.validation.new_tokens
        assert self.judged is not None, "a generation export's variants are judged on a Judged set"
        figures = generation_quality(reference, split, runner(candidate), traced, other, self.judged, cache_dtype=dtype)
        base = self.load_exported()
        ratios = paired_speedup(
            lambda: greedy_loop(split, runner(base), traced, other, reference.config, n),
            lambda: greedy_loop(split, runner(candidate), traced, other, reference.config, n, cache_dtype=dtype),
            {},
        )
        return figures, ratios


def _derive_per_component(variant: Variant, job_for, components: list[str], out_dir: Path, work: Path) -> Derived:
    """`variant` of each component's program, gathered in one folder beside the fp32 export's
    manifest and configs, which `ExportedModel` loads as it loads the fp32 export. Returns the
    folder with what all components' recipes found (nodes kept in float, runtime operators)."""
    import shutil

    gathered = work / "gathered"
    gathered.mkdir()
    programs = tuple(f"{component}." for component in components)
    for path in out_dir.iterdir():
        if path.is_file() and not path.name.startswith(programs):  # export.json, config.json, generation_config.json
            shutil.copy(path, gathered / path.name)
    kept: list[str] = []
    ops: set[str] = set()
    for component in components:
        derived = variant.make(job_for(component))
        for path in derived.folder.iterdir():
            if path.name.startswith(f"{component}."):
                shutil.copy(path, gathered / path.name)
        kept += derived.kept_in_float
        ops |= set(derived.runtime_ops)
    # Every component is made with the same attempt's settings: the last one's say them all.
    return Derived(
        gathered,
        kept_in_float=kept,
        runtime_ops=sorted(ops),
        settings=derived.settings,
        more_accurate=derived.more_accurate,
    )

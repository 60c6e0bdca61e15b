"""One backend's job, as named stages: load, export and save, eager's reference, validate, variants,
the loaders' layout (with the web runtimes), and the record of what was made.

`worker/__main__.py` runs the process (imports, forks, timeouts) and calls `run_job`; what the
export is made of (its components, how each is exported and judged) is the plan's split's
(`splits.py`). Each stage names itself through `stage(...)`, which the report's timings and peaks
read (`BackendResult.timings`, `stage_peaks_mb`).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, UnsupportedArchitectureError, describe_error
from ..messages import WorkerJob
from ..pipeline.plan import refuse_made_up_weights
from ..report import ArtifactFile, BackendResult, ExportPlan, Split, Status, Validation, VariantResult
from ..settings import web_checks
from ..variants import default_kinds, variants_of
from ..versions import runtime_versions
from .derive import CALIBRATION, rebase_shares, rejudge_published, run_variants, why_skipped
from .inputs import as_dtype
from .memory import return_freed
from .onnx_variants import runtime_ops
from .splits import Exporting, split_for
from .validate import Reference, compare_generation, loaders_run
from .web_check import check_on_web

if TYPE_CHECKING:
    from ..backends import Backend
    from .splits import Exporting
    from .validate import Reference

Stage = Callable[[str], None]


@dataclass
class Job:
    """What every stage reads: the job, its backend, the plan as this backend exports it, its split
    and folders, and the result the stages fill in."""

    job: WorkerJob
    backend: Backend
    result: BackendResult
    stage: Stage
    plan: ExportPlan
    split: Any  # a `splits.SingleGraph` or one of its subclasses
    model_dir: Path
    out_dir: Path


def run_job(job: WorkerJob, backend: Backend, result: BackendResult, stage: Stage) -> None:
    """Export, save, reload and validate one backend, then derive its variants and lay it out for
    its loaders, filling in `result`."""
    import torch

    torch.manual_seed(0)
    plan = job.plan.with_fixed_image_size() if backend.fixed_image_size else job.plan
    run = Job(job, backend, result, stage, plan, split_for(plan), Path(job.model_dir), Path(job.out_dir))
    # The checkpoint's own dtype where the backend's runtime serves it: a bfloat16 model is not doubled.
    result.dtype, result.dtype_note = backend.precision(plan.source_dtype)
    dtype = getattr(torch, result.dtype)
    model = _load_model(run, dtype)
    if backend.llm_runner is not None and run.split.name == Split.DECODER:
        _through_llm_runner(run, model)
        return
    sample = as_dtype(run.split.inputs(run.model_dir, model.config, plan.sample, seed=0), dtype)
    other = as_dtype(run.split.inputs(run.model_dir, model.config, plan.validation, seed=1), dtype)
    exporting, traced, export_seconds = _export_and_save(run, model, sample)

    # Eager's side of every check, computed once; the weights go before the programs are loaded
    # unless a variant re-exports the model.
    stage("eager reference")
    split = run.split
    asked = variants_of(backend.name, plan.variants, split.generates)
    wanted = [v for v in asked if not why_skipped(v, split, backend.name)]
    reference = Reference(model, split, traced)
    # A generation variant is judged teacher-forced on real text (`inputs.Judged`), built once here.
    judged = split.judged(run.model_dir, model.config, other) if wanted and split.generates else None
    if judged is not None:
        judged.prompt = as_dtype(judged.prompt, dtype)
    reference.prepare(sample, other, judged)
    if not any(v.needs_model for v in wanted):
        reference.release()
    del model

    validation, components, load_exported, validate_seconds = _validate(
        run, exporting, reference, traced, sample, other
    )
    if plan.variants and validation.passed:
        _variants(run, exporting, reference, load_exported, sample, other, judged)
    if validation.passed and backend.layout is not None:
        _lay_out(run, components, validation, reference, traced, other, judged)

    files = sorted(p for p in run.out_dir.rglob("*") if p.is_file())
    result.status = Status.OK if validation.passed else Status.FAILED
    result.error = validation.first_problem()
    result.files = [ArtifactFile(str(p.relative_to(run.out_dir)), p.stat().st_size) for p in files]
    result.export_seconds = round(export_seconds, 2)
    result.validate_seconds = round(validate_seconds, 2)
    result.components = components
    result.validation = validation
    result.versions = runtime_versions((*exporting.exporter.required_packages, *backend.packages))


def _load_model(run: Job, dtype: Any) -> Any:
    """Stage "loading model": the eager model in `dtype`, refused where its weights would be made up."""
    import transformers

    run.stage("loading model")
    plan = run.plan
    model_class = getattr(transformers, plan.model_class, None)
    if model_class is None:  # remote code: the plan only exists if it was trusted
        model_class = getattr(transformers, plan.auto_class or "AutoModel")
    model, loading = model_class.from_pretrained(
        run.model_dir,
        dtype=dtype,
        trust_remote_code=plan.trust_remote_code,
        use_safetensors=run.job.use_safetensors,
        output_loading_info=True,
    )
    model = model.eval()
    refuse_made_up_weights(plan, loading.get("missing_keys") or [])
    run.split.prepare(model)
    layout = getattr(run.split, "cache_layout", None)
    if layout is not None and not layout.states:
        run.result.cache_layers = [list(layout.attention[i]) for i in sorted(layout.attention)]
    return model


def _through_llm_runner(run: Job, model: Any) -> None:
    """A decoder the runtime's own LLM runner drives (`Backend.llm_runner`): exported as that runner reads it."""
    assert run.backend.llm_runner is not None
    module, _, function = run.backend.llm_runner.partition(":")
    runner = importlib.import_module(module)
    getattr(runner, function)(run.split, run.backend, model, run.model_dir, run.out_dir, run.result, run.stage)
    files = sorted(p for p in run.out_dir.rglob("*") if p.is_file())
    run.result.files = [ArtifactFile(str(p.relative_to(run.out_dir)), p.stat().st_size) for p in files]
    run.result.versions = runtime_versions(("torch", *run.backend.packages))


def _export_and_save(run: Job, model: Any, sample: dict[str, Any]) -> tuple[Exporting, dict[str, set[str]], float]:
    """Stages "exporting" and "saving". Returns how it was exported, each component's traced
    inputs, and the export's seconds."""
    import torch

    run.stage("exporting")
    started = time.perf_counter()
    exporting = Exporting(run.plan, run.backend)
    with torch.no_grad():
        try:
            exported = run.split.export(exporting, model, sample)
        except Exception as error:
            _refuse_if_eager_fails(run, model, sample, error)
            raise
    _refuse_missing_kernels(exported)
    export_seconds = time.perf_counter() - started
    run.stage("saving")
    exported.save_pretrained(run.out_dir)
    if run.backend.generation_fusions and run.split.generates:  # the operators its fused graphs run
        run.result.runtime_ops = sorted({op for c in exported.components.values() for op in runtime_ops(c.program)})
    traced = {name: set(component.metadata.kwargs) for name, component in exported.components.items()}
    return exporting, traced, export_seconds


def _refuse_missing_kernels(exported: Any) -> None:
    """Each ExecuTorch program's operators have a kernel in ExecuTorch's runtime: where one has none,
    the runtime refuses the whole method with a bare code ("Failed to load method forward, error:
    0x:14") and names the operator only on its own stderr. Measured: Qwen2.5-VL's vision encoder
    undoes its window order with `argsort` over int64, and the runtime has no `aten::sort` kernel.

    Raises:
        UnsupportedArchitectureError: naming each component's operators the runtime lacks.
    """
    programs = {
        name: plan
        for name, component in exported.components.items()
        if (plan := getattr(component.program, "executorch_program", None)) is not None
    }
    if not programs:
        return
    from executorch.extension.pybindings import portable_lib

    kernels = set(portable_lib._get_operator_names())
    missing = {
        name: sorted(
            {".".join(filter(None, (op.name, op.overload))) for m in plan.execution_plan for op in m.operators}
            - kernels
        )
        for name, plan in programs.items()
    }
    said = "; ".join(f"{', '.join(ops)} (in {name})" for name, ops in missing.items() if ops)
    if said:
        raise UnsupportedArchitectureError(
            f"The ExecuTorch program calls operators ExecuTorch's runtime has no kernel for: {said}, so the "
            "runtime cannot load it.",
            "Export it with dynamo or onnx; an app could run the program only by registering these kernels itself.",
        )


def _refuse_if_eager_fails(run: Job, model: Any, sample: dict[str, Any], error: Exception) -> None:
    """After a failed export of a single graph: whether the model's own forward fails on the same
    inputs, in transformers, with no export involved. Then the checkpoint is the cause, and no export
    of it can be right (measured: an OWLv2 whose projection_dim differs from its text width fails in
    eager with the export's own message, "einsum(): subscript d has size 16 … previously seen 32").

    Raises:
        ConfigError: naming the model's own error, where eager fails too.
    """
    import torch
    import transformers

    if run.split.name != Split.SINGLE:
        return
    try:
        with torch.no_grad():
            model(**sample)
    except Exception as eager:  # noqa: BLE001  (the model's own failure is the answer)
        raise ConfigError(
            f"{type(model).__name__} does not run on this checkpoint in transformers {transformers.__version__} "
            f"itself, with no export involved: {type(eager).__name__}: {describe_error(eager)[:300]}",
            "Fix config.json so that the model runs in transformers (its sizes as the model's documentation "
            "says they must relate), then export again.",
        ) from error


def _validate(
    run: Job,
    exporting: Exporting,
    reference: Reference,
    traced: dict[str, set[str]],
    sample: dict[str, Any],
    other: dict[str, Any],
) -> tuple[Validation, list[str], Callable[..., Any], float]:
    """Stage "validating", on the files as a user loads them. Returns the validation, the
    components, how to load the export again (for the variants) and the seconds it took."""
    from transformers.exporters import ExportedModel

    run.stage("validating")
    started = time.perf_counter()
    result, backend, plan = run.result, run.backend, run.plan
    # The exporter class's own facts: its programs' suffix, whether loading them runs pickled code
    # (a `.pt2`), the packages it exports with. A config naming the repo's code needs trust too.
    exporter = exporting.exporter
    result.trust_remote_code = exporter.requires_trust_remote_code

    def load_exported(**options: Any) -> Any:
        return ExportedModel.from_pretrained(
            run.out_dir,
            trust_remote_code=result.trust_remote_code or plan.trust_remote_code,
            device=backend.runner_device,
            **options,
        )

    # Opened to check its outputs, not to time them (`Backend.checking_options`).
    loaded = load_exported(**backend.checking_runner_options())
    validation = Validation(tolerance=backend.tolerance[result.dtype or "float32"])
    validation.checks.extend(run.split.validate(reference, loaded, traced, sample, other))
    components = list(loaded.components)
    result.inputs = {name: list(runner.metadata.kwargs) for name, runner in loaded.runners.items()}
    result.programs = {c: f"{c}{exporter.program_suffix}" for c in components}
    # The program's runtime copy of the weights goes too: each variant is built without it and then
    # timed against a fresh one (beside a quantizer's copy it put a 135 M model's peak at 4.5x fp32).
    del loaded
    return validation, components, load_exported, time.perf_counter() - started


def _variants(
    run: Job,
    exporting: Exporting,
    reference: Reference,
    load_exported: Callable[..., Any],
    sample: dict[str, Any],
    other: dict[str, Any],
    judged: Any,
) -> None:
    """Stage "variants": each one asked for, derived and judged (`derive.run_variants`)."""
    import torch

    run.stage("variants")
    calibration = [run.split.inputs(run.model_dir, reference.config, CALIBRATION, seed=seed) for seed in (2, 3)]
    run.result.measured_on = f"{cpu_name()}, {torch.get_num_threads()} threads"
    run.result.variants = run_variants(
        run.split,
        exporting,
        reference,
        load_exported,
        run.out_dir,
        sample,
        other,
        judged=judged,
        calibration=calibration,
        stage=run.stage,
    )


def _lay_out(
    run: Job,
    components: list[str],
    validation: Validation,
    reference: Reference,
    traced: dict[str, set[str]],
    other: dict[str, Any],
    judged: Any,
) -> None:
    """Stage "laying out for loaders": the files renamed as the loaders read them, run again as they
    run them (each variant's figures from its published files), then stage "web runtimes"."""

    result, out_dir, split, backend = run.result, run.out_dir, run.split, run.backend
    assert backend.layout is not None
    return_freed()  # the variants' graphs and sessions: the layout rewrites the fp32 graph where they were
    run.stage("laying out for loaders")
    result.layout, renamed = backend.layout(out_dir, components, split.loaders)
    result.programs = {c: renamed.get(file, file) for c, file in result.programs.items()}
    for variant in result.variants:
        if variant.file:
            variant.file = renamed.get(variant.file, variant.file)
        variant.files = [renamed.get(f, f) for f in variant.files]
    origin = {new: old for old, new in renamed.items()}

    def variant_paths(variant: VariantResult) -> dict[str, Path] | None:
        """Each component's file of a variant, as the loaders read it (None: not published so)."""
        published_files = variant.published_files
        if len(components) == 1 and len(published_files) == 1:
            return {components[0]: out_dir / published_files[0]}
        if not published_files or not all(f in origin for f in published_files):
            return None
        return {next(c for c in components if origin[f].startswith(f"{c}_")): out_dir / f for f in published_files}

    if result.layout.for_loaders:
        # The graphs the loaders read have other names than the ones validated: run them as they do.
        paths = {c: out_dir / file for c, file in result.programs.items()}
        loaders = loaders_run(paths, reference.config)
        validation.checks.append(compare_generation("loaders_layout", reference, split, loaders, traced, other))
        del loaders  # one session at a time: each variant's below is loaded where the fp32 one was
        return_freed()
        for variant in result.variants:
            # A variant's own figures, from its published files as the loaders run them.
            swapped = variant_paths(variant) if variant.ok else None
            if swapped:
                published = loaders_run({**paths, **swapped}, reference.config, quantized=True)
                assert judged is not None
                rejudge_published(variant, split, published, reference, traced, other, judged, out_dir)
                del published
                return_freed()
    if backend.runs_in_browsers and validation.passed and web_checks():
        run.stage("web runtimes")
        defaults = default_kinds(run.plan.variants, backend.name, split.generates)
        check_on_web(
            result, split, reference, traced, other, judged, out_dir, validation.tolerance, defaults, variant_paths
        )
        return_freed()
    rebase_shares(result.variants, out_dir)


def cpu_name() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo; else what `platform` says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()

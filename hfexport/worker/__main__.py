"""One backend's export and validation, in a process of its own (`python -m hfexport.worker`).

Everything under `hfexport/worker/` runs here, never in the parent: this is where the model's
weights are loaded and traced. `pipeline/export.py` starts `python -m hfexport.worker JOB_DIR`
once per backend, before the job is known:
the worker imports torch, transformers and the exporters first, then waits for a `start` line on
stdin, when `JOB_DIR/job.json` (plan, model folder, backend, output folder) is there. It writes its
current stage to `stage` (the parent shows it as progress) and its outcome, a `BackendResult`, to
`result.json`. A
crash, an OOM kill or a hang therefore costs this backend alone: the parent sees a missing result
or a timeout.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import signal
import sys
import time
import traceback
from pathlib import Path

from ..settings import quiet_noise

_STARTED = time.perf_counter()


def main(job_dir: str) -> int:
    job_path = Path(job_dir)
    marks: list[tuple[str, float]] = [("starting", _STARTED)]
    if quiet_noise():
        from ..logs import quiet_known_noise

        quiet_known_noise()
    _preload()
    marks.append(("waiting for the plan", time.perf_counter()))
    if sys.stdin.readline().strip() != "start":
        return 0  # the parent needed no worker after all (bad input, cached exports)
    job = json.loads((job_path / "job.json").read_text())
    backend_name = job["backend"]
    from ..backends import get_backend
    from ..proc import injected_fault
    from ..report import BackendResult, Status

    # A backend registered outside hfexport is found by importing the module that registered it.
    importlib.import_module(job.get("backend_module") or "hfexport.backends")
    backend = get_backend(backend_name)

    def stage(name: str) -> None:
        """Show progress (the parent reads this file) and time each stage, for the report's profile."""
        (job_path / "stage").write_text(name)
        marks.append((name, time.perf_counter()))

    fault = injected_fault(backend_name)
    if fault == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "hang":
        stage("hanging (test hook)")
        while True:
            time.sleep(60)

    result = BackendResult(backend_name, Status.FAILED, backend.subfolder)
    try:
        run_job(job, backend, result, stage)
    except Exception as e:
        result.status = Status.FAILED
        result.error = f"{type(e).__name__}: {_describe(e)}"
        traceback.print_exc()  # into worker.log: the parent keeps its tail in the report
    result.peak_rss_mb = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    marks.append(("end", time.perf_counter()))
    result.timings = {name: round(end - start, 2) for (name, start), (_, end) in zip(marks, marks[1:])}
    (job_path / "result.json").write_text(json.dumps(result.to_dict(), indent=2))
    return 0


def _preload() -> None:
    """The imports every backend needs, done while the parent is still planning (`export.BackendWorkers`)."""
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from transformers.exporters import AutoHfExporter  # noqa: F401


def _describe(e: BaseException) -> str:
    """The exception's first line, and its causes' (exporters wrap the real error)."""
    parts = []
    while e is not None and len(parts) < 3:
        line = (str(e).strip().splitlines() or [""])[0][:400]
        parts.append(line or type(e).__name__)
        e = e.__cause__
    return " <- ".join(parts)


def run_job(job: dict, backend, result, stage) -> None:
    """Export, save, reload and validate one backend, filling in `result` (a `BackendResult`)."""
    import dataclasses
    import types

    import torch
    import transformers
    from torch.export import Dim
    from transformers.exporters import AutoHfExporter, ExportedModel
    from transformers.exporters.utils import decompose_for_generation

    from ..report import ArtifactFile, ExportPlan, Layout, Status, Validation
    from ..versions import runtime_versions
    from .components import ImageFeatures, TokenEmbeddings, on_embeddings
    from .inputs import build_inputs, speaks_languages
    from .validate import compare_forward, compare_generation, decoder_with_past_run

    torch.manual_seed(0)
    plan = ExportPlan.from_dict(job["plan"])
    if backend.fixed_image_size:
        plan = plan.with_fixed_image_size()
    model_dir = Path(job["model_dir"])
    out_dir = Path(job["out_dir"])

    stage("loading model")
    model_class = getattr(transformers, plan.model_class, None)
    if model_class is None:  # remote code: the plan only exists if it was trusted
        model_class = getattr(transformers, plan.auto_class or "AutoModel")
    model = model_class.from_pretrained(
        model_dir,
        dtype=getattr(torch, plan.dtype),
        trust_remote_code=plan.trust_remote_code,
        use_safetensors=job.get("use_safetensors", True),
    ).eval()
    if plan.mode == "single" and hasattr(model.config, "use_cache"):
        model.config.use_cache = False  # one graph, no cache in or out
    if plan.mode == "generation" and speaks_languages(model.generation_config):
        # Whisper's own generate() first runs a forward to detect the language, which the exporter
        # would capture as the prefill. The language and task go in the decoder prompt explicitly
        # (`inputs.decoder_prompt`), and transformers' base generate() is traced and judged.
        from transformers.generation.utils import GenerationMixin

        model.generate = types.MethodType(GenerationMixin.generate, model)

    sample = build_inputs(model_dir, model.config, plan, plan.sample, seed=0)
    other = build_inputs(model_dir, model.config, plan, plan.validation, seed=1)

    # torch.export Dims, shared by name so every input's batch axis is the same symbol.
    dims: dict[str, Dim] = {}

    def dynamic_shapes_for(inputs: dict) -> dict:
        shapes = {}
        for name, tensor in inputs.items():
            axes = plan.dynamic_axes.get(name, {})
            shapes[name] = {
                int(axis): dims.setdefault(dim, Dim(dim, min=low, max=high))
                for axis, (dim, low, high) in axes.items()
                if int(axis) < tensor.dim()
            } or None
        return shapes

    # ── export ──
    stage("exporting")
    started = time.perf_counter()
    exporter = AutoHfExporter.from_config({"export_format": backend.export_format})

    def make_config():
        config = backend.make_config(dynamic_shapes_for(sample) if plan.mode == "single" else None)
        sized = plan.modality == "audio" or "2" in plan.dynamic_axes.get("pixel_values", {})
        if sized and hasattr(config, "prefer_deferred_runtime_asserts_over_guards"):
            # A conv encoder's output length is a floor division of the samples (or pixels): torch.export
            # cannot prove its guards for every length and would only take multiples of the strides.
            # They hold for any real recording or processed image, so they become checks at run time.
            config = dataclasses.replace(config, prefer_deferred_runtime_asserts_over_guards=True)
        return config

    def export_program(of_model, inputs: dict, config):
        """`of_model` exported the way this plan exports it: one graph, or (a decoder LLM) the decode
        program alone. Variants re-export a quantized or cast copy of the model through it."""
        if plan.mode == "single":
            return exporter.export(of_model, inputs, config)
        # Weights once: the exporter's multi-token decode takes the prompt on an empty cache as well
        # as each new token, so this one program is the whole decoder (no prefill copy of the weights).
        stages = decompose_for_generation(
            of_model, dict(inputs), generation_config=of_model.generation_config, multi_token_decode=True
        )
        decoder, decoder_inputs = stages["decode"]
        if plan.modality == "image-text":
            decoder_inputs = on_embeddings(of_model, decoder_inputs)
        program = exporter.export(decoder, decoder_inputs, config)
        program.components = {"decode": program.components["model"]}
        program.generation_config = of_model.generation_config
        return program

    with torch.no_grad():
        if plan.mode == "single" or plan.components == ["decode"]:
            exported = export_program(model, sample, make_config())
        elif plan.modality == "image-text":
            # The exporters leave the images' features and the tokens' embeddings to the caller:
            # each a graph of its own here, feeding the one decoder over embeddings.
            token_inputs = {"input_ids": sample["input_ids"]}
            graphs = {
                "vision_encoder": exporter.export(
                    ImageFeatures(model), {"pixel_values": sample["pixel_values"][:1]}, backend.make_config(None)
                ),
                "embed_tokens": exporter.export(
                    TokenEmbeddings(model), token_inputs, backend.make_config(dynamic_shapes_for(token_inputs))
                ),
                "decode": export_program(model, sample, make_config()),
            }
            exported = ExportedModel(
                {name: next(iter(graph.components.values())) for name, graph in graphs.items()},
                exporter.export_format,
                config=model.config,
                generation_config=model.generation_config,
            )
        else:
            generate_inputs = dict(sample)
            exported = exporter.export_for_generation(
                model, generate_inputs, backend.make_config(None), generation_config=model.generation_config
            )
            if plan.is_encoder_decoder:
                # 5.24's export_for_generation leaves the encoder out: generate() runs it before the first
                # captured forward. Export it on its own so the components run without the eager model.
                encoder_inputs = {k: v for k, v in sample.items() if k != "decoder_input_ids"}
                encoder = exporter.export(
                    model.get_encoder(), encoder_inputs, backend.make_config(dynamic_shapes_for(encoder_inputs))
                )
                exported.components = {"encoder": encoder.components["model"], **exported.components}
    export_seconds = time.perf_counter() - started

    stage("saving")
    exported.save_pretrained(out_dir)
    del exported

    # ── validate, on the files as a user loads them ──
    stage("validating")
    started = time.perf_counter()
    # A pickled program, or a config that names the repo's code (trusted to get this far), needs trust.
    loaded = ExportedModel.from_pretrained(
        out_dir, trust_remote_code=backend.loads_pickle or plan.trust_remote_code, device=backend.runner_device
    )
    validation = Validation(tolerance=backend.tolerance[plan.dtype])
    if plan.mode == "single":
        validation.checks.append(compare_forward("sample", model, loaded, sample))
        validation.checks.append(compare_forward("other_shape", model, loaded, other))
    else:
        traced = {name: set(runner.metadata.kwargs) for name, runner in loaded.runners.items()}

        def exported_run(component: str, **kwargs):
            return loaded.runners[component](**kwargs)

        # The sample prompt and one of a different batch, length and (encoder-decoder) prompt length.
        validation.checks.append(compare_generation("generation_sample", model, exported_run, traced, sample, plan))
        validation.checks.append(compare_generation("generation_other_shape", model, exported_run, traced, other, plan))
    validate_seconds = time.perf_counter() - started

    if plan.variants and validation.passed:
        stage("variants")
        result.variants = run_variants(
            plan,
            backend,
            model,
            loaded,
            out_dir,
            sample,
            other,
            calibration=[build_inputs(model_dir, model.config, plan, _CALIBRATION, seed=seed) for seed in (2, 3)],
            export=export_program,
            make_config=make_config,
            stage=stage,
        )

    components = list(loaded.components)
    result.inputs = {name: list(runner.metadata.kwargs) for name, runner in loaded.runners.items()}
    if validation.passed and backend.layout is not None:
        stage("laying out for loaders")
        del loaded
        result.layout, renamed = backend.layout(out_dir, components)
        result.programs = {c: renamed[f] for c in components if (f := f"{c}.{backend.suffix}") in renamed}
        for variant in result.variants:
            variant.file = renamed.get(variant.file, variant.file)
        if result.layout == Layout.DECODER_WITH_PAST:
            # The graph the loaders read has other names than the one validated: run it as they do.
            run = decoder_with_past_run(out_dir / result.programs["decode"], model.config)
            validation.checks.append(compare_generation("loaders_layout", model, run, traced, other, plan))
            for variant in result.variants:
                if variant.ok:  # the published file's own figures, from the file as the loaders run it
                    rejudge_published(
                        variant,
                        decoder_with_past_run(out_dir / variant.file, model.config),
                        model,
                        traced,
                        other,
                        plan,
                        out_dir,
                    )

    files = sorted(p for p in out_dir.rglob("*") if p.is_file())
    result.status = Status.OK if validation.passed else Status.FAILED
    result.error = validation.first_problem()
    result.files = [ArtifactFile(str(p.relative_to(out_dir)), p.stat().st_size) for p in files]
    result.export_seconds = round(export_seconds, 2)
    result.validate_seconds = round(validate_seconds, 2)
    result.components = components
    result.validation = validation
    result.versions = runtime_versions(backend.packages)


def _reported(figures: dict[str, float]) -> dict:
    """Quality figures as the report keeps them: 6 decimals, a non-finite one as its text (JSON has no NaN)."""
    import math

    return {k: round(v, 6) if math.isfinite(v) else str(v) for k, v in figures.items()}


def rejudge_published(variant, run, model, traced: dict, prompt: dict, plan, out_dir: Path) -> None:
    """A generation variant judged again on its published file (renamed for the loaders): its
    figures are replaced by that file's, and a file that now misses its thresholds is removed."""
    from ..report import Status
    from ..variants import misses
    from .validate import generation_quality

    try:
        figures = generation_quality(model, run, traced, prompt, plan)
        missed = misses(figures, variant.thresholds)
    except Exception as e:
        missed = [f"{type(e).__name__}: {_describe(e)}"]
        figures = {}
    variant.quality = _reported(figures) or variant.quality
    if missed:
        (out_dir / variant.file).unlink(missing_ok=True)
        variant.status, variant.file = Status.FAILED, None
        variant.error = "as published for the loaders: " + ", ".join(missed) + " (not published)"


# Calibration and sensitivity inputs: a shape and seeds of their own, never the validation inputs'.
from ..report import Shape  # noqa: E402

_CALIBRATION = Shape(batch=4, sequence=16)


def run_variants(
    plan,
    backend,
    model,
    loaded,
    out_dir: Path,
    sample: dict,
    other: dict,
    *,
    calibration: list[dict],
    export,
    make_config,
    stage,
) -> list:
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

    from ..report import Status, VariantResult
    from ..variants import VARIANTS, VariantJob, misses, thresholds_for, variants_of
    from .validate import generation_quality, greedy_loop, paired_speedup, quality_figures

    wanted = variants_of(backend.name, plan.variants)
    single = plan.mode == "single"
    components = list(plan.components)
    base_bytes = sum(p.stat().st_size for p in out_dir.iterdir() if p.is_file() and p.suffix != ".json")
    if single:
        with torch.inference_mode():
            reference = model(**other)
    results = []
    shared = tempfile.TemporaryDirectory(prefix="variants-shared-")  # what several variants of this export use
    for variant in wanted:
        stage(f"variant {variant.kind}")
        thresholds = thresholds_for(variant.kind, plan.min_quality)
        outcome = VariantResult(str(variant.kind), Status.FAILED, thresholds=thresholds)
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
        with tempfile.TemporaryDirectory(prefix=f"variant-{variant.kind}-") as work:
            work = Path(work)

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
                candidate = ExportedModel.from_pretrained(folder, device=backend.runner_device)
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
                    figures = generation_quality(model, runner(candidate), traced, other, plan, cache_dtype=dtype)
                    loop = {
                        "run": None,
                        "traced": traced,
                        "prompt": other,
                        "config": model.config,
                        "is_encoder_decoder": plan.is_encoder_decoder,
                        "new_tokens": plan.validation.new_tokens,
                    }
                    speedup = paired_speedup(
                        lambda: greedy_loop(**{**loop, "run": runner(loaded)}),
                        lambda: greedy_loop(**{**loop, "run": runner(candidate), "cache_dtype": dtype}),
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
                        backend.layout(folder, components)
                    file = f"{variant.folder}/{components[0]}.{backend.suffix}"
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
                outcome.error = f"{type(e).__name__}: {_describe(e)}"
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

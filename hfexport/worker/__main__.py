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

from ..report import WorkerJob, describe_error
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
    job = WorkerJob.from_json((job_path / "job.json").read_text())
    backend_name = job.backend
    from ..backends import get_backend
    from ..proc import injected_fault
    from ..report import BackendResult, Status

    # A backend registered outside hfexport is found by importing the module that registered it.
    importlib.import_module(job.backend_module or "hfexport.backends")
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
        result.error = f"{type(e).__name__}: {describe_error(e)}"
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


def run_job(job: WorkerJob, backend, result, stage) -> None:
    """Export, save, reload and validate one backend, filling in `result` (a `BackendResult`)."""
    import dataclasses
    import types

    import torch
    import transformers
    from torch.export import Dim
    from transformers.exporters import AutoHfExporter, ExportedModel
    from transformers.exporters.utils import decompose_for_generation

    from ..report import ArtifactFile, Layout, Status, Validation
    from ..versions import runtime_versions
    from .components import ImageFeatures, TokenEmbeddings, on_embeddings
    from .derive import CALIBRATION, rejudge_published, run_variants
    from .inputs import build_inputs, speaks_languages
    from .validate import compare_forward, compare_generation, decoder_with_past_run

    torch.manual_seed(0)
    plan = job.plan
    if backend.fixed_image_size:
        plan = plan.with_fixed_image_size()
    model_dir = Path(job.model_dir)
    out_dir = Path(job.out_dir)

    stage("loading model")
    model_class = getattr(transformers, plan.model_class, None)
    if model_class is None:  # remote code: the plan only exists if it was trusted
        model_class = getattr(transformers, plan.auto_class or "AutoModel")
    model = model_class.from_pretrained(
        model_dir,
        dtype=getattr(torch, plan.dtype),
        trust_remote_code=plan.trust_remote_code,
        use_safetensors=job.use_safetensors,
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
            calibration=[build_inputs(model_dir, model.config, plan, CALIBRATION, seed=seed) for seed in (2, 3)],
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

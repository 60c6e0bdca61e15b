"""The worker process of one export: it imports torch, transformers and the exporters once, then
forks a fresh process for each backend's job (`python -m hfexport.worker`).

Everything under `hfexport/worker/` runs in these processes, never in the parent: this is where the
model's weights are loaded and traced. `pipeline/export.py` starts this process before the plan
exists, holding no secret (and, under HFEXPORT_WORKER_USER, as that user). Once imported, it reads
`fork JOB_DIR` lines on stdin. Each forks a child in a session of its own that reads
`JOB_DIR/job.json` (plan, model folder, backend, output folder), logs to `JOB_DIR/worker.log`,
writes its current stage to `stage` (the parent shows it as progress) and its outcome, a
`BackendResult`, to `result.json`, then exits. This process answers `pid PID JOB_DIR` for each fork
and `exit PID CODE` as each child ends (CODE as `subprocess` gives it: -N for signal N), and kills a
child's session on `kill PID` (its pids are its sandbox's, `hfexport/sandbox.py`); it ends
when its stdin closes, and its children with it. A crash, an OOM kill or a hang therefore costs
one backend alone: the parent sees a missing result or a timeout.

Why fork: the imports are most of a small model's worker. Measured on a tiny BERT's ONNX export:
8.5 s of a 15 s worker was imports (5.2 s before the job, 3.3 s of exporter modules on first
use), which a process per backend paid for each backend. Forked, a backend's process starts in
milliseconds with them done, and shares their pages copy-on-write. This process runs no torch
operation itself, so no thread pool is forked half-started.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..proc import die_with_parent
from ..report import BackendResult, describe_error
from ..messages import WorkerJob
from ..settings import FAULT, quiet_noise
from .memory import peak_mb, return_freed

if TYPE_CHECKING:
    from ..backends import Backend

_STARTED = time.perf_counter()


def main(backends: list[str]) -> int:
    """Import (with the exporters of `backends`), then fork a child per `fork JOB_DIR` line until
    stdin closes."""
    if quiet_noise():
        from ..logs import quiet_known_noise

        quiet_known_noise()
    _preload(backends)
    preloaded = (time.perf_counter(), peak_mb())  # when, and at what peak, the imports ended
    children: set[int] = set()
    pending = b""
    while True:
        ready, _, _ = select.select([0], [], [], 0.2)
        if ready:
            chunk = os.read(0, 4096)
            if not chunk:  # the parent is done (or gone): the children go with this process
                return 0
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                command, _, job_dir = line.decode().partition(" ")
                if command == "fork" and job_dir:
                    pid = _fork(Path(job_dir), preloaded)
                    children.add(pid)
                    _say(f"pid {pid} {job_dir}")
                elif command == "kill" and job_dir.isdigit() and int(job_dir) in children:
                    try:  # its session: the job's own children too
                        os.killpg(int(job_dir), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            children.discard(pid)
            _say(f"exit {pid} {os.waitstatus_to_exitcode(status)}")


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _fork(job_path: Path, preloaded: tuple[float, float]) -> int:
    """A child running the job in `job_path`, its output in the job's log; its pid (in this process)."""
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        os.setsid()  # a session of its own: a timeout kills the job's own children too
        die_with_parent()  # a fork does not inherit it
        if os.getppid() != parent:  # this process ended before the line above: so does the job
            os._exit(code)
        log = os.open(job_path / "worker.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        code = run(job_path, preloaded)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run(job_path: Path, preloaded: tuple[float, float]) -> int:
    """Run the job in `job_path` (in a forked child): export, save, validate, and write `result.json`.
    `preloaded`: when the worker process's imports ended, and its peak RSS then (the first stage's)."""
    marks: list[tuple[str, float, float]] = [("starting", _STARTED, 0.0), ("waiting for the plan", *preloaded)]
    job = WorkerJob.from_json((job_path / "job.json").read_text())
    backend_name = job.backend
    from ..backends import get_backend
    from ..errors import HfExportError
    from ..proc import injected_fault
    from ..report import Status

    # A backend registered outside hfexport is found by importing the module that registered it.
    importlib.import_module(job.backend_module or "hfexport.backends")
    backend = get_backend(backend_name)

    def stage(name: str) -> None:
        """Show progress (the parent reads this file); time each stage and note the peak RSS it
        ended at, for the report's profile."""
        (job_path / "stage").write_text(name)
        marks.append((name, time.perf_counter(), peak_mb()))

    fault = injected_fault(backend_name)
    if fault == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "hang":
        stage("hanging (test hook)")
        while True:
            time.sleep(60)

    result = BackendResult(backend_name, Status.FAILED, backend.subfolder)
    try:
        if fault == "fail":
            raise RuntimeError(f"a failure injected by the {FAULT} test hook")
        run_job(job, backend, result, stage)
    except HfExportError as e:  # the model itself is refused: its cause and fix, no traceback
        result.status = Status.FAILED
        result.error = f"{e.cause} Fix: {e.fix}"
    except Exception as e:
        result.status = Status.FAILED
        result.error = f"{type(e).__name__}: {describe_error(e)}"
        traceback.print_exc()  # into worker.log: the parent keeps its tail in the report
    result.peak_rss_mb = peak_mb()
    marks.append(("end", time.perf_counter(), result.peak_rss_mb))
    result.timings = {name: round(end - start, 2) for (name, start, _), (_, end, _) in zip(marks, marks[1:])}
    result.stage_peaks_mb = {name: peak for (name, _, _), (_, _, peak) in zip(marks, marks[1:])}
    (job_path / "result.json").write_text(json.dumps(result.to_dict(), indent=2))
    return 0


def _cpu_name() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo; else what `platform` says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _preload(backends: list[str]) -> None:
    """The imports the backends need, done while the parent is still planning (`export.BackendWorkers`):
    torch, transformers and each backend's exporter and runner (3.3 s of a tiny BERT's ONNX worker
    when they were left to first use). A backend whose packages are missing is left out: its job
    says why."""
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from transformers.exporters.auto import get_exporter_class, get_runner_class

    from ..backends import get_backend

    for name in backends:
        try:
            export_format = get_backend(name).export_format
            get_exporter_class(export_format)
            get_runner_class(export_format)
        except Exception:  # noqa: BLE001  (reported by the job itself, where it matters)
            continue


def run_job(job: WorkerJob, backend: Backend, result: BackendResult, stage: Callable[[str], None]) -> None:
    """Export, save, reload and validate one backend, filling in `result`. What the export is made
    of (its components, how each is exported and judged) is the plan's split's (`splits.py`)."""
    import torch
    import transformers
    from transformers.exporters import ExportedModel

    from ..report import ArtifactFile, Split, Status, Validation
    from ..versions import runtime_versions
    from ..variants import variants_of
    from .inputs import as_dtype
    from .derive import CALIBRATION, rebase_shares, rejudge_published, run_variants, why_skipped
    from ..pipeline.plan import refuse_made_up_weights
    from .splits import Exporting, split_for
    from .validate import Reference, compare_generation, loaders_run
    from .web_check import check_on_web
    from ..settings import web_checks
    from ..variants import default_kinds

    torch.manual_seed(0)
    plan = job.plan
    if backend.fixed_image_size:
        plan = plan.with_fixed_image_size()
    split = split_for(plan)
    model_dir = Path(job.model_dir)
    out_dir = Path(job.out_dir)

    # The checkpoint's own dtype where the backend's runtime serves it: a bfloat16 model is not doubled.
    result.dtype, result.dtype_note = backend.precision(plan.source_dtype)
    dtype = getattr(torch, result.dtype)

    stage("loading model")
    model_class = getattr(transformers, plan.model_class, None)
    if model_class is None:  # remote code: the plan only exists if it was trusted
        model_class = getattr(transformers, plan.auto_class or "AutoModel")
    model, loading = model_class.from_pretrained(
        model_dir,
        dtype=dtype,
        trust_remote_code=plan.trust_remote_code,
        use_safetensors=job.use_safetensors,
        output_loading_info=True,
    )
    model = model.eval()
    refuse_made_up_weights(plan, loading.get("missing_keys") or [])
    split.prepare(model)
    layout = getattr(split, "cache_layout", None)
    if layout is not None and not layout.states:
        result.cache_layers = [list(layout.attention[i]) for i in sorted(layout.attention)]
    if backend.llm_runner is not None and split.name == Split.DECODER:
        # The runtime's own LLM runner drives the decoder: it is exported as that runner reads it.
        module, _, function = backend.llm_runner.partition(":")
        runner = importlib.import_module(module)
        why_not = runner.cannot_run(split, model)
        if why_not:  # said before anything is exported (the model's own cache, read in `prepare`)
            result.status, result.error = Status.SKIPPED, why_not
            return
        getattr(runner, function)(split, backend, model, model_dir, out_dir, result, stage)
        files = sorted(p for p in out_dir.rglob("*") if p.is_file())
        result.files = [ArtifactFile(str(p.relative_to(out_dir)), p.stat().st_size) for p in files]
        result.versions = runtime_versions(("torch", "executorch", *backend.packages))
        return
    sample = as_dtype(split.inputs(model_dir, model.config, plan.sample, seed=0), dtype)
    other = as_dtype(split.inputs(model_dir, model.config, plan.validation, seed=1), dtype)

    stage("exporting")
    started = time.perf_counter()
    exporting = Exporting(plan, backend)
    # The exporter class's own facts: its programs' suffix, whether loading them runs pickled code
    # (a `.pt2`), the packages it exports with.
    exporter = exporting.exporter
    with torch.no_grad():
        exported = split.export(exporting, model, sample)
    export_seconds = time.perf_counter() - started

    stage("saving")
    exported.save_pretrained(out_dir)
    traced = {name: set(component.metadata.kwargs) for name, component in exported.components.items()}
    del exported

    # Eager's side of every check, computed once; the weights go before the programs are loaded
    # unless a variant re-exports the model.
    stage("eager reference")
    wanted = [
        v for v in variants_of(backend.name, plan.variants, split.generates) if not why_skipped(v, split, backend.name)
    ]
    reference = Reference(model, split, traced)
    # A generation variant is judged teacher-forced on real text (`inputs.Judged`), built once here.
    judged = split.judged(model_dir, model.config, other) if wanted and split.generates else None
    if judged is not None:
        judged.prompt = as_dtype(judged.prompt, dtype)
    reference.prepare(sample, other, judged)
    if not any(v.needs_model for v in wanted):
        reference.release()

    # ── validate, on the files as a user loads them ──
    stage("validating")
    started = time.perf_counter()
    # A pickled program, or a config that names the repo's code (trusted to get this far), needs trust.
    result.trust_remote_code = exporter.requires_trust_remote_code

    def load_exported(**options):
        return ExportedModel.from_pretrained(
            out_dir,
            trust_remote_code=result.trust_remote_code or plan.trust_remote_code,
            device=backend.runner_device,
            **options,
        )

    # Opened to check its outputs, not to time them (`Backend.checking_options`).
    loaded = load_exported(**backend.checking_runner_options())
    validation = Validation(tolerance=backend.tolerance[result.dtype])
    validation.checks.extend(split.validate(reference, loaded, traced, sample, other))
    validate_seconds = time.perf_counter() - started
    components = list(loaded.components)
    result.inputs = {name: list(runner.metadata.kwargs) for name, runner in loaded.runners.items()}
    result.programs = {c: f"{c}{exporter.program_suffix}" for c in components}
    # The program's runtime copy of the weights goes too: each variant is built without it and then
    # timed against a fresh one (beside a quantizer's copy it put a 135 M model's peak at 4.5x fp32).
    del loaded

    if plan.variants and validation.passed:
        stage("variants")
        calibration = [split.inputs(model_dir, reference.config, CALIBRATION, seed=seed) for seed in (2, 3)]
        result.measured_on = f"{_cpu_name()}, {torch.get_num_threads()} threads"
        result.variants = run_variants(
            split,
            exporting,
            reference,
            load_exported,
            out_dir,
            sample,
            other,
            judged=judged,
            calibration=calibration,
            stage=stage,
        )

    if validation.passed and backend.layout is not None:
        return_freed()  # the variants' graphs and sessions: the layout rewrites the fp32 graph where they were
        stage("laying out for loaders")
        result.layout, renamed = backend.layout(out_dir, components, split.loaders)
        result.programs = {c: renamed.get(file, file) for c, file in result.programs.items()}
        for variant in result.variants:
            if variant.file:
                variant.file = renamed.get(variant.file, variant.file)
            variant.files = [renamed.get(f, f) for f in variant.files]
        origin = {new: old for old, new in renamed.items()}

        def variant_paths(variant) -> dict[str, Path] | None:
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
            run = loaders_run(paths, reference.config)
            validation.checks.append(compare_generation("loaders_layout", reference, split, run, traced, other))
            del run  # one session at a time: each variant's below is loaded where the fp32 one was
            return_freed()
            for variant in result.variants:
                # A variant's own figures, from its published files as the loaders run them.
                swapped = variant_paths(variant) if variant.ok else None
                if swapped:
                    published = loaders_run({**paths, **swapped}, reference.config)
                    assert judged is not None
                    rejudge_published(variant, split, published, reference, traced, other, judged, out_dir)
                    del published
                    return_freed()
        if backend.runs_in_browsers and validation.passed and web_checks():
            stage("web runtimes")
            defaults = default_kinds(plan.variants, backend.name, split.generates)
            check_on_web(
                result, split, reference, traced, other, judged, out_dir, validation.tolerance, defaults, variant_paths
            )
            return_freed()
        rebase_shares(result.variants, out_dir)

    files = sorted(p for p in out_dir.rglob("*") if p.is_file())
    result.status = Status.OK if validation.passed else Status.FAILED
    result.error = validation.first_problem()
    result.files = [ArtifactFile(str(p.relative_to(out_dir)), p.stat().st_size) for p in files]
    result.export_seconds = round(export_seconds, 2)
    result.validate_seconds = round(validate_seconds, 2)
    result.components = components
    result.validation = validation
    result.versions = runtime_versions((*exporter.required_packages, *backend.packages))


if __name__ == "__main__":
    sys.exit(main([name for name in (sys.argv[1] if len(sys.argv) > 1 else "").split(",") if name]))

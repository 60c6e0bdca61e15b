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
child's session on `kill PID` (its pids are its sandbox's, `hfexport/sandbox/`); it ends
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
from pathlib import Path

from ..backends import get_backend
from ..errors import HfExportError, describe_error
from ..logs import quiet_known_noise
from ..messages import WorkerJob
from ..proc import die_with_parent, injected_fault
from ..report import BackendResult, Status
from ..settings import FAULT, quiet_noise
from .memory import peak_mb

_STARTED = time.perf_counter()


def main(backends: list[str]) -> int:
    """Import (with the exporters of `backends`), then fork a child per `fork JOB_DIR` line until
    stdin closes."""
    if quiet_noise():
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
    # here: torch and the exporters load after `main` quieted their known noise (`logs`), as `_preload` does
    from .job import run_job

    job = WorkerJob.from_json((job_path / "job.json").read_text())
    backend_name = job.backend

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
        run_job(job, backend, result, stage)  # worker/job.py: the stages
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


def _preload(backends: list[str]) -> None:
    """The imports the backends need, done while the parent is still planning (`export.BackendWorkers`):
    torch, transformers and each backend's exporter and runner (3.3 s of a tiny BERT's ONNX worker
    when they were left to first use). A backend whose packages are missing is left out: its job
    says why."""
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from transformers.exporters.auto import get_exporter_class, get_runner_class

    for name in backends:
        try:
            export_format = get_backend(name).export_format
            get_exporter_class(export_format)
            get_runner_class(export_format)
        except Exception:  # noqa: BLE001  (reported by the job itself, where it matters)
            continue


if __name__ == "__main__":
    sys.exit(main([name for name in (sys.argv[1] if len(sys.argv) > 1 else "").split(",") if name]))

"""Stage 4 — export: run each backend in its own process, with a timeout.

Why a process per backend: tracing patches torch internals, ExecuTorch lowering can use several
GB, and a native crash takes its process down. Isolated, a backend that crashes, is OOM-killed or
hangs is reported as such, and the other backends' results are kept. The worker
exports, saves and validates (`hfexport/worker/`); this module only starts it, watches it and
reads its result, a `BackendResult` the worker wrote with `to_dict()`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..settings import jobs as configured_jobs
from ..backends import get_backend
from ..proc import (
    FAULT_ENV,
    WorkerUser,
    check_model_readable,
    check_readable,
    child_env,
    injected_fault,
    lend,
    reclaim,
    sandboxed,
    worker_user,
)
from ..report import BackendResult, ExportPlan, Status, WorkerJob
from .fetch import FetchedModel

DEFAULT_TIMEOUT_S = 1800
_PACKAGE = Path(__file__).resolve().parent.parent

Progress = Callable[[str, str], None]  # progress(backend, message)


# ── Stage 4: export ──────────────────────────────────────────────────────────


def default_jobs() -> int:
    """Backends exported at once: `HFEXPORT_JOBS`, else 1 (peak memory is then one backend's)."""
    return configured_jobs()


def run_backends(
    fetched: FetchedModel,
    plan: ExportPlan,
    staging: Path,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: Progress | None = None,
    *,
    workers: BackendWorkers,
    too_large: dict[str, str] | None = None,
) -> list[BackendResult]:
    """Export and validate every backend of the plan into `staging/<subfolder>`, one process each.

    Backends that cannot run here (a missing package, no CUDA), that the preflight expects not to
    fit (`too_large`: backend → why, `pipeline/preflight.py`), or whose exporter cannot export this
    model (`Backend.limits`), are `skipped` with the reason.
    `workers` are the processes the caller started ahead, while it planned (see `BackendWorkers`); their
    `jobs` backends run at once: much of ExecuTorch lowering and ONNX translation is
    single-threaded Python, so they overlap well; each worker then gets its share of the cores for
    torch's thread pool instead of all of them.
    """
    progress = progress or (lambda backend, message: None)
    user = workers.user
    if user is not None:  # the workers run as another user: what they read and write must be open to it
        check_model_readable(fetched.model_dir, user)
        check_readable(
            staging,
            user,
            "the output folder",
            "Write the output where others can traverse it (--out, or HFEXPORT_CACHE for push).",
            reach_only=True,
        )
        staging.chmod(0o711)  # traversable, not listable: each worker reaches only its own folder

    def one(name: str) -> BackendResult:
        backend = get_backend(name)
        reason = (too_large or {}).get(name) or backend.unavailable_reason() or backend.cannot_export(plan)
        if reason:
            workers.skip()
            progress(name, f"skipped: {reason}")
            return BackendResult(name, Status.SKIPPED, backend.subfolder, error=reason)
        out_dir = staging / backend.subfolder
        out_dir.mkdir(parents=True)
        lend(out_dir, user)
        job = WorkerJob(name, backend.module, plan, str(fetched.model_dir), str(out_dir), fetched.use_safetensors)
        with workers.take() as worker:
            result = _run(worker, job, timeout_s, progress)
        reclaim(out_dir, user)  # the worker has exited: its files are ours now, out of its user's reach
        progress(name, str(result.status))
        return result

    if workers.jobs == 1:
        return [one(name) for name in plan.backends]
    with ThreadPoolExecutor(max_workers=workers.jobs, thread_name_prefix="backend") as pool:
        return list(pool.map(one, plan.backends))


class BackendWorkers:
    """Worker processes started before their job exists, each to run one backend and exit.

    A worker spends ~8 s importing torch, transformers and the exporters before it can do anything,
    and the parent spends about as long planning (it imports the same libraries to read the model
    class). Started before the plan, workers do their imports while the parent plans — and, with
    `jobs=1`, the next backend's worker imports while the current one exports. Each then
    takes its job on stdin. Isolation is unchanged: every backend gets a fresh process of its own.

    Up to `jobs` idle workers (and one core fewer than the machine has) are kept warm while backends
    remain, so `jobs=1` holds one exporting and one idle process, the idle one ~0.5 GB. Used as a
    context manager; leaving it kills the idle ones, e.g. when planning fails or the exports come
    from the cache.
    """

    def __init__(self, backends: int, jobs: int | None = None):
        self.jobs = jobs or default_jobs()
        self.user = worker_user()  # HFEXPORT_WORKER_USER: checked here, before any process starts
        for path, what in ((Path(sys.executable).resolve(), "the Python interpreter"), (_PACKAGE, "hfexport's code")):
            check_readable(
                path,
                self.user,
                what,
                "Install Python and hfexport where other users can run them "
                "(e.g. /usr/local, as the container does), not under a private home such as /root.",
            )
        self._pending = backends  # backends not yet handed to a worker
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        # Each worker gets its share of the cores for torch's thread pool when several run at once.
        self._threads = str(max(1, (os.cpu_count() or 1) // self.jobs)) if self.jobs > 1 else None

    def __enter__(self) -> BackendWorkers:
        with self._lock:
            self._top_up()
        return self

    def __exit__(self, *exc) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()

    def take(self) -> _Worker:
        """A started worker for the next backend (a new one if none is idle)."""
        with self._lock:
            self._pending -= 1
            worker = self._idle.pop(0) if self._idle else self._new()
            self._top_up()
        return worker

    def skip(self) -> None:
        """One backend will not run (skipped): one worker fewer is needed."""
        with self._lock:
            self._pending -= 1
            surplus = self._idle[max(0, self._pending) :]
            del self._idle[max(0, self._pending) :]
        for worker in surplus:
            worker.close()

    def _top_up(self) -> None:
        # One core is left to the parent: its planning is what the workers wait for.
        ahead = min(self.jobs, self._pending, max(1, (os.cpu_count() or 1) - 1))
        while len(self._idle) < ahead:
            self._idle.append(self._new())

    def _new(self) -> _Worker:
        """A worker started ahead by `prestart` with this pool's settings, else a new one."""
        for index, (settings, worker) in enumerate(_PRESTARTED):
            if settings == (self._threads, self.user) and worker.process.poll() is None:
                del _PRESTARTED[index]
                return worker
        return _Worker.start(self._threads, self.user)


# Workers started before this process knew its job (a warm push, `entrypoints/warm_push.py`),
# with the settings they were started under: the first pool with the same settings takes them.
_PRESTARTED: list[tuple[tuple[str | None, WorkerUser | None], _Worker]] = []


def prestart(backends: int, jobs: int | None = None) -> None:
    """Start the workers a `BackendWorkers(backends, jobs)` would start first, for a later pool of
    this process to take: their imports are done before its job arrives."""
    pool = BackendWorkers(backends, jobs)
    with pool._lock:
        pool._top_up()
        _PRESTARTED.extend(((pool._threads, pool.user), worker) for worker in pool._idle)
        pool._idle = []


@dataclass
class _Worker:
    """One `python -m hfexport.worker JOB_DIR` process, importing or waiting for its job."""

    process: subprocess.Popen
    job_dir: tempfile.TemporaryDirectory
    log: object

    @classmethod
    def start(cls, threads: str | None, user: WorkerUser | None = None) -> _Worker:
        job_dir = tempfile.TemporaryDirectory(prefix="hfexport-worker-")
        lend(Path(job_dir.name), user)
        log = open(Path(job_dir.name) / "worker.log", "wb")
        # Under another user the worker's home and the repo's imported code live in its job folder.
        own = {"HOME": job_dir.name, "HF_MODULES_CACHE": str(Path(job_dir.name) / "modules")} if user else {}
        # A session of its own, so a timeout kills the worker's children too.
        process = subprocess.Popen(
            [sys.executable, "-m", "hfexport.worker", job_dir.name],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=sandboxed(user),
            # The worker loads the repo's weights (pickles, with --allow-pickle) and code: no secrets.
            env=child_env(
                {
                    **own,
                    "PYTHONUNBUFFERED": "1",
                    "TOKENIZERS_PARALLELISM": "false",
                    **({"OMP_NUM_THREADS": threads} if threads else {}),
                }
            ),
        )
        return cls(process, job_dir, log)

    @property
    def path(self) -> Path:
        return Path(self.job_dir.name)

    def hand(self, job: WorkerJob) -> None:
        """Give the worker its job: the file first, then the line on stdin it is waiting for."""
        (self.path / "job.json").write_text(job.to_json())
        try:
            self.process.stdin.write(b"start\n")
            self.process.stdin.close()
        except BrokenPipeError:  # it died while importing: `_run` reports the crash
            pass

    def close(self) -> None:
        _kill_group(self.process)
        if not self.process.stdin.closed:
            self.process.stdin.close()
        self.log.close()
        self.job_dir.cleanup()

    def __enter__(self) -> _Worker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _run(worker: _Worker, job: WorkerJob, timeout_s: float, progress: Progress) -> BackendResult:
    """Hand `job` to `worker`, watch it to the end and read its result (the caller closes `worker`)."""
    name = job.backend
    backend = get_backend(name)
    started = time.perf_counter()  # the backend's own time: a warm worker's imports came before
    worker.hand(job)
    # Ctrl-C or a failing progress callback: the caller's `with worker` kills it on the way out.
    status = _wait(worker.process, worker.path, name, started, timeout_s, progress)
    wall = round(time.perf_counter() - started, 2)
    log_tail = _tail(worker.path / "worker.log")
    result_path = worker.path / "result.json"
    fault = injected_fault(name)
    if status == "timeout":
        return BackendResult(
            name,
            Status.TIMEOUT,
            backend.subfolder,
            wall_seconds=wall,
            log_tail=log_tail,
            fault=fault,
            error=f"did not finish within {timeout_s:g} s and was stopped (raise the timeout for large models: "
            "--timeout, or timeout_s= in Python)",
        )
    if not result_path.exists():
        return BackendResult(
            name,
            Status.CRASHED,
            backend.subfolder,
            wall_seconds=wall,
            log_tail=log_tail,
            fault=fault,
            error=_crash_reason(worker.process.returncode, fault),
        )
    result = BackendResult.from_dict(json.loads(result_path.read_text()))
    result.wall_seconds = wall
    result.log_tail = None if result.ok else log_tail
    result.fault = fault
    return result


def _wait(process, job_path: Path, name: str, started: float, timeout_s: float, progress: Progress) -> str:
    last_stage = None
    while True:
        try:
            process.wait(timeout=0.5)
            return "exited"
        except subprocess.TimeoutExpired:
            pass
        elapsed = time.perf_counter() - started
        if elapsed > timeout_s:
            _kill_group(process)
            return "timeout"
        stage_file = job_path / "stage"
        stage = stage_file.read_text() if stage_file.exists() else "starting"
        if stage != last_stage:
            progress(name, stage)
            last_stage = stage


def _kill_group(process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def _crash_reason(returncode: int, fault: str | None = None) -> str:
    if returncode is not None and returncode < 0:
        signame = signal.Signals(-returncode).name
        if fault == "crash":
            return f"the export process was killed by {signame} (the {FAULT_ENV} test hook)"
        hint = (
            " — most often the out-of-memory killer; retry on a machine with more RAM" if signame == "SIGKILL" else ""
        )
        return f"the export process was killed by {signame}{hint}"
    return f"the export process exited with code {returncode} without a result (see log_tail)"


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])

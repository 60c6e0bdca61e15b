"""Stage 4 — export: run each backend in its own process, with a timeout.

Why a process per backend: tracing patches torch internals, ExecuTorch lowering can use several
GB, and a native crash takes its process down. Isolated, a backend that crashes, is OOM-killed or
hangs is reported as such, and the other backends' results are kept. The worker
exports, saves and validates (`hfexport/worker/`); this module only starts it, watches it and
reads its result, a `BackendResult` the worker wrote with `to_dict()`. Each backend's process is
forked from one worker process that did the imports once (`BackendWorkers`).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..backends import get_backend
from ..messages import WorkerJob
from ..proc import FAULT_ENV, injected_fault
from ..report import BackendResult, ExportPlan, Status
from ..sandbox.crossing import PlantedFileError, read_text, take
from ..sandbox.identity import WorkerUser, check_model_readable, check_readable, lend, reclaim, worker_user
from ..sandbox.launch import exit_code, spawn, visible
from ..settings import jobs as configured_jobs
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
    if user is not None:  # the workers run as another user: the model must be open to it
        check_model_readable(fetched.model_dir, user)
    model_dir = workers.shown(fetched.model_dir)

    def one(name: str) -> BackendResult:
        backend = get_backend(name)
        reason = (too_large or {}).get(name) or backend.unavailable_reason() or backend.cannot_export(plan)
        if reason:
            workers.skip()
            progress(name, f"skipped: {reason}")
            return BackendResult(name, Status.SKIPPED, backend.subfolder, error=reason)
        out_dir = staging / backend.subfolder
        out_dir.mkdir(parents=True)
        with workers.take() as worker:
            # The worker writes in its own job folder; the files it names cross back (`crossing.take`).
            written = worker.path / "out"
            written.mkdir()
            lend(written, user)
            job = WorkerJob(name, backend.module, plan, str(model_dir), str(written), fetched.use_safetensors)
            result = _run(worker, job, timeout_s, progress)
            if result.ok:
                try:
                    take(written, out_dir, [f.path for f in result.files], f"The {name} worker")
                except PlantedFileError as error:
                    result.status, result.error = Status.FAILED, str(error.cause)
        reclaim(out_dir, user)  # its files are ours now, out of the worker user's reach
        progress(name, str(result.status))
        return result

    if workers.jobs == 1:
        return [one(name) for name in plan.backends]
    with ThreadPoolExecutor(max_workers=workers.jobs, thread_name_prefix="backend") as pool:
        return list(pool.map(one, plan.backends))


class BackendWorkers:
    """The worker process of one export (`python -m hfexport.worker`), started before the plan
    exists, and the fresh process it forks for each backend's job.

    The worker process spends ~5 s importing torch, transformers and the backends' exporters; the
    parent spends about as long planning (it imports the same libraries to read the model class).
    Started first, it imports while the parent plans. Each backend then gets a process of its own,
    forked from it when its job is handed over: a crash, an OOM kill or a hang still costs that
    backend alone, and no backend pays the imports again (see `hfexport/worker/__main__.py`).

    Used as a context manager; leaving it ends the worker process, e.g. when planning fails or the
    exports come from the cache. It also ends once no backend is left to run.
    """

    def __init__(self, backends: list[str], jobs: int | None = None, model_dir: Path | None = None):
        self.jobs = jobs or default_jobs()
        # What the sandbox shows, read-only, beside the runtime: the model being exported.
        self.reads = (Path(model_dir),) if model_dir is not None else ()
        self.user = worker_user()  # HFEXPORT_WORKER_USER: checked here, before any process starts
        for path, what in ((Path(sys.executable).resolve(), "the Python interpreter"), (_PACKAGE, "hfexport's code")):
            check_readable(
                path,
                self.user,
                what,
                "Install Python and hfexport where other users can run them "
                "(e.g. /usr/local, as the container does), not under a private home such as /root.",
            )
        self.backends = list(backends)
        self._pending = len(self.backends)  # backends not yet handed to a worker or skipped
        self._running = 0
        self._lock = threading.Lock()
        # Each backend gets its share of the cores for torch's thread pool when several run at once.
        self._threads = str(max(1, (os.cpu_count() or 1) // self.jobs)) if self.jobs > 1 else None
        self._forks: _Forks | None = None

    def __enter__(self) -> BackendWorkers:
        if self._pending:
            self._forks = _prestarted(self._threads, self.user) or _Forks.start(
                self.backends, self._threads, self.user, self.reads
            )
        return self

    def shown(self, model_dir: Path) -> Path:
        """`model_dir` as the workers can read it: itself, or (a worker started before its job,
        `prestart`, whose sandbox conceals the caches) a copy in the workers' own folder."""
        return self._forks.shown(Path(model_dir)) if self._forks is not None else Path(model_dir)

    def __exit__(self, *exc) -> None:
        with self._lock:
            forks, self._forks = self._forks, None
        if forks is not None:
            forks.close()

    def take(self) -> _Worker:
        """The worker of the next backend: its job folder, forked when its job is handed over."""
        with self._lock:
            if self._forks is None:
                raise RuntimeError("BackendWorkers is not open (use it as a context manager)")
            self._pending -= 1
            self._running += 1
            return _Worker(self._forks, self.user, self._done)

    def skip(self) -> None:
        """One backend will not run (skipped)."""
        with self._lock:
            self._pending -= 1
        self._end_if_idle()

    def _done(self) -> None:
        with self._lock:
            self._running -= 1
        self._end_if_idle()

    def _end_if_idle(self) -> None:
        """No backend left to run: the worker process (~0.5 GB) goes now, not when the run ends."""
        with self._lock:
            forks = self._forks if self._pending <= 0 and self._running == 0 else None
            if forks is not None:
                self._forks = None
        if forks is not None:
            forks.close()


# Worker processes started before this process knew its job (a warm push, `entrypoints/warm_push.py`),
# with the settings they were started under: the first pool with the same settings takes one.
_PRESTARTED: list[tuple[tuple[str | None, WorkerUser | None], _Forks]] = []


def prestart(backends: list[str], jobs: int | None = None) -> None:
    """Start the worker process a `BackendWorkers(backends, jobs)` would start, for a later pool of
    this process to take: its imports are done before its job arrives."""
    pool = BackendWorkers(backends, jobs)
    _PRESTARTED.append(((pool._threads, pool.user), _Forks.start(pool.backends, pool._threads, pool.user, ())))


def _prestarted(threads: str | None, user: WorkerUser | None) -> _Forks | None:
    for index, (settings, forks) in enumerate(_PRESTARTED):
        if settings == (threads, user) and forks.process.poll() is None:
            del _PRESTARTED[index]
            return forks
    return None


class _Forks:
    """The parent's side of `python -m hfexport.worker`: asks it to fork a child per job and learns,
    from the lines it writes, each child's pid and how it ended."""

    def __init__(
        self, process: subprocess.Popen, home: tempfile.TemporaryDirectory, log, reads: tuple[Path, ...] | None
    ):
        # `reads`: what its sandbox shows of the caches and /tmp; None: it runs in none (sees all).
        self.process, self.home, self.log, self.reads = process, home, log, reads
        self._copies: dict[Path, Path] = {}
        self._lock = threading.Lock()
        self._by_dir: dict[str, _Forked] = {}
        self._by_pid: dict[int, _Forked] = {}
        self._gone: int | None = None  # its exit code, once it has ended
        self._reader = threading.Thread(target=self._read, name="worker-forks", daemon=True)
        self._reader.start()

    @classmethod
    def start(
        cls, backends: list[str], threads: str | None, user: WorkerUser | None, reads: tuple[Path, ...]
    ) -> _Forks:
        home = tempfile.TemporaryDirectory(prefix="hfexport-workers-")
        # The workers' home, the repo's imported code and each job's folder live in this folder, the
        # only one their sandbox may write (`sandbox.launch.spawn`).
        log = open(Path(home.name) / "workers.log", "wb")
        command = [sys.executable, "-m", "hfexport.worker", ",".join(backends)]
        # The workers load the repo's weights (pickles, with --allow-pickle) and code: no secrets.
        threads_env = {"OMP_NUM_THREADS": threads} if threads else {}
        env = {"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", **threads_env}
        started = spawn(command, user, Path(home.name), reads=reads, env=env)
        # A session of its own: ending it leaves no process behind (its children die with it).
        process = subprocess.Popen(
            **started, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, start_new_session=True
        )
        wrapped = started["args"]
        return cls(process, home, log, reads if wrapped != command else None)

    def shown(self, model_dir: Path) -> Path:
        """`model_dir`, or a copy of it in this worker's folder where its sandbox cannot see it (a
        worker started before its job knew the model: the HF cache is concealed from it)."""
        if self.reads is None or visible(model_dir, self.reads):
            return model_dir
        with self._lock:
            if model_dir not in self._copies:
                copy = Path(tempfile.mkdtemp(prefix="model-", dir=self.home.name))
                # The Hub client's snapshot links point into its blobs: the copy holds their content.
                shutil.copytree(model_dir, copy, symlinks=False, dirs_exist_ok=True)
                self._copies[model_dir] = copy
            return self._copies[model_dir]

    def fork(self, job_dir: Path, child: _Forked) -> None:
        """Ask for a child running the job in `job_dir`; `child` learns its pid and its end."""
        with self._lock:
            if self._gone is not None:
                self._end_unforked(child, self._gone)
                return
            self._by_dir[str(job_dir)] = child
            self._say(f"fork {job_dir}")

    def kill_child(self, pid: int) -> None:
        """Ask for the session of its child `pid` to be killed: the pid is the worker's own (in its
        sandbox's PID namespace), not one this process could signal."""
        with self._lock:
            self._say(f"kill {pid}")

    def _say(self, line: str) -> None:
        assert self.process.stdin is not None  # started with stdin=PIPE
        try:
            self.process.stdin.write(f"{line}\n".encode())
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError):  # it died (importing, say): `_read` ends its children
            pass

    def kill(self) -> None:
        _kill_group(self.process)

    def close(self) -> None:
        self.kill()
        self._reader.join()
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        self.log.close()
        self.home.cleanup()

    def _read(self) -> None:
        assert self.process.stdout is not None  # started with stdout=PIPE
        for raw in self.process.stdout:
            word, _, rest = raw.decode(errors="replace").rstrip("\n").partition(" ")
            with self._lock:
                if word == "pid":
                    pid, _, job_dir = rest.partition(" ")
                    child = self._by_dir.pop(job_dir, None)
                    if child is not None:
                        self._by_pid[int(pid)] = child
                        child.pid = int(pid)
                elif word == "exit":
                    pid, _, code = rest.partition(" ")
                    child = self._by_pid.pop(int(pid), None)
                    if child is not None:
                        child.ended(int(code))
        # It ended: a child it forked died with it (SIGKILL, set when forked).
        code = exit_code(self.process.wait())
        with self._lock:
            self._gone = code
            left = [*self._by_pid.values(), *self._by_dir.values()]
            self._by_pid.clear()
            self._by_dir.clear()
        for child in left:
            if child.pid is None:
                self._end_unforked(child, code)
            else:
                child.ended(-signal.SIGKILL)

    def _end_unforked(self, child: _Forked, code: int) -> None:
        """A job it never forked shares its end (`code`), and its log says why (a failed import, say)."""
        child.note = _tail(Path(self.home.name) / "workers.log")
        child.ended(code)


class _Forked:
    """One backend's process, forked by the worker process: what `_wait` needs of a `Popen`."""

    def __init__(self, forks: _Forks):
        self.forks = forks
        self.pid: int | None = None
        self.returncode: int | None = None
        self.note = ""  # the worker process's log, where it ended before forking this one
        self._ended = threading.Event()

    def ended(self, code: int) -> None:
        self.returncode = code
        self._ended.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired("hfexport.worker", timeout or 0)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        """SIGKILL to its session (the job's own children too); the worker process itself when the
        job was never forked (still importing)."""
        if self.pid is None:
            self.forks.kill()
        else:
            self.forks.kill_child(self.pid)


class _Worker:
    """One backend's job folder and, once handed its job, the process forked to run it."""

    def __init__(self, forks: _Forks, user: WorkerUser | None, done: Callable[[], None]):
        self.job_dir = tempfile.TemporaryDirectory(prefix="job-", dir=forks.home.name)
        lend(Path(self.job_dir.name), user)
        self.process = _Forked(forks)
        self._handed = False
        self._done = done

    @property
    def path(self) -> Path:
        return Path(self.job_dir.name)

    def hand(self, job: WorkerJob) -> None:
        """Give the worker its job: the file first, then the fork that runs it."""
        (self.path / "job.json").write_text(job.to_json())
        self._handed = True
        self.process.forks.fork(self.path, self.process)

    def close(self) -> None:
        if self._handed and self.process.poll() is None:
            _kill_group(self.process)
        self.job_dir.cleanup()
        self._done()

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
    log_tail = _tail(worker.path / "worker.log") or worker.process.note
    written = read_text(worker.path / "result.json")  # never through a link (`crossing.py`)
    fault = injected_fault(name)

    def ended(status: Status, error: str) -> BackendResult:
        return BackendResult(
            name, status, backend.subfolder, wall_seconds=wall, log_tail=log_tail, fault=fault, error=error
        )

    if status == "timeout":
        return ended(
            Status.TIMEOUT,
            f"did not finish within {timeout_s:g} s and was stopped (raise the timeout for large models: "
            "--timeout, or timeout_s= in Python)",
        )
    if written is None:
        return ended(Status.CRASHED, _crash_reason(worker.process.returncode, fault))
    try:
        result = BackendResult.from_dict(json.loads(written))
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        return ended(
            Status.CRASHED, f"the export process wrote a result that does not read as one ({type(error).__name__})"
        )
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
        stage = (read_text(job_path / "stage", limit=200) or "starting").strip()[:200]
        if stage != last_stage:
            progress(name, stage)
            last_stage = stage


def _kill_group(process: subprocess.Popen | _Forked) -> None:
    if isinstance(process, _Forked):
        process.kill()
    else:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait()


def _crash_reason(returncode: int | None, fault: str | None = None) -> str:
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
    text = read_text(path) or ""
    return "\n".join(text.strip().splitlines()[-lines:])

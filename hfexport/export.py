"""Stage 4 — export: run each backend in its own process, with a timeout.

Why a process per backend: tracing patches torch internals, ExecuTorch lowering can use several
GB, and a native crash takes its process down. Isolated, a backend that crashes, is OOM-killed or
hangs is reported as such, and the other backends' results are kept. The worker (`worker.py`)
exports, saves and validates; this module only starts it, watches it and reads its result.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .backends import get_backend
from .fetch import FetchedModel
from .plan import ExportPlan
from .proc import die_with_parent

DEFAULT_TIMEOUT_S = 1800

Progress = Callable[[str, str], None]  # progress(backend, message)


@dataclass
class BackendResult:
    """What one backend produced; the report and the publish stage read this."""

    backend: str
    status: str  # ok | failed | crashed | timeout | skipped
    subfolder: str
    error: str | None = None
    files: list[dict] = field(default_factory=list)
    size_bytes: int = 0
    export_seconds: float | None = None
    validate_seconds: float | None = None
    wall_seconds: float | None = None
    peak_rss_mb: float | None = None
    components: list[str] = field(default_factory=list)
    validation: dict | None = None
    versions: dict = field(default_factory=dict)
    # Seconds per worker stage ("starting" is the imports): the profile of where the time went.
    timings: dict = field(default_factory=dict)
    log_tail: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# ── Stage 4: export ──────────────────────────────────────────────────────────


def default_jobs() -> int:
    """Backends exported at once: `HFEXPORT_JOBS`, else 1 (peak memory is then one backend's)."""
    return max(1, int(os.environ.get("HFEXPORT_JOBS", "1")))


def run_backends(
    fetched: FetchedModel,
    plan: ExportPlan,
    staging: Path,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: Progress | None = None,
    jobs: int | None = None,
) -> list[BackendResult]:
    """Export and validate every backend of the plan into `staging/<subfolder>`, one process each.

    Backends that cannot run here (a missing package, no CUDA) are `skipped` with the reason.
    With `jobs` > 1 that many backends run at once: much of ExecuTorch lowering and ONNX
    translation is single-threaded Python, so they overlap well; each worker then gets its share
    of the cores for torch's thread pool instead of all of them.
    """
    progress = progress or (lambda backend, message: None)
    jobs = jobs or default_jobs()
    threads = str(max(1, (os.cpu_count() or 1) // jobs)) if jobs > 1 else None

    def one(name: str) -> BackendResult:
        backend = get_backend(name)
        reason = backend.unavailable_reason()
        if reason:
            progress(name, f"skipped: {reason}")
            return BackendResult(name, "skipped", backend.subfolder, error=reason)
        result = _run_isolated(fetched, plan, name, staging / backend.subfolder, timeout_s, progress, threads)
        progress(name, result.status)
        return result

    if jobs == 1:
        return [one(name) for name in plan.backends]
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="backend") as pool:
        return list(pool.map(one, plan.backends))


def _run_isolated(
    fetched: FetchedModel, plan: ExportPlan, name: str, out_dir: Path, timeout_s: float, progress: Progress,
    threads: str | None = None,
) -> BackendResult:
    backend = get_backend(name)
    with tempfile.TemporaryDirectory(prefix=f"hfexport-{name}-") as job_dir:
        job_path = Path(job_dir)
        job = {
            "backend": name,
            "plan": plan.to_dict(),
            "model_dir": str(fetched.model_dir),
            "out_dir": str(out_dir),
            "use_safetensors": fetched.use_safetensors,
        }
        (job_path / "job.json").write_text(json.dumps(job))
        log_path = job_path / "worker.log"
        started = time.perf_counter()
        with open(log_path, "wb") as log:
            # A session of its own, so a timeout kills the worker's children too.
            process = subprocess.Popen(
                [sys.executable, "-m", "hfexport.worker", job_dir],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=die_with_parent,
                env={
                    **os.environ,
                    "PYTHONUNBUFFERED": "1",
                    "TOKENIZERS_PARALLELISM": "false",
                    **({"OMP_NUM_THREADS": threads} if threads else {}),
                },
            )
            try:
                status = _wait(process, job_path, name, started, timeout_s, progress)
            except BaseException:  # Ctrl-C or a failing progress callback: never leave a worker behind
                _kill_group(process)
                raise
        wall = round(time.perf_counter() - started, 2)
        log_tail = _tail(log_path)
        result_path = job_path / "result.json"
        if status == "timeout":
            return BackendResult(
                name, "timeout", backend.subfolder, wall_seconds=wall, log_tail=log_tail,
                error=f"did not finish within {timeout_s:g} s and was stopped (raise --timeout for large models)",
            )
        if not result_path.exists():
            return BackendResult(
                name, "crashed", backend.subfolder, wall_seconds=wall, log_tail=log_tail,
                error=_crash_reason(process.returncode),
            )
        data = json.loads(result_path.read_text())
        data.pop("traceback", None)
        result = BackendResult(
            backend=name,
            status=data.get("status", "failed"),
            subfolder=backend.subfolder,
            error=data.get("error"),
            files=data.get("files", []),
            size_bytes=data.get("size_bytes", 0),
            export_seconds=data.get("export_seconds"),
            validate_seconds=data.get("validate_seconds"),
            wall_seconds=wall,
            peak_rss_mb=data.get("peak_rss_mb"),
            components=data.get("components", []),
            validation=data.get("validation"),
            versions=data.get("versions", {}),
            timings=data.get("timings", {}),
            log_tail=None if data.get("status") == "ok" else log_tail,
        )
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


def _crash_reason(returncode: int) -> str:
    if returncode is not None and returncode < 0:
        signame = signal.Signals(-returncode).name
        hint = " — most often the out-of-memory killer; retry on a machine with more RAM" if signame == "SIGKILL" else ""
        return f"the export process was killed by {signame}{hint}"
    return f"the export process exited with code {returncode} without a result (see log_tail)"


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])

"""Where a queued export job runs: here (`local`), or as an HF Job (`hf-jobs`).

An executor takes a job (repo, sha, plan) and returns its `JobOutcome`, or raises `JobFailed`
saying whether a retry may help. Adding one is a class with `run(job) -> JobOutcome` and
`close()` (`Executor`).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ...backends import get_backend
from ...errors import ExitCode, HubUnavailableError, retryable_exit
from ...hub.retry import retry
from ...messages import PublishResult
from ...pipeline import cache
from ...pipeline.preflight import needs, smallest_flavor, weights_of
from ...proc import die_with_parent
from ...report import Source, Status
from ...settings import HF_CACHE_MAX_GB, MEMORY_LIMIT_MB, READ_TOKEN, WEBHOOK_SECRET, cache_max_bytes
from ...table import summary
from .budget import Busy, MemoryBudget, limit_mb
from .outcome import HfJobRun, JobOutcome
from .queue import Job
from .warm import WarmPushes

if TYPE_CHECKING:
    from ...pipeline.preflight import Weights


class Executor(Protocol):
    """Where a claimed job runs."""

    def run(self, job: Job) -> JobOutcome | Mapping[str, Any]:
        """Run `job` to its end (a dict of `JobOutcome`'s fields is read as one).

        Raises:
            Busy: not now (the machine's memory is held): back in the queue.
            JobFailed: it failed, saying whether a retry may help.
        """
        ...

    def close(self) -> None: ...


class JobFailed(Exception):
    """A job's run failed. `message` is its cause and fix as the service says them (the job's error,
    which the request page and the status page show); `output`, the push's whole stderr where it
    printed one (the operator's log keeps it)."""

    def __init__(self, message: str, retryable: bool, output: str | None = None):
        super().__init__(message)
        self.retryable, self.output = retryable, output


# What a push's refusal (`hfexport push --json`: `kind`, `error`, `fix`) advises, said in the
# service's terms: its fix names CLI flags (`--allow-pickle`, `--task`) that neither the request page
# nor `serve` offers. A kind not listed keeps the push's own fix.
NO_PICKLES = (
    "This service never unpickles a model's files (unpickling runs code from them): ask the model's owner for "
    "safetensors weights (the Hub's safetensors conversion opens that pull request), then ask again."
)
SERVICE_FIXES = {
    "PickleWeightsError": NO_PICKLES,
    "UnsupportedArchitectureError": "This service exports a model for its own head's task (`hfexport tasks` lists "
    "them): ask for a model with one of those heads, or export this one's base model yourself with "
    "`hfexport export REPO --task feature-extraction`.",
    "RemoteCodeError": "This model needs its repo's own code, which this service runs only where its operator "
    "started it with --trust-remote-code (in a sandbox): ask for a model transformers implements.",
    "SourceNotFoundError": "Check the repo id (org/name, as in the repo's URL); a private or gated repo needs a "
    "token that can read it: on the request page, ask again with one; for a watched repo, the operator gives "
    "`hfexport serve` one (HF_TOKEN).",
    "AuthError": "The token this job ran with may not publish there: on the request page, ask again with a token "
    "that has write access; for a watched repo, the operator gives `hfexport serve` one (HF_TOKEN).",
}


def refusal(stdout: str) -> str | None:
    """A push's refusal from its `--json` output (`console.fail`): its cause, then the fix in the
    service's terms (`SERVICE_FIXES`); None where it printed none."""
    try:
        outcome = json.loads(stdout)
    except ValueError:
        return None
    if not isinstance(outcome, dict) or outcome.get("ok") is not False or not outcome.get("error"):
        return None
    fix = SERVICE_FIXES.get(str(outcome.get("kind")), str(outcome.get("fix") or ""))
    return f"{outcome['error']}\nfix: {fix}" if fix else str(outcome["error"])


# A push's stderr as the operator's log keeps it (its last bytes where it printed more).
MAX_OUTPUT_BYTES = 64 * 1024


def push_arguments(job: Job, backends: str | None = None) -> list[str]:
    """The `hfexport push` arguments for a job (or for a group of its backends); never the token
    (it travels in the environment)."""
    # `--` ends the options: whatever the repo id is, it is read as the REPO_ID argument.
    return [
        "push",
        "--revision",
        job.head_sha,
        "--backends",
        backends or ",".join(job.plan.backends),
        "--task",
        job.plan.task,
        "--json",
        *(["--trust-remote-code"] if job.plan.trust_remote_code else []),
        *(["--into", job.plan.into] if job.plan.into else []),
        "--",
        job.repo_id,
    ]


def _communicate(
    process: subprocess.Popen, stdin: str, timeout_s: float, on_stage: Callable[[str], None] | None
) -> tuple[str, str]:
    """`process.communicate(stdin)`, its stderr read as it comes: each progress line a piped push
    prints (`  onnx: exporting (12s)`) handed to `on_stage` as the job's stage (`onnx: exporting`).

    Raises:
        subprocess.TimeoutExpired: it ran past `timeout_s` (it is killed first).
    """
    out: list[str] = []
    err: list[str] = []

    def read_stderr() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            err.append(line)
            if on_stage is not None and (stage := _STAGE_LINE.match(line)):
                on_stage(stage.group(1))

    def read_stdout() -> None:
        assert process.stdout is not None
        out.append(process.stdout.read())

    readers = [threading.Thread(target=f, daemon=True) for f in (read_stderr, read_stdout)]
    for reader in readers:
        reader.start()
    if process.stdin is not None:
        try:
            process.stdin.write(stdin)
            process.stdin.close()
        except BrokenPipeError:  # it ended before reading: what it printed says why
            pass
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    finally:
        for reader in readers:
            reader.join(timeout=10)
    return "".join(out), "".join(err)


# A backend's stage as a piped push prints it (`console.progress_callback`): "  onnx: exporting (12s)".
_STAGE_LINE = re.compile(r"^  ([\w-]+: [^()\n]+?) \(\d+s\)$")


def hardware_groups(job: Job) -> dict[str, list[str]]:
    """The job's backends by the hardware they need: `{"cpu": [...], "gpu": [...]}` (groups that
    have none are left out). Each group runs as its own push; all fill the same PR."""
    groups: dict[str, list[str]] = {}
    for name in job.plan.backends:
        groups.setdefault("gpu" if get_backend(name).needs_cuda else "cpu", []).append(name)
    return groups


@dataclass
class LocalExecutor:
    """`hfexport push` in a child process of the service (which dies with it). With `warm`, that
    many push processes are kept ready, their imports and their worker process's done before their
    job arrives (`warm.py`, `entrypoints/warm_push.py`); each still runs one job and exits."""

    timeout_s: float = 4 * 3600
    env: dict[str, str] = field(default_factory=dict)
    warm: int = 0
    backends: tuple[str, ...] = ()  # the backends whose exporters a warm push's worker process imports ahead
    # The machine's memory, shared by the jobs running at once (`budget.py`); None: each counts it all.
    budget: MemoryBudget | None = None

    def __post_init__(self) -> None:
        # Each push's own temporary folder (its TMPDIR: its workers' folders, its downloads' partial
        # files), removed once it has ended however it ended — a push killed at the job timeout too.
        self._tmp: dict[int, str] = {}
        self._running: set[str] = set()  # the repos of the jobs running: their downloads stay
        self._lock = threading.Lock()
        self._pushes = WarmPushes(self._start_warm, self.warm) if self.warm else None
        if self._pushes is not None:
            self._pushes.refill()

    def _popen(self, *command: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        tmp = tempfile.mkdtemp(prefix="hfexport-job-")
        environment = {**os.environ, **self.env, **(env or {}), "TMPDIR": tmp}
        process = subprocess.Popen(
            [sys.executable, "-m", *command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=die_with_parent,
            # Not the service's own secrets: a push needs the Hub token, never the webhook's.
            env={k: v for k, v in environment.items() if k not in (WEBHOOK_SECRET, READ_TOKEN)},
        )
        with self._lock:
            self._tmp[process.pid] = tmp
        return process

    def _ended(self, process: subprocess.Popen) -> None:
        """A push has ended (or was killed): its temporary folder goes, and the export cache's
        folder it was writing (`cache.evict`) and the HF cache are brought within their bounds."""
        with self._lock:
            tmp = self._tmp.pop(process.pid, None)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        cache.evict()
        with self._lock:
            busy = set(self._running)
        bound_hf_cache(cache_max_bytes(HF_CACHE_MAX_GB), keep=busy)

    def _start_warm(self) -> subprocess.Popen:
        return self._popen("hfexport.entrypoints.warm_push", ",".join(self.backends))

    def run(self, job: Job) -> JobOutcome:
        """Run the job's push here once its memory is reserved.

        Raises:
            Busy: it does not fit beside the jobs running now.
            JobFailed: the push failed, or a backend's process was killed or stopped (retryable:
                such an outcome is the machine's, and the push published none of it).
        """
        reservation = None
        if self.budget is not None:
            estimate = job_memory(job, list(job.plan.backends))
            reservation = self.budget.reserve(estimate)
            if reservation is None:
                raise Busy(
                    f"needs ~{(estimate or 0) / 1e9:.1f} GB of memory beside the {self.budget.held / 1e9:.1f} GB "
                    f"the running jobs hold, of {self.budget.total / 1e9:.1f} GB",
                    BUSY_RETRY_S,
                )
        try:
            limit = {MEMORY_LIMIT_MB: limit_mb(reservation[1])} if reservation is not None else {}
            return self._run(job, limit)
        finally:
            if reservation is not None and self.budget is not None:
                self.budget.release(reservation[0])

    def _run(self, job: Job, env: dict[str, str]) -> JobOutcome:
        if job.hub_token is not None:  # asked for on the request page: it runs with the asker's token
            env = {**env, "HF_TOKEN": job.hub_token}
        if self._pushes is not None and job.hub_token is None:
            process, warm = self._pushes.take()
            stdin = json.dumps({"arguments": push_arguments(job), "env": env}) + "\n"
        else:
            process, warm, stdin = self._popen("hfexport", *push_arguments(job), env=env), False, ""
        with self._lock:
            self._running.add(job.repo_id)
        try:
            stdout, stderr = _communicate(process, stdin, self.timeout_s, job.on_stage)
        except subprocess.TimeoutExpired:  # killed: the same commit would run as long again
            raise JobFailed(f"push ran past the job timeout ({self.timeout_s:g} s) and was stopped", False) from None
        finally:
            with self._lock:
                self._running.discard(job.repo_id)
            self._ended(process)
            if self._pushes is not None:
                self._pushes.refill()
        output = stderr[-MAX_OUTPUT_BYTES:]
        # The job's error: the push's own refusal where it made one, else the end of what it printed.
        tail = "\n".join(stderr.strip().splitlines()[-40:])
        if process.returncode in (ExitCode.OK, ExitCode.BACKEND_FAILED):  # the PR says which backend failed
            try:
                result = PublishResult.from_dict(json.loads(stdout))
            except (ValueError, KeyError, TypeError):
                raise JobFailed(f"push printed no JSON: {tail}", retryable=True, output=output) from None
            backends = result.report.backends if result.report is not None else []
            stopped = [f"{b.backend} {b.status}" for b in backends if b.status in NOT_ANSWERS]
            if stopped:
                raise JobFailed(f"{', '.join(stopped)}: the machine's doing, not the model's; retried", True, output)
            return JobOutcome(
                action=str(result.action),
                pr_url=result.pr_url,
                repo_url=result.repo_url,
                exit_code=process.returncode,
                warm=warm,
                made=summary(result.report) if result.report is not None else [],
            )
        said = refusal(stdout) or f"push exited with {process.returncode}: {tail}"
        raise JobFailed(said, retryable=retryable_exit(process.returncode), output=output)

    def close(self) -> None:
        """End the warm processes waiting for a job, and remove their temporary folders."""
        if self._pushes is not None:
            self._pushes.close()
        with self._lock:
            left, self._tmp = list(self._tmp.values()), {}
        for tmp in left:
            shutil.rmtree(tmp, ignore_errors=True)


def bound_hf_cache(max_bytes: int, keep: frozenset[str] | set[str] = frozenset()) -> list[str]:
    """Keep the HF cache (the Hub downloads of `HF_HOME`) within `max_bytes`: the repos used least
    recently go first (`huggingface_hub.scan_cache_dir`), except those in `keep` (jobs running).
    Returns the repos removed."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir()
    except CacheNotFound:
        return []
    total, gone = info.size_on_disk, []
    for repo in sorted(info.repos, key=lambda r: r.last_accessed):
        if total <= max_bytes:
            break
        if repo.repo_id in keep:
            continue
        info.delete_revisions(*(r.commit_hash for r in repo.revisions)).execute()
        total -= repo.size_on_disk
        gone.append(repo.repo_id)
    return gone


# A job that does not fit beside the running ones asks again after this long.
BUSY_RETRY_S = 5.0
# A backend's outcomes that say nothing of the model: its process was killed (the OOM killer, most
# often) or stopped at the timeout. The push publishes none of them; the job is retried.
NOT_ANSWERS = (Status.CRASHED, Status.TIMEOUT)


def job_weights(job: Job, token: str | None = None) -> Weights | None:
    """The job's commit's weights, from their safetensors headers on the Hub (None: unknown)."""

    try:
        return weights_of(Source(kind="hub", ref=job.repo_id, sha=job.head_sha), token)
    except HubUnavailableError:  # the push's own preflight reads them again
        return None


def job_memory(job: Job, backends: list[str], token: str | None = None) -> int | None:
    """The memory the push of `backends` for the job needs by the preflight's estimate, or None."""

    weights = job_weights(job, token)
    return None if weights is None else needs(weights, backends)[0]


# The CPU flavor of a model whose size cannot be read (no safetensors headers).
UNSIZED_CPU_FLAVOR = "cpu-upgrade"


def sized_flavor(api, job: Job, backends: list[str], token: str | None) -> tuple[str, str | None]:
    """The cheapest CPU flavor that fits `backends`' export of the job's commit by the preflight's
    estimate (one backend at a time, as `push` runs them: the largest peak; the download and every
    output on disk), and what it was sized for; `UNSIZED_CPU_FLAVOR` where the size is unknown, the
    largest flavor where none is enough (the preflight in the Job then says so)."""

    weights = job_weights(job, token)
    if weights is None:
        return UNSIZED_CPU_FLAVOR, None
    memory, disk = needs(weights, backends)
    hardware = retry("list the HF Jobs flavors", api.list_jobs_hardware)
    why = f"{weights.describe()}: ~{memory / 1e9:.1f} GB of memory, ~{disk / 1e9:.1f} GB of disk"
    flavor = smallest_flavor(memory, disk, hardware)
    if flavor is None:
        cpus = [h for h in hardware if h.accelerator is None]
        return max(cpus, key=lambda h: h.unit_cost_micro_usd).name, f"{why} (more than any CPU flavor has)"
    return flavor, why


@dataclass
class HfJobsExecutor:
    """Each export as HF Jobs (`HfApi.run_job`), one per hardware group (CPU backends on a CPU
    flavor, `executorch-cuda` on a GPU one), run in parallel and followed to their end; they
    converge on the one PR.

    The CPU flavor, unless given, is the cheapest that fits the model: the preflight's estimate
    (`pipeline/preflight.py`, from the commit's safetensors headers) against the flavors the Hub
    lists (`HfApi.list_jobs_hardware`); the job's record says which and why. The token reaches
    the Jobs as a secret (`HF_TOKEN`), never on their command line."""

    image: str
    token: str | None = None
    namespace: str | None = None
    cpu_flavor: str | None = None  # None: sized by the model (`sized_flavor`)
    gpu_flavor: str = "a10g-small"
    poll_s: float = 2.0
    timeout_s: float = 4 * 3600
    env: dict[str, str] = field(default_factory=dict)

    def run(self, job: Job) -> JobOutcome:
        from huggingface_hub import HfApi

        api = HfApi(token=self.token)
        token = job.hub_token or self.token  # a job asked on the request page runs as its asker
        started: dict[str, Any] = {}
        sized: dict[str, Any] = {}
        launched = time.monotonic()
        for hardware, backends in hardware_groups(job).items():
            flavor: str | None
            if hardware == "gpu":
                flavor = self.gpu_flavor
            else:
                flavor, sized[hardware] = self.cpu_flavor, None
                if flavor is None:
                    flavor, sized[hardware] = sized_flavor(api, job, backends, self.token)
            started[hardware] = retry(
                f"start the {hardware} HF Job",
                functools.partial(
                    api.run_job,
                    image=self.image,
                    command=["hfexport", *push_arguments(job, ",".join(backends))],
                    env=dict(self.env),
                    secrets={"HF_TOKEN": token} if token else None,
                    flavor=flavor,
                    timeout=int(self.timeout_s),
                    namespace=self.namespace,
                    labels={"app": "hfexport", "repo": job.repo_id.replace("/", "--"), "hardware": hardware},
                ),
            )
        # Each group publishes on its own: one that fails does not stop the others (their exports
        # still belong in the PR); the job fails once all have ended if any did. The Hub ends a Job
        # at its timeout; this deadline (a poll later) is for a Hub that does not.
        deadline = launched + self.timeout_s + 2 * self.poll_s
        running, done, failed, timed_out = dict(started), dict[str, HfJobRun](), [], False
        while running:
            for hardware, info in list(running.items()):
                current = retry(
                    "follow the HF Job", functools.partial(api.inspect_job, job_id=info.id, namespace=self.namespace)
                )
                stage = str(current.status.stage)
                if stage.endswith("COMPLETED"):
                    done[hardware] = HfJobRun(
                        hf_job=info.id,
                        hf_job_url=getattr(current, "url", None),
                        flavor=current.flavor,
                        timeout_s=int(self.timeout_s),
                        sized_for=sized.get(hardware),
                    )
                    del running[hardware]
                elif stage.endswith(("ERROR", "CANCELED", "DELETED")):
                    # Ended by the Hub at its timeout: the same commit would run as long again.
                    timed_out |= time.monotonic() - launched >= self.timeout_s
                    failed.append(
                        f"HF Job {info.id} ({hardware}, {current.flavor}, timeout {self.timeout_s:g} s) ended"
                        f" {stage}: {current.status.message or ''}"
                    )
                    del running[hardware]
            if running and time.monotonic() > deadline:
                for info in running.values():
                    retry(
                        "cancel the HF Job", functools.partial(api.cancel_job, job_id=info.id, namespace=self.namespace)
                    )
                raise JobFailed(
                    f"HF Jobs {[i.id for i in running.values()]} ran past {self.timeout_s:g} s and were cancelled",
                    retryable=False,
                )
            if running:
                time.sleep(self.poll_s)
        if failed:
            raise JobFailed("; ".join(failed), retryable=not timed_out)
        return JobOutcome(stage="COMPLETED", jobs=done)

    def close(self) -> None:
        """Nothing waits here: the Jobs are the Hub's."""

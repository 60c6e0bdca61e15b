"""Where a queued export job runs: here (`local`), or as an HF Job (`hf-jobs`).

An executor takes a job (repo, sha, plan) and returns a result dict, or raises `JobFailed`
saying whether a retry may help. Adding one is a class with `run(job) -> dict`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field

from ...backends import get_backend
from ...proc import die_with_parent
from ...report import PublishResult
from .queue import Job


class JobFailed(Exception):
    def __init__(self, message: str, retryable: bool):
        super().__init__(message)
        self.retryable = retryable


def push_arguments(job: Job) -> list[str]:
    """The `hfexport push` arguments for a job; never the token (it travels in the environment)."""
    backends, _, task = job.plan_key.partition("|")
    return ["push", job.repo_id, "--revision", job.head_sha, "--backends", backends, "--task", task or "auto", "--json"]


@dataclass
class LocalExecutor:
    """`hfexport push` in a child process of the service (which dies with it)."""

    timeout_s: float = 4 * 3600
    env: dict[str, str] = field(default_factory=dict)

    def run(self, job: Job) -> dict:
        process = subprocess.run(
            [sys.executable, "-m", "hfexport", *push_arguments(job)],
            capture_output=True,
            text=True,
            timeout=self.timeout_s,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
            env={**os.environ, **self.env},
        )
        tail = "\n".join(process.stderr.strip().splitlines()[-5:])
        if process.returncode in (0, 1):  # 1: some backend failed validation; the PR says which
            try:
                result = PublishResult.from_dict(json.loads(process.stdout))
            except (ValueError, KeyError, TypeError):
                raise JobFailed(f"push printed no JSON: {tail}", retryable=True) from None
            return {"action": str(result.action), "pr_url": result.pr_url, "exit_code": process.returncode}
        # 2: bad input (retrying cannot help); 3: the Hub kept failing; anything else: a crash.
        raise JobFailed(f"push exited with {process.returncode}: {tail}", retryable=process.returncode != 2)


@dataclass
class HfJobsExecutor:
    """Each export as an HF Job (`HfApi.run_job`), on a flavor chosen per backend, followed to its end.

    The token reaches the Job as a secret (`HF_TOKEN`), never on its command line."""

    image: str
    token: str | None = None
    namespace: str | None = None
    cpu_flavor: str = "cpu-upgrade"
    gpu_flavor: str = "a10g-small"
    poll_s: float = 2.0
    timeout_s: float = 4 * 3600
    env: dict[str, str] = field(default_factory=dict)

    def flavor_for(self, job: Job) -> str:
        backends = job.plan_key.partition("|")[0].split(",")
        return self.gpu_flavor if any(get_backend(b).needs_cuda for b in backends) else self.cpu_flavor

    def run(self, job: Job) -> dict:
        from huggingface_hub import HfApi

        from ...hub.retry import retry

        api = HfApi(token=self.token)
        info = retry(
            "start the HF Job",
            lambda: api.run_job(
                image=self.image,
                command=["hfexport", *push_arguments(job)],
                env=dict(self.env),
                secrets={"HF_TOKEN": self.token} if self.token else None,
                flavor=self.flavor_for(job),
                timeout=int(self.timeout_s),
                namespace=self.namespace,
                labels={"app": "hfexport", "repo": job.repo_id.replace("/", "--")},
            ),
        )
        deadline = time.monotonic() + self.timeout_s
        while True:
            current = retry("follow the HF Job", lambda: api.inspect_job(job_id=info.id, namespace=self.namespace))
            stage = str(current.status.stage)
            if stage.endswith("COMPLETED"):
                return {"hf_job": info.id, "hf_job_url": getattr(current, "url", None), "stage": "COMPLETED"}
            if stage.endswith(("ERROR", "CANCELED", "DELETED")):
                raise JobFailed(f"HF Job {info.id} ended {stage}: {current.status.message or ''}", retryable=True)
            if time.monotonic() > deadline:
                retry("cancel the HF Job", lambda: api.cancel_job(job_id=info.id, namespace=self.namespace))
                raise JobFailed(f"HF Job {info.id} ran past {self.timeout_s:g} s and was cancelled", retryable=False)
            time.sleep(self.poll_s)

"""HF Jobs on the local Hub: a job runs as a local process instead of a container.

The image cannot run here, so its command does, as a local process: a command whose first word is
a key of `Settings.job_entrypoints` runs that entry's command instead (the image's entrypoint as
installed here), anything else as given. The job's environment is the
Hub's own (`Settings.job_env`: HF_ENDPOINT pointing back here, ...) plus the job's `environment`
and `secrets` — secrets reach the process, never the job's public description.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import threading
from dataclasses import dataclass, field

from .store import now_iso

# The flavors `GET /api/jobs/hardware` lists, in the Hub's format (`HfApi.list_jobs_hardware`);
# cpu-basic's figures are those the client's documentation shows, the others this emulator's own.
HARDWARE = [
    {"name": "cpu-basic", "cpu": "2 vCPU", "ram": "16 GB", "storage": "20 GB", "cost": 167},
    {"name": "cpu-upgrade", "cpu": "8 vCPU", "ram": "32 GB", "storage": "50 GB", "cost": 500},
    {"name": "cpu-xl", "cpu": "16 vCPU", "ram": "124 GB", "storage": "200 GB", "cost": 1667},
    {"name": "a10g-small", "cpu": "4 vCPU", "ram": "15 GB", "storage": "110 GB", "cost": 1667, "gpu": "A10G"},
]


def hardware_list() -> list[dict]:
    return [
        {
            "name": h["name"],
            "prettyName": h["name"].replace("-", " ").title(),
            "cpu": h["cpu"],
            "ram": h["ram"],
            "ephemeralStorage": h["storage"],
            "accelerator": (
                {"type": "gpu", "model": h["gpu"], "quantity": "1", "vram": "24 GB", "manufacturer": "Nvidia"}
                if "gpu" in h
                else None
            ),
            "unitCostMicroUSD": h["cost"],
            "unitCostUSD": h["cost"] / 1e6,
            "unitLabel": "minute",
        }
        for h in HARDWARE
    ]


@dataclass
class LocalJob:
    id: str
    owner: str
    spec: dict
    stage: str = "RUNNING"
    message: str | None = None
    created_at: str = field(default_factory=now_iso)
    finished_at: str | None = None
    logs: list[str] = field(default_factory=list)
    process: subprocess.Popen | None = None

    def info(self, base_url: str) -> dict:
        spec = self.spec
        return {
            "id": self.id,
            "createdAt": self.created_at,
            "finishedAt": self.finished_at,
            "dockerImage": spec.get("dockerImage"),
            "spaceId": spec.get("spaceId"),
            "command": spec.get("command"),
            "arguments": spec.get("arguments", []),
            "environment": spec.get("environment", {}),
            "secrets": {name: None for name in spec.get("secrets", {})},  # names only, as the Hub shows them
            "flavor": spec.get("flavor"),
            "labels": spec.get("labels"),
            "status": {"stage": self.stage, "message": self.message},
            "owner": {"id": self.owner, "name": self.owner, "type": "user"},
            "url": f"{base_url}/jobs/{self.owner}/{self.id}",
        }


class JobRunner:
    def __init__(self, job_env: dict[str, str], entrypoints: dict[str, list[str]]):
        self.job_env = job_env
        self.entrypoints = entrypoints
        self.jobs: dict[str, LocalJob] = {}
        self.lock = threading.Lock()

    def start(self, owner: str, spec: dict) -> LocalJob:
        job = LocalJob(secrets.token_hex(12), owner, spec)
        with self.lock:
            self.jobs[job.id] = job
        command = list(spec.get("command") or []) + list(spec.get("arguments") or [])
        if command and command[0] in self.entrypoints:
            command = [*self.entrypoints[command[0]], *command[1:]]
        env = {**os.environ, **self.job_env, **spec.get("environment", {}), **spec.get("secrets", {})}
        try:
            job.process = subprocess.Popen(
                command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
            )
        except OSError as e:
            job.stage, job.message, job.finished_at = "ERROR", f"could not start: {e}", now_iso()
            return job
        threading.Thread(target=self._follow, args=(job,), daemon=True).start()
        if spec.get("timeoutSeconds"):  # the Hub ends a Job that runs past the timeout it was given
            timer = threading.Timer(float(spec["timeoutSeconds"]), self._time_out, args=(job,))
            timer.daemon = True
            timer.start()
        return job

    def _time_out(self, job: LocalJob) -> None:
        if job.process is not None and job.process.poll() is None:
            job.process.kill()  # before the stage says so: a client that reads ERROR finds it ended
            job.stage, job.message = "ERROR", f"timed out after {job.spec['timeoutSeconds']} s"

    def _follow(self, job: LocalJob) -> None:
        for line in job.process.stdout:
            job.logs.append(line.rstrip("\n"))
        code = job.process.wait()
        if job.stage == "RUNNING":
            job.stage = "COMPLETED" if code == 0 else "ERROR"
            job.message = None if code == 0 else f"exit code {code}"
        job.finished_at = now_iso()

    def cancel(self, job: LocalJob) -> None:
        if job.process is not None and job.process.poll() is None:
            job.stage, job.message = "CANCELED", "cancelled"
            job.process.kill()

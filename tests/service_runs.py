"""`hfexport serve` as the tests drive it: a real process on the local Hub, and the webhooks it gets."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from hfexport.entrypoints.service.queue import Job, JobStatus
from hfexport.messages import JobPlan

SECRET = "s3cret-webhook-value"
# What a service started without a secret (page-only) is read with: `--read-token`.
READ_TOKEN = "read-token-of-the-operator"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """`hfexport serve` as a real process, restartable on the same queue."""

    def __init__(
        self,
        db: Path,
        watch: list[str],
        token: str,
        backends: str = "dynamo",
        extra: tuple[str, ...] = (),
        max_fds: int | None = None,
        env: dict[str, str] | None = None,
        secret: str | None = SECRET,
    ):
        self.db, self.watch, self.token, self.backends, self.extra = db, watch, token, backends, extra
        self.env = env or {}
        self.secret = secret  # None: started without one (no webhooks), read with READ_TOKEN
        self.max_fds = max_fds  # the process's descriptor limit (RLIMIT_NOFILE), as a server's default
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Service:
        args = [
            sys.executable,
            "-m",
            "hfexport",
            "serve",
            "--port",
            str(self.port),
            "--db",
            str(self.db),
            "--backends",
            self.backends,
        ]
        for repo in self.watch:
            args += ["--watch", repo]
        # The reconcile pass queues watched heads on start: tests of the webhook path turn it off.
        args += list(self.extra) if "--reconcile-every" in self.extra else [*self.extra, "--reconcile-every", "0"]
        env = {**os.environ, "HF_TOKEN": self.token, **self.env}
        if self.secret is None:
            env.pop("HFEXPORT_WEBHOOK_SECRET", None)
            args += ["--read-token", READ_TOKEN]
        else:
            env["HFEXPORT_WEBHOOK_SECRET"] = self.secret
        self.log = open(self.db.with_suffix(".log"), "ab")

        def limit() -> None:
            if self.max_fds is not None:
                import resource

                resource.setrlimit(resource.RLIMIT_NOFILE, (self.max_fds, self.max_fds))

        self.process = subprocess.Popen(args, env=env, stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=limit)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.get("/healthz")
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("the service did not start: " + self.db.with_suffix(".log").read_text()[-2000:])

    def kill9(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)

    def get(self, path: str, secret: str | None = SECRET) -> dict:
        """GET as the operator: /jobs needs the webhook secret (or the read token)."""
        if self.secret is None and secret == SECRET:  # a page-only service: its operator's read token
            headers = {"Authorization": f"Bearer {READ_TOKEN}"}
        else:
            headers = {"X-Webhook-Secret": secret} if secret else {}
        request = urllib.request.Request(self.url + path, headers=headers)
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.loads(r.read())

    def post(self, payload: bytes | dict, secret: str | None = SECRET) -> tuple[int, dict]:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        if secret is not None:
            headers["X-Webhook-Secret"] = secret
        request = urllib.request.Request(self.url + "/webhook", data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def wait_done(self, job_id: int, timeout: float = 600) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.get(f"/jobs/{job_id}")
            if job["status"] in ("done", "failed", "superseded"):
                return job
            time.sleep(0.5)
        raise AssertionError(f"job {job_id} did not finish: {job}")


def hub_api(hub, token):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=token)


def seeded(hub, token, repo: str, folder: Path) -> str:
    api = hub_api(hub, token)
    api.create_repo(repo, exist_ok=True)
    api.upload_folder(repo_id=repo, folder_path=folder)
    return api.model_info(repo).sha


def webhook_payload(repo: str, sha: str, ref: str = "refs/heads/main", scope: str = "repo.content") -> dict:
    return {
        "event": {"action": "update", "scope": scope},
        "repo": {"type": "model", "name": repo, "id": repo, "private": False, "headSha": sha, "owner": {"id": "x"}},
        "updatedRefs": [{"ref": ref, "oldSha": "0" * 40, "newSha": sha}],
        "webhook": {"id": "abc", "version": 3},
    }


def pull_requests(hub, token, repo):
    return [d for d in hub_api(hub, token).get_repo_discussions(repo) if d.is_pull_request]


def running_job(job_id: int, repo_id: str, head_sha: str, plan: JobPlan) -> Job:
    """A job as a worker holds it when it hands it to an executor: claimed, first attempt."""
    return Job(
        id=job_id,
        repo_id=repo_id,
        head_sha=head_sha,
        plan=plan,
        status=JobStatus.RUNNING,
        attempts=1,
        result=None,
        error=None,
        created_at=0,
        updated_at=0,
    )

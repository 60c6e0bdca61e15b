"""`hfexport serve` (the webhook receiver) and the HF Jobs executor, end to end on the local Hub."""

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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from hfexport.entrypoints.service.executors import HfJobsExecutor
from hfexport.entrypoints.service.queue import Job, JobStatus
from hfexport.report import JobPlan

import tiny_models

SECRET = "s3cret-webhook-value"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """`hfexport serve` as a real process, restartable on the same queue."""

    def __init__(self, db: Path, watch: list[str], token: str, backends: str = "dynamo", extra: tuple[str, ...] = ()):
        self.db, self.watch, self.token, self.backends, self.extra = db, watch, token, backends, extra
        self.port = _free_port()
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
        args += list(self.extra)
        env = {**os.environ, "HF_TOKEN": self.token, "HFEXPORT_WEBHOOK_SECRET": SECRET}
        self.log = open(self.db.with_suffix(".log"), "ab")
        self.process = subprocess.Popen(args, env=env, stdout=self.log, stderr=subprocess.STDOUT)
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
        request = urllib.request.Request(self.url + path, headers={"X-Webhook-Secret": secret} if secret else {})
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


@pytest.fixture(scope="module")
def accounts(hub):
    return {"alice": hub.add_user("alice-svc"), "bot": hub.add_user("svc-bot")}


def _api(hub, token):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=token)


def _seed(hub, token, repo: str, folder: Path) -> str:
    api = _api(hub, token)
    api.create_repo(repo, exist_ok=True)
    api.upload_folder(repo_id=repo, folder_path=folder)
    return api.model_info(repo).sha


def _payload(repo: str, sha: str, ref: str = "refs/heads/main", scope: str = "repo.content") -> dict:
    return {
        "event": {"action": "update", "scope": scope},
        "repo": {"type": "model", "name": repo, "id": repo, "private": False, "headSha": sha, "owner": {"id": "x"}},
        "updatedRefs": [{"ref": ref, "oldSha": "0" * 40, "newSha": sha}],
        "webhook": {"id": "abc", "version": 3},
    }


def _prs(hub, token, repo):
    return [d for d in _api(hub, token).get_repo_discussions(repo) if d.is_pull_request]


def test_refuses_forged_missing_secret_and_junk(tmp_path, accounts):
    service = Service(tmp_path / "q.sqlite", ["alice-svc/any"], accounts["bot"]).start()
    try:
        good = _payload("alice-svc/any", "a" * 40)
        assert service.post(good, secret=None)[0] == 401
        assert service.post(good, secret="guess")[0] == 403
        assert service.post(good, secret=SECRET[:-1])[0] == 403
        assert service.post(b"{not json")[0] == 400
        assert service.post({"event": "nope"})[0] == 400
        assert service.post(b"[" + b"1," * 600_000 + b"1]")[0] == 413
        # Valid but not ours to act on: our own PR ref, a discussion event, an unwatched repo.
        for payload in (
            _payload("alice-svc/any", "b" * 40, ref="refs/pr/3"),
            _payload("alice-svc/any", "c" * 40, scope="discussion"),
            _payload("someone/else", "d" * 40),
        ):
            status, body = service.post(payload)
            assert status == 200 and "ignored" in body, body
        assert service.get("/jobs")["jobs"] == []
        assert service.get("/healthz")["ok"] is True
    finally:
        service.stop()


def test_commit_fires_webhook_then_service_opens_pr(hub, accounts, tmp_path, workspace):
    repo = "alice-svc/e2e"
    _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-e2e"))
    service = Service(tmp_path / "q.sqlite", [repo], accounts["bot"]).start()
    hub.add_webhook(service.url + "/webhook", SECRET)
    try:
        owner = _api(hub, accounts["alice"])
        owner.upload_file(path_or_fileobj=b"# E2E\n", path_in_repo="README.md", repo_id=repo)
        sha = owner.model_info(repo).sha
        deadline = time.monotonic() + 30
        while not service.get("/jobs")["jobs"] and time.monotonic() < deadline:
            time.sleep(0.2)
        jobs = service.get("/jobs")["jobs"]
        assert len(jobs) == 1 and jobs[0]["head_sha"] == sha and jobs[0]["repo_id"] == repo
        job = service.wait_done(jobs[0]["id"])
        assert job["status"] == "done" and job["result"]["action"] == "opened", job
        prs = _prs(hub, accounts["alice"], repo)
        assert len(prs) == 1 and job["result"]["pr_url"].endswith(f"/discussions/{prs[0].num}")
        # The PR itself fired discussion and refs/pr/N events: none of them queued work.
        time.sleep(2)
        assert len(service.get("/jobs")["jobs"]) == 1
    finally:
        hub.webhooks.hooks.clear()
        service.stop()


def test_fifty_concurrent_identical_events_make_one_job_and_one_pr(hub, accounts, tmp_path, workspace):
    repo = "alice-svc/burst"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-burst", seed=50))
    service = Service(tmp_path / "q.sqlite", [repo], accounts["bot"]).start()
    try:
        with ThreadPoolExecutor(max_workers=50) as pool:
            replies = list(pool.map(lambda _: service.post(_payload(repo, sha)), range(50)))
        assert all(status in (200, 202) for status, _ in replies), replies
        assert sum(body["queued"] for _, body in replies) == 1
        assert len({body["job"] for _, body in replies}) == 1
        job = service.wait_done(replies[0][1]["job"])
        assert job["status"] == "done" and job["attempts"] == 1 and job["result"]["action"] == "opened"
        assert len(service.get("/jobs")["jobs"]) == 1
        assert len(_prs(hub, accounts["alice"], repo)) == 1
        # A replay, later, is harmless too.
        status, body = service.post(_payload(repo, sha))
        assert status == 200 and body["queued"] is False
    finally:
        service.stop()


def test_kill9_mid_job_then_restart_completes_with_one_pr(hub, accounts, tmp_path, workspace):
    repo = "alice-svc/crashy"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-crashy", seed=9))
    db = tmp_path / "q.sqlite"
    service = Service(db, [repo], accounts["bot"], backends="dynamo,onnx").start()
    status, body = service.post(_payload(repo, sha))
    assert status == 202
    deadline = time.monotonic() + 60
    while service.get(f"/jobs/{body['job']}")["status"] != "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(4)  # the export is under way
    service.kill9()
    assert _prs(hub, accounts["alice"], repo) == []  # killed before it could publish
    restarted = Service(db, [repo], accounts["bot"], backends="dynamo,onnx")
    restarted.port = service.port
    restarted.start()
    try:
        job = restarted.wait_done(body["job"])
        assert job["status"] == "done" and job["attempts"] == 2, job
        assert len(_prs(hub, accounts["alice"], repo)) == 1
    finally:
        restarted.stop()


def test_hf_jobs_executor_runs_on_the_hubs_jobs_endpoints(hub, accounts, tmp_path, workspace):
    repo = "alice-svc/jobs"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-jobs"))
    executor = HfJobsExecutor(image="hfexport:test", token=accounts["bot"], poll_s=0.5)
    job = Job(
        id=1,
        repo_id=repo,
        head_sha=sha,
        plan=JobPlan(("dynamo",)),
        status=JobStatus.RUNNING,
        attempts=1,
        result=None,
        error=None,
        created_at=0,
        updated_at=0,
    )
    result = executor.run(job)
    assert result["stage"] == "COMPLETED" and set(result["jobs"]) == {"cpu"}
    launched = hub.app.jobs.jobs[result["jobs"]["cpu"]["hf_job"]]
    spec = launched.spec
    # Sized by the model: a tiny BERT fits the cheapest CPU flavor the Hub lists.
    assert spec["dockerImage"] == "hfexport:test" and spec["flavor"] == "cpu-basic"
    assert "M parameters (f32)" in result["jobs"]["cpu"]["sized_for"], result
    assert accounts["bot"] not in json.dumps(spec["command"]) and accounts["bot"] not in json.dumps(
        spec.get("environment")
    )
    assert spec["secrets"] == {"HF_TOKEN": accounts["bot"]}  # the secret reaches the job's process only
    info = _api(hub, accounts["bot"]).inspect_job(job_id=launched.id)
    assert accounts["bot"] not in json.dumps(info.command) and list(info.secrets) == ["HF_TOKEN"]
    assert not any(accounts["bot"] in line for line in launched.logs)
    assert len(_prs(hub, accounts["alice"], repo)) == 1


def test_hf_jobs_flavor_is_the_cheapest_that_fits_the_models_estimate(hub, accounts, tmp_path):
    """The CPU flavor follows the commit's size, read from its safetensors header (no weight is
    downloaded): a 3 B-parameter bf16 checkpoint (~85 GB by the estimate) needs the flavor with the
    most memory; a 60 B one more than any has, so the largest is taken and the record says so."""
    from huggingface_hub import HfApi

    from hfexport.entrypoints.service.executors import sized_flavor
    from test_preflight import _header_only_checkpoint

    api = HfApi(endpoint=hub.url, token=accounts["alice"])
    for billions in (3, 60):
        repo = f"alice-svc/header-only-{billions}b"
        api.create_repo(repo)
        api.upload_folder(repo_id=repo, folder_path=_header_only_checkpoint(tmp_path / repo, billions * 10**9))
        job = Job(3, repo, api.model_info(repo).sha, JobPlan(("onnx",)), JobStatus.RUNNING, 1, None, None, 0, 0)
        flavor, why = sized_flavor(api, job, ["onnx"], accounts["alice"])
        assert flavor == "cpu-xl" and f"{billions}.00 B parameters (bf16)" in why, (flavor, why)
        assert ("more than any CPU flavor has" in why) == (billions == 60), why


def test_hf_jobs_split_a_request_by_hardware_and_run_the_groups_in_parallel(hub, accounts, workspace):
    """dynamo on a CPU flavor and executorch-cuda on a GPU flavor, as two Jobs started together. The
    local Hub runs Jobs here, on no GPU: the GPU group finds nothing it can run and its Job fails,
    which the executor reports; the CPU group's PR is there."""
    from hfexport.entrypoints.service.executors import JobFailed, hardware_groups

    repo = "alice-svc/jobs-split"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-jobs-split", seed=3))
    job = Job(
        id=2,
        repo_id=repo,
        head_sha=sha,
        plan=JobPlan(("dynamo", "executorch-cuda")),
        status=JobStatus.RUNNING,
        attempts=1,
        result=None,
        error=None,
        created_at=0,
        updated_at=0,
    )
    assert hardware_groups(job) == {"cpu": ["dynamo"], "gpu": ["executorch-cuda"]}
    before = set(hub.app.jobs.jobs)
    with pytest.raises(JobFailed, match=r"\(gpu\)"):
        HfJobsExecutor(image="hfexport:test", token=accounts["bot"], poll_s=0.5).run(job)
    launched = [hub.app.jobs.jobs[i] for i in set(hub.app.jobs.jobs) - before]
    flavors = {j.spec["flavor"]: j.spec["command"] for j in launched}
    assert set(flavors) == {"cpu-basic", "a10g-small"}
    assert flavors["a10g-small"][flavors["a10g-small"].index("--backends") + 1] == "executorch-cuda"
    assert flavors["cpu-basic"][flavors["cpu-basic"].index("--backends") + 1] == "dynamo"
    # Started together: the GPU Job was launched before the CPU one finished.
    cpu = next(j for j in launched if j.spec["flavor"] == "cpu-basic")
    gpu = next(j for j in launched if j.spec["flavor"] == "a10g-small")
    assert gpu.created_at <= cpu.finished_at
    deadline = time.monotonic() + 300
    while cpu.finished_at is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert cpu.stage == "COMPLETED" and len(_prs(hub, accounts["alice"], repo)) == 1


def test_push_from_webhook_env(hub, accounts, workspace):
    """The Hub-native path: a webhook starts a Job, which runs `push --from-webhook-env`."""
    from conftest import run_cli

    repo = "alice-svc/native"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-native"))
    env = {"HF_TOKEN": accounts["bot"], "WEBHOOK_PAYLOAD": json.dumps(_payload(repo, sha))}
    result = run_cli("push", "--from-webhook-env", "--backends", "dynamo", "--json", env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout)
    assert out["action"] == "opened" and out["report"]["source"]["sha"] == sha
    ignored = run_cli(
        "push", "--from-webhook-env", env={**env, "WEBHOOK_PAYLOAD": json.dumps(_payload(repo, sha, ref="refs/pr/1"))}
    )
    assert ignored.returncode == 0 and "ignored" in ignored.stderr
    junk = run_cli("push", "--from-webhook-env", env={**env, "WEBHOOK_PAYLOAD": "{junk"})
    assert junk.returncode == 2 and "WEBHOOK_PAYLOAD" in junk.stderr


# ── the queue: leases, attempts, bad input ───────────────────────────────────


def test_a_job_running_past_its_lease_is_not_started_twice(tmp_path):
    """Two workers, a 1 s lease, a job that takes 3.5 s: the heartbeat keeps the lease, so the
    second worker never claims it (without the heartbeat it would, after 1 s)."""
    from hfexport.entrypoints.service import ServiceConfig, QueueWorkers
    from hfexport.entrypoints.service.queue import JobQueue

    calls = []

    class SlowExecutor:
        def run(self, job):
            calls.append(job.id)
            time.sleep(3.5)
            return {"action": "opened"}

    queue = JobQueue(tmp_path / "q.sqlite", lease_s=1, max_attempts=4)
    job_id, _ = queue.enqueue("alice-svc/slow", "a" * 40, JobPlan(("dynamo",)))
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=JobPlan(("dynamo",)), workers=2)
    workers = QueueWorkers(config, queue, SlowExecutor(), idle_s=0.05).start()
    try:
        deadline = time.monotonic() + 30
        while queue.get(job_id).status != "done" and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        workers.stop()
    job = queue.get(job_id)
    assert job.status == "done" and job.attempts == 1 and calls == [job_id]


def test_only_the_lease_holder_can_finish_or_fail_a_job(tmp_path):
    from hfexport.entrypoints.service.queue import JobQueue

    queue = JobQueue(tmp_path / "q.sqlite", lease_s=0.2, max_attempts=3)
    job_id, _ = queue.enqueue("alice-svc/lease", "b" * 40, JobPlan(("dynamo",)))
    _, first = queue.claim()
    time.sleep(0.3)  # the first holder stalls past its lease; another worker takes the job
    job, second = queue.claim()
    assert job.id == job_id and job.attempts == 2 and second != first
    assert queue.finish(job_id, first, {"action": "opened"}) is False
    assert queue.fail(job_id, first, "late", None) is False and queue.renew(job_id, first) is False
    assert queue.get(job_id).status == "running"
    assert queue.finish(job_id, second, {"action": "opened"}) is True and queue.get(job_id).status == "done"


def test_a_kill9_loop_stops_at_max_attempts(hub, accounts, tmp_path, workspace):
    repo = "alice-svc/kill-loop"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-kill-loop", seed=60))
    db = tmp_path / "q.sqlite"
    port = None
    job_id = None
    for round_ in range(4):
        service = Service(db, [repo], accounts["bot"], extra=("--max-attempts", "2"))
        if port is not None:
            service.port = port
        service.start()
        port = service.port
        if job_id is None:
            status, body = service.post(_payload(repo, sha))
            assert status == 202
            job_id = body["job"]
        deadline = time.monotonic() + 30
        while service.get(f"/jobs/{job_id}")["status"] in ("queued",) and time.monotonic() < deadline:
            time.sleep(0.2)
        job = service.get(f"/jobs/{job_id}")
        service.kill9()
        if job["status"] == "failed":
            break
        assert job["status"] == "running" and job["attempts"] == round_ + 1, job
    assert job["status"] == "failed" and job["attempts"] == 2, job
    assert "gave up after 2 attempts" in job["error"]
    assert _prs(hub, accounts["alice"], repo) == []


def test_a_bad_input_job_is_attempted_once(hub, accounts, tmp_path):
    service = Service(tmp_path / "q.sqlite", ["*"], accounts["bot"]).start()
    try:
        status, body = service.post(_payload("alice-svc/no-such-model", "c" * 40))
        assert status == 202
        job = service.wait_done(body["job"], timeout=120)
        assert job["status"] == "failed" and job["attempts"] == 1, job
        assert "exited with 2" in job["error"]
    finally:
        service.stop()


def test_an_older_commits_job_never_runs_once_the_branch_moved_on(hub, accounts, tmp_path):
    """Ten repos, each with two commits; their jobs queued older first or newer first, as retries,
    late or re-sent webhooks and two workers order them. Every job of an older commit ends
    `superseded` (naming the head's job) without running; each repo's head runs exactly once: 0 of
    10 PRs could be pointed back at an older commit. A re-sent webhook for the older commit later
    queues nothing."""
    import random

    from hfexport.entrypoints.service import QueueWorkers, ServiceConfig, branch_head
    from hfexport.entrypoints.service.queue import JobQueue

    ran: list[tuple[str, str]] = []

    class RecordingExecutor:
        def run(self, job):
            ran.append((job.repo_id, job.head_sha))
            return {"action": "opened"}

    owner, plan = _api(hub, accounts["alice"]), JobPlan(("dynamo",))
    queue = JobQueue(tmp_path / "q.sqlite", max_attempts=4)
    heads, older = {}, {}
    order = random.Random(0)
    for trial in range(10):
        repo = f"alice-svc/newest-{trial}"
        owner.create_repo(repo)
        owner.upload_file(path_or_fileobj=b"one", path_in_repo="a.txt", repo_id=repo)
        older[repo] = owner.model_info(repo).sha
        owner.upload_file(path_or_fileobj=b"two", path_in_repo="a.txt", repo_id=repo)
        heads[repo] = owner.model_info(repo).sha
        shas = [older[repo], heads[repo]]
        order.shuffle(shas)
        for sha in shas:
            queue.enqueue(repo, sha, plan)
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=plan, workers=2)
    workers = QueueWorkers(config, queue, RecordingExecutor(), idle_s=0.05, head=branch_head(None, "main")).start()
    try:
        deadline = time.monotonic() + 60
        while (queue.counts().get("queued") or queue.counts().get("running")) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        workers.stop()
    assert sorted(ran) == sorted(heads.items()), ran
    jobs = {(j.repo_id, j.head_sha): j for j in queue.list(limit=100)}
    for repo, sha in older.items():
        job, newest = jobs[(repo, sha)], jobs[(repo, heads[repo])]
        assert (
            job.status == "superseded"
            and job.attempts == 1
            and job.result
            == {
                "head_sha": heads[repo],
                "job": newest.id,
            }
        ), job
        assert newest.status == "done"
        assert queue.enqueue(repo, sha, plan) == (job.id, False)  # a re-sent webhook: nothing new


def test_a_worker_outlives_a_locked_queue_and_healthz_says_what_is_wrong(tmp_path):
    """Another process holds the queue's database locked past the busy timeout (here 0.3 s, 30 s
    in service): the workers' claims fail, the threads live on, `/healthz` answers 503 naming the
    unwritable queue meanwhile; once the lock goes the job runs and `/healthz` is 200. A worker
    thread that has stopped makes `/healthz` 503 naming it."""
    import sqlite3
    import threading

    from starlette.testclient import TestClient

    from hfexport.entrypoints.service import QueueWorkers, ServiceConfig, create_app
    from hfexport.entrypoints.service.queue import JobQueue

    class Done:
        def run(self, job):
            return {"action": "opened"}

    queue = JobQueue(tmp_path / "q.sqlite", busy_timeout_s=0.3)
    job_id, _ = queue.enqueue("alice-svc/locked", "c" * 40, JobPlan(("dynamo",)))
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=JobPlan(("dynamo",)), workers=2)
    locker = sqlite3.connect(tmp_path / "q.sqlite", isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    workers = QueueWorkers(config, queue, Done(), idle_s=0.05).start()
    client = TestClient(create_app(config, queue, workers))
    try:
        time.sleep(1.5)  # several failed claims, each waiting out the busy timeout
        answer = client.get("/healthz")
        assert answer.status_code == 503 and "the queue cannot be written" in answer.json()["problems"][0]
        assert workers.dead() == []
        locker.execute("ROLLBACK")
        deadline = time.monotonic() + 30
        while queue.get(job_id).status != "done" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert queue.get(job_id).status == "done"
        assert client.get("/healthz").status_code == 200
        # A thread that stopped (an error no guard caught): named, 503.
        stopped = threading.Thread(target=lambda: None, name="worker-9")
        stopped.start()
        stopped.join()
        workers._threads.append(stopped)
        answer = client.get("/healthz")
        assert answer.status_code == 503 and answer.json()["problems"] == ["worker-9 has stopped"]
    finally:
        locker.close()
        workers.stop()


def test_a_commit_that_failed_for_a_transient_cause_is_queued_again_by_its_next_webhook(tmp_path):
    """The Hub down through every attempt: the job fails for good, marked transient; the webhook
    sent again for that commit queues it again with its attempts anew, and it runs. A job that
    failed for a cause no retry fixes (bad input) stays failed: its webhook queues nothing."""
    from hfexport.entrypoints.service import QueueWorkers, ServiceConfig
    from hfexport.entrypoints.service.executors import JobFailed
    from hfexport.entrypoints.service.queue import JobQueue

    hub_down = {"alice-svc/outage": True}

    class Executor:
        def run(self, job):
            if job.repo_id == "alice-svc/bad-input":
                raise JobFailed("push exited with 2: no such model", retryable=False)
            if hub_down[job.repo_id]:
                raise JobFailed("push exited with 3: the Hub is unreachable", retryable=True)
            return {"action": "opened"}

    plan = JobPlan(("dynamo",))
    queue = JobQueue(tmp_path / "q.sqlite", max_attempts=2)
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=plan, max_attempts=2, backoff_s=0.01)
    outage, _ = queue.enqueue("alice-svc/outage", "d" * 40, plan)
    bad, _ = queue.enqueue("alice-svc/bad-input", "e" * 40, plan)
    workers = QueueWorkers(config, queue, Executor(), idle_s=0.02).start()
    try:

        def settle() -> None:
            deadline = time.monotonic() + 30
            while (queue.counts().get("queued") or queue.counts().get("running")) and time.monotonic() < deadline:
                time.sleep(0.05)

        settle()
        assert queue.get(outage).status == "failed" and queue.get(outage).attempts == 2
        assert queue.get(bad).status == "failed" and queue.get(bad).attempts == 1
        hub_down["alice-svc/outage"] = False  # the Hub is back; the owner presses "replay"
        assert queue.enqueue("alice-svc/outage", "d" * 40, plan) == (outage, True)
        assert queue.enqueue("alice-svc/bad-input", "e" * 40, plan) == (bad, False)
        settle()
    finally:
        workers.stop()
    job = queue.get(outage)
    assert job.status == "done" and job.attempts == 1, job
    assert queue.get(bad).status == "failed"

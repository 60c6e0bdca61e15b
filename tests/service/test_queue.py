"""The durable queue (service/queue.py): leases, attempts, fairness between repos and namespaces,
retention."""

from __future__ import annotations

import time

import tiny_models
from service_runs import SECRET, Service, free_port, hub_api, pull_requests, seeded, webhook_payload  # noqa: F401

from hfexport.messages import JobPlan


def test_a_job_running_past_its_lease_is_not_started_twice(tmp_path):
    """Two workers, a 1 s lease, a job that takes 3.5 s: the heartbeat keeps the lease, so the
    second worker never claims it (without the heartbeat it would, after 1 s)."""
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.workers import QueueWorkers

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
    sha = seeded(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-kill-loop", seed=60))
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
            status, body = service.post(webhook_payload(repo, sha))
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
    assert pull_requests(hub, accounts["alice"], repo) == []


def test_a_bad_input_job_is_attempted_once(hub, accounts, tmp_path):
    service = Service(tmp_path / "q.sqlite", ["*"], accounts["bot"]).start()
    try:
        status, body = service.post(webhook_payload("alice-svc/no-such-model", "c" * 40))
        assert status == 202
        job = service.wait_done(body["job"], timeout=120)
        assert job["status"] == "failed" and job["attempts"] == 1, job
        # The push's own refusal, whole, with its fix in the service's terms (no `--token`).
        assert "has no repo 'alice-svc/no-such-model'" in job["error"] and "\nfix: " in job["error"], job
        assert "--token" not in job["error"], job
    finally:
        service.stop()


def test_a_burst_of_49_commits_to_one_repo_delays_another_repos_job_by_one_job_at_most(tmp_path):
    """49 webhooks for 49 commits of one repo, then one for another repo, to the real app: every one
    is queued (202), the busy repo's waiting jobs collapse to its newest commit, and the other repo's
    job runs second. Claims go round-robin: with jobs of three plans waiting for one repo, a job of
    another repo queued after them runs second too."""
    from starlette.testclient import TestClient

    from hfexport.entrypoints.service.app import create_app
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.workers import QueueWorkers

    ran: list[tuple[str, str, str]] = []

    class Recording:
        def run(self, job):
            ran.append((job.repo_id, job.head_sha, str(job.plan)))
            return {"action": "opened"}

    plan = JobPlan(("dynamo",))
    queue = JobQueue(tmp_path / "q.sqlite")
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=plan)
    client = TestClient(create_app(config, queue))
    busy = [f"{i:040x}" for i in range(1, 50)]
    for sha in busy:
        answer = client.post(
            "/webhook", json=webhook_payload("alice-svc/busy", sha), headers={"X-Webhook-Secret": SECRET}
        )
        assert answer.status_code == 202, answer.text
    answer = client.post(
        "/webhook", json=webhook_payload("bob-svc/quiet", "f" * 40), headers={"X-Webhook-Secret": SECRET}
    )
    assert answer.status_code == 202
    assert queue.counts() == {"superseded": 48, "queued": 2}
    heads = {"alice-svc/busy": busy[-1], "bob-svc/quiet": "f" * 40}

    def drain() -> None:
        workers = QueueWorkers(config, queue, Recording(), idle_s=0.02, head=heads.get).start()
        try:
            deadline = time.monotonic() + 30
            while queue.counts().get("queued") and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            workers.stop()

    drain()
    assert ran == [("alice-svc/busy", busy[-1], str(plan)), ("bob-svc/quiet", "f" * 40, str(plan))]
    # Round-robin: three plans of the busy repo wait, then the quiet repo's job: one of the busy
    # repo's (served longest ago), the quiet one's, then the rest.
    ran.clear()
    for backends in (("onnx",), ("executorch",), ("dynamo", "onnx")):
        queue.enqueue("alice-svc/busy", busy[-1], JobPlan(backends))
    queue.enqueue("bob-svc/quiet", "f" * 40, JobPlan(("onnx",)))
    drain()
    assert [repo for repo, _, _ in ran] == ["alice-svc/busy", "bob-svc/quiet", "alice-svc/busy", "alice-svc/busy"]


def test_one_namespace_cannot_fill_the_queue_for_the_others(tmp_path):
    """A namespace at its cap of waiting jobs gets 503 with Retry-After for a new repo's commit;
    another namespace's webhook is still queued."""
    from starlette.testclient import TestClient

    from hfexport.entrypoints.service.app import create_app
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.queue import JobQueue

    plan = JobPlan(("dynamo",))
    queue = JobQueue(tmp_path / "q.sqlite", max_queued_per_namespace=3)
    client = TestClient(create_app(ServiceConfig(secret=SECRET, watch={"*"}, plan=plan), queue))
    codes = [
        client.post(
            "/webhook", json=webhook_payload(f"big-org/repo-{i}", "a" * 40), headers={"X-Webhook-Secret": SECRET}
        )
        for i in range(4)
    ]
    assert [c.status_code for c in codes] == [202, 202, 202, 503]
    assert codes[-1].headers["retry-after"] == "60" and "big-org/repo-3" in codes[-1].json()["error"]
    other = client.post(
        "/webhook", json=webhook_payload("small-org/repo", "b" * 40), headers={"X-Webhook-Secret": SECRET}
    )
    assert other.status_code == 202


def test_finished_jobs_are_pruned_after_the_retention_and_healthz_reads_only_the_waiting_ones(tmp_path, accounts):
    """A queue holding 100,000 jobs finished a year ago and 10 finished today: `serve --keep-days 30`
    deletes the old ones and keeps today's; `/healthz` (unauthenticated) counts only the jobs
    waiting, through the status index — its cost follows the queue, not the history."""
    import sqlite3

    from hfexport.entrypoints.service.queue import JobQueue

    db = tmp_path / "q.sqlite"
    queue, year_ago = JobQueue(db), time.time() - 365 * 86400
    with sqlite3.connect(db) as connection:
        connection.executemany(
            "INSERT INTO jobs (dedup_key, repo_id, head_sha, plan_key, status, created_at, updated_at) "
            "VALUES (?, ?, ?, 'dynamo|auto', ?, ?, ?)",
            [
                (
                    f"old/{i}",
                    f"old/r{i % 100}",
                    f"{i:040x}",
                    ("done", "failed", "superseded")[i % 3],
                    year_ago,
                    year_ago,
                )
                for i in range(100_000)
            ]
            + [(f"new/{i}", "new/r", f"{i:040x}", "done", time.time(), time.time()) for i in range(10)],
        )
    plan = " ".join(
        row[-1]
        for row in queue._connect().execute(
            "EXPLAIN QUERY PLAN SELECT status, COUNT(*) FROM jobs WHERE status IN ('queued', 'running') GROUP BY status"
        )
    )
    assert plan.startswith("SEARCH jobs USING COVERING INDEX") and "SCAN" not in plan, plan
    service = Service(db, ["new/r"], accounts["bot"], extra=("--keep-days", "30", "--warm", "0")).start()
    try:
        deadline = time.monotonic() + 60
        while queue.counts().get("done", 0) + queue.counts().get("failed", 0) > 10 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert queue.counts() == {"done": 10}, queue.counts()
        assert service.get("/healthz", secret=None) == {"ok": True, "jobs": {}}
    finally:
        service.stop()

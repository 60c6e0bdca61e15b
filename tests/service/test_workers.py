"""The workers that run the queue's jobs (service/workers.py): the newest commit wins, transient
failures come back, the fleet's PR writes are paced."""

from __future__ import annotations

import time

from service_runs import SECRET, Service, free_port, hub_api, pull_requests, seeded, webhook_payload  # noqa: F401

from hfexport.entrypoints.service.outcome import Superseded
from hfexport.messages import JobPlan


def test_an_older_commits_job_never_runs_once_the_branch_moved_on(hub, accounts, tmp_path):
    """Ten repos, each with two commits; their jobs queued older first or newer first, as retries,
    late or re-sent webhooks and two workers order them. Every job of an older commit ends
    `superseded` (naming the head's job) without running; each repo's head runs exactly once: 0 of
    10 PRs could be pointed back at an older commit. A re-sent webhook for the older commit later
    queues nothing."""
    import random

    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.workers import QueueWorkers, branch_head

    ran: list[tuple[str, str]] = []

    class RecordingExecutor:
        def run(self, job):
            ran.append((job.repo_id, job.head_sha))
            return {"action": "opened"}

    owner, plan = hub_api(hub, accounts["alice"]), JobPlan(("dynamo",))
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
        # Superseded when the head's webhook arrived (attempts 0), or when it started (1).
        assert job.status == "superseded" and job.attempts <= 1 and job.result == Superseded(heads[repo], newest.id), (
            job
        )
        assert newest.status == "done"
        assert queue.enqueue(repo, sha, plan) == (job.id, False)  # a re-sent webhook: nothing new


def test_a_commit_the_branch_is_force_pushed_back_to_runs_again(hub, accounts, tmp_path):
    """main goes A → B → (force-push) A: A's job ran before B's, and its webhook now is no
    duplicate: it runs again (and push takes the PR back to A). Another replay of it is one."""
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.workers import QueueWorkers, branch_head

    ran: list[str] = []

    class RecordingExecutor:
        def run(self, job):
            ran.append(job.head_sha)
            return {"action": "updated"}

    repo, owner, plan = "alice-svc/rolled-back", hub_api(hub, accounts["alice"]), JobPlan(("dynamo",))
    owner.create_repo(repo)
    owner.upload_file(path_or_fileobj=b"one", path_in_repo="a.txt", repo_id=repo)
    a = owner.model_info(repo).sha
    owner.upload_file(path_or_fileobj=b"two", path_in_repo="a.txt", repo_id=repo)
    b = owner.model_info(repo).sha
    queue = JobQueue(tmp_path / "q.sqlite", max_attempts=4)
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=plan, workers=1)
    workers = QueueWorkers(config, queue, RecordingExecutor(), idle_s=0.05, head=branch_head(None, "main")).start()

    def settle() -> None:
        deadline = time.monotonic() + 30
        while (queue.counts().get("queued") or queue.counts().get("running")) and time.monotonic() < deadline:
            time.sleep(0.05)

    try:
        hub.force_push(repo, a)
        assert queue.enqueue(repo, a, plan)[1]
        settle()
        hub.force_push(repo, b)
        assert queue.enqueue(repo, b, plan)[1]
        settle()
        hub.force_push(repo, a)  # the owner withdraws B
        assert queue.enqueue(repo, a, plan)[1], "the webhook of the commit main came back to was dropped"
        settle()
        assert not queue.enqueue(repo, a, plan)[1]  # a replay of it, once it ran again
    finally:
        workers.stop()
    assert ran == [a, b, a], ran


def test_a_worker_outlives_a_locked_queue_and_healthz_says_what_is_wrong(tmp_path):
    """Another process holds the queue's database locked past the busy timeout (here 0.3 s, 30 s
    in service): the workers' claims fail, the threads live on, `/healthz` answers 503 naming the
    unwritable queue meanwhile; once the lock goes the job runs and `/healthz` is 200. A worker
    thread that has stopped makes `/healthz` 503 naming it."""
    import sqlite3
    import threading

    from starlette.testclient import TestClient

    from hfexport.entrypoints.service.app import create_app
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.workers import QueueWorkers

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
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.executors import JobFailed
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.workers import QueueWorkers

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


def test_a_five_minute_hub_outage_loses_no_commit(tmp_path):
    """Twenty repos push during a five-minute Hub outage (a simulated clock): every attempt in it
    fails transiently and is retried on the schedule (30 s, 2 min, 8 min…); after it every commit's
    job is done, none failed, no attempt ran early. The old schedule (5 s doubling, four attempts)
    would have given up on all twenty after 35 s."""
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.executors import JobFailed
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.workers import QueueWorkers

    now = [1_000_000.0]
    outage_ends = now[0] + 300
    attempts: list[tuple[str, float]] = []

    class HubDown:
        def run(self, job):
            attempts.append((job.repo_id, now[0]))
            if now[0] < outage_ends:
                raise JobFailed("push exited with 3: the Hub answered 503", retryable=True)
            return {"action": "opened"}

    plan = JobPlan(("dynamo",))
    queue = JobQueue(tmp_path / "q.sqlite", clock=lambda: now[0])
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=plan)
    workers = QueueWorkers(config, queue, HubDown(), idle_s=0.001)
    jobs = []
    for i in range(20):
        now[0] += 7  # a push every 7 s, from the outage's start
        jobs.append(queue.enqueue(f"alice-svc/outage-{i}", f"{i + 1:040x}", plan)[0])
        workers._once()
    while queue.counts().get("queued"):
        now[0] = max(now[0], queue.next_run_at())  # the clock jumps to the next retry
        workers._once()
    assert {queue.get(j).status for j in jobs} == {"done"}, queue.counts()
    by_repo: dict[str, list[float]] = {}
    for repo, at in attempts:
        by_repo.setdefault(repo, []).append(at)
    for times in by_repo.values():
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert all(gap >= config.retry_delay(n + 1) for n, gap in enumerate(gaps)), gaps
    assert max(len(t) for t in by_repo.values()) <= 4  # 30 s + 2 min + 8 min covers five minutes
    old = ServiceConfig(secret=SECRET, watch={"*"}, plan=plan, max_attempts=4, backoff_s=5, max_backoff_s=20)
    assert sum(old.retry_delay(n) for n in range(1, 4)) < 60  # how the old schedule lost them


def test_pr_writes_are_paced_for_the_fleet_and_a_429_pauses_every_worker(tmp_path):
    """A token bucket of 60 writes an hour, bursts of 2, on a simulated clock: five repos' jobs start
    two at once, then one a minute, none early, and a job put back to wait for its token has not
    spent an attempt. A push that ended on the Hub's 429 pauses the writes of every worker on the
    queue until its retry is due."""
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.executors import JobFailed
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.workers import QueueWorkers

    now = [5_000_000.0]
    started: list[tuple[str, float]] = []
    limited = {"alice-svc/limited"}

    class Recording:
        def run(self, job):
            started.append((job.repo_id, now[0]))
            if job.repo_id in limited:
                limited.clear()
                raise JobFailed(
                    "push exited with 3: 429 Too Many Requests: you have reached your 'api' rate limit", True
                )
            return {"action": "opened"}

    plan = JobPlan(("dynamo",))
    queue = JobQueue(tmp_path / "q.sqlite", clock=lambda: now[0])
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=plan, writes_per_hour=60, writes_burst=2)
    workers = QueueWorkers(config, queue, Recording(), idle_s=0.001)

    def drain() -> None:
        while queue.counts().get("queued"):
            workers._once()
            now[0] = max(now[0], queue.next_run_at() or now[0])

    for i in range(5):
        queue.enqueue(f"alice-svc/paced-{i}", f"{i + 1:040x}", plan)
    t0 = now[0]
    drain()
    offsets = [round(at - t0) for _, at in started]
    assert offsets == [0, 0, 60, 120, 180], offsets
    assert all(j.attempts == 1 and j.status == "done" for j in queue.list())
    # A 429: the bucket is paused for the failed job's retry delay (30 s); nothing starts before.
    started.clear()
    now[0] += 3600  # the bucket is full again
    queue.enqueue("alice-svc/limited", "a" * 40, plan)
    workers._once()
    queue.enqueue("alice-svc/other", "b" * 40, plan)
    t1 = now[0]
    drain()
    assert started[0] == ("alice-svc/limited", t1)
    assert sorted(repo for repo, _ in started[1:]) == ["alice-svc/limited", "alice-svc/other"]
    assert all(at - t1 >= config.retry_delay(1) for _, at in started[1:]), started
    assert {j.status for j in queue.list()} == {"done"}


def test_a_clock_stepping_back_an_hour_never_makes_a_pr_write_wait_an_hour(tmp_path):
    """The machine's clock steps back 1 h (NTP, a restored VM) after the bucket emptied, and after a
    429's pause: the next write waits its token's minute and the pause's 30 s, not an hour more."""
    from hfexport.entrypoints.service.queue import JobQueue

    now = [5_000_000.0]
    queue = JobQueue(tmp_path / "q.sqlite", clock=lambda: now[0])
    assert queue.take_write(60, 2) == 0 and queue.take_write(60, 2) == 0  # the burst, spent
    now[0] -= 3600
    assert 0 < queue.take_write(60, 2) <= 60
    now[0] += 60
    assert queue.take_write(60, 2) == 0  # a minute later by the new clock: its token is there
    queue.pause_writes(30)
    now[0] -= 3600
    assert 0 < queue.take_write(60, 2) <= 30
    now[0] += 60
    assert queue.take_write(60, 2) == 0

"""A durable job queue on SQLite (WAL mode): a restart, or a `kill -9`, loses nothing.

One row per export job, unique by its dedup key (repo, head sha, plan): a replayed or repeated
webhook inserts nothing new. A repo's queued jobs collapse to its newest commit: a new one
supersedes those of the same plan still waiting, so a burst of 49 pushes is one export. Claims go
round-robin across repos (the repo claimed longest ago first), so one busy repo never holds the
others back by more than one job. Waiting jobs are capped per namespace (an organisation's
thousand repos cannot fill the queue for everyone else) and in all.

QueueWorkers claim a row by moving it to `running` inside a write transaction, so two workers
never take the same job, and get a lease token: only the holder can renew the lease (a heartbeat
while the job runs), finish or fail the job. Rows left `running` by a process that died are handed
out again when their lease expires (at once on start-up when that process was of this machine, see
`recover`). Every claim counts an attempt; a job that has used `max_attempts` is failed instead of
claimed again, however its runs ended (a `kill -9` loop included).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from ...messages import JobPlan
from ...redact import without_local_paths
from .outcome import JobOutcome, JobResult, Superseded, result_of


class JobStatus(StrEnum):
    """Where a queued job is (the `status` column)."""

    QUEUED = "queued"
    RUNNING = "running"  # claimed, under a lease its worker renews
    DONE = "done"
    FAILED = "failed"  # gave up: not retryable, or out of attempts
    # The branch had moved on when it started: the job of the newer head runs instead (`result`
    # names it), so no PR is ever pointed back at an older commit.
    SUPERSEDED = "superseded"


_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dedup_key TEXT NOT NULL UNIQUE,
    repo_id TEXT NOT NULL,
    head_sha TEXT NOT NULL,
    plan_key TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'queued',   -- queued | running | done | failed | superseded
    attempts INTEGER NOT NULL DEFAULT 0,
    next_run_at REAL NOT NULL DEFAULT 0,
    lease_until REAL,
    lease_owner TEXT,
    result TEXT,
    error TEXT,
    transient INTEGER NOT NULL DEFAULT 0,    -- failed for good, but of a failure worth a retry later
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_ready ON jobs (status, next_run_at);
CREATE INDEX IF NOT EXISTS jobs_repo ON jobs (repo_id, status);
CREATE INDEX IF NOT EXISTS jobs_finished ON jobs (status, updated_at);
-- A token bucket the whole fleet's PR writes draw from (every service on this queue), and a pause
-- the Hub's 429 sets.
CREATE TABLE IF NOT EXISTS pacing (
    name TEXT PRIMARY KEY,
    tokens REAL NOT NULL,
    updated_at REAL NOT NULL,
    paused_until REAL NOT NULL DEFAULT 0
);
-- The request page's requests: its key's digest (the key is the page's only way in) → its job. Kept
-- here, not in memory, so a page still answers after a restart ("ask again": its token is gone).
CREATE TABLE IF NOT EXISTS request_pages (
    key_digest TEXT PRIMARY KEY,
    job_id INTEGER NOT NULL,
    created_at REAL NOT NULL
);
-- Per repo, the sequence number of its last claim: claims go to the repo served longest ago.
CREATE TABLE IF NOT EXISTS repos (
    repo_id TEXT PRIMARY KEY,
    last_claim INTEGER NOT NULL DEFAULT 0
);
"""


@dataclass(frozen=True)
class RepoStatus:
    """One repo as the status page shows it: its newest job, and what its jobs did last."""

    repo_id: str
    head_sha: str  # the newest job's commit
    status: JobStatus  # the newest job's state
    waiting: int  # its jobs queued (a running one is its state, not waiting)
    pr_url: str | None  # the PR the last done job opened or updated
    action: str | None  # what that job did (opened, updated, unchanged…)
    error: str | None  # the newest failed job's error, without local paths
    updated_at: float
    started_at: float | None = None  # when the newest job's current run began (running: its elapsed time)
    repo_url: str | None = None  # the derived repo the last done job wrote to (`push --into`)
    # The newest job's, where an operator's retry may queue it again; None for a request's job (its
    # requester's token is gone: only they can ask again).
    job_id: int | None = None


@dataclass
class Job:
    id: int
    repo_id: str
    head_sha: str
    plan: JobPlan
    status: JobStatus
    attempts: int
    result: JobResult | None  # when done, its outcome; when superseded, the newer head and its job
    error: str | None
    created_at: float
    updated_at: float
    # When its current run began (running: the request page's elapsed time).
    started_at: float | None = None
    # A requester's token the job runs with (`request_page.RequestTokens`): never stored or shown.
    hub_token: str | None = field(default=None, repr=False, compare=False)
    # Where the executor says each stage its push reaches (`stages.JobStages`): never stored.
    on_stage: Callable[[str], None] | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        """As `/jobs` shows it: no local path in the error, no token."""
        return {
            **{k: v for k, v in self.__dict__.items() if k not in ("hub_token", "on_stage")},
            "result": self.result.to_dict() if self.result is not None else None,
            "plan": str(self.plan),
            "status": str(self.status),
            "error": without_local_paths(self.error) if self.error else None,
        }


class JobQueue:
    def __init__(
        self,
        path: str | Path,
        lease_s: float = 300,
        max_attempts: int = 4,
        max_queued: int = 1000,
        busy_timeout_s: float = 30,
        max_queued_per_namespace: int = 1000,
        clock: Callable[[], float] = time.time,
    ):
        """Args:
        path: the SQLite file (created with its tables if new).
        lease_s: how long a claim lasts unless renewed.
        max_attempts: claims per job (restarts included) before it is failed.
        max_queued: jobs waiting or running in all, beyond which nothing is queued (a bound on the file).
        busy_timeout_s: how long a call waits for another writer before it raises.
        max_queued_per_namespace: jobs the repos of one namespace may have waiting or running: beyond,
            its webhooks get 503 and the other namespaces' do not (one repo holds one waiting job
            per plan at most: its newest commit's).
        clock: the time (seconds): leases, retry times; tests pass a simulated one.
        """
        self.path = str(path)
        self.clock = clock
        self.max_queued_per_namespace = max_queued_per_namespace
        self.lease_s = lease_s
        # How long a call waits for another writer (a backup, a second instance) before it raises.
        self.busy_timeout_s = busy_timeout_s
        self.max_attempts = max_attempts
        self.max_queued = max_queued
        self._local = threading.local()
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            columns = {row["name"] for row in db.execute("PRAGMA table_info(jobs)")}
            if "lease_owner" not in columns:  # a queue written by an earlier version
                db.execute("ALTER TABLE jobs ADD COLUMN lease_owner TEXT")
            if "transient" not in columns:
                db.execute("ALTER TABLE jobs ADD COLUMN transient INTEGER NOT NULL DEFAULT 0")
            if "started_at" not in columns:  # when its current run began (the status page's elapsed time)
                db.execute("ALTER TABLE jobs ADD COLUMN started_at REAL")

    def _connect(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            # One connection per thread; `isolation_level=None` so BEGIN IMMEDIATE is ours to issue.
            db = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=True)
            db.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_s * 1000)}")
            db.execute("PRAGMA synchronous=NORMAL")
            db.row_factory = sqlite3.Row
            self._local.db = db
        return db

    def writable(self, timeout_s: float = 1.0) -> bool:
        """Whether a write transaction can start within `timeout_s` (a fresh connection: `/healthz`
        asks it, and must answer while a worker waits on a lock)."""
        try:
            db = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None)
            try:
                db.execute("BEGIN IMMEDIATE")
                db.execute("ROLLBACK")
            finally:
                db.close()
        except sqlite3.Error:
            return False
        return True

    def full(self, repo_id: str | None = None) -> bool:
        """Whether new work (of `repo_id`) is refused: the queue holds `max_queued` jobs waiting or
        running, or `repo_id`'s namespace `max_queued_per_namespace` of them."""
        db = self._connect()
        if repo_id is not None:
            namespace = repo_id.split("/")[0]
            # The namespace's ids sort between "ns/" and "ns0" ("0" follows "/"): the index serves it.
            row = db.execute(
                "SELECT COUNT(*) AS n FROM jobs WHERE repo_id >= ? AND repo_id < ? AND status IN ('queued', 'running')",
                (f"{namespace}/", f"{namespace}0"),
            ).fetchone()
            if row["n"] >= self.max_queued_per_namespace:
                return True
        row = db.execute("SELECT COUNT(*) AS n FROM jobs WHERE status IN ('queued', 'running')").fetchone()
        return row["n"] >= self.max_queued

    def requests_full(self, requester: str, per_requester: int) -> str | None:
        """Why a request of `requester` is refused now, or None: the jobs asked for on the request page
        hold half of `max_queued` (the other half stays the watched repos'), or `requester`'s own
        hold `per_requester`."""
        db = self._connect()
        active = "status IN ('queued', 'running')"
        mine = f"|by={requester}"
        row = db.execute(
            f"SELECT COUNT(*) AS n, SUM(substr(plan_key, -?) = ?) AS mine FROM jobs WHERE {active} "
            "AND instr(plan_key, '|by=') > 0",
            (len(mine), mine),
        ).fetchone()
        if (row["mine"] or 0) >= per_requester:
            return f"{requester} has {row['mine']} exports waiting or running, the most one person may have at once"
        if row["n"] >= self.max_queued // 2:
            return "the requests' share of the queue is full (the rest is kept for the repos the service watches)"
        return None

    def pull_request_jobs(self, repo_id: str, limit: int = 50) -> list[Job]:
        """The newest jobs of `repo_id` whose exports go to a pull request on it (no `into`), waiting,
        running or done, newest first: what a request for another such PR would duplicate."""
        rows = (
            self._connect()
            .execute(
                "SELECT * FROM jobs WHERE repo_id=? AND status IN ('queued', 'running', 'done') "
                "AND instr(plan_key, '|into=') = 0 ORDER BY id DESC LIMIT ?",
                (repo_id, limit),
            )
            .fetchall()
        )
        return [_job(row) for row in rows]

    def remember_page(self, key_digest: str, job_id: int, keep_s: float = 30 * 86400) -> None:
        """Record that the request page `key_digest` shows `job_id`; pages older than `keep_s` go."""
        now = self.clock()
        db = self._connect()
        db.execute("DELETE FROM request_pages WHERE created_at < ?", (now - keep_s,))
        db.execute("INSERT OR REPLACE INTO request_pages VALUES (?, ?, ?)", (key_digest, job_id, now))

    def page_job(self, key_digest: str) -> int | None:
        row = self._connect().execute("SELECT job_id FROM request_pages WHERE key_digest = ?", (key_digest,)).fetchone()
        return None if row is None else int(row["job_id"])

    def enqueue(self, repo_id: str, head_sha: str, plan: JobPlan, *, is_head: bool = False) -> tuple[int, bool]:
        """Add a job unless one with the same (repo, sha, plan) exists, and supersede the repo's
        jobs of that plan still waiting (the newest commit wins). One that failed for good of a
        transient cause (the Hub down through every attempt) is queued again, with its attempts
        anew: a re-sent webhook is how such a commit gets its export. So is one done before a later
        commit's job: the branch was force-pushed back to it (a late replay of its webhook runs, finds
        the later commit on the branch, and writes nothing).

        Args:
            is_head: the Hub said `head_sha` is the branch's head (a worker's check, not a webhook):
                a job of it that a later-arriving webhook superseded is queued again too.

        Returns:
            (job id, whether it is queued now and was not before).
        """
        key = f"{repo_id}@{head_sha}#{plan}"
        now = self.clock()
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            cursor = db.execute(
                "INSERT OR IGNORE INTO jobs (dedup_key, repo_id, head_sha, plan_key, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (key, repo_id, head_sha, str(plan), now, now),
            )
            created = cursor.rowcount == 1
            if not created:
                # Done, but a later commit's job came after it: the branch came back to this commit
                # (a force-push withdrawing the later one), and the PR must follow it back.
                returned = (
                    "status='done' AND EXISTS (SELECT 1 FROM jobs AS later WHERE later.repo_id=jobs.repo_id "
                    "AND later.plan_key=jobs.plan_key AND later.id>jobs.id AND later.updated_at>jobs.updated_at)"
                )
                revived = f"(status='failed' AND transient=1) OR ({returned})"
                revived += " OR status='superseded'" if is_head else ""
                cursor = db.execute(
                    "UPDATE jobs SET status='queued', attempts=0, next_run_at=0, transient=0, result=NULL, "
                    f"updated_at=? WHERE dedup_key=? AND ({revived})",
                    (now, key),
                )
                created = cursor.rowcount == 1
            job_id = db.execute("SELECT id FROM jobs WHERE dedup_key = ?", (key,)).fetchone()["id"]
            if created:
                db.execute(
                    "UPDATE jobs SET status='superseded', result=?, updated_at=? "
                    "WHERE repo_id=? AND plan_key=? AND status='queued' AND id<>?",
                    (json.dumps({"head_sha": head_sha, "job": job_id}), now, repo_id, str(plan), job_id),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return job_id, created

    def recover(self) -> int:
        """On start-up: jobs a dead process left `running` go back to the queue at once — those
        whose lease ran out, or was taken by a process of this machine that is gone (a `kill -9`).
        A lease another live service holds (a rolling restart on the same `--db`) is left to it."""
        now = self.clock()
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            rows = db.execute("SELECT id, lease_until, lease_owner FROM jobs WHERE status='running'").fetchall()
            gone = [r["id"] for r in rows if (r["lease_until"] or 0) < now or _holder_gone(r["lease_owner"])]
            for job_id in gone:
                db.execute(
                    "UPDATE jobs SET status='queued', lease_until=NULL, lease_owner=NULL, updated_at=? WHERE id=?",
                    (now, job_id),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return len(gone)

    def claim(self) -> tuple[Job, str] | None:
        """Take a ready job (or one whose lease ran out) of the repo claimed longest ago, its oldest;
        mark it running and count an attempt. Returns the job and its lease token, or None. A job
        that has used up its attempts is failed here instead of being handed out again."""
        now = self.clock()
        db = self._connect()
        while True:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(
                    "SELECT jobs.* FROM jobs LEFT JOIN repos ON repos.repo_id = jobs.repo_id "
                    "WHERE (status='queued' AND next_run_at <= ?) OR (status='running' AND lease_until < ?) "
                    "ORDER BY COALESCE(repos.last_claim, 0), jobs.id LIMIT 1",
                    (now, now),
                ).fetchone()
                if row is None:
                    db.execute("COMMIT")
                    return None
                if row["attempts"] >= self.max_attempts:
                    error = f"gave up after {row['attempts']} attempts (the last run ended without a result)"
                    db.execute(
                        "UPDATE jobs SET status='failed', error=COALESCE(error || '; ', '') || ?, lease_until=NULL, "
                        "lease_owner=NULL, updated_at=? WHERE id=?",
                        (error, now, row["id"]),
                    )
                    db.execute("COMMIT")
                    continue
                token = _lease_token()
                db.execute(
                    "UPDATE jobs SET status='running', attempts=attempts+1, lease_until=?, lease_owner=?, "
                    "updated_at=?, started_at=? WHERE id=?",
                    (now + self.lease_s, token, now, now, row["id"]),
                )
                db.execute(
                    "INSERT INTO repos (repo_id, last_claim) VALUES (?, (SELECT COALESCE(MAX(last_claim), 0) + 1 "
                    "FROM repos)) ON CONFLICT (repo_id) DO UPDATE SET last_claim = excluded.last_claim",
                    (row["repo_id"],),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            job = self.get(row["id"])
            return (job, token) if job is not None else None

    def renew(self, job_id: int, token: str) -> bool:
        """Extend the lease of a running job (the holder's heartbeat). False: the lease was lost."""
        now = self.clock()
        cursor = self._connect().execute(
            "UPDATE jobs SET lease_until=?, updated_at=? WHERE id=? AND status='running' AND lease_owner=?",
            (now + self.lease_s, now, job_id, token),
        )
        return cursor.rowcount == 1

    def finish(self, job_id: int, token: str, outcome: JobOutcome | Mapping[str, Any]) -> bool:
        """Done, with what it came to (only the lease holder can; False when the lease was lost)."""
        return self._set(job_id, token, JobStatus.DONE, result=JobOutcome.of(outcome).to_dict())

    def supersede(self, job_id: int, token: str, head_sha: str, newer_id: int) -> bool:
        """End a running job whose repo's branch is now at `head_sha` (job `newer_id` exports it)."""
        return self._set(job_id, token, JobStatus.SUPERSEDED, result=Superseded(head_sha, newer_id).to_dict())

    def fail(self, job_id: int, token: str, error: str, retry_in_s: float | None, transient: bool = False) -> bool:
        """Back to the queue after `retry_in_s`, or `failed` for good when it is None (`transient`:
        of a cause worth a retry later, which the next webhook for the commit gets). Only the
        lease holder can; False when the lease was lost (another worker owns the job now)."""
        if retry_in_s is None:
            cursor = self._connect().execute(
                "UPDATE jobs SET status='failed', error=?, transient=?, lease_until=NULL, lease_owner=NULL, "
                "updated_at=? WHERE id=? AND status='running' AND lease_owner=?",
                (error, int(transient), self.clock(), job_id, token),
            )
            return cursor.rowcount == 1
        now = self.clock()
        cursor = self._connect().execute(
            "UPDATE jobs SET status='queued', error=?, next_run_at=?, lease_until=NULL, lease_owner=NULL, updated_at=? "
            "WHERE id=? AND status='running' AND lease_owner=?",
            (error, now + retry_in_s, now, job_id, token),
        )
        return cursor.rowcount == 1

    def retry(self, job_id: int) -> str | None:
        """A failed job queued again now, its attempts counted afresh (the operator's retry from the
        status page); its last error stays until it runs. None: queued; else why not."""
        job = self.get(job_id)
        if job is None or job.status != JobStatus.FAILED:
            return f"job {job_id} is not a failed job"
        if job.plan.requester:  # it ran with its requester's token, which is gone: only they can ask again
            return f"job {job_id} was asked for on the request page by {job.plan.requester}, whose token is gone"
        now = self.clock()
        cursor = self._connect().execute(
            "UPDATE jobs SET status='queued', attempts=0, transient=0, next_run_at=?, updated_at=? "
            "WHERE id=? AND status='failed'",
            (now, now, job_id),
        )
        return None if cursor.rowcount == 1 else f"job {job_id} changed meanwhile"

    def position(self, job_id: int) -> int | None:
        """How many due jobs `claim` hands out before a queued one, as it orders them now (the repo
        claimed longest ago first, then the oldest job); None: the job is not queued."""
        row = (
            self._connect()
            .execute(
                "SELECT (SELECT COUNT(*) FROM jobs o LEFT JOIN repos r ON r.repo_id = o.repo_id "
                "WHERE o.status='queued' AND o.next_run_at <= ? AND o.id != j.id "
                "AND (COALESCE(r.last_claim, 0), o.id) < (COALESCE(rj.last_claim, 0), j.id)) AS ahead "
                "FROM jobs j LEFT JOIN repos rj ON rj.repo_id = j.repo_id WHERE j.id=? AND j.status='queued'",
                (self.clock(), job_id),
            )
            .fetchone()
        )
        return None if row is None else int(row["ahead"])

    def _set(self, job_id: int, token: str, status: str, result: dict | None = None, error: str | None = None) -> bool:
        cursor = self._connect().execute(
            "UPDATE jobs SET status=?, result=?, error=?, lease_until=NULL, lease_owner=NULL, updated_at=? "
            "WHERE id=? AND status='running' AND lease_owner=?",
            (status, json.dumps(result) if result is not None else None, error, self.clock(), job_id, token),
        )
        return cursor.rowcount == 1

    def take_write(self, per_hour: float, burst: int) -> float:
        """Take one PR write from the fleet's token bucket (`per_hour`, up to `burst` at once).
        Returns 0 when taken, else the seconds until one is due (nothing taken): the bucket is
        empty, or paused after the Hub answered 429 (`pause_writes`)."""
        now, rate = self.clock(), per_hour / 3600
        db = self._connect()
        db.execute("BEGIN IMMEDIATE")
        try:
            row = db.execute("SELECT * FROM pacing WHERE name='pr-writes'").fetchone()
            tokens, paused = (float(burst), 0.0) if row is None else (row["tokens"], row["paused_until"])
            if row is not None:
                # Elapsed time is never negative: where the clock stepped back (NTP, a VM restored),
                # the bucket gains nothing and a pause moves back with the clock, rather than every
                # write waiting for the clock to catch up (an hour, for an hour's step).
                elapsed = now - row["updated_at"]
                if elapsed < 0:
                    paused, elapsed = (paused + elapsed if paused > 0 else paused), 0.0
                tokens = min(float(burst), tokens + elapsed * rate)
            # A token due "now" counts as there (float sums fall short of 1 by a few ulps), and a wait is
            # never shorter than a millisecond: a simulated or coarse clock must move past it.
            wait = paused - now if paused > now else (0.0 if tokens >= 1 - 1e-9 else max(1e-3, (1 - tokens) / rate))
            if wait <= 0:
                tokens -= 1
            db.execute(
                "INSERT INTO pacing (name, tokens, updated_at, paused_until) VALUES ('pr-writes', ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET tokens=excluded.tokens, updated_at=excluded.updated_at, "
                "paused_until=excluded.paused_until",
                (tokens, now, paused),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return max(0.0, wait)

    def pause_writes(self, seconds: float) -> None:
        """No PR write starts for `seconds` (the Hub rate-limited one): for every service on this queue."""
        until = self.clock() + seconds
        self._connect().execute(
            "INSERT INTO pacing (name, tokens, updated_at, paused_until) VALUES ('pr-writes', 0, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET paused_until=MAX(paused_until, excluded.paused_until)",
            (self.clock(), until),
        )

    def release(self, job_id: int, token: str, delay_s: float) -> bool:
        """Give a claimed job back, to run after `delay_s`, its attempt not counted (it never ran)."""
        cursor = self._connect().execute(
            "UPDATE jobs SET status='queued', attempts=MAX(0, attempts-1), next_run_at=?, lease_until=NULL, "
            "lease_owner=NULL, updated_at=? WHERE id=? AND status='running' AND lease_owner=?",
            (self.clock() + delay_s, self.clock(), job_id, token),
        )
        return cursor.rowcount == 1

    def next_run_at(self) -> float | None:
        """When the earliest waiting job becomes ready (a retry's time), or None when none waits."""
        row = self._connect().execute("SELECT MIN(next_run_at) AS t FROM jobs WHERE status='queued'").fetchone()
        return row["t"]

    def repos(self, limit: int = 200) -> list[RepoStatus]:
        """The `limit` repos whose jobs changed last, newest first (the status page's rows)."""
        rows = (
            self._connect()
            .execute(
                "SELECT j.*, "
                "(SELECT COUNT(*) FROM jobs w WHERE w.repo_id = j.repo_id AND w.status = 'queued') "
                "AS waiting, "
                "(SELECT d.result FROM jobs d WHERE d.repo_id = j.repo_id AND d.status = 'done' "
                "ORDER BY d.updated_at DESC LIMIT 1) AS done_result, "
                "(SELECT f.error FROM jobs f WHERE f.repo_id = j.repo_id AND f.status = 'failed' "
                "ORDER BY f.updated_at DESC LIMIT 1) AS failed_error "
                "FROM jobs j WHERE j.id IN (SELECT MAX(id) FROM jobs GROUP BY repo_id) "
                "ORDER BY j.updated_at DESC LIMIT ?",
                (limit,),
            )
            .fetchall()
        )
        statuses = []
        for row in rows:
            result = JobOutcome.of(json.loads(row["done_result"])) if row["done_result"] else JobOutcome()
            statuses.append(
                RepoStatus(
                    repo_id=row["repo_id"],
                    head_sha=row["head_sha"],
                    status=JobStatus(row["status"]),
                    waiting=row["waiting"],
                    pr_url=result.pr_url,
                    repo_url=result.repo_url,
                    action=result.action,
                    error=without_local_paths(row["failed_error"]) if row["failed_error"] else None,
                    updated_at=row["updated_at"],
                    started_at=row["started_at"],
                    job_id=None if JobPlan.parse(row["plan_key"]).requester else row["id"],
                )
            )
        return statuses

    def get(self, job_id: int) -> Job | None:
        if not 0 < job_id < 2**63:  # SQLite integers: anything else is no job, not an error
            return None
        row = self._connect().execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        return _job(row) if row else None

    def list(self, limit: int = 100) -> list[Job]:
        rows = self._connect().execute("SELECT * FROM jobs ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [_job(r) for r in rows]

    def active(self) -> dict[str, int]:
        """The jobs queued and running (what `/healthz` shows): read from the status index, so its
        cost follows the waiting jobs (capped by --max-queued), not the rows kept."""
        rows = (
            self._connect()
            .execute("SELECT status, COUNT(*) AS n FROM jobs WHERE status IN ('queued', 'running') GROUP BY status")
            .fetchall()
        )
        return {r["status"]: r["n"] for r in rows}

    def prune(self, keep_s: float) -> int:
        """Delete the jobs finished (done, failed, superseded) more than `keep_s` ago; how many.
        A replayed webhook of such a commit queues it again (its push then finds the PR unchanged)."""
        cursor = self._connect().execute(
            "DELETE FROM jobs WHERE status IN ('done', 'failed', 'superseded') AND updated_at < ?",
            (self.clock() - keep_s,),
        )
        return cursor.rowcount

    def counts(self) -> dict[str, int]:
        rows = self._connect().execute("SELECT status, COUNT(*) AS n FROM jobs GROUP BY status").fetchall()
        return {r["status"]: r["n"] for r in rows}


def _lease_token() -> str:
    """A lease's token: its holder (machine and process), and a secret part only it knows."""
    return f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(8)}"


def _holder_gone(token: str | None) -> bool:
    """Whether the process that holds a lease (`_lease_token`) is known to be gone: one of this
    machine that no longer runs. Of another machine, or an older token, nothing is known."""
    host, _, rest = (token or "").partition("/")
    pid = rest.partition("/")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if int(pid) == os.getpid():
        return True  # this process's leases from before it started: only a recycled pid does that
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, under another user
        return False
    return False


def _job(row: sqlite3.Row) -> Job:
    return Job(
        id=row["id"],
        repo_id=row["repo_id"],
        head_sha=row["head_sha"],
        plan=JobPlan.parse(row["plan_key"]),
        status=JobStatus(row["status"]),
        attempts=row["attempts"],
        result=result_of(json.loads(row["result"])) if row["result"] else None,
        error=row["error"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        started_at=row["started_at"],
    )

"""A durable job queue on SQLite (WAL mode): a restart, or a `kill -9`, loses nothing.

One row per export job, unique by its dedup key (repo, head sha, plan): a replayed or repeated
webhook inserts nothing new. QueueWorkers claim a row by moving it to `running` inside a write
transaction, so two workers never take the same job, and get a lease token: only the holder can
renew the lease (a heartbeat while the job runs), finish or fail the job. Rows left `running` by a
process that died are handed out again when their lease expires (and at once on start-up, see
`recover`). Every claim counts an attempt; a job that has used `max_attempts` is failed instead of
claimed again, however its runs ended (a `kill -9` loop included).
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from ...report import JobPlan, without_local_paths


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
"""


@dataclass
class Job:
    id: int
    repo_id: str
    head_sha: str
    plan: JobPlan
    status: JobStatus
    attempts: int
    result: dict | None
    error: str | None
    created_at: float
    updated_at: float

    def to_dict(self) -> dict:
        """As `/jobs` shows it: no local path in the error."""
        return {
            **self.__dict__,
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
    ):
        self.path = str(path)
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

    def full(self) -> bool:
        """Whether the queue holds `max_queued` jobs waiting or running: new work is refused then."""
        row = self._connect().execute("SELECT COUNT(*) AS n FROM jobs WHERE status IN ('queued', 'running')").fetchone()
        return row["n"] >= self.max_queued

    def enqueue(self, repo_id: str, head_sha: str, plan: JobPlan) -> tuple[int, bool]:
        """Add a job unless one with the same (repo, sha, plan) exists; one that failed for good of a
        transient cause (the Hub down through every attempt) is queued again, with its attempts
        anew: a re-sent webhook is how such a commit gets its export. Returns (job id, queued)."""
        key = f"{repo_id}@{head_sha}#{plan}"
        now = time.time()
        db = self._connect()
        cursor = db.execute(
            "INSERT OR IGNORE INTO jobs (dedup_key, repo_id, head_sha, plan_key, created_at, updated_at) VALUES (?, ?, "
            "?, ?, ?, ?)",
            (key, repo_id, head_sha, str(plan), now, now),
        )
        created = cursor.rowcount == 1
        if not created:
            cursor = db.execute(
                "UPDATE jobs SET status='queued', attempts=0, next_run_at=0, transient=0, updated_at=? "
                "WHERE dedup_key=? AND status='failed' AND transient=1",
                (now, key),
            )
            created = cursor.rowcount == 1
        row = db.execute("SELECT id FROM jobs WHERE dedup_key = ?", (key,)).fetchone()
        return row["id"], created

    def recover(self) -> int:
        """On start-up: jobs a dead process left `running` go back to the queue."""
        now = time.time()
        cursor = self._connect().execute(
            "UPDATE jobs SET status='queued', lease_until=NULL, lease_owner=NULL, updated_at=? WHERE status='running'",
            (now,),
        )
        return cursor.rowcount

    def claim(self) -> tuple[Job, str] | None:
        """Take the oldest ready job (or one whose lease ran out), mark it running and count an
        attempt. Returns the job and its lease token, or None. A job that has used up its attempts
        is failed here instead of being handed out again."""
        now = time.time()
        db = self._connect()
        while True:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(
                    "SELECT * FROM jobs WHERE (status='queued' AND next_run_at <= ?) OR (status='running' AND "
                    "lease_until < ?) "
                    "ORDER BY id LIMIT 1",
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
                token = secrets.token_hex(8)
                db.execute(
                    "UPDATE jobs SET status='running', attempts=attempts+1, lease_until=?, lease_owner=?, updated_at=? "
                    "WHERE id=?",
                    (now + self.lease_s, token, now, row["id"]),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return self.get(row["id"]), token

    def renew(self, job_id: int, token: str) -> bool:
        """Extend the lease of a running job (the holder's heartbeat). False: the lease was lost."""
        now = time.time()
        cursor = self._connect().execute(
            "UPDATE jobs SET lease_until=?, updated_at=? WHERE id=? AND status='running' AND lease_owner=?",
            (now + self.lease_s, now, job_id, token),
        )
        return cursor.rowcount == 1

    def finish(self, job_id: int, token: str, result: dict) -> bool:
        return self._set(job_id, token, JobStatus.DONE, result=result)

    def supersede(self, job_id: int, token: str, head_sha: str, newer_id: int) -> bool:
        """End a running job whose repo's branch is now at `head_sha` (job `newer_id` exports it)."""
        return self._set(job_id, token, JobStatus.SUPERSEDED, result={"head_sha": head_sha, "job": newer_id})

    def fail(self, job_id: int, token: str, error: str, retry_in_s: float | None, transient: bool = False) -> bool:
        """Back to the queue after `retry_in_s`, or `failed` for good when it is None (`transient`:
        of a cause worth a retry later, which the next webhook for the commit gets). Only the
        lease holder can; False when the lease was lost (another worker owns the job now)."""
        if retry_in_s is None:
            cursor = self._connect().execute(
                "UPDATE jobs SET status='failed', error=?, transient=?, lease_until=NULL, lease_owner=NULL, "
                "updated_at=? WHERE id=? AND status='running' AND lease_owner=?",
                (error, int(transient), time.time(), job_id, token),
            )
            return cursor.rowcount == 1
        now = time.time()
        cursor = self._connect().execute(
            "UPDATE jobs SET status='queued', error=?, next_run_at=?, lease_until=NULL, lease_owner=NULL, updated_at=? "
            "WHERE id=? AND status='running' AND lease_owner=?",
            (error, now + retry_in_s, now, job_id, token),
        )
        return cursor.rowcount == 1

    def _set(self, job_id: int, token: str, status: str, result: dict | None = None, error: str | None = None) -> bool:
        cursor = self._connect().execute(
            "UPDATE jobs SET status=?, result=?, error=?, lease_until=NULL, lease_owner=NULL, updated_at=? "
            "WHERE id=? AND status='running' AND lease_owner=?",
            (status, json.dumps(result) if result is not None else None, error, time.time(), job_id, token),
        )
        return cursor.rowcount == 1

    def get(self, job_id: int) -> Job | None:
        if not 0 < job_id < 2**63:  # SQLite integers: anything else is no job, not an error
            return None
        row = self._connect().execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        return _job(row) if row else None

    def list(self, limit: int = 100) -> list[Job]:
        rows = self._connect().execute("SELECT * FROM jobs ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [_job(r) for r in rows]

    def counts(self) -> dict[str, int]:
        rows = self._connect().execute("SELECT status, COUNT(*) AS n FROM jobs GROUP BY status").fetchall()
        return {r["status"]: r["n"] for r in rows}


def _job(row: sqlite3.Row) -> Job:
    return Job(
        id=row["id"],
        repo_id=row["repo_id"],
        head_sha=row["head_sha"],
        plan=JobPlan.parse(row["plan_key"]),
        status=JobStatus(row["status"]),
        attempts=row["attempts"],
        result=json.loads(row["result"]) if row["result"] else None,
        error=row["error"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )

"""`QueueWorkers`: the threads that claim the queue's jobs and run them on the executor (local or
HF Jobs), the newest commit winning, transient failures retried with backoff."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
import time
from collections.abc import Callable

from ...redact import without_local_paths
from .budget import Busy
from .config import ServiceConfig
from .executors import Executor, JobFailed
from .outcome import JobOutcome
from .queue import JobQueue
from .stages import JobStages
from .tokens import TOKEN_LOST, RequestTokens

log = logging.getLogger("hfexport.serve")
# How a push that ended on the Hub's rate limit says so (huggingface_hub's 429 message).
_RATE_LIMITED = re.compile(r"\b429\b|Too Many Requests|rate limit", re.I)


def branch_head(token: str | None, branch: str) -> Callable[[str], str | None]:
    """`QueueWorkers.head` on the Hub: a repo's `branch` commit now (`HfApi.model_info`), or None
    when the Hub cannot say (unreachable, no such repo or branch): the job then runs as queued."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)

    def head(repo_id: str) -> str | None:
        try:
            return api.model_info(repo_id, revision=branch).sha
        except Exception as e:  # any answer but a commit: not a reason to stop a worker
            log.warning(json.dumps({"msg": "branch head unknown", "repo": repo_id, "error": type(e).__name__}))
            return None

    return head


PRUNE_EVERY_S = 3600.0


class QueueWorkers:
    """`config.workers` threads that claim jobs from the queue and run them on the executor, each
    renewing its job's lease while the executor runs (so a long export is never claimed twice).

    The newest commit wins: a claimed job first asks `head` for its repo's branch head now, and if
    the branch has moved on the job ends `superseded` and the head's job is queued instead (or
    found: one per commit) — a retry, a late or re-sent webhook, or a second worker never points
    a PR back at an older commit. `head` answers None where it cannot tell (the job then runs)."""

    def __init__(
        self,
        config: ServiceConfig,
        queue: JobQueue,
        executor: Executor,
        idle_s: float = 0.5,
        head: Callable[[str], str | None] | None = None,
    ):
        self.config, self.queue, self.executor, self.idle_s = config, queue, executor, idle_s
        self.head = head or (lambda repo_id: None)
        self.tokens = RequestTokens()  # the tokens of jobs asked for on the request page
        self.stages = JobStages()  # where each running job's push is
        self._stop = threading.Event()
        self._prune_lock, self._next_prune = threading.Lock(), 0.0
        self._threads = [
            threading.Thread(target=self._loop, name=f"worker-{i}", daemon=True) for i in range(config.workers)
        ]

    def start(self) -> QueueWorkers:
        try:
            recovered = self.queue.recover()
        except Exception:  # a locked database: those jobs are claimed again when their leases run out
            log.exception(json.dumps({"msg": "recovery deferred to the leases"}))
            recovered = 0
        if recovered:
            log.info(json.dumps({"msg": "recovered", "jobs": recovered}))
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)

    def dead(self) -> list[str]:
        """The worker threads that have stopped while the service runs (none should, ever)."""
        if self._stop.is_set():
            return []
        return [t.name for t in self._threads if t.ident is not None and not t.is_alive()]

    def _prune(self) -> None:
        """Delete the finished jobs past `config.keep_s`, once an hour (by this process's monotonic clock)."""
        now = time.monotonic()
        with self._prune_lock:
            if now < self._next_prune:
                return
            self._next_prune = now + PRUNE_EVERY_S
        pruned = self.queue.prune(self.config.keep_s)
        if pruned:
            log.info(json.dumps({"msg": "pruned", "jobs": pruned}))

    def _loop(self) -> None:
        errors = 0
        while not self._stop.is_set():
            try:
                self._prune()
                self._once()
                errors = 0
            except Exception:  # a database error (locked past its timeout, full disk): wait, then go on
                errors += 1
                log.exception(json.dumps({"msg": "worker error", "in_a_row": errors}))
                self._stop.wait(min(60.0, self.idle_s * 2**errors))

    def _once(self) -> None:
        claimed = self.queue.claim()
        if claimed is None:
            self._stop.wait(self.idle_s)
            return
        job, token = claimed
        done = threading.Event()
        heartbeat = threading.Thread(target=self._heartbeat, args=(job.id, token, done), daemon=True)
        heartbeat.start()
        try:
            self._run(job, token)
        finally:
            self.stages.drop(job.id)
            done.set()
            heartbeat.join()

    def _heartbeat(self, job_id: int, token: str, done: threading.Event) -> None:
        while not done.wait(self.queue.lease_s / 3):
            try:
                renewed = self.queue.renew(job_id, token)
            except Exception:  # a locked database: the next beat tries again, within the lease
                log.exception(json.dumps({"msg": "lease renewal failed", "job": job_id}))
                continue
            if not renewed:
                log.warning(json.dumps({"msg": "lease lost", "job": job_id}))
                return

    def _run(self, job, token: str) -> None:
        started = time.perf_counter()
        head = self.head(job.repo_id)
        if head is not None and head != job.head_sha:
            newer, _ = self.queue.enqueue(job.repo_id, head, job.plan, is_head=True)
            self.queue.supersede(job.id, token, head, newer)
            self.tokens.move(job.id, newer)
            log.info(json.dumps({"msg": "superseded", "job": job.id, "sha": job.head_sha, "head": head, "by": newer}))
            return
        wait = self.queue.take_write(self.config.writes_per_hour, self.config.writes_burst)
        if wait > 0:  # the fleet's PR writes are paced (or paused by a 429): back in the queue until due
            self.queue.release(job.id, token, wait)
            log.info(json.dumps({"msg": "paced", "job": job.id, "wait_s": round(wait, 1)}))
            return
        log.info(
            json.dumps(
                {"msg": "running", "job": job.id, "repo": job.repo_id, "sha": job.head_sha, "attempt": job.attempts}
            )
        )
        # A request runs with its requester's token or not at all; a watched repo's job with the
        # service's own (no request's token is ever lent to it: their plans differ, `JobPlan.requester`).
        lent = self.tokens.get(job.id) if job.plan.requester else None
        if job.plan.requester and lent is None:
            self.queue.fail(job.id, token, TOKEN_LOST, None)
            log.warning(json.dumps({"msg": "failed", "job": job.id, "error": "the requester's token is gone"}))
            return
        self.stages.set(job.id, "starting")
        try:
            running = dataclasses.replace(job, hub_token=lent, on_stage=lambda stage: self.stages.set(job.id, stage))
            outcome = JobOutcome.of(self.executor.run(running))
        except Busy as e:  # the machine's memory is held by the jobs running: back in the queue
            self.queue.release(job.id, token, e.retry_in_s)
            log.info(json.dumps({"msg": "waiting for memory", "job": job.id, "why": str(e)}))
            return
        except JobFailed as e:
            retry_in = (
                self.config.retry_delay(job.attempts)
                if e.retryable and job.attempts < self.config.max_attempts
                else None
            )
            if e.retryable and _RATE_LIMITED.search(str(e)):  # the Hub's rate limit: every worker waits
                self.queue.pause_writes(self.config.retry_delay(job.attempts))
            self.queue.fail(job.id, token, without_local_paths(str(e)), retry_in, transient=e.retryable)
            if retry_in is None:
                self.tokens.drop(job.id)
            failed = {"msg": "failed", "job": job.id, "repo": job.repo_id, "error": str(e), "retry_in_s": retry_in}
            if e.output:  # the push's whole stderr: the operator's log keeps what the pages shorten
                failed["output"] = e.output
            log.warning(json.dumps(failed))
            return
        except Exception as e:  # an executor bug must not kill the worker
            retry_in = self.config.backoff_s if job.attempts < self.config.max_attempts else None
            self.queue.fail(job.id, token, f"{type(e).__name__}: {without_local_paths(str(e))}", retry_in)
            if retry_in is None:
                self.tokens.drop(job.id)
            log.exception("executor error")
            return
        outcome = outcome.timed(time.perf_counter() - started)
        self.queue.finish(job.id, token, outcome)
        self.tokens.drop(job.id)
        log.info(json.dumps({"msg": "done", "job": job.id, **outcome.to_dict()}))

"""`ServiceConfig`: what `hfexport serve` was started with, as the app and the workers read it
(`run.configure` builds it from the options `serve_options.py` declares)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ...messages import JobPlan
from .watch import Watch

MIN_SECRET_LENGTH = 16


@dataclass
class ServiceConfig:
    # None: no webhooks (`/webhook` says so); the request page and the reconcile pass still run.
    secret: str | None
    # Repos acted on; a set of ids and patterns is read as one `Watch`.
    watch: Watch
    plan: JobPlan  # what every watched repo gets
    workers: int = 1
    # A transient failure (the Hub down, 5xx, 429) is retried after backoff_s, then 4x longer each
    # time up to max_backoff_s: 30 s, 2 min, 8 min, 32 min, then hourly — ten attempts span ~5.7 h,
    # so an outage of minutes to hours loses no commit (and a webhook re-sent after that re-queues it).
    max_attempts: int = 10
    backoff_s: float = 30.0
    max_backoff_s: float = 3600.0
    # PR writes (a job that opens or updates a PR) for the whole fleet on this queue: a token bucket.
    writes_per_hour: float = 300.0
    writes_burst: int = 20
    branch: str = "main"
    bot_names: set[str] = field(default_factory=set)
    # Who may read /jobs and / besides the webhook's sender: `Authorization: Bearer <read_token>`,
    # or the read token as a Basic-auth password (a browser).
    read_token: str | None = None
    # Finished jobs (done, failed, superseded) are deleted this long after they ended.
    keep_s: float = 30 * 86400
    # `/request`: a form where anyone with a Hub token asks for an export (`request_page.py`).
    request_page: bool = False
    # Each request runs as an HF Job under its requester's token (`--executor hf-jobs`): on their
    # account and bill, which the form says before they ask.
    requests_billed: bool = False

    def plan_for(self, repo_id: str) -> JobPlan:
        """The plan of a job of `repo_id`: `plan`, into the repo its watch pattern names, if any."""
        into = self.watch.destination(repo_id)
        return dataclasses.replace(self.plan, into=into) if into else self.plan

    def retry_delay(self, attempts: int) -> float:
        """Seconds before a job that failed transiently on its `attempts`-th attempt runs again."""
        return min(self.backoff_s * 4 ** (attempts - 1), self.max_backoff_s)

    def __post_init__(self) -> None:
        if not isinstance(self.watch, Watch):
            self.watch = Watch(frozenset(self.watch))
        if self.secret is not None and len(self.secret) < MIN_SECRET_LENGTH:
            raise ValueError(f"the webhook secret must be at least {MIN_SECRET_LENGTH} characters")

"""`hfexport serve`'s options, each declared once: its type, flag, environment variable and help.

The command (`entrypoints/cli.py`) names them in its signature and hands their values to
`service/run.py` as one `ServeOptions`. Nothing here imports the service: `hfexport --help` stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..settings import READ_TOKEN, WEBHOOK_SECRET

Secret = Annotated[
    Optional[str],
    typer.Option(
        envvar=WEBHOOK_SECRET,
        help="The webhook's secret (X-Webhook-Secret), 16 characters or more. Without it the service takes no "
        "webhooks (a page-only service: --request-page; watched repos are still reconciled).",
        show_default=False,
    ),
]
Watch = Annotated[
    Optional[list[str]],
    typer.Option(
        help="Repo id to act on (repeatable); 'org/*' for every model of a namespace; '*' for every repo the "
        "webhook sends. Add ' -> me/{name}-ONNX' to publish its exports into a repo of your own instead of a PR.",
        show_default=False,
    ),
]
WatchFile = Annotated[
    Optional[Path], typer.Option(help="A file of --watch values, one a line ('#' comments).", show_default=False)
]
WatchTop = Annotated[
    int, typer.Option(min=0, help="Also watch the N most downloaded models (of --watch-filter), re-listed.")
]
WatchFilter = Annotated[Optional[str], typer.Option(help="The Hub tag --watch-top lists (e.g. text-classification).")]
ReconcileEvery = Annotated[
    float,
    typer.Option(
        min=0,
        help="Seconds between passes queuing each watched repo's head (missed webhooks), the first on start; 0: none.",
    ),
]
Db = Annotated[Path, typer.Option(help="The durable job queue (SQLite).")]
Host = Annotated[str, typer.Option(help="Address to bind.")]
Port = Annotated[int, typer.Option(help="Port.")]
Workers = Annotated[int, typer.Option(help="Jobs run at once.")]
Executor = Annotated[str, typer.Option(help="local (a push process here) or hf-jobs (an HF Job per export).")]
Image = Annotated[str, typer.Option(help="The hfexport image HF Jobs run (hf-jobs executor).")]
Backends = Annotated[str, typer.Option(help="Backends each job exports.")]
Task = Annotated[str, typer.Option(help="Task, as for export.")]
TrustRemoteCode = Annotated[
    bool,
    typer.Option(
        "--trust-remote-code",
        help="Export repos whose model code lives in the repo (auto_map); it runs in a sandbox that reaches "
        "no token or secret, and is refused where this machine gives none.",
    ),
]
MaxAttempts = Annotated[
    int, typer.Option(min=1, help="Attempts per job (restarts included) before it is marked failed.")
]
Backoff = Annotated[
    float,
    typer.Option(
        min=0, help="Seconds before a transient failure (Hub down, 5xx, 429) is retried; 4x longer each time."
    ),
]
MaxBackoff = Annotated[float, typer.Option(min=0, help="The longest wait between two attempts, seconds.")]
PrsPerHour = Annotated[
    float,
    typer.Option(
        min=0.01, help="Jobs that may open or update a PR, per hour, for every service on this --db (bursts of 20)."
    ),
]
Lease = Annotated[
    float, typer.Option(min=1, help="Seconds a running job's lease lasts; renewed while it runs, reclaimed after.")
]
MaxQueued = Annotated[
    int, typer.Option(min=1, help="Jobs waiting or running at most; beyond, webhooks get 503 + Retry-After.")
]
MaxQueuedPerNamespace = Annotated[
    int,
    typer.Option(min=1, help="Jobs one namespace's repos may have waiting or running; beyond, theirs get 503."),
]
HeaderTimeout = Annotated[
    float, typer.Option(min=0.1, help="Seconds a connection has to send a request's headers before it is closed.")
]
MaxConnections = Annotated[
    int,
    typer.Option(min=2, help="Open connections past which the oldest still sending its headers is closed."),
]
Warm = Annotated[
    int,
    typer.Option(
        min=0,
        help="Push processes kept ready with torch, transformers and a backend worker imported, so a job "
        "starts without that wait (~0.9 GB each while idle; --executor local). 0: each job's push starts "
        "when the job does.",
    ),
]
KeepDays = Annotated[
    float,
    typer.Option(min=0.01, help="Days a finished job is kept (for /jobs and deduplication) before it is deleted."),
]
JobTimeout = Annotated[
    float,
    typer.Option(
        min=60, help="Seconds one job may run (its push here, or its HF Jobs: given to the Hub as their timeout)."
    ),
]
ReadToken = Annotated[
    Optional[str],
    typer.Option(
        envvar=READ_TOKEN,
        help="A token that may read /jobs (Authorization: Bearer) besides the webhook secret.",
        show_default=False,
    ),
]

RequestPage = Annotated[
    bool,
    typer.Option(
        "--request-page",
        help="Serve /request: a page where anyone with a Hub token asks for an export of a model, into a PR or a "
        "repo of theirs, and watches it (the job runs with their token, kept in memory only).",
    ),
]


@dataclass(frozen=True)
class ServeOptions:
    """The command's values, as this module declares them (their help says what each does). No
    defaults here: `serve`'s signature holds the one default of each option."""

    secret: str | None
    watch: list[str] | None
    watch_file: Path | None
    watch_top: int
    watch_filter: str | None
    reconcile_every: float
    db: Path
    host: str
    port: int
    workers: int
    executor: str
    image: str
    backends: str
    task: str
    trust_remote_code: bool
    max_attempts: int
    backoff: float
    max_backoff: float
    prs_per_hour: float
    lease: float
    max_queued: int
    max_queued_per_namespace: int
    header_timeout: float
    max_connections: int
    warm: int
    keep_days: float
    job_timeout: float
    read_token: str | None
    request_page: bool

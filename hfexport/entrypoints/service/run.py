"""`hfexport serve`: the webhook service wired together from its options.

`entrypoints/cli.py` declares the command (its options in `entrypoints/serve_options.py`) and hands
its values here as one `ServeOptions`; this
module checks them (bad input → `HfExportError`, before anything starts), builds the queue, the
executor and the workers, and runs the HTTP app until it is stopped.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

from ...backends import parse_backends
from ...errors import HfExportError
from ...messages import JobPlan
from ...pipeline.preflight import Machine
from ...sandbox.identity import worker_user
from ...sandbox.launch import require
from ..serve_options import ServeOptions
from .app import create_app
from .budget import MemoryBudget
from .config import ServiceConfig
from .executors import HfJobsExecutor, LocalExecutor
from .limits import guarded_http
from .queue import JobQueue
from .watch import Reconciler, Watch
from .workers import QueueWorkers, branch_head


class JsonLines(logging.Formatter):
    """A log record as one JSON object: `time` (UTC, ISO 8601, ms) and `level` first, then our
    message's own keys (ours are JSON objects), or a library's text as `msg` with its logger, and
    any traceback as `traceback`."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        try:
            fields = json.loads(text) if text.startswith("{") else None
        except ValueError:
            fields = None
        if not isinstance(fields, dict):
            fields = {"msg": text, "logger": record.name}
        when = datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds")
        line = {"time": when, "level": record.levelname.lower(), **fields}
        if record.exc_info:
            line["traceback"] = self.formatException(record.exc_info)
        return json.dumps(line)


def configure(o: ServeOptions) -> ServiceConfig:
    """The service's configuration, checked before anything starts.

    Raises:
        HfExportError: an unknown backend or executor, nothing watched, a weak secret, or a repo's
            own code asked for where this machine gives no sandbox (exit 2).
    """
    names = parse_backends(o.backends)
    if o.executor not in ("local", "hf-jobs"):
        raise HfExportError(f"Unknown executor {o.executor!r}.", "Use --executor local or --executor hf-jobs.")
    try:
        watched = Watch.parse(o.watch or [], o.watch_file, o.watch_top, o.watch_filter)
    except ValueError as e:
        raise HfExportError(f"Cannot start: {e}.", "Pass --watch org/name, --watch 'org/*' or --watch '*'.") from None
    if o.secret is None and not o.request_page and not o.reconcile_every:
        raise HfExportError(
            "Cannot start: without --secret no webhook reaches the service, and nothing else would queue work.",
            "Set HFEXPORT_WEBHOOK_SECRET (or --secret), or pass --request-page, or a --reconcile-every period.",
        )
    if not watched.patterns and not watched.top and not o.request_page:
        raise HfExportError(
            "Cannot start: nothing is watched.", "Pass --watch, --watch-file or --watch-top (or --request-page)."
        )
    try:
        config = ServiceConfig(
            secret=o.secret,
            watch=watched,
            plan=JobPlan(tuple(names), o.task, o.trust_remote_code),
            workers=o.workers,
            max_attempts=o.max_attempts,
            backoff_s=o.backoff,
            max_backoff_s=o.max_backoff,
            writes_per_hour=o.prs_per_hour,
            read_token=o.read_token,
            keep_s=o.keep_days * 86400,
            request_page=o.request_page,
            requests_billed=o.executor == "hf-jobs",
        )
    except ValueError as e:
        raise HfExportError(
            f"Cannot start: {e}.",
            "Set HFEXPORT_WEBHOOK_SECRET (or --secret) to a long random value, the same as the Hub webhook's.",
        ) from None
    if o.trust_remote_code:  # refused now, not in every job: this machine gives no sandbox
        require("a repo's own code (--trust-remote-code)", worker_user())
    return config


def executor_for(o: ServeOptions, config: ServiceConfig, token: str | None) -> LocalExecutor | HfJobsExecutor:
    """Where each job runs: a push process here, or an HF Job (launched with `token`)."""
    return (
        LocalExecutor(
            timeout_s=o.job_timeout,
            warm=o.warm,
            backends=tuple(config.plan.backends),
            budget=MemoryBudget(Machine.here().memory_bytes),
        )
        if o.executor == "local"
        else HfJobsExecutor(image=o.image, token=token, timeout_s=o.job_timeout)
    )


def run(o: ServeOptions) -> None:
    """Start the service and serve until stopped (the CLI's `hfexport serve`).

    Raises:
        HfExportError: bad options (see `configure`); nothing is started then.
    """
    import uvicorn
    from huggingface_hub import HfApi, get_token

    # One JSON object a line, its time and level first: ours at INFO; the libraries' (their HTTP
    # clients log each request at INFO) only from WARNING.
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLines())
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    logging.getLogger("hfexport").setLevel(logging.INFO)
    config = configure(o)
    token = get_token()  # the service's own: HF_TOKEN, else the saved login, read once
    watched = config.watch
    queue = JobQueue(
        o.db,
        lease_s=o.lease,
        max_attempts=o.max_attempts,
        max_queued=o.max_queued,
        max_queued_per_namespace=o.max_queued_per_namespace,
    )
    runner = executor_for(o, config, token)
    pool = QueueWorkers(config, queue, runner, head=branch_head(token, config.branch)).start()

    def queue_head(repo_id: str, sha: str) -> bool:
        return queue.enqueue(repo_id, sha, config.plan_for(repo_id), is_head=True)[1]

    hub = HfApi(token=token)
    reconciler = Reconciler(watched, queue_head, hub, config.branch, o.reconcile_every, full=queue.full)
    if o.reconcile_every:
        reconciler.start()
    try:
        shown = "127.0.0.1" if o.host in ("0.0.0.0", "::") else o.host
        logging.getLogger("hfexport.serve").info(
            json.dumps(
                {
                    "msg": "listening",
                    "url": f"http://{shown}:{o.port}/",
                    **({"webhook": f"http://{shown}:{o.port}/webhook"} if config.secret else {"webhook": None}),
                    **({"request_page": f"http://{shown}:{o.port}/request"} if config.request_page else {}),
                    "healthz": f"http://{shown}:{o.port}/healthz",
                    "watching": sorted(watched.patterns) or (f"top {o.watch_top}" if o.watch_top else []),
                }
            )
        )
        uvicorn.run(
            create_app(config, queue, pool),
            host=o.host,
            port=o.port,
            log_level="warning",
            http=guarded_http(o.header_timeout, o.max_connections),
        )
    finally:
        reconciler.stop()
        pool.stop()
        runner.close()

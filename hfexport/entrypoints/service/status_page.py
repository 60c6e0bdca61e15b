"""`GET /`: what an operator looks at — one server-rendered HTML page, no script, no build step.

A row per repo (the ones whose jobs changed last first): the commit of its newest job, that job's
state, how many of its jobs wait (queued, not running), the PR its last finished job opened or
updated (or the derived repo it wrote to), and its newest failure. Above them, the queue's counts
and the workers' health, the same facts `/healthz` and `/jobs` give as JSON. Every value is
escaped: repo ids, errors and URLs come from the outside. Each state has a colour of its own
(`STATE_COLOURS`), which the screenshot test counts rows by. It reloads itself every 15 s (a meta
refresh: still no script). A failed row has a retry button: a form posting to `/jobs/{id}/retry`
with a value only this page can make (the browser resends its Basic credentials to any site's form).
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable

from .queue import JobStatus, RepoStatus

# The background of a row's state cell, by state: distinct from each other and from every other
# colour on the page (the health line's greens and reds too), so a screenshot can be read by colour.
STATE_COLOURS = {
    JobStatus.DONE: "#2e9d4f",
    JobStatus.FAILED: "#d43c3c",
    JobStatus.QUEUED: "#e3a21a",
    JobStatus.RUNNING: "#2f6fd6",
    JobStatus.SUPERSEDED: "#8a8a8a",
}


def _ago(t: float, now: float) -> str:
    seconds = max(0, int(now - t))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def _state(row: RepoStatus, now: float) -> str:
    """The newest job's state; a running one with how long it has run ("running, 4 min")."""
    if row.status == JobStatus.RUNNING and row.started_at is not None:
        return f"running, {_ago(row.started_at, now).removesuffix(' ago')}"
    return str(row.status)


def _retry(row: RepoStatus, check: Callable[[int], str] | None) -> str:
    """A failed newest job's retry button (POST /jobs/{id}/retry), where the page offers them."""
    if check is None or row.status != JobStatus.FAILED or row.job_id is None:
        return ""
    return (
        f'<form method="post" action="/jobs/{row.job_id}/retry">'
        f'<input type="hidden" name="check" value="{check(row.job_id)}">'
        f'<button type="submit" aria-label="retry job {row.job_id} of {html.escape(row.repo_id)}">retry</button></form>'
    )


def render(
    rows: list[RepoStatus],
    counts: dict[str, int],
    problems: list[str],
    now: float | None = None,
    retry_check: Callable[[int], str] | None = None,
) -> str:
    """The page, whole.

    Args:
        rows: `JobQueue.repos()`.
        counts: `JobQueue.counts()`.
        problems: what `/healthz` would say is wrong (empty when healthy).
        now: the time the ages are counted from (tests pass one).
        retry_check: the value a failed row's retry form carries for its job (`app.retry_check`:
            no other site's page can make it); None: no retry buttons.
    """
    now = time.time() if now is None else now
    e = html.escape
    health = (
        '<p class="ok">Healthy: every worker runs and the queue can be written.</p>'
        if not problems
        else "".join(f'<p class="bad">{e(p)}</p>' for p in problems)
    )
    totals = ", ".join(f"{n} {e(status)}" for status, n in sorted(counts.items())) or "no jobs yet"
    body = []
    for r in rows:
        pr = f'<a href="{e(r.pr_url)}">#{e(r.pr_url.rsplit("/", 1)[-1])}</a>' if r.pr_url else "-"
        if r.repo_url:  # a derived repo of the watcher's own (`--into`)
            pr = f'<a href="{e(r.repo_url)}">{e(r.repo_url.rstrip("/").split("/", 3)[-1])}</a>'
        body.append(
            "<tr>"
            f"<td>{e(r.repo_id)}</td>"
            f"<td><code>{e(r.head_sha[:12])}</code></td>"
            f'<td class="state" style="background:{STATE_COLOURS[r.status]}">{e(_state(r, now))}</td>'
            f"<td>{r.waiting}</td>"
            f"<td>{pr} {e(r.action or '')}</td>"
            f"<td>{e(r.error or '')}{_retry(r, retry_check)}</td>"
            f"<td>{e(_ago(r.updated_at, now))}</td>"
            "</tr>"
        )
    table = (
        "<table><thead><tr><th>repo</th><th>newest commit</th><th>state</th><th>waiting</th><th>published</th>"
        "<th>last failure</th><th>changed</th></tr></thead><tbody>" + "".join(body) + "</tbody></table>"
        if body
        else "<p>No job yet: the service has not been sent a watched repo's commit.</p>"
    )
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>hfexport service</title>'
        '<meta name="viewport" content="width=device-width"><meta http-equiv="refresh" content="15">'
        "<style>body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}"
        "table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:.45em .6em;"
        "text-align:left;vertical-align:top}.state{color:#fff;font-weight:600}.ok{color:#1b6e34}"
        ".bad{color:#a11d1d;font-weight:600}code{font-size:13px}</style></head><body>"
        f"<h1>hfexport service</h1>{health}<p>Jobs: {totals}.</p>{table}</body></html>"
    )

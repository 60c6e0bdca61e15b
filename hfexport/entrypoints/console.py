"""What the terminal shows, for every entry point that prints (the CLI and the demo): errors with
their fix, progress lines, and the report's table — formatted from `report.rows()`, like every
other surface that shows it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console
from rich.table import Table

from ..errors import HfExportError
from ..report import HEADERS, REPORT_FILE, VARIANT_HEADERS, Report, Status, rows, variant_rows

err = Console(stderr=True)

# The CLI table's columns (Row attributes); numbers are right-aligned.
CLI_COLUMNS = ["backend", "status", "components", "size", "precision", "max_abs_diff", "export_seconds", "peak_rss"]
VARIANT_COLUMNS = ["backend", "variant", "status", "file", "size", "share", "quality", "speed"]
_RIGHT = {"size", "max_abs_diff", "export_seconds", "peak_rss"}


def fail(e: HfExportError) -> NoReturn:
    """Print an error's cause and fix, and exit with its code."""
    err.print(f"[bold red]error:[/] {e.cause}", markup=True, highlight=False)
    err.print(f"[bold]fix:[/] {e.fix}", highlight=False)
    raise typer.Exit(e.exit_code)


def badge(status: str) -> str:
    if status == Status.OK:
        return "[green]✓[/]"
    if status.startswith(Status.SKIPPED):
        return "[yellow]–[/]"
    return "[red]✗[/]"


def progress_callback(status, started: float):
    """A progress callback: the spinner shows each backend's stage and the elapsed time; a
    backend's outcome is printed once, as a line of its own."""
    outcomes = {str(s) for s in Status} - {Status.SKIPPED}

    def progress(backend: str, message: str) -> None:
        status.update(f"[bold]{backend}[/]: {message}  [dim]({time.perf_counter() - started:.0f}s)[/]")
        if message in outcomes or message.startswith(Status.SKIPPED):
            err.print(f"  {badge(message)} {backend}")

    return progress


def print_report(report: Report) -> None:
    """The readable table: one row per backend, then each error in full and where the report is."""
    table = Table(title=f"{report.source.ref} @ {report.source.sha[:12]} · {report.plan.task}")
    for column in CLI_COLUMNS:
        table.add_column(HEADERS[column], justify="right" if column in _RIGHT else "left")
    for row in rows(report):
        cells = [getattr(row, c) for c in CLI_COLUMNS]
        cells[CLI_COLUMNS.index("status")] = f"{badge(row.status)} {row.status}"
        table.add_row(*cells)
    err.print(table)
    variants = variant_rows(report)
    if variants:
        table = Table(title="variants (quality against eager fp32; a failed one is not kept)")
        for column in VARIANT_COLUMNS:
            table.add_column(
                VARIANT_HEADERS[column], justify="right" if column in ("size", "share", "speed") else "left"
            )
        for row in variants:
            cells = [
                str(getattr(row, c)).replace("`", "") for c in VARIANT_COLUMNS
            ]  # Markdown code marks, not for a terminal
            cells[VARIANT_COLUMNS.index("status")] = f"{badge(row.status)} {row.status}"
            table.add_row(*cells)
        err.print(table)
    for b in report.backends:
        if b.error:
            err.print(f"[bold]{b.backend}[/] {b.status}: {b.error}", highlight=False)
        for v in b.variants:
            if v.error:
                err.print(f"[bold]{b.backend} {v.kind}[/] {v.status}: {v.error}", highlight=False)
    if report.out_dir:
        err.print(f"report: {Path(report.out_dir) / REPORT_FILE}")

"""What the terminal shows, for every entry point that prints (the CLI and the demo): errors with
their fix, progress lines, and the report's table — formatted from `table.rows()`, like every
other surface that shows it."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Literal, NoReturn

import typer
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..card.where import picks
from ..errors import HfExportError
from ..report import REPORT_FILE, Report, Status
from ..table import HEADERS, VARIANT_HEADERS, rows, variant_rows

err = Console(stderr=True)

# The CLI table's columns (Row attributes); numbers are right-aligned.
CLI_COLUMNS = ["backend", "status", "components", "size", "precision", "max_abs_diff", "export_seconds", "peak_rss"]
VARIANT_COLUMNS = ["backend", "variant", "status", "file", "size", "share", "quality", "speed"]
_RIGHT = {"size", "max_abs_diff", "export_seconds", "peak_rss"}


def fail(e: HfExportError, as_json: bool = False) -> NoReturn:
    """Print an error's cause and fix, and exit with its code; with `as_json` (a command's --json),
    also `{"ok": false, "error", "fix", "exit_code", "kind"}` on stdout, where a script reads the
    outcome (`kind`: the error's class, by which the service words its own fix)."""
    err.print(f"[bold red]error:[/] {e.cause}", markup=True, highlight=False)
    err.print(f"[bold]fix:[/] {e.fix}", highlight=False)
    if as_json:
        outcome = {"ok": False, "error": e.cause, "fix": e.fix, "exit_code": int(e.exit_code), "kind": type(e).__name__}
        sys.stdout.write(json.dumps(outcome, indent=2) + "\n")
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
    said: dict[str, str] = {}

    def progress(backend: str, message: str) -> None:
        elapsed = f"({time.perf_counter() - started:.0f}s)"
        status.update(f"[bold]{backend}[/]: {message}  [dim]{elapsed}[/]")
        if message in outcomes or message.startswith(Status.SKIPPED):
            err.print(f"  {badge(message)} {backend}")
        elif not err.is_terminal and said.get(backend) != message:  # piped: no spinner, a line a stage
            err.print(f"  {backend}: {message} {elapsed}", highlight=False, soft_wrap=True)
        said[backend] = message

    return progress


def show(
    title: str,
    headers: list[str],
    cells: list[list[str]],
    *,
    right: frozenset[str] = frozenset(),
    prose: frozenset[str] = frozenset(),
    console: Console | None = None,
) -> None:
    """A table whose identifiers and figures are never cut: a column in `prose` wraps at its words,
    every other cell keeps its line whole. Where the terminal is too narrow for that (80 columns:
    every CI log, the Action's), each row is printed as a record instead — its first two cells,
    then one `header: value` line per other cell. `right`: the headers of right-aligned columns."""
    console = console or err
    texts = [[Text.from_markup(cell) for cell in row] for row in cells]
    # The width each column needs: a whole line for an identifier or a figure, the longest word of prose.
    needed = []
    for index, header in enumerate(headers):
        column = [Text(header), *(row[index] for row in texts)]
        if header in prose:
            needed.append(max(cell_len(word) for text in column for word in (text.plain.split() or [""])))
        else:
            needed.append(max(text.cell_len for text in column))
    if sum(needed) + 3 * len(headers) + 1 <= console.width:  # a cell's padding and border: 3
        table = Table(title=title)
        for header, width in zip(headers, needed):
            justify: Literal["right", "left"] = "right" if header in right else "left"
            table.add_column(header, justify=justify, no_wrap=header not in prose, min_width=width)
        for line in texts:
            table.add_row(*line)
        console.print(table)
        return
    console.print(f"[bold]{title}[/]", highlight=False)
    for row in cells:
        console.print(f"[bold]{row[0]}[/] {row[1]}", highlight=False)
        for header, value in zip(headers[2:], row[2:]):
            if value not in ("", "-"):
                console.print(f"  {header}: {value}", highlight=False)


def print_report(report: Report) -> None:
    """The readable table: one row per backend, then each error in full and where the report is."""
    cells = []
    for row in rows(report):
        values: list[str] = [str(getattr(row, c)) for c in CLI_COLUMNS]
        values[CLI_COLUMNS.index("status")] = f"{badge(row.status)} {row.status}"
        cells.append(values)
    headers = [HEADERS[c] for c in CLI_COLUMNS]
    title = f"{report.source.ref} @ {report.source.sha[:12]} · {report.plan.task}"
    show(title, headers, cells, right=frozenset(HEADERS[c] for c in _RIGHT), prose=frozenset({HEADERS["components"]}))
    variants = variant_rows(report)
    if variants:
        cells = []
        for variant in variants:
            values = [str(getattr(variant, c)).replace("`", "") for c in VARIANT_COLUMNS]  # Markdown code marks
            values[VARIANT_COLUMNS.index("status")] = f"{badge(variant.status)} {variant.status}"
            cells.append(values)
        show(
            "variants (quality against eager fp32; a failed one is not kept)",
            [VARIANT_HEADERS[c] for c in VARIANT_COLUMNS],
            cells,
            right=frozenset(VARIANT_HEADERS[c] for c in ("size", "share", "speed")),
            prose=frozenset({VARIANT_HEADERS["quality"]}),
        )
    where = picks(report)
    if where:  # the file to take for each place, and why: the card's first table too
        err.print("[bold]which file where[/]", highlight=False)
        for pick in where:
            err.print(f"  {pick.where}: [bold]{pick.file}[/]", highlight=False)
            err.print(f"    {pick.why}", highlight=False)
    for b in report.backends:
        if b.error:
            err.print(f"[bold]{b.backend}[/] {b.status}: {b.error}", highlight=False)
        for v in b.variants:
            if v.error:
                err.print(f"[bold]{b.backend} {v.kind}[/] {v.status}: {v.error}", highlight=False)
    if report.out_dir:
        # A path is one word: never wrapped (a terminal's click or copy takes it whole).
        err.print(f"report: {Path(report.out_dir) / REPORT_FILE}", highlight=False, soft_wrap=True)

"""The one table every surface shows — the CLI, the card, the PR description, the Action summary —
built once per report (`rows`, `variant_rows`: each cell already formatted) and rendered by each
medium (`markdown_table`, or `entrypoints/console.py`'s rich table), with the formatters they share.
Like the report it reads, it imports nothing of hfexport's but `report`."""

from __future__ import annotations

from dataclasses import dataclass

from .report import Figure, Report, Status, Validation, format_diff, one_line


@dataclass(frozen=True)
class Row:
    """One backend as every table shows it: each cell already formatted."""

    backend: str
    status: Status
    source: str
    folder: str
    files: str
    components: str
    size: str
    precision: str
    max_abs_diff: str
    tolerance: str
    export_seconds: str
    peak_rss: str
    error: str
    runs_on: str = "-"

    @property
    def outcome(self) -> str:
        """The status, with the error when there is one (on one line)."""
        return f"{self.status}: {self.error}" if self.error else str(self.status)


# Column headers, by Row attribute: the same words in the CLI, the card, the PR and the Action.
HEADERS = {
    "backend": "backend",
    "status": "status",
    "outcome": "status",
    "source": "from commit",
    "folder": "folder",
    "files": "files",
    "components": "components",
    "size": "size",
    "precision": "precision",
    "max_abs_diff": "max abs diff",
    "tolerance": "tolerance",
    "export_seconds": "export s",
    "peak_rss": "peak RSS",
    "runs_on": "runs on",
}


def rows(report: Report) -> list[Row]:
    """The per-backend table of a report, one `Row` per backend, in the plan's order."""
    table = []
    for b in report.backends:
        validation = b.validation
        table.append(
            Row(
                backend=b.backend,
                status=b.status,
                source=f"`{b.source_sha[:12]}`" if b.source_sha else "-",
                folder=f"`{b.subfolder}/`",
                # Files a user fetches: not an empty one (a graph whose weights fit inside it still
                # leaves its 0-byte `.onnx_data` beside it on some exporters).
                files=", ".join(f.path for f in b.files if f.size) or "-",
                components=",".join(b.components) or "-",
                size=format_size(b.program_bytes),
                precision=b.dtype or "-",
                max_abs_diff=format_diff(validation.max_abs_diff if validation and validation.checks else None),
                tolerance=format_tolerance(validation),
                export_seconds=f"{b.export_seconds:.1f}" if b.export_seconds is not None else "-",
                peak_rss=f"{b.peak_rss_mb:.0f} MB" if b.peak_rss_mb else "-",
                error=one_line(b.error) if b.error else "",
                runs_on=b.web.cell() if b.web else "-",
            )
        )
    return table


def markdown_table(report: Report, columns: list[str]) -> list[str]:
    """`rows(report)` as a Markdown table of the given `Row` attributes (card, PR, Action summary)."""
    return _markdown(rows(report), HEADERS, columns)


def _markdown(table: list, headers: dict[str, str], columns: list[str]) -> list[str]:
    lines = ["| " + " | ".join(headers[c] for c in columns) + " |", "|" + "---|" * len(columns)]
    for row in table:
        # A pipe inside a cell (`|Δ log-prob|`) escaped as GitHub's and the Hub's Markdown read it.
        lines.append("| " + " | ".join(str(getattr(row, c)).replace("|", "\\|") for c in columns) + " |")
    return lines


@dataclass(frozen=True)
class VariantRow:
    """One variant as every table shows it: each cell already formatted."""

    backend: str
    variant: str
    status: Status
    file: str
    size: str
    share: str
    quality: str
    speed: str
    error: str
    runs_on: str = "-"

    @property
    def outcome(self) -> str:
        return f"{self.status}: {self.error}" if self.error else str(self.status)


VARIANT_HEADERS = {
    "backend": "backend",
    "variant": "variant",
    "status": "status",
    "outcome": "status",
    "file": "file",
    "size": "size",
    "share": "of fp32",
    "quality": "quality vs eager fp32",
    "speed": "speed vs fp32",
    "runs_on": "runs on",
}


def variant_rows(report: Report) -> list[VariantRow]:
    """Every backend's variants, one `VariantRow` each, in the plan's order."""
    return [
        VariantRow(
            backend=b.backend,
            variant=v.kind,
            status=v.status,
            file=", ".join(f"`{b.subfolder}/{path}`" for path in v.published_files) or "-",
            size=format_size(v.size),
            share=f"{v.size_share:.0%}" if v.size_share is not None else "-",
            quality=(f"{v.settings}: " if v.settings else "") + format_quality(v.quality),
            # Slower than the fp32 file it derives from (an "optimized" graph on another CPU): said.
            speed=format_speed(v.speedup, v.speedup_range) if v.speedup is not None else "-",
            error=one_line(v.error) if v.error else "",
            runs_on=v.web.cell() if v.web else "-",
        )
        for b in report.backends
        for v in b.variants
    ]


def summary(report: Report) -> list[str]:
    """What a report published, a line each, as a page shows it after the fact: each validated
    backend (its folder, size and max abs diff), then each published variant (its file, size and
    share, quality and speed) — the same cells as the tables."""
    lines = [
        f"{row.folder.strip('`')} — {row.size}, max abs diff {row.max_abs_diff} vs the original model"
        for row in rows(report)
        if row.status == Status.OK
    ]
    lines += [
        f"{row.file.replace('`', '')} ({row.variant}) — {row.size}, {row.share} of fp32; {row.quality}; "
        f"{row.speed} fp32's speed"
        for row in variant_rows(report)
        if row.status == Status.OK
    ]
    return lines


def markdown_variant_table(report: Report, columns: list[str]) -> list[str]:
    """`variant_rows(report)` as a Markdown table (card, PR); no lines when there is no variant."""
    table = variant_rows(report)
    return _markdown(table, VARIANT_HEADERS, columns) if table else []


def format_quality(quality: dict) -> str:
    """The figures a user judges a variant by: cosine for embeddings, top-1 agreement for heads."""
    parts = []
    if Figure.COSINE_MEAN in quality:
        mean, low = _num(quality[Figure.COSINE_MEAN], ".4f"), _num(quality.get(Figure.COSINE_MIN), ".4f")
        parts.append(f"cosine mean {mean}, min {low}")
    if Figure.TOP1_AGREEMENT in quality:
        parts.append(f"top-1 agreement {_num(quality[Figure.TOP1_AGREEMENT], '.1%')}")
    if Figure.TOKEN_AGREEMENT in quality:
        parts.append(f"greedy tokens as eager {_num(quality[Figure.TOKEN_AGREEMENT], '.1%')}")
    if Figure.FORCED_TOP1_AGREEMENT in quality:
        over = quality.get(Figure.FORCED_TOKENS)
        tokens = f" over {int(over)} tokens" if isinstance(over, (int, float)) else ""
        parts.append(f"teacher-forced top-1 as eager {_num(quality[Figure.FORCED_TOP1_AGREEMENT], '.1%')}{tokens}")
    if Figure.LOGPROB_DELTA_MEAN in quality:
        parts.append(f"mean |Δ log-prob| {_num(quality[Figure.LOGPROB_DELTA_MEAN], '.3f')}")
    if Figure.KLD_MEAN in quality:
        error = quality.get(Figure.KLD_SE)
        spread = f" ± {_num(error, '.2g')}" if error is not None else ""
        parts.append(f"KLD {_num(quality[Figure.KLD_MEAN], '.3g')}{spread} nats")
    if Figure.DECODE_TOK_S in quality:
        parts.append(f"decodes {_num(quality[Figure.DECODE_TOK_S], '.1f')} tok/s at batch 1 where judged")
    return "; ".join(parts) or "-"


def _num(value, spec: str) -> str:
    return format(value, spec) if isinstance(value, (int, float)) else str(value)


def format_speed(speedup: float, spread: list[float] | None = None) -> str:
    """A variant's speed against fp32, with its rounds' spread where measured: `1.69× (1.52–1.80)`;
    one slower than fp32 (an "optimized" graph on another CPU) says so."""
    text = f"{speedup:.2f}×" + (f" ({spread[0]:.2f}–{spread[1]:.2f})" if spread else "")
    return text + (" (slower than fp32)" if speedup < 1 else "")


def format_size(n: int | None) -> str:
    """Bytes in decimal units, as the Hub shows file sizes: `-` for none."""
    if not n:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def format_tolerance(validation: Validation | None) -> str:
    """The tolerance as it was applied: `1e-03` alone, or `× 31.2` where an output's scale raised it."""
    if validation is None:
        return "-"
    scale = max((max(1.0, v) for c in validation.checks for v in c.scale.values()), default=1.0)
    return f"{validation.tolerance:g}" + (f" × {scale:.3g}" if scale > 1 else "")

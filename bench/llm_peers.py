"""hfexport's LLM files beside ONNX Runtime GenAI's model builder's, in one run →
docs/benchmarks-llm-peers.md (+ .json):

    .venv/bin/python bench/llm_peers.py [--models smollm2,gemma3-270m] [--rounds 3] [--tokens 32]

The builder (`onnxruntime-genai`, what transformers.js's maintainers send LLM users to) is one of
hfexport's pins: run bare here (`python -m onnxruntime_genai.models.builder`), and through hfexport's
`ort-genai` backend, which builds, judges and publishes its folders (`hfexport ort-genai …` rows: what a
push of `--backends ort-genai` publishes, and a kind it refuses made again with its floors lifted).
Both tools read the same local folder of each model (bench/real_models.py: SmolLM2-135M, a Llama;
Gemma 3 270M, sliding-window layers and a 262 k vocabulary). Per file of each tool:

- bytes, as a share of that tool's fp32 file;
- fidelity to eager fp32 teacher-forced over nine passages of prose the judge never sees (256 tokens
  each, 2,304 positions; `pydoc_data.topics` counted from the start, the judge's from the end): KL
  divergence mean ± standard error (nats), and "same top" — the peers' measures (llama.cpp,
  Olive, LiquidONNX);
- decode tokens per second at batch 1 on this machine's threads, a greedy loop from a 32-token
  prompt feeding the cache back, every file in interleaved rounds (`llm_measure.interleaved`): on a
  shared machine only the ratios within one run hold;
- export wall time: `hfexport export --variants none`, then the default variants as a user's run
  makes them (a kind whose first settings miss its floors tries its next); a kind the default run
  does not publish is made again with its floors lifted so that its file is measured too (the
  `published` column says what it missed), and the builder's `-p fp32|int8|int4` (accuracy level 4,
  as the issue measured it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
WORK = BENCH / ".work" / "llm-peers"
DOCS = ROOT / "docs"
PY = sys.executable
sys.path.insert(0, str(BENCH))

import llm_measure  # noqa: E402
from real_models import BUILDERS  # noqa: E402

# The builder's settings per precision (its `--extra_options`): int8 compute, blocks of 32.
BUILDER = {
    "fp32": ("fp32", []),
    "int8": ("int8", ["accuracy_level=4"]),
    "int4": ("int4", ["accuracy_level=4", "block_size=32"]),
}
# hfexport's defaults for a generation export, floors lifted so each file exists to be measured.
OURS = ("w8", "q4")
_LIFTED = ("forced_top1_agreement=0", "logprob_delta_mean=1e9", "kld_mean=1e9", "decode_speedup=0")
PASSAGES = range(20, 80, 6)  # sorted topic names from the start; the judge's count from the end


class BuildFailed(Exception):
    """A tool could not build a model's file: its last line says why."""


def timed(command: list[str], env: dict | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"{' '.join(command[:4])} failed:\n{done.stderr[-3000:]}", file=sys.stderr)
        raise BuildFailed((done.stderr.strip().splitlines() or ["no output"])[-1])
    return time.perf_counter() - started


def ours(folder: Path, work: Path) -> tuple[dict[str, Path], dict[str, float], list[dict]]:
    """hfexport's fp32 graph (`--variants none`, timed), its default variants as a user's run makes
    them (timed), and any kind that run did not publish made again with its floors lifted, so that
    its file is measured too. Returns the files, the times and the variants' reports."""
    files, seconds = {}, {}
    plain, variants = work / "hfexport-none", work / "hfexport-default"
    export = [PY, "-m", "hfexport", "export", str(folder), "--backends", "onnx"]
    if not (plain / "onnx" / "model.onnx").exists():
        seconds["none"] = timed([*export, "--variants", "none", "--out", str(plain)], {"HFEXPORT_JOBS": "1"})
    if not (variants / "hfexport-report.json").exists():
        out = ["--variants", ",".join(OURS), "--out", str(variants)]
        seconds["default"] = timed([*export, *out], {"HFEXPORT_JOBS": "1"})
    times = work / "hfexport-seconds.json"
    seconds = {**(json.loads(times.read_text()) if times.exists() else {}), **seconds}
    times.write_text(json.dumps(seconds))
    files["hfexport fp32"] = plain / "onnx" / "model.onnx"
    reports = []
    for v in json.loads((variants / "hfexport-report.json").read_text())["backends"][0]["variants"]:
        folder_of = variants
        if not v.get("file"):  # not published by default: its first settings, made with the floors lifted
            folder_of = work / f"hfexport-lifted-{v['kind']}"
            if not (folder_of / "hfexport-report.json").exists():
                lifted = [a for figure in _LIFTED for a in ("--min-quality", f"{v['kind']}.{figure}")]
                timed([*export, "--variants", v["kind"], *lifted, "--out", str(folder_of)], {"HFEXPORT_JOBS": "1"})
            (v,) = json.loads((folder_of / "hfexport-report.json").read_text())["backends"][0]["variants"]
            v["published"] = False
        files[f"hfexport {v['kind']}"] = folder_of / "onnx" / v["file"]
        reports.append(v)
    return files, seconds, reports


def builder(folder: Path, work: Path) -> tuple[dict[str, Path], dict[str, float], str | None]:
    """The builder's file of each precision, each build timed; or none, and why it could not build
    the model (its own last line: Gemma 3's per-layer-type rope parameters under transformers 5
    stop onnxruntime-genai 0.18.0's `make_rope_init`)."""
    files, seconds = {}, {}
    times = work / "builder-seconds.json"
    known = json.loads(times.read_text()) if times.exists() else {}
    for name, (precision, extra) in BUILDER.items():
        out = work / f"builder-{name}"
        if not (out / "model.onnx").exists():
            command = [PY, "-m", "onnxruntime_genai.models.builder", "-i", str(folder)]
            command += ["-o", str(out), "-p", precision, "-e", "cpu", "-c", str(work / "builder-cache")]
            try:
                known[name] = timed(command + (["--extra_options", *extra] if extra else []))
            except BuildFailed as e:
                return {}, {}, str(e)
        files[f"builder {name}"], seconds[name] = out / "model.onnx", known.get(name, float("nan"))
    times.write_text(json.dumps(known))
    return files, seconds, None


def genai(folder: Path, work: Path) -> tuple[dict[str, Path], dict[str, float], list[dict]]:
    """hfexport's `ort-genai` backend as a push runs it (`--variants default`, timed), each kind it did not
    publish made again with its floors lifted. Returns its folders' graphs, its times (the wall time,
    and the report's build and judge stages) and the variants' reports."""
    out = work / "hfexport-genai"
    export = [PY, "-m", "hfexport", "export", str(folder), "--backends", "ort-genai"]
    times = work / "hfexport-genai-seconds.json"
    seconds = json.loads(times.read_text()) if times.exists() else {}
    if not (out / "hfexport-report.json").exists():
        seconds["wall"] = timed([*export, "--variants", "default", "--out", str(out)], {"HFEXPORT_JOBS": "1"})
    (backend,) = json.loads((out / "hfexport-report.json").read_text())["backends"]
    stages = backend["timings"]
    # The worker's stages: each builder run ("building …", "variant KIND: builder -p …"), each judge.
    builds = {k: v for k, v in stages.items() if k.startswith("building") or ": builder" in k}
    seconds["builds"] = {k.split("builder ", 1)[-1]: round(v, 1) for k, v in builds.items()}
    seconds["build"] = sum(builds.values())
    seconds["judge"] = sum(v for k, v in stages.items() if k in ("eager reference", "validating") or "judging" in k)
    times.write_text(json.dumps(seconds))
    files = {"hfexport ort-genai fp32": out / "onnxruntime" / backend["programs"]["decode"]}
    reports = []
    for v in backend["variants"]:
        folder_of = out
        if not v.get("file"):
            folder_of = work / f"hfexport-genai-lifted-{v['kind']}"
            if not (folder_of / "hfexport-report.json").exists():
                lifted = [a for figure in _LIFTED for a in ("--min-quality", f"{v['kind']}.{figure}")]
                timed([*export, "--variants", v["kind"], *lifted, "--out", str(folder_of)], {"HFEXPORT_JOBS": "1"})
            refused = v["error"]
            (v,) = json.loads((folder_of / "hfexport-report.json").read_text())["backends"][0]["variants"]
            v["published"], v["refused"] = False, refused
        files[f"hfexport ort-genai {v['kind']}"] = folder_of / "onnxruntime" / v["file"]
        reports.append(v)
    return files, seconds, reports


def eager_log_probs(folder: Path) -> tuple[list, list]:
    import pydoc_data.topics

    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    topics = pydoc_data.topics.topics
    names = sorted(topics)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    rows = [tokenizer(" ".join(topics[names[i]].split()), return_tensors="np")["input_ids"] for i in PASSAGES]
    rows = [r[:, :256] for r in rows if r.shape[1] >= 256]
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        eager = [torch.log_softmax(model(torch.from_numpy(r)).logits.float(), -1)[0].numpy() for r in rows]
    return [np.asarray(r) for r in rows], eager


def measure(folder: Path, rounds: int, tokens: int) -> dict:
    config = json.loads((folder / "config.json").read_text())
    config = config.get("text_config", config)
    work = WORK / folder.name
    work.mkdir(parents=True, exist_ok=True)
    ours_files, ours_seconds, reports = ours(folder, work)
    theirs, builder_seconds, builder_failed = builder(folder, work)
    genai_files, genai_seconds, genai_reports = genai(folder, work) if not builder_failed else ({}, {}, [])
    files = {**ours_files, **theirs, **genai_files}
    rows_ids, eager = eager_log_probs(folder)
    feeders = {name: llm_measure.feeder(path, config) for name, path in files.items()}
    rows = {}
    for name, path in files.items():
        fidelity = llm_measure.teacher_forced(feeders[name], rows_ids, eager)
        tool = name.rsplit(" ", 1)[0]
        base = files[f"{tool} fp32"]
        rows[name] = {
            "file": str(path.relative_to(work)),
            "bytes": llm_measure.program_bytes(path),
            "share": llm_measure.program_bytes(path) / llm_measure.program_bytes(base),
            **fidelity.as_dict(),
        }
        print(name, rows[name], flush=True)
    rates = llm_measure.interleaved(feeders, rows_ids[0][:, :32], tokens, rounds)
    for name, rate in rates.items():
        rows[name]["decode_tok_s"] = round(rate, 2)
        rows[name]["vs_our_fp32"] = round(rate / rates["hfexport fp32"], 3)
        rows[name]["vs_builder_fp32"] = round(rate / rates["builder fp32"], 3) if "builder fp32" in rates else None
    from hfexport.variants import misses, thresholds_for

    named = [(f"hfexport {v['kind']}", v) for v in reports]
    named += [(f"hfexport ort-genai {v['kind']}", v) for v in genai_reports]
    for name, v in named:
        row = rows[name]
        gated = {**v["quality"], "decode_speedup": v.get("speedup") or 0}
        row["settings"] = v.get("settings")
        missed = [v["refused"]] if v.get("refused") else misses(gated, thresholds_for(v["kind"], {}))
        row["missed_by_default"] = [] if v.get("published", True) else missed
    return {
        "model": folder.name,
        "threads": os.cpu_count(),
        "rounds": rounds,
        "tokens": tokens,
        "export_seconds": {"hfexport": ours_seconds, "builder": builder_seconds, "ort-genai": genai_seconds},
        "builder_failed": builder_failed,
        "rows": rows,
    }


def render(results: list[dict]) -> str:
    lines = [
        "# LLM files beside ONNX Runtime GenAI's model builder",
        "",
        "Written by `bench/llm_peers.py` (its docstring says how each figure is taken), one model after the "
        "other in one run.",
    ]
    for result in results:
        lines += _render(result)
    return "\n".join(lines)


def _render(result: dict) -> list[str]:
    seconds = result["export_seconds"]
    ours, theirs = seconds["hfexport"], seconds["builder"]
    lines = [
        "",
        f"## {result['model']}",
        "",
        f"{result['threads']} threads, decode at batch 1 from a 32-token prompt, "
        f"{result['tokens']} tokens × {result['rounds']} interleaved rounds; fidelity teacher-forced over "
        f"{next(iter(result['rows'].values()))['positions']} positions of prose against eager fp32.",
        "",
        "| file | size vs its fp32 | KLD (nats, mean ± SE) | same top | decode tok/s | vs our fp32 | vs builder fp32 "
        "| published by default |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in result["rows"].items():
        published = "-"
        if "missed_by_default" in row:
            published = "yes" if not row["missed_by_default"] else "no: " + ", ".join(row["missed_by_default"])
        lines.append(
            f"| {name}{' (' + row['settings'] + ')' if row.get('settings') else ''} | {row['share']:.1%} "
            f"| {row['kld_mean']:.4f} ± {row['kld_se']:.4f} | {row['same_top']:.1%} | {row['decode_tok_s']:.1f} "
            f"| {row['vs_our_fp32']:.2f}× | {_ratio(row['vs_builder_fp32'])} | {published} |"
        )
    built = "; builder " + ", ".join(f"{k} {v:.0f} s" for k, v in theirs.items()) if theirs else ""
    lines += ["", "Export wall time: hfexport " + ", ".join(f"{k} {v:.0f} s" for k, v in ours.items()) + built + "."]
    genai = seconds.get("ort-genai") or {}
    if genai:
        lines += [
            "",
            f"hfexport's `ort-genai` backend, default variants: {genai['wall']:.0f} s in all. The builder's runs in "
            "its worker: "
            + ", ".join(f"`{k}` {v:.0f} s" for k, v in genai["builds"].items())
            + f" ({genai['build']:.0f} s; bare, above: {', '.join(f'{k} {v:.0f} s' for k, v in theirs.items())}). "
            f"Its judge: {genai['judge']:.0f} s (eager's reference, the figures over prose through the Generator, "
            "paired decode rounds, WebGPU's placement in Chromium); the rest is the worker's start and loading the "
            "model. A q4 that misses its floors is built again with more accurate settings (the row shows the "
            "first, made with the floors lifted; the refusal is the last one's). The WebGPU folder computes in "
            "float: its CPU speed here is not what it is for.",
        ]
    if result.get("builder_failed"):
        lines += ["", f"The builder could not build this model: `{result['builder_failed']}`."]
    return lines


def _ratio(value: float | None) -> str:
    return f"{value:.2f}×" if value is not None else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="smollm2", help="bench/real_models.py's names, comma-separated")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    results = [measure(BUILDERS[name](), args.rounds, args.tokens) for name in args.models.split(",")]
    (DOCS / "benchmarks-llm-peers.json").write_text(json.dumps(results, indent=1) + "\n")
    (DOCS / "benchmarks-llm-peers.md").write_text(render(results) + "\n")
    print(render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

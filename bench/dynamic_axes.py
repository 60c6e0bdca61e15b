"""The exporter's seconds per decoder layer: every axis `Dim.AUTO` (what `transformers.exporters`
marks given no dynamic shapes) against the axes a runtime varies (`hfexport.worker.splits.varying_axes`).

A Llama shape of random weights (width 576, 9 heads, 3 key/value heads: SmolLM2-135M's) at two
depths, its decode program captured once per depth as hfexport captures it, then exported by each
spec in interleaved rounds in one process (the two share every cost but the spec's), per backend.
The slope between the depths is the per-layer cost; the ratio is narrowed / all axes:

    .venv/bin/python bench/dynamic_axes.py            # writes docs/benchmarks-dynamic-axes.{md,json}
    .venv/bin/python bench/dynamic_axes.py --rounds 1 --depths 2 4   # a quick look
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent.parent))

DOCS = Path(__file__).parent.parent / "docs"


def decode_program_inputs(layers: int):
    """The decode program's module and its traced inputs, as `splits.Decoder.export_program` captures them."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    from transformers.exporters.utils import decompose_for_generation

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=layers,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=2048,
    )
    model = LlamaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    ids = torch.randint(3, config.vocab_size, (2, 12))
    stages = decompose_for_generation(
        model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, multi_token_decode=True
    )
    return stages["decode"]


def seconds(backend: str, module, inputs: dict, narrowed: bool) -> float:
    from transformers.exporters import AutoHfExporter

    from hfexport.backends import get_backend
    from hfexport.worker.splits import varying_axes

    config = get_backend(backend).make_config(None)
    if narrowed:
        config = varying_axes(config, module, inputs)
    exporter = AutoHfExporter.from_config({"export_format": get_backend(backend).export_format})
    started = time.perf_counter()
    exporter.export(module, dict(inputs), config)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs=2, default=(4, 12))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backends", default="dynamo,onnx")
    args = parser.parse_args()
    rows = []
    for backend in args.backends.split(","):
        measured: dict[tuple[int, bool], list[float]] = {}
        for depth in args.depths:
            module, inputs = decode_program_inputs(depth)
            for _ in range(args.rounds):
                for narrowed in (False, True):  # interleaved: drift on the machine hits both alike
                    measured.setdefault((depth, narrowed), []).append(seconds(backend, module, inputs, narrowed))
        low, high = args.depths
        for narrowed in (False, True):
            at = {d: statistics.median(measured[(d, narrowed)]) for d in args.depths}
            rows.append(
                {
                    "backend": backend,
                    "axes": "varying only" if narrowed else "every axis (Dim.AUTO)",
                    **{f"{d} layers s": round(at[d], 1) for d in args.depths},
                    "s per layer": round((at[high] - at[low]) / (high - low), 2),
                }
            )
        rows[-1]["ratio"] = round(rows[-1]["s per layer"] / rows[-2]["s per layer"], 2)
        rows[-2]["ratio"] = 1.0
    (DOCS / "benchmarks-dynamic-axes.json").write_text(json.dumps(rows, indent=2) + "\n")
    columns = list(rows[0])
    lines = [
        "# The exporter's seconds per decoder layer, by dynamic-shape spec",
        "",
        "Written by `bench/dynamic_axes.py` (one run, both specs interleaved in one process, medians of "
        f"{args.rounds} rounds; a SmolLM2-135M-shaped Llama of random weights, its decode program as "
        "hfexport captures it). Ratio: seconds per layer, varying axes / every axis.",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for row in rows]
    (DOCS / "benchmarks-dynamic-axes.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

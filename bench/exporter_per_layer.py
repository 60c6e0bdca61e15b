"""The exporter's seconds per decoder layer, before and after what hfexport changed around it.

Two changes are measured, each against what came before it:
- *axes*: every axis `Dim.AUTO` (what `transformers.exporters` marks given no dynamic shapes)
  against the axes a runtime varies (`hfexport.worker.splits.varying_axes`);
- *matcher* (ONNX): onnxscript's rewriter as pinned against its multi-output matcher kept linear
  (`hfexport.worker.exporter_fixes._multi_output_rules_look_at_their_own_ops`).

A Llama shape of random weights (width 576, 9 heads, 3 key/value heads: SmolLM2-135M's) at two
depths, its decode program captured once per depth as hfexport captures it, then exported under
each setting in interleaved rounds in one process (the settings share every cost but their own),
per backend. The slope between the depths is the per-layer cost; the ratio is against the first row:

    .venv/bin/python bench/exporter_per_layer.py      # writes docs/benchmarks-exporter-per-layer.{md,json}
    .venv/bin/python bench/exporter_per_layer.py --rounds 1 --depths 2 4   # a quick look
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent.parent))

DOCS = Path(__file__).parent.parent / "docs"

# (name, dynamic axes narrowed, onnxscript's matcher kept linear): each setting adds one change.
SETTINGS = {
    "dynamo": [("every axis Dim.AUTO", False, False), ("varying axes only", True, False)],
    "onnx": [
        ("every axis Dim.AUTO, matcher as pinned", False, False),
        ("varying axes only, matcher as pinned", True, False),
        ("varying axes only, matcher linear (hfexport today)", True, True),
    ],
}


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


@contextlib.contextmanager
def matcher_fix(on: bool):
    """hfexport's fix of onnxscript's matcher registered (as hfexport runs) or taken out of the registry."""
    from transformers.exporters import utils

    from hfexport.worker import exporter_fixes

    fix = exporter_fixes._multi_output_rules_look_at_their_own_ops
    entries = [e for e in utils._PATCHES.get("onnx", []) if e[2] is fix]
    if not on:
        utils._PATCHES["onnx"] = [e for e in utils._PATCHES["onnx"] if e[2] is not fix]
    try:
        yield
    finally:
        if not on:
            utils._PATCHES["onnx"].extend(entries)


def seconds(backend: str, module, inputs: dict, narrowed: bool, linear: bool) -> float:
    from transformers.exporters import AutoHfExporter

    from hfexport.backends import get_backend
    from hfexport.worker.splits import varying_axes

    config = get_backend(backend).make_config(None)
    if narrowed:
        config = varying_axes(config, module, inputs)
    exporter = AutoHfExporter.from_config({"export_format": get_backend(backend).export_format})
    with matcher_fix(linear):
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
        settings = SETTINGS[backend]
        measured: dict[tuple[int, str], list[float]] = {}
        for depth in args.depths:
            module, inputs = decode_program_inputs(depth)
            for _ in range(args.rounds):
                for name, narrowed, linear in settings:  # interleaved: drift on the machine hits all alike
                    measured.setdefault((depth, name), []).append(seconds(backend, module, inputs, narrowed, linear))
        low, high = args.depths
        first = None
        for name, _, _ in settings:
            at = {d: statistics.median(measured[(d, name)]) for d in args.depths}
            per_layer = (at[high] - at[low]) / (high - low)
            first = first or per_layer
            rows.append(
                {
                    "backend": backend,
                    "setting": name,
                    **{f"{d} layers s": round(at[d], 1) for d in args.depths},
                    "s per layer": round(per_layer, 2),
                    "ratio": round(per_layer / first, 2),
                }
            )
    (DOCS / "benchmarks-exporter-per-layer.json").write_text(json.dumps(rows, indent=2) + "\n")
    columns = list(rows[0])
    lines = [
        "# The exporter's seconds per decoder layer, before and after",
        "",
        "Written by `bench/exporter_per_layer.py` on 2 cores (one run, the settings interleaved in one "
        f"process, medians of {args.rounds} rounds; a SmolLM2-135M-shaped Llama of random weights, its "
        "decode program as hfexport captures it). Ratio: seconds per layer against the backend's first row.",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]
    lines += ["| " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for row in rows]
    (DOCS / "benchmarks-exporter-per-layer.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

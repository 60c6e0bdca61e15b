"""Where an ONNX export by `transformers.exporters` spends its time, phase by phase.

The *exporting* stage of hfexport's profile is one call into the exporter. This script makes that call
with timers around the library functions it goes through, to show which part makes it slower than
optimum-cli (which uses the TorchScript exporter):

    python bench/onnx_phases.py MODEL_DIR   # prints one JSON line: seconds per phase

Timers only wrap functions (nothing is changed); the export is the one bench/bare_export.py makes.
"""

from __future__ import annotations

import json
import sys
import time

import torch
import transformers
from phases import around
from torch.export import Dim
from transformers.exporters import AutoHfExporter, OnnxConfig

SPENT: dict[str, float] = {}


def timed(path: str, phase: str) -> None:
    """Replace the function at `path` with one that adds its run time to SPENT[phase]."""

    def spent(started: float) -> None:
        SPENT[phase] = SPENT.get(phase, 0.0) + time.perf_counter() - started

    around(path, spent)


def main() -> int:
    model_dir = sys.argv[1]
    timed("transformers.exporters.exporter_dynamo.DynamoExporter.export_program", "torch.export")
    timed("torch.onnx._internal.exporter._core._prepare_exported_program_for_export", "run_decompositions")
    timed("torch.onnx.export", "torch.onnx.export")
    timed("torch.onnx._internal.exporter._onnx_program.ONNXProgram.optimize", "onnxscript optimizer")

    config = transformers.AutoConfig.from_pretrained(model_dir)
    model = transformers.AutoModel.from_pretrained(model_dir).eval()
    batch, seq = Dim("batch", min=1, max=64), Dim("sequence", min=1, max=config.max_position_embeddings)
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    export_config = OnnxConfig(dynamic=True, dynamic_shapes=shapes)
    ids = torch.randint(5, config.vocab_size, (2, 8))
    start = time.perf_counter()
    with torch.no_grad():
        AutoHfExporter.from_config(export_config).export(
            model, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, export_config
        )
    total = time.perf_counter() - start

    onnx_export = SPENT.get("torch.onnx.export", 0.0)
    decompositions = SPENT.get("run_decompositions", 0.0)
    optimizer = SPENT.get("onnxscript optimizer", 0.0)
    phases = {
        "torch.export trace": SPENT.get("torch.export", 0.0),
        "run_decompositions (second trace, inside torch.onnx.export)": decompositions,
        "translation to ONNX": onnx_export - decompositions - optimizer,
        "onnxscript optimizer": optimizer,
        "exporter's own fixes and the rest": total - onnx_export - SPENT.get("torch.export", 0.0),
    }
    print(json.dumps({"total_s": total, "phases": phases}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

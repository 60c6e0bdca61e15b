"""The baseline: what a user writes by hand with `transformers.exporters`, no hfexport around it.

Load, export with the same config hfexport uses, save, reload on the backend's runtime, compare
once with eager. Run as its own process so its wall time and peak RSS are measured like ours:

    python bench/bare_export.py MODEL_DIR BACKEND OUT_DIR [--task text-generation]
"""

from __future__ import annotations

import argparse
import sys

import torch
import transformers
from torch.export import Dim
from transformers.exporters import AutoHfExporter, DynamoConfig, ExecutorchConfig, ExportedModel, OnnxConfig


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("backend", choices=["dynamo", "onnx", "executorch"])
    parser.add_argument("out_dir")
    parser.add_argument("--task", default="feature-extraction")
    args = parser.parse_args()

    config = transformers.AutoConfig.from_pretrained(args.model_dir)
    model_class = transformers.AutoModelForCausalLM if args.task == "text-generation" else transformers.AutoModel
    model = (
        model_class.from_pretrained(args.model_dir, use_cache=False).eval()
        if args.task == "text-generation"
        else model_class.from_pretrained(args.model_dir).eval()
    )
    batch, seq = Dim("batch", min=1, max=64), Dim("sequence", min=1, max=config.max_position_embeddings)
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    make = {"dynamo": DynamoConfig, "onnx": OnnxConfig, "executorch": ExecutorchConfig}[args.backend]
    export_config = make(dynamic=True, dynamic_shapes=shapes)
    ids = torch.randint(5, config.vocab_size, (2, 8))
    sample = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    with torch.no_grad():
        exported = AutoHfExporter.from_config(export_config).export(model, sample, export_config)
    exported.save_pretrained(args.out_dir)
    loaded = ExportedModel.from_pretrained(args.out_dir, trust_remote_code=args.backend == "dynamo")
    other = torch.randint(5, config.vocab_size, (3, 13))
    inputs = {"input_ids": other, "attention_mask": torch.ones_like(other)}
    with torch.inference_mode():
        expected, got = model(**inputs), loaded(**inputs)
    key = "logits" if args.task == "text-generation" else "last_hidden_state"
    diff = (expected[key] - got[key]).abs().max().item()
    print(f"max abs diff {diff:.3g}")
    return 0 if diff < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())

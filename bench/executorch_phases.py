"""Where the memory of a decoder LLM's ExecuTorch program goes, phase by phase.

hfexport's ExecuTorch worker peaks at 4.4x-6.4x the fp32 weights (docs/benchmarks-scale.md), all of it
in the stage that builds the program for ExecuTorch's LLM runner. This script runs that stage's own
function (`hfexport.worker.llm_runner.export`) on a Llama of SmolLM2-135M's shape, fewer layers by
default (`--layers`; a 30-layer one takes ~4 minutes), with a probe after each library call it goes
through — torch.export, ExecuTorch's `to_edge_transform_and_lower`, `to_executorch`, `write_to_file` —
and prints, per phase, the process's resident set (freed heap handed back first, so what is still
held) and its peak so far, in MB and as a multiple of the fp32 weights:

    python bench/executorch_phases.py [--layers 6]   # prints a table, then one JSON line

Probes only wrap functions (nothing is changed).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

from phases import around

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PHASES: list[dict] = []


def _resident_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmRSS:"))


def probe(phase: str, started: float) -> None:
    from hfexport.worker.memory import return_freed

    return_freed()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    PHASES.append(
        {"phase": phase, "seconds": time.perf_counter() - started, "held_mb": _resident_mb(), "peak_mb": peak}
    )


def probed(path: str, phase: str) -> None:
    """Probe after each call of the function or method at `path` (module.function or module.Class.method)."""
    around(path, lambda started: probe(phase, started))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=6, help="decoder layers (SmolLM2-135M has 30)")
    args = parser.parse_args()

    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    from hfexport.worker import llm_runner

    started = time.perf_counter()
    probe("imports", started)
    torch.manual_seed(0)
    special = dict(bos_token_id=0, eos_token_id=0)
    config = LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=args.layers,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        **special,
    )
    model = LlamaForCausalLM(config).eval()
    model.generation_config = GenerationConfig(**special)
    fp32_mb = sum(p.numel() for p in model.parameters()) * 4 / 2**20
    probe("model built", started)

    probed("transformers.integrations.executorch.TorchExportableModuleForDecoderOnlyLM.export", "torch.export")
    probed("executorch.exir.to_edge_transform_and_lower", "to_edge_transform_and_lower")
    probed("executorch.exir.program._program.EdgeProgramManager.to_executorch", "to_executorch")
    probed("executorch.exir.program._program.ExecutorchProgramManager.write_to_file", "write_to_file")
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / llm_runner.PROGRAM
        llm_runner.export(model, path, llm_runner.max_seq_len(model.config))
        program_mb = path.stat().st_size / 2**20

    base = PHASES[0]["held_mb"]
    print(f"{args.layers} layers, {fp32_mb:.0f} MB of fp32 weights, program {program_mb:.0f} MB; imports {base:.0f} MB")
    print(f"{'phase':32s} {'s':>6s} {'held MB':>8s} {'peak MB':>8s} {'(peak-imports)/fp32':>20s}")
    for p in PHASES:
        ratio = (p["peak_mb"] - base) / fp32_mb
        print(f"{p['phase']:32s} {p['seconds']:6.1f} {p['held_mb']:8.0f} {p['peak_mb']:8.0f} {ratio:19.2f}x")
    print(json.dumps({"layers": args.layers, "fp32_mb": fp32_mb, "program_mb": program_mb, "phases": PHASES}))


if __name__ == "__main__":
    main()

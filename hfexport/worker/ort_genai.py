"""A decoder LLM as ONNX Runtime GenAI runs it: the folders its model builder writes, judged as its
users run them.

ONNX Runtime GenAI (behind Foundry Local, Windows' AI APIs and Olive) drives an LLM from one folder:
`model.onnx` (+ `model.onnx.data`), `genai_config.json` and the tokenizer files, which its model builder
(`python -m onnxruntime_genai.models.builder`) writes from a transformers checkpoint, one folder a
target (execution provider and precision). onnx-community publishes them beside `onnx/` as
`onnxruntime/<device group>/<target>/`; so does this backend (`Target.folder`).

The builder validates nothing: its default int4 of SmolLM2-135M keeps 65.1 % same top with eager
(KLD 0.39 nats; docs/benchmarks-llm-peers.md). Here each folder is built by the pinned builder in a
process of its own — in the worker's sandbox, which holds no token; `hf_token=false` and
`hf_remote=false` keep it off the network and off the repo's code — and judged as every generation
file is, in `onnxruntime_genai` itself: its `Generator` fed the prompt, then each token, as an app
feeds it (`generator_run`). The fp32 folder must give eager `generate()`'s token ids (32 of them,
through the Generator's own greedy search too); the int8 and int4 folders are held to the floors of
hfexport's own w8 and q4 files (teacher-forced same top, |Δ log-prob|, KLD over real prose, and decode
at least as fast as the fp32 folder), and one that misses them is not published.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..errors import UnsupportedArchitectureError, describe_error
from ..report import Check, Figure, Layout, Status, Validation, VariantKind, VariantResult, WebRuntimes
from ..variants import misses, thresholds_for, variants_of
from ..web.runtimes import WebRuntimeMissing
from ..web.webgpu import missing_on_webgpu, placement
from .derive import reported
from .llm_runner import compare, eager_side, prefix_of, quality
from .validate import Reference

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from ..backends import Backend
    from ..report import BackendResult
    from .splits import ExportSplit

# The file ONNX Runtime GenAI opens in each folder (`genai_config.json` names it).
PROGRAM = "model.onnx"
# Positions a judging Generator holds (its cache is allocated whole: `past_present_share_buffer`):
# the model's context, bounded. The judge's longest text is a prompt and 256 forced tokens.
MAX_LENGTH_BOUND = 2048
# Greedy tokens the fp32 folder must write as eager does, through the Generator's own search.
GREEDY_TOKENS = 32
# The prompt the Generator's own greedy search is checked on (and the card's block runs).
PROMPT = "hfexport validated this file against the original model."


@dataclass(frozen=True)
class Target:
    """One folder the builder writes: its execution provider (`-e`), precision (`-p`) and the
    quantization options (`--extra_options`) it is built with, named as onnx-community and Microsoft's
    own repos name theirs (`cpu_and_mobile/cpu-int4-rtn-block-32-acc-level-4`)."""

    precision: str
    provider: str = "cpu"
    options: tuple[tuple[str, str], ...] = ()

    @property
    def folder(self) -> str:
        group = {"cpu": "cpu_and_mobile"}.get(self.provider, self.provider)
        name = [self.provider, self.precision]
        settings = dict(self.options)
        if "algo_config" in settings:
            name.append(settings["algo_config"].replace("_", ""))
        elif self.precision.startswith("int"):
            name.append("rtn")
        if "matmul_mixed_precision" in settings:
            name.append("mixed")
        if "block_size" in settings:
            name.append(f"block-{settings['block_size']}")
        if "accuracy_level" in settings:
            name.append(f"acc-level-{settings['accuracy_level']}")
        return f"{group}/{'-'.join(name)}"

    @property
    def settings(self) -> str:
        """As the report says them: the builder's own words."""
        extra = " ".join(f"{k}={v}" for k, v in self.options)
        return f"builder -p {self.precision} -e {self.provider}" + (f" {extra}" if extra else "")


# The options every quantized CPU folder is built with. accuracy_level=4: MatMulNBits computes in int8
# (SmolLM2-135M's int8 decoded 2.15x its fp32 folder, its int4 2.76x; float compute has no fast CPU
# kernel: 583-720 µs against 17 µs for a 576x1536 MatMulNBits). Blocks of 32: the builder's default.
_FAST = (("accuracy_level", "4"), ("block_size", "32"))
FP32 = Target("fp32")
# Each kind's settings, fastest first: where one misses its floors the next, more accurate one is
# built and judged. Measured on SmolLM2-135M (weights dequantized from a 4-bit GGUF), 1,536 positions
# of prose, teacher-forced against eager fp32 (same top, KLD nats), decode tok/s at batch 1 (fp32 24.5):
#   int8, round to nearest                               94.9 %  0.005   59.6 tok/s  267 MB
#   int4, round to nearest (the builder's default)       66.4 %  0.398  100.1        87 MB
#   int4, blocks of 16                                   71.4 %  0.310   63.1       103 MB
#   int4, k_quant                                        63.3 %  0.461   90.0        89 MB
#   int4, k_quant, blocks of 16, int8 head               73.6 %  0.231   55.6       123 MB
#   int4, k_quant, int8 head and mixed layers            76.0 %  0.197   87.4       114 MB
#   int4 at float compute (accuracy level 1)             65.9 %  0.394   61.8        87 MB
# The builder also writes graphs ONNX Runtime refuses: an int8 head over round-to-nearest ("Node input
# 'lm_head.MatMul.weight_Q8G32' is not a graph input"), asymmetric int4 (a uint8 embedding Reshape).
# No int4 setting reaches q4's floors on that checkpoint (hfexport's own q4, HQQ: 98.2 %): it is
# reported with its figures and not published. (A model trained in float lands nearer its grid.)
ATTEMPTS: dict[VariantKind, tuple[Target, ...]] = {
    VariantKind.W8: (Target("int8", options=_FAST),),
    VariantKind.Q4: (
        Target("int4", options=_FAST),
        Target(
            "int4",
            options=(
                *_FAST,
                ("algo_config", "k_quant"),
                ("matmul_mixed_precision", "last_matmul:int8,mixed_layers:int8"),
            ),
        ),
    ),
    # WebGPU computes in float (accuracy level 0), fed and returning float32 (`use_webgpu_fp32`: GPUs
    # without float16, and the browser check's SwiftShader).
    VariantKind.Q4_WEBGPU: (Target("int4", "webgpu", (("block_size", "32"), ("use_webgpu_fp32", "true"))),),
}


def build(model_dir: Path, out_dir: Path, target: Target) -> float:
    """The builder writes `target`'s folder under `out_dir` from the checkpoint at `model_dir`, in a
    process of its own; returns its seconds.

    Raises:
        RuntimeError: the builder failed, with the last lines it printed.
    """
    folder = out_dir / target.folder
    folder.mkdir(parents=True)
    options = ["hf_token=false", "hf_remote=false", *(f"{k}={v}" for k, v in target.options)]
    with tempfile.TemporaryDirectory(prefix="hfexport-genai-cache-") as cache:
        command = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(model_dir), "-o", str(folder)]
        command += ["-p", target.precision, "-e", target.provider, "-c", cache, "--extra_options", *options]
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        said = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        last = next((line for line in reversed(said) if "Error" in line or "error" in line), said[-1] if said else "")
        raise RuntimeError(f"ONNX Runtime GenAI's builder failed on {target.settings}: {last.strip()}")
    return time.perf_counter() - started


def open_model(folder: Path) -> Any:
    """The folder as an `og.Model` on ONNX Runtime's CPU provider, whichever its `genai_config.json`
    names: the judge runs WebGPU's folder on the CPU (its figures are the weights', not the device's)."""
    import onnxruntime_genai as og

    config = og.Config(str(folder))
    config.clear_providers()
    return og.Model(config)


def _max_length(model: Any) -> int:
    context = int(getattr(model.config, "max_position_embeddings", None) or MAX_LENGTH_BOUND)
    return min(context, MAX_LENGTH_BOUND)


def generator_run(folder: Path, max_length: int, prefix: int = 0) -> Callable[..., dict]:
    """`run(component, input_ids, cache_position)` over the folder in `onnxruntime_genai`, for the
    split's greedy loop (`validate.greedy_loop`): a `Generator` per text (a new one where the text
    starts at position 0, after `prefix` masked ones), fed the prompt and then each token with
    `append_tokens` as an app feeds it; the logits are the Generator's own output of that call."""
    import numpy as np
    import onnxruntime_genai as og

    model = open_model(folder)
    held: dict[str, Any] = {}

    def run(component: str, input_ids: torch.Tensor, cache_position: torch.Tensor, **_: Any) -> dict:
        if int(cache_position[0]) - prefix == 0:
            params = og.GeneratorParams(model)
            params.set_search_options(max_length=max_length, do_sample=False)
            held["generator"] = og.Generator(model, params)
        generator = held["generator"]
        generator.append_tokens(input_ids[0].to(torch.int32).numpy())
        return {"logits": torch.from_numpy(np.array(generator.get_output("logits"))), "cache": ()}

    return run


def greedy_search(model: Any, ids: list[int], new_tokens: int) -> tuple[list[int], float]:
    """The ids `onnxruntime_genai`'s own greedy search writes after `ids` (an `og.Model`), exactly
    `new_tokens` of them (end of sequence held back, as eager's reference holds it back), and the
    seconds it took to write them (the prompt's run excluded)."""
    import onnxruntime_genai as og

    params = og.GeneratorParams(model)
    total = len(ids) + new_tokens
    params.set_search_options(max_length=total, min_length=total, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(ids)
    started = time.perf_counter()
    while not generator.is_done():
        generator.generate_next_token()
    seconds = time.perf_counter() - started
    return [int(t) for t in generator.get_sequence(0)[len(ids) :]], seconds


def generator_check(model: Any, model_dir: Path, folder: Path) -> Check:
    """`onnxruntime_genai`'s `Generator` searching greedily itself, with the folder's tokenizer,
    against eager `generate()`'s `GREEDY_TOKENS` ids on `PROMPT`."""
    import onnxruntime_genai as og
    from transformers import AutoTokenizer

    check = Check("onnxruntime_genai")
    loaded = open_model(folder)
    ids = [int(i) for i in og.Tokenizer(loaded).encode(PROMPT)]
    theirs = AutoTokenizer.from_pretrained(model_dir)(PROMPT)["input_ids"]
    if ids != list(theirs):
        check.error = f"its tokenizer reads the prompt as {ids[:12]}, transformers' as {list(theirs)[:12]}"
        return check
    with torch.inference_mode():
        expected = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=GREEDY_TOKENS,
            min_new_tokens=GREEDY_TOKENS,
            do_sample=False,
        )[0, len(ids) :].tolist()
    written, _ = greedy_search(loaded, ids, GREEDY_TOKENS)
    check.eager_tokens, check.exported_tokens = [expected], [written]
    check.tokens_equal = written == expected
    if not check.tokens_equal:
        at = next(i for i, (a, b) in enumerate(zip(written, expected)) if a != b)
        check.error = f"its greedy search wrote {written[at]} at new token {at} where eager wrote {expected[at]}"
    return check


def paired_decode(base: Any, variant: Any, ids: list[int], rounds: int = 5) -> tuple[list[float], float]:
    """The fp32 folder's decode time over the variant's (two `og.Model`s) in each of `rounds` paired
    rounds after a warm-up of both, sorted: the median is the figure, the ends its spread (on a shared
    2-core machine one round swings; the pairs keep what the other load did to both). And the variant's
    median tokens per second, on this machine."""
    greedy_search(base, ids, GREEDY_TOKENS), greedy_search(variant, ids, GREEDY_TOKENS)
    ratios, taken = [], []
    for _ in range(rounds):
        _, baseline = greedy_search(base, ids, GREEDY_TOKENS)
        _, seconds = greedy_search(variant, ids, GREEDY_TOKENS)
        ratios.append(baseline / seconds)
        taken.append(seconds)
    return sorted(ratios), GREEDY_TOKENS / sorted(taken)[len(taken) // 2]


def on_webgpu(graph: Path) -> WebRuntimes:
    """Where WebGPU's folder runs in a browser: opened on onnxruntime-web's WebGPU provider in headless
    Chromium (`web.webgpu`), every node that computes on floats or quantized weights placed on the GPU.
    Not a file transformers.js's wasm backend is given (ONNX Runtime GenAI's web apps run WebGPU)."""
    web = WebRuntimes(wasm_note="ONNX Runtime GenAI's WebGPU folder: not a wasm file")
    try:
        (placed,) = placement([graph])
        web.webgpu_cpu = missing_on_webgpu(graph, placed) if placed.error is None else []
    except (WebRuntimeMissing, OSError, RuntimeError, subprocess.SubprocessError) as e:
        web.webgpu_note = f"not run: {describe_error(e)}"
        return web
    web.webgpu, web.webgpu_note = placed.error is None and not web.webgpu_cpu, placed.error
    return web


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.name.startswith(PROGRAM))


def refuse_unbuildable(config: Any) -> None:
    """What the pinned builder is known to fail on, said before it runs.

    Raises:
        UnsupportedArchitectureError: a config with rotary settings per layer type (transformers 5's
            Gemma 3: `rope_parameters` keyed `full_attention`, `sliding_attention`), where the builder reads
            one `rope_parameters["rope_type"]` (measured: `KeyError: 'rope_type'`, tiny and 270M alike).
    """
    from importlib.metadata import version

    text = config.get_text_config()
    rope = getattr(text, "rope_parameters", None)
    if isinstance(rope, dict) and rope and all(isinstance(v, dict) for v in rope.values()):
        raise UnsupportedArchitectureError(
            f"ONNX Runtime GenAI's model builder (onnxruntime-genai {version('onnxruntime-genai')}) reads one set of "
            f"rotary settings (`rope_parameters['rope_type']`), and this {text.model_type} config holds one per layer "
            f"type ({', '.join(rope)}), as transformers 5 writes it: the builder fails with KeyError: 'rope_type'.",
            "Export it with onnx (--backends onnx): its decoder graph runs in ONNX Runtime, transformers.js and "
            "optimum, validated the same way.",
        )


def run(
    split: ExportSplit,
    backend: Backend,
    model: PreTrainedModel,
    model_dir: Path,
    out_dir: Path,
    result: BackendResult,
    stage: Callable[[str], None],
) -> None:
    """The backend's whole job (`Backend.llm_runner` names this): the fp32 folder built and judged,
    then each variant's (w8: int8, q4: int4), one folder a target; `result` filled in."""
    plan = split.plan
    refuse_unbuildable(model.config)
    stage("building with ONNX Runtime GenAI's builder")
    result.export_seconds = round(build(model_dir, out_dir, FP32), 2)
    base = out_dir / FP32.folder

    stage("eager reference")
    other = split.inputs(model_dir, model.config, plan.validation, seed=1)
    wanted = [v for v in variants_of(backend.name, plan.variants, generates=True) if v.kind in ATTEMPTS]
    reference, prompts, judged = eager_side(split, model, model_dir, other, bool(wanted))

    stage("validating")
    started = time.perf_counter()
    length = _max_length(model)
    opened = lambda folder: generator_run(folder, length, prefix_of(split))  # noqa: E731
    validation = Validation(tolerance=backend.tolerance[result.dtype or "float32"])
    validation.checks.append(compare("generation_other_shape", reference, base, prompts, opened))
    validation.checks.append(generator_check(model, model_dir, base))
    result.validate_seconds = round(time.perf_counter() - started, 2)
    if wanted and validation.passed:
        stage("variants")
        result.variants = _variants(wanted, plan, reference, model_dir, out_dir, prompts, judged, opened, stage)
    result.layout = Layout.ORT_GENAI
    result.components = list(split.components)
    result.programs = {c: f"{FP32.folder}/{PROGRAM}" for c in split.components}
    result.inputs = {c: ["input_ids", "attention_mask", "past_key_values"] for c in split.components}
    result.validation = validation
    result.status = Status.OK if validation.passed else Status.FAILED
    result.error = validation.first_problem()
    if not validation.passed:
        shutil.rmtree(base, ignore_errors=True)


def _variants(
    wanted: list,
    plan: Any,
    reference: Reference,
    model_dir: Path,
    out_dir: Path,
    prompts: list[dict],
    judged: list,
    opened: Callable[[Path], Callable[..., dict]],
    stage: Callable[[str], None],
) -> list[VariantResult]:
    """Each wanted kind built by its `ATTEMPTS` in turn until one meets the kind's floors (its figures
    against eager fp32 through the Generator, and its decode speed over the fp32 folder's, paired
    rounds); a kind none of whose settings do is reported with the last one's figures, not published."""
    import traceback

    from transformers import AutoTokenizer

    base_folder = out_dir / FP32.folder
    base_bytes, base_model = _folder_bytes(base_folder), open_model(base_folder)
    ids = AutoTokenizer.from_pretrained(model_dir)(PROMPT)["input_ids"]
    results = []
    for variant in wanted:
        outcome = VariantResult(variant.kind, Status.FAILED, thresholds=thresholds_for(variant.kind, plan.min_quality))
        results.append(outcome)
        for target in ATTEMPTS[variant.kind]:
            stage(f"variant {variant.kind}: {target.settings}")
            folder = out_dir / target.folder
            outcome.settings = target.settings
            try:
                build(model_dir, out_dir, target)
                stage(f"variant {variant.kind}: judging {target.folder}")
                figures = quality(reference, folder, prompts, judged, opened)
                if target.provider == "webgpu":
                    outcome.web = on_webgpu(folder / PROGRAM)
                else:
                    speed, figures[Figure.DECODE_TOK_S] = paired_decode(base_model, open_model(folder), ids)
                    figures[Figure.DECODE_SPEEDUP] = speed[len(speed) // 2]
                    outcome.speedup = round(speed[len(speed) // 2], 3)
                    outcome.speedup_range = [round(speed[0], 2), round(speed[-1], 2)]
            except Exception as e:
                traceback.print_exc()
                outcome.error = f"{type(e).__name__}: {describe_error(e)}"
                shutil.rmtree(folder, ignore_errors=True)
                continue
            outcome.quality = reported(figures)
            missed = misses(figures, outcome.thresholds)
            if outcome.web is not None and not outcome.web.webgpu:
                missed.append(
                    f"WebGPU: {outcome.web.cell().split(' · ')[-1]}"
                    + (f" ({outcome.web.webgpu_note})" if outcome.web.webgpu_note else "")
                )
            if missed:
                shutil.rmtree(folder)
                outcome.error = ", ".join(missed) + " (not published)"
                if all(m.startswith(Figure.DECODE_SPEEDUP) for m in missed):
                    outcome.error += ": it decodes slower than the fp32 folder; a more accurate one is no faster"
                    break
                continue
            outcome.status, outcome.error = Status.OK, None
            outcome.file = f"{target.folder}/{PROGRAM}"
            outcome.files = sorted(str(p.relative_to(out_dir)) for p in folder.iterdir())
            outcome.size = _folder_bytes(folder)
            outcome.size_share = round(outcome.size / base_bytes, 4)
            break
    return results

"""Smaller and faster variants of a backend's export, as a registry: what each one is, the file
name loaders look for, and the quality it is held to.

Precision is what users choose a file by: transformers.js picks `onnx/model_quantized.onnx` for
`dtype: 'q8'` and `model_fp16.onnx` for `'fp16'`; sentence-transformers ships int8 and fused
graphs beside `model.onnx`. A variant is derived from the backend's validated fp32 export, in the
same worker, with the tools `transformers.exporters` ships (ONNX Runtime's quantizer through
`OnnxRuntimeQuantizer`, the ORT fusions through `OnnxConfig(ort_fusions=...)`, the exporter itself for a
float16 program) and ONNX Runtime's own `MatMulNBitsQuantizer` for weight-only files; hfexport
adds the choice of what to keep in float (a sensitivity pass, the tied head), the quality check
against eager fp32 and the packaging. Adding one is "write a recipe in the worker
and register it here by its dotted path" (the parent never imports the worker's modules):

    # hfexport/worker/onnx_variants.py
    def int8(job: VariantJob) -> Path:
        ...  # write a folder `ExportedModel.from_pretrained` loads; return it

    # here
    register_variant("onnx", VariantKind.INT8, file="model_quantized.onnx", package=package_onnx,
                     recipe="hfexport.worker.onnx_variants:int8")

A variant that misses its quality thresholds is reported and not published.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .layouts import package_onnx, package_pte
from .report import Figure, VariantKind

# Quality figures (worker/validate) each kind must reach against eager fp32, on inputs of another
# shape than any trace or calibration. Overridable per kind (`--min-quality int8.cosine_mean=0.995`).
# Embedding models are judged by cosine, heads by top-1 agreement, generation teacher-forced over at
# least 200 positions of real text (`inputs.Judged`: prose, or spoken prose and its transcript): the
# share of positions whose arg-max is eager's and the mean |Δ log-prob| of the text's tokens (lower
# is better). Greedy agreement with eager `generate()` is reported, never a gate: on Whisper base's
# w8 it was 0.375 with teacher-forced top-1 1.000 — one flip at a near-tie changes every later token.
# The weight-only kinds of a generation export are also held to decode at least as fast as the fp32
# program (`decode_speedup`): users download them to go faster. Their floors are what ONNX Runtime's
# fast kernels (int8 compute, integer zero points) keep on real weights — SmolLM2-135M, 2,304
# positions of prose (bench/llm_peers.py): w8 same top 0.963, KLD 0.0046 ± 0.0001, ~2x fp32's decode;
# q4 by round-to-nearest 0.728, 0.28 (a checkpoint dequantized from llama.cpp's Q4_1, whose grids
# integer zero points miss: not published, as ONNX Runtime GenAI's int4 at 0.65 should not be), by
# HQQ 0.982, 0.0015, 1.7-2.0x (`onnx_variants._integer_zero_points`; docs/benchmarks-llm-peers.md).
DEFAULT_THRESHOLDS: dict[VariantKind, dict[str, float]] = {
    VariantKind.OPTIMIZED: {
        Figure.COSINE_MEAN: 0.9999,
        Figure.COSINE_MIN: 0.999,
        Figure.TOP1_AGREEMENT: 0.99,
        Figure.FORCED_TOP1_AGREEMENT: 0.99,
        Figure.LOGPROB_DELTA_MEAN: 0.01,
    },
    VariantKind.FP16: {
        Figure.COSINE_MEAN: 0.999,
        Figure.COSINE_MIN: 0.99,
        Figure.TOP1_AGREEMENT: 0.98,
        Figure.FORCED_TOP1_AGREEMENT: 0.98,
        Figure.LOGPROB_DELTA_MEAN: 0.05,
    },
    VariantKind.INT8: {
        Figure.COSINE_MEAN: 0.99,
        Figure.COSINE_MIN: 0.95,
        Figure.TOP1_AGREEMENT: 0.9,
        Figure.FORCED_TOP1_AGREEMENT: 0.9,
        Figure.LOGPROB_DELTA_MEAN: 0.25,
    },
    VariantKind.DA8W4: {Figure.FORCED_TOP1_AGREEMENT: 0.7, Figure.LOGPROB_DELTA_MEAN: 0.5},
    VariantKind.W8: {
        Figure.COSINE_MEAN: 0.999,
        Figure.COSINE_MIN: 0.99,
        Figure.TOP1_AGREEMENT: 0.98,
        Figure.FORCED_TOP1_AGREEMENT: 0.95,
        Figure.LOGPROB_DELTA_MEAN: 0.1,
        Figure.KLD_MEAN: 0.01,
        Figure.DECODE_SPEEDUP: 1.0,
    },
    VariantKind.Q4: {
        Figure.COSINE_MEAN: 0.99,
        Figure.COSINE_MIN: 0.95,
        Figure.TOP1_AGREEMENT: 0.9,
        Figure.FORCED_TOP1_AGREEMENT: 0.85,
        Figure.LOGPROB_DELTA_MEAN: 0.3,
        Figure.KLD_MEAN: 0.15,
        Figure.DECODE_SPEEDUP: 1.0,
    },
    VariantKind.Q4F16: {Figure.FORCED_TOP1_AGREEMENT: 0.8, Figure.LOGPROB_DELTA_MEAN: 0.3},
    # q4's, but for speed: it is WebGPU's file, judged on the CPU, where float compute is slow (it must
    # instead run every computing node on onnxruntime-web's WebGPU provider).
    VariantKind.Q4_WEBGPU: {Figure.FORCED_TOP1_AGREEMENT: 0.85, Figure.LOGPROB_DELTA_MEAN: 0.3, Figure.KLD_MEAN: 0.15},
}
LOWER_IS_BETTER = frozenset({Figure.LOGPROB_DELTA_MEAN, Figure.KLD_MEAN})
# Measured, never gated: a count, a standard error, a speed on one machine.
UNGATED = frozenset({Figure.FORCED_TOKENS, Figure.KLD_SE, Figure.DECODE_TOK_S})


def misses(figures: dict[str, float], thresholds: dict[str, float]) -> list[str]:
    """The thresholds `figures` miss, each said as `figure value < limit` (or `>` where lower is better)."""
    missed = []
    for name, limit in thresholds.items():
        if name not in figures:
            continue
        value = figures[name]
        if name in LOWER_IS_BETTER and not value <= limit:
            missed.append(f"{name} {value:.4g} > {limit:g}")
        elif name not in LOWER_IS_BETTER and not value >= limit:
            missed.append(f"{name} {value:.4g} < {limit:g}")
    return missed


# What a push builds when not told — `default`, a name of its own (`--variants default,fp16`) —
# by whether the export generates. One graph (encoders, heads): the int8 ONNX graph, the file
# transformers.js loads by default in the browser (`q8`) and the one sentence-transformers users
# pick for CPU serving, and the weight-only 8-bit graph, the quantized file WebGPU runs (it has no
# kernel for int8's `QAttention`, `MatMulInteger`, `DynamicQuantizeLinear`). On the real MiniLM:
# int8 cosine to eager 0.992 (min 0.979), w8 0.9996 (0.9985), q4 0.972 (0.902; HQQ 0.980) — 4 bits
# miss int8's floors on a 22 M encoder, so q4 is asked for by name there. Generation: weight-only
# files, which keep a trained model's quality where dynamic int8 does not (onnx_variants.py: 0.71
# greedy tokens as eager on a trained Llama, w8 1.0).
# (ExecuTorch int8 is asked for by name: the PT2E calibration pass fails on BERT-family attention
# masks in the pinned torchao — an index op fed a float tensor — so as a default it would fail on
# the most published family.)
DEFAULT = "default"
DEFAULT_VARIANTS = (DEFAULT,)
# ONNX Runtime GenAI's folders: its builder's int8 and int4 (`worker/ort_genai.py`), held to the same floors.
DEFAULTS: dict[bool, tuple[str, ...]] = {
    False: ("onnx:int8", "onnx:w8"),
    True: ("onnx:w8", "onnx:q4", "ort-genai:w8", "ort-genai:q4", "ort-genai:q4-webgpu"),
}


@dataclass
class VariantJob:
    """What a variant function gets, in the export worker."""

    model: Any  # the eager model, float32
    sample: dict  # the inputs the fp32 program was traced with
    calibration: list[dict]  # other inputs, for calibration and sensitivity (never the validation inputs)
    base_dir: Path  # the backend's validated fp32 export
    work_dir: Path  # an empty folder: write the variant's loadable folder here
    make_config: Callable[[], Any]  # the backend's export config, as the fp32 program had it
    # `export(model, sample, config)`: a (quantized, cast) copy of the model exported as the fp32
    # program was: one graph, or a decoder LLM's decode program (`exported.save_pretrained` writes
    # `<component>.onnx` / `.pte`).
    export: Callable[[Any, dict, Any], Any]
    # The program's component (`worker/splits.py` names them); its file is `<component>.onnx` / `.pte`.
    component: str = "model"
    # A folder kept while all the variants of this export are built: what one builds that another
    # also needs (the fused graph of `optimized` and `int8`) is built once, there. None: `work_dir`.
    shared_dir: Path | None = None
    # Which of the recipe's settings to make, fastest first: where one misses the variant's floors
    # and its `Derived.more_accurate` says a slower, more accurate one exists, that one is made next.
    attempt: int = 0
    # Only settings that decode faster than fp32 on ONNX Runtime's CPU kernels: a generation
    # export's kinds held to `Figure.DECODE_SPEEDUP`.
    fast_only: bool = False


@dataclass(frozen=True)
class Derived:
    """What a recipe returns: the folder `ExportedModel` loads the variant from, and what it found."""

    folder: Path
    # Node names the sensitivity pass kept in float (int8).
    kept_in_float: list[str] = field(default_factory=list)
    # The dtype the program's float inputs take ("float16" for an fp16 program), None: as the fp32 one's.
    float_inputs: str | None = None
    # Operators beyond the runtime's defaults: ONNX Runtime's com.microsoft ones, ExecuTorch's quantized kernels.
    runtime_ops: list[str] = field(default_factory=list)
    # The settings it was made with, where the recipe has several (`VariantJob.attempt`): said in the report.
    settings: str | None = None
    # A slower, more accurate setting exists: judged next should this one miss the floors.
    more_accurate: bool = False
    # More accurate settings exist that `VariantJob.fast_only` left out: said where this one misses.
    slower_not_made: bool = False


@dataclass(frozen=True)
class Variant:
    backend: str
    kind: VariantKind
    # The file in the backend's folder, under the name the ecosystem's loaders look for.
    file: str
    # `module:function`, the recipe `fn(job) -> Derived`: resolved in the worker (`make`), never here.
    # None: the backend's own LLM runtime job builds it (`Backend.llm_runner`: ONNX Runtime GenAI's builder).
    recipe: str | None
    # `package(folder, out_dir, component, file) -> files`: the validated program of `component`
    # from `make`'s folder, written into the backend's folder under `file`.
    package: Callable[[Path, Path, str, str], list[Path]] | None
    # Also derived from generation exports (its quality then judged by greedy tokens and log-probs).
    generation: bool = False
    # Derived from single-graph exports (encoders, classifiers) too; False: generation alone.
    single: bool = True
    # Also derived for each component of an export of several (an encoder-decoder's encoder and
    # decoder; an image-text model's): it transforms each saved program, no re-export. Those are
    # published together in `folder`.
    per_component: bool = False
    # The `dtype` transformers.js picks this file by, where it is published under transformers.js's
    # own name for it (`model_quantized.onnx` is its "q8").
    js_dtype: str | None = None
    # Its recipe re-exports the eager model (`VariantJob.model`: a fused, float16 or quantized copy),
    # so the worker keeps the model's weights for it. False: it transforms the saved programs alone,
    # and the weights are dropped before any program is loaded beside them (`validate.Reference`).
    needs_model: bool = True

    def make(self, job: VariantJob) -> Derived:
        """Run the recipe (in the export worker: it imports torch and the runtimes)."""
        import importlib

        assert self.recipe is not None, f"{self.backend}'s {self.kind} is built by its backend's own job"
        module, _, function = self.recipe.partition(":")
        return getattr(importlib.import_module(module), function)(job)

    def file_for(self, component: str) -> str:
        """The published name for `component`'s program: `model_quantized.onnx`, `decode_quantized.onnx`."""
        return self.file.replace("model", component, 1)

    @property
    def folder(self) -> str:
        """Where a per-component variant's programs, manifest and configs go in the backend's folder,
        loadable by `ExportedModel` like the fp32 export: `quantized` (of `model_quantized.onnx`)."""
        return Path(self.file).stem.removeprefix("model_")


VARIANTS: dict[tuple[str, VariantKind], Variant] = {}


def register_variant(
    backend: str,
    kind: VariantKind,
    *,
    file: str,
    package: Callable[[Path, Path, str, str], list[Path]] | None,
    recipe: str | None,
    generation: bool = False,
    single: bool = True,
    per_component: bool = False,
    js_dtype: str | None = None,
    needs_model: bool = True,
) -> Variant:
    """Register the recipe at `recipe` (`module:function`, `fn(job) -> Derived`) as the `kind` variant of `backend`."""
    variant = Variant(
        backend, VariantKind(kind), file, recipe, package, generation, single, per_component, js_dtype, needs_model
    )
    VARIANTS[(backend, variant.kind)] = variant
    return variant


def variants_of(backend: str, names: list[str], generates: bool = False) -> list[Variant]:
    """The registered variants of `backend` that `names` ask for (`kind` for every backend that
    offers it, `backend:kind` for one, `default`: `DEFAULTS` of an export that `generates` or not),
    in the order asked."""
    kinds = []
    names = [n for name in names for n in (DEFAULTS[generates] if name == DEFAULT else (name,))]
    for name in names:
        target, _, kind = name.rpartition(":")
        if target in ("", backend) and (backend, VariantKind(kind)) in VARIANTS and VariantKind(kind) not in kinds:
            kinds.append(VariantKind(kind))
    return [VARIANTS[(backend, kind)] for kind in kinds]


def default_kinds(names: list[str], backend: str, generates: bool) -> set[VariantKind]:
    """The kinds of `backend` that `names` ask for only through `default` (not also by name): what
    a push chose for the user rather than what the user chose."""
    if DEFAULT not in names:
        return set()
    chosen = {v.kind for v in variants_of(backend, [DEFAULT], generates)}
    named = {v.kind for v in variants_of(backend, [n for n in names if n != DEFAULT], generates)}
    return chosen - named


def why_not(variant: Variant, generates: bool, backend: str) -> str | None:
    """Why `variant` is not derived from an export that `generates` (or not), or None: it is."""
    if generates and not variant.generation:
        return f"no {variant.kind} variant of {backend} generation exports yet"
    if not generates and not variant.single:
        return f"{variant.kind} is for decoder LLMs (generation exports)"
    return None


def unavailable(names: list[str], backends: list[str], generates: bool) -> dict[str, str]:
    """The variants asked for by name (not `default`) that no backend of this export derives, each
    with why: said before the export, not found missing after it."""
    missing = {}
    for name in (n for n in names if n != DEFAULT):
        offered = [(b, v) for b in backends for v in variants_of(b, [name], generates)]
        reasons = [why for b, v in offered if (why := why_not(v, generates, b)) is not None]
        if not offered:
            missing[name] = f"none of the backends asked for ({', '.join(backends)}) offers it"
        elif len(reasons) == len(offered):
            missing[name] = "; ".join(dict.fromkeys(reasons))
    return missing


def parse_variants(spec: str | list[str] | None) -> list[str]:
    """`"int8,fp16"`, `"onnx:int8"`, `"default"`, a list, `"none"` or None (`default`) → validated names.

    Raises:
        ConfigError: a name that is no variant kind, or a `backend:kind` no backend offers.
    """
    if spec is None:
        return list(DEFAULT_VARIANTS)
    names = spec.split(",") if isinstance(spec, str) else spec
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError(
            f"Variants must be names, not {spec!r}.",
            "Give a comma-separated string or a list of names, e.g. int8,fp16 (in .hfexport.yaml: variants: [int8, "
            "fp16]).",
        )
    names = [n.strip() for n in names if n.strip() and n.strip() != "none"]
    known = [str(k) for k in VariantKind]
    offered = sorted(f"{backend}:{kind}" for backend, kind in VARIANTS)
    for name in names:
        backend, _, kind = name.rpartition(":")
        if name != DEFAULT and (kind not in known or (backend and (backend, VariantKind(kind)) not in VARIANTS)):
            raise ConfigError(
                f"Unknown variant {name!r}.",
                f"Use a kind ({', '.join(known)}) for every backend that offers it, or one of {', '.join(offered)}; "
                "or default, or none (--variants on the command line, variants= in Python).",
            )
    return list(dict.fromkeys(names))


def parse_thresholds(items: list[str] | dict | None) -> dict[str, dict[str, float]]:
    """`["int8.cosine_mean=0.995"]` → `{"int8": {"cosine_mean": 0.995}}` (overrides of the defaults).

    Raises:
        ConfigError: a malformed item, an unknown kind or figure, a value that is not a number.
    """
    if isinstance(items, dict):
        items = [f"{kind}.{name}={value}" for kind, figures in items.items() for name, value in figures.items()]
    overrides: dict[str, dict[str, float]] = {}
    figures = sorted(str(f) for f in Figure if f not in UNGATED)
    for item in items or []:
        key, _, value = item.partition("=")
        kind, _, name = key.strip().partition(".")
        try:
            number = float(value)
            VariantKind(kind)
            if name not in figures:
                raise ValueError(name)
        except ValueError:
            raise ConfigError(
                f"Cannot read the quality threshold {item!r}.",
                f"Write KIND.FIGURE=VALUE, KIND one of {', '.join(VariantKind)}, FIGURE one of {', '.join(figures)} "
                "(e.g. --min-quality int8.cosine_mean=0.995).",
            ) from None
        overrides.setdefault(kind, {})[name] = number
    return overrides


def thresholds_for(kind: str, overrides: dict[str, dict[str, float]]) -> dict[str, float]:
    return {**DEFAULT_THRESHOLDS[VariantKind(kind)], **overrides.get(kind, {})}


# ── The built-in variants ────────────────────────────────────────────────────

# Each recipe lives in the worker (`hfexport/worker/*_variants.py`), named here by dotted path: the parent
# process reads this registry without importing torch, onnxruntime or the recipes.

register_variant(
    "onnx",
    VariantKind.OPTIMIZED,
    file="model_optimized.onnx",
    package=package_onnx,
    generation=True,
    recipe="hfexport.worker.onnx_variants:optimized",
)
register_variant(
    "onnx",
    VariantKind.FP16,
    file="model_fp16.onnx",
    package=package_onnx,
    generation=True,
    js_dtype="fp16",
    recipe="hfexport.worker.onnx_variants:fp16",
)
register_variant(
    "onnx",
    VariantKind.INT8,
    file="model_quantized.onnx",
    package=package_onnx,
    generation=True,
    per_component=True,
    js_dtype="q8",
    recipe="hfexport.worker.onnx_variants:int8",
)
register_variant(
    "onnx",
    VariantKind.W8,
    file="model_w8.onnx",
    package=package_onnx,
    generation=True,
    per_component=True,
    needs_model=False,
    recipe="hfexport.worker.onnx_variants:w8",
)
register_variant(
    "onnx",
    VariantKind.Q4,
    file="model_q4.onnx",
    package=package_onnx,
    generation=True,
    per_component=True,
    needs_model=False,
    js_dtype="q4",
    recipe="hfexport.worker.onnx_variants:q4",
)
register_variant(
    "onnx",
    VariantKind.Q4F16,
    file="model_q4f16.onnx",
    package=package_onnx,
    generation=True,
    single=False,
    js_dtype="q4f16",
    recipe="hfexport.worker.onnx_variants:q4f16",
)
register_variant(
    "executorch",
    VariantKind.INT8,
    file="model_int8.pte",
    package=package_pte,
    recipe="hfexport.worker.executorch_variants:int8",
)
register_variant(
    "executorch",
    VariantKind.DA8W4,
    file="model_8da4w.pte",
    package=package_pte,
    generation=True,
    single=False,
    recipe="hfexport.worker.executorch_variants:da8w4",
)
# ONNX Runtime GenAI's builder writes these (`worker/ort_genai.py`: a folder each, named by its settings).
for _kind in (VariantKind.W8, VariantKind.Q4, VariantKind.Q4_WEBGPU):
    register_variant("ort-genai", _kind, file="model.onnx", package=None, recipe=None, generation=True, single=False)

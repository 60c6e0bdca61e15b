"""Smaller and faster variants of a backend's export, as a registry: what each one is, the file
name loaders look for, and the quality it is held to.

Precision is what users choose a file by: transformers.js picks `onnx/model_quantized.onnx` for
`dtype: 'q8'` and `model_fp16.onnx` for `'fp16'`; sentence-transformers ships int8 and fused
graphs beside `model.onnx`. A variant is derived from the backend's validated fp32 export, in the
same worker, with the tools `transformers.exporters` ships (ONNX Runtime's quantizer through
`OnnxRuntimeQuantizer`, the ORT fusions through `OnnxConfig(ort_fusions=...)`, the exporter itself for a
float16 program); hfexport adds the choice of what to keep in float (a sensitivity pass), the
quality check against eager fp32 and the packaging. Adding one is "write a function and decorate
it":

    @register_variant("onnx", VariantKind.INT8, file="model_quantized.onnx", package=package_onnx)
    def onnx_int8(job: VariantJob) -> Path:
        ...  # write a folder `ExportedModel.from_pretrained` loads; return it

A variant that misses its quality thresholds is reported and not published.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .layouts import load_onnx as _load_onnx
from .layouts import package_onnx, package_pte


class VariantKind(StrEnum):
    """What a variant changes: the graph (fused ops), or the precision of weights and activations."""

    OPTIMIZED = "optimized"  # fp32, fused into the runtime's own ops
    FP16 = "fp16"
    INT8 = "int8"  # int8 weights; activations quantized at run time
    # Decoder LLMs on device: int4 weights in groups on the linears, int8 activations quantized at
    # run time (optimum-executorch's `--qlinear 8da4w`).
    DA8W4 = "8da4w"


# Quality figures (worker/validate) each kind must reach against eager fp32, on inputs of another
# shape than any trace or calibration. Overridable per kind (`--min-quality int8.cosine_mean=0.995`).
# Embedding models are judged by cosine, heads by top-1 agreement, generation by greedy token
# agreement with eager `generate()` and the mean |Δ log-prob| of eager's tokens (lower is better).
DEFAULT_THRESHOLDS: dict[VariantKind, dict[str, float]] = {
    VariantKind.OPTIMIZED: {
        "cosine_mean": 0.9999,
        "cosine_min": 0.999,
        "top1_agreement": 0.99,
        "token_agreement": 1.0,
        "logprob_delta_mean": 0.01,
    },
    VariantKind.FP16: {
        "cosine_mean": 0.999,
        "cosine_min": 0.99,
        "top1_agreement": 0.98,
        "token_agreement": 0.95,
        "logprob_delta_mean": 0.05,
    },
    VariantKind.INT8: {
        "cosine_mean": 0.99,
        "cosine_min": 0.95,
        "top1_agreement": 0.9,
        "token_agreement": 0.75,
        "logprob_delta_mean": 0.25,
    },
    VariantKind.DA8W4: {"token_agreement": 0.5, "logprob_delta_mean": 0.5},
}
LOWER_IS_BETTER = frozenset({"logprob_delta_mean"})


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


# What a push builds when not told: the int8 ONNX graph, the file transformers.js loads by default
# in the browser (`q8`) and the one sentence-transformers users pick for CPU serving. (ExecuTorch
# int8 is asked for by name: the PT2E calibration pass fails on BERT-family attention masks in
# the pinned torchao — an index op fed a float tensor — so as a default it would fail on the most
# published family.)
DEFAULT_VARIANTS = ("onnx:int8",)


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
    # The program's component: "model" for one graph, "decode" for a decoder LLM (its file: decode.onnx).
    component: str = "model"
    # Out: `kept_in_float` (node names), `float_inputs` (the dtype its float inputs take, e.g. "float16"),
    # `runtime_ops` (operators beyond the runtime's defaults: ORT's com.microsoft ones, ExecuTorch's quantized kernels).
    options: dict = field(default_factory=dict)
    # A folder kept while all the variants of this export are built: what one builds that another
    # also needs (the fused graph of `optimized` and `int8`) is built once, there. None: `work_dir`.
    shared_dir: Path | None = None


@dataclass(frozen=True)
class Variant:
    backend: str
    kind: VariantKind
    # The file in the backend's folder, under the name the ecosystem's loaders look for.
    file: str
    make: Callable[[VariantJob], Path]
    # `package(folder, out_dir, component, file) -> files`: the validated program of `component`
    # from `make`'s folder, written into the backend's folder under `file`.
    package: Callable[[Path, Path, str, str], list[Path]]
    module: str
    # Also derived from generation exports (its quality then judged by greedy tokens and log-probs).
    generation: bool = False
    # Derived from single-graph exports (encoders, classifiers) too; False: generation alone.
    single: bool = True
    # Also derived for each component of an export of several (an encoder-decoder's encoder, prefill
    # and decode; an image-text model's): it transforms each saved program, no re-export. Those are
    # published together in `folder`.
    per_component: bool = False

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
    package: Callable[[Path, Path, str, str], list[Path]],
    generation: bool = False,
    single: bool = True,
    per_component: bool = False,
) -> Callable:
    """Decorator: register `fn(job) -> folder` as the `kind` variant of `backend`."""

    def decorate(fn: Callable[[VariantJob], Path]) -> Callable:
        VARIANTS[(backend, VariantKind(kind))] = Variant(
            backend, VariantKind(kind), file, fn, package, fn.__module__, generation, single, per_component
        )
        return fn

    return decorate


def variants_of(backend: str, names: list[str]) -> list[Variant]:
    """The registered variants of `backend` that `names` ask for (`kind` for every backend that
    offers it, `backend:kind` for one), in the order asked."""
    kinds = []
    for name in names:
        target, _, kind = name.rpartition(":")
        if target in ("", backend) and (backend, VariantKind(kind)) in VARIANTS and VariantKind(kind) not in kinds:
            kinds.append(VariantKind(kind))
    return [VARIANTS[(backend, kind)] for kind in kinds]


def parse_variants(spec: str | list[str] | None) -> list[str]:
    """`"int8,fp16"`, `"onnx:int8"`, a list, `"none"` or None (the default set) → validated names.

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
        if kind not in known or (backend and (backend, VariantKind(kind)) not in VARIANTS):
            raise ConfigError(
                f"Unknown variant {name!r}.",
                f"Use a kind ({', '.join(known)}) for every backend that offers it, or one of {', '.join(offered)}; "
                "or none (--variants on the command line, variants= in Python).",
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
    figures = sorted({name for thresholds in DEFAULT_THRESHOLDS.values() for name in thresholds})
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

# ONNX Runtime's own operator domain (the fusions' and the quantizer's ops: Attention, QAttention…).
_MS_DOMAIN = "com.microsoft"

# An int8 graph may keep its most outlier-prone projections in float while it stays within this
# share of the fp32 bytes (what sentence-transformers' own qint8 files weigh: ~25 %). Each one kept
# costs speed too (MiniLM: ~4 % per FFN output projection): one lifts the mean cosine from 0.9906
# to 0.992 and keeps the file faster than sentence-transformers' qint8 graph; two would not.
INT8_BYTE_BUDGET = 0.30
INT8_MAX_KEPT_IN_FLOAT = 1


def _loadable(model, descriptors: Path, job: VariantJob) -> Path:
    """A folder `ExportedModel.from_pretrained` loads, as it loads the fp32 export: `model`
    saved the exporter's way (`<component>.onnx` + `.onnx.data`) beside the descriptors of
    `descriptors`. What is published is repacked from it by `package_onnx`."""
    import shutil

    import onnx_ir

    folder = job.work_dir / "variant"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("export.json", "config.json"):
        if (descriptors / name).exists():
            shutil.copy(descriptors / name, folder / name)
    name = f"{job.component}.onnx"
    onnx_ir.save(model, folder / name, external_data=f"{name}.data")
    job.options["runtime_ops"] = sorted({n.op_type for n in model.graph.all_nodes() if n.domain == _MS_DOMAIN})
    return folder


@register_variant("onnx", VariantKind.OPTIMIZED, file="model_optimized.onnx", package=package_onnx, generation=True)
def _onnx_optimized(job: VariantJob) -> Path:
    """The exporter's own fusion into ONNX Runtime's CPU ops: `_fused_for_ort`."""
    graph, _ = _fused_for_ort(job)
    return _loadable(_load_onnx(graph), graph.parent, job)


def _fused_for_ort(job: VariantJob) -> tuple[Path, bool]:
    """The model exported with its eager attention and fused by the exporter into ONNX Runtime's
    CPU ops (`OnnxConfig(ort_fusions="cpu")`), on the program as it is converted: fusing a graph read
    back from disk trips onnx_ir's passes. Eager attention, because the fusions recognise attention
    written out (into ORT's `Attention`), not the SDPA lowering, which they leave as a dozen ops per
    layer (MiniLM, paired rounds against optimum's graph: 1.01x with SDPA, 1.12x eager).

    An encoder's `Attention` nodes are then fed its padding mask as ORT's `mask_index`, where that is
    proven to be the same graph (`_padding_as_mask_index`, `_same_outputs`). Built once per export
    in `job.shared_dir`, beside the export's manifest and configs. Returns the graph's path, and
    whether it was so rewired (its `Attention` nodes are then ones ORT's quantizer makes `QAttention`)."""
    import copy
    import dataclasses
    import shutil

    import onnx_ir

    folder = (job.shared_dir or job.work_dir) / f"fused-{job.component}"
    rewired = folder / f"{job.component}_mask_index.onnx"
    if not folder.exists():
        staging = job.work_dir / "fused"  # moved into place whole, or not at all
        model = copy.deepcopy(job.model)
        model.set_attn_implementation("eager")
        exported = job.export(model, job.sample, dataclasses.replace(job.make_config(), ort_fusions="cpu"))
        exported.save_pretrained(staging)
        fused = staging / f"{job.component}.onnx"
        graph = _load_onnx(fused)
        if job.component == "model" and _padding_as_mask_index(graph):  # one graph, never a decoder's cache loop
            onnx_ir.save(graph, staging / rewired.name, external_data=f"{rewired.name}.data")
            if not _same_outputs(fused, staging / rewired.name, job.calibration):
                for path in staging.glob(f"{rewired.name}*"):
                    path.unlink()
        shutil.move(staging, folder)
    return (rewired, True) if rewired.exists() else (folder / f"{job.component}.onnx", False)


def _padding_as_mask_index(model) -> bool:
    """Feed each fused `Attention` the graph's 2-D `attention_mask` as its `mask_index` instead of
    the additive `attention_bias` the exporter's fusion builds from it, in place; False (and the
    graph unchanged) unless every `Attention` takes such a bias.

    Why: ORT's dynamic quantizer turns `Attention` into its int8 `QAttention` (one kernel for the QKV
    projection and the attention: MiniLM's int8 graph runs 1.07x sentence-transformers' qint8 one
    with it, 0.89x without), but `QAttention` has no `attention_bias` input, and the quantizer skips
    any node with `qkv_hidden_sizes` (equal sizes say nothing the weight's shape does not). Only a
    bias computed from `attention_mask` alone (shapes aside) in a bidirectional attention is replaced."""
    import onnx_ir as ir
    import onnxscript.optimizer

    mask = next((v for v in model.graph.inputs if v.name == "attention_mask"), None)
    attentions = [n for n in model.graph if n.op_type == "Attention" and n.domain == _MS_DOMAIN]
    if mask is None or mask.shape is None or len(mask.shape) != 2 or not attentions:
        return False
    for node in attentions:
        inputs = [*node.inputs, *[None] * 6]
        bias = inputs[5]
        if (
            inputs[3] is not None
            or inputs[4] is not None
            or bias is None
            or len(node.inputs) > 6
            or node.attributes.get_int("unidirectional", 0)
            or _data_sources(bias) != {mask.name}
        ):
            return False
    # The QKV weight is a Concat of the three projections until folded: the quantizer takes initializers.
    onnxscript.optimizer.fold_constants(model, input_size_limit=1 << 62, output_size_limit=1 << 62)
    cast = ir.node("Cast", [mask], attributes={"to": ir.DataType.INT32}, name="hfexport_mask_index")
    cast.outputs[0].name = "hfexport_mask_index"
    model.graph.insert_before(next(iter(model.graph)), cast)
    for node in attentions:
        node.replace_input_with(3, cast.outputs[0])
        node.replace_input_with(5, None)
        sizes = node.attributes.get_ints("qkv_hidden_sizes")
        if sizes is not None and len(set(sizes)) == 1:
            del node.attributes["qkv_hidden_sizes"]
    ir.passes.common.RemoveUnusedNodesPass()(model)
    return True


def _data_sources(value) -> set[str]:
    """The graph inputs `value` is computed from, reads of a shape (Shape, Size) left out."""
    sources, seen, stack = set(), set(), [value]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        node = v.producer()
        if node is None:
            if v.is_graph_input():
                sources.add(v.name)
        elif node.op_type not in ("Shape", "Size"):
            stack.extend(i for i in node.inputs if i is not None)
    return sources


def _same_outputs(original: Path, rewired: Path, calibration: list[dict]) -> bool:
    """Whether the graph at `rewired` computes what the one at `original` does, on the (padded)
    calibration inputs."""
    import numpy as np
    import onnxruntime as ort

    sessions = [ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for p in (original, rewired)]
    for sample in calibration:
        feed = {i.name: np.asarray(sample[i.name]) for i in sessions[0].get_inputs()}
        want, got = (s.run(None, feed) for s in sessions)
        if not all(np.allclose(a, b, rtol=1e-3, atol=1e-4) for a, b in zip(want, got)):
            return False
    return True


@register_variant("onnx", VariantKind.FP16, file="model_fp16.onnx", package=package_onnx, generation=True)
def _onnx_fp16(job: VariantJob) -> Path:
    import copy

    import torch

    # The exporter's own float16 program: float inputs (pixels, audio) are float16 too, as users feed them.
    sample = {k: v.to(torch.float16) if v.is_floating_point() else v for k, v in job.sample.items()}
    job.options["float_inputs"] = "float16"
    exported = job.export(copy.deepcopy(job.model).to(torch.float16), sample, job.make_config())
    exported.save_pretrained(job.work_dir / "exported")
    model = _load_onnx(job.work_dir / "exported" / f"{job.component}.onnx")
    return _loadable(model, job.work_dir / "exported", job)


@register_variant(
    "onnx", VariantKind.INT8, file="model_quantized.onnx", package=package_onnx, generation=True, per_component=True
)
def _onnx_int8(job: VariantJob) -> Path:
    """ONNX Runtime dynamic quantization: per-channel symmetric int8 weights (the kernels' fast path;
    on MiniLM uint8 weights scored 0.001 more cosine and ran 7 % slower), activations quantized at
    run time. Of the encoder's graph fused into ORT's ops where its attention quantizes whole
    (`QAttention`, see `_fused_for_ort`), else of the fp32 export's graph.

    Dynamic per-tensor activation ranges are what hurts: a projection whose input has a few huge
    values (the FFN output projections of BERT-like models) loses its bulk to rounding. A
    sensitivity pass on the calibration inputs ranks projections by that outlier ratio and keeps
    the worst in float, within `INT8_BYTE_BUDGET` and `INT8_MAX_KEPT_IN_FLOAT`."""
    import sys

    from onnxruntime.quantization import QuantType
    from transformers.exporters import OnnxRuntimeDynamicConfig, OnnxRuntimeQuantizer
    from transformers.exporters.configs import ExportFormat

    graph = job.base_dir / f"{job.component}.onnx"
    if job.component == "model" and "attention_mask" in job.sample:  # an encoder whose attention may quantize whole
        try:
            fused, whole = _fused_for_ort(job)
        except Exception as e:
            # A model without eager attention, a graph the fusions refuse: the plain one is quantized.
            fused, whole = None, False
            print(
                f"int8: the fused graph failed ({type(e).__name__}: {e}); quantizing the fp32 export's", file=sys.stderr
            )
        if whole and fused is not None:
            graph = fused

    def quantized(keep: list[str]):
        config = OnnxRuntimeDynamicConfig(per_channel=True, weight_type=QuantType.QInt8, nodes_to_exclude=keep or None)
        return OnnxRuntimeQuantizer(config).quantize(_load_onnx(graph), job.sample, ExportFormat.ONNX)

    everything = _loadable(quantized([]), job.base_dir, job)
    budget = INT8_BYTE_BUDGET * _onnx_bytes(job.base_dir, job.component) - _onnx_bytes(everything, job.component)
    keep = _outlier_projections(graph, job, budget)
    job.options["kept_in_float"] = keep
    return _loadable(quantized(keep), job.base_dir, job) if keep else everything


def _onnx_bytes(folder: Path, component: str) -> int:
    return sum(
        p.stat().st_size for p in (folder / f"{component}.onnx", folder / f"{component}.onnx.data") if p.exists()
    )


def _outlier_projections(graph: Path, job: VariantJob, budget: float) -> list[str]:
    """The MatMul/Gemm nodes with a weight whose input's max/mean |x| on the calibration inputs is
    largest, while keeping their weights in float costs at most `budget` bytes more (and at most
    `INT8_MAX_KEPT_IN_FLOAT` of them)."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    proto = onnx.load(str(graph))
    weights = {i.name: int(np.prod(i.dims)) * 4 for i in proto.graph.initializer}
    projections = [
        (n.name, n.input[0], weights[n.input[1]])
        for n in proto.graph.node
        if n.op_type in ("MatMul", "Gemm") and len(n.input) > 1 and n.input[1] in weights
    ]
    if not projections or budget <= 0:
        return []
    for _, activation, _ in projections:  # expose each projection's input as an output of the probe
        proto.graph.output.append(onnx.helper.make_empty_tensor_value_info(activation))
    probe = job.work_dir / "probe" / "model.onnx"
    probe.parent.mkdir(parents=True)
    onnx.save(proto, str(probe), save_as_external_data=True, location="model.onnx_data")
    session = ort.InferenceSession(str(probe))
    if any(i.name not in job.calibration[0] for i in session.get_inputs()):
        return []  # a decoder's graph takes cache tensors, not generate() inputs: quantize it all
    names = [o.name for o in session.get_outputs()]
    ratio = {name: 0.0 for name, _, _ in projections}
    for sample in job.calibration:
        # A program traced on one example (an image-text model's vision encoder) takes that many rows.
        feed = {
            i.name: np.asarray(sample[i.name])[: i.shape[0] if i.shape and isinstance(i.shape[0], int) else None]
            for i in session.get_inputs()
            if i.name in sample
        }
        outputs = dict(zip(names, session.run(None, feed)))
        for name, activation, _ in projections:
            x = np.abs(outputs[activation])
            ratio[name] = max(ratio[name], float(x.max() / (x.mean() + 1e-12)))
    kept: list[str] = []
    for name, _, size in sorted(projections, key=lambda p: ratio[p[0]], reverse=True):
        if len(kept) == INT8_MAX_KEPT_IN_FLOAT or 0.75 * size > budget:  # int8 weights: a quarter of fp32's
            break
        kept.append(name)
        budget -= 0.75 * size
    return kept


@register_variant("executorch", VariantKind.INT8, file="model_int8.pte", package=package_pte)
def _executorch_int8(job: VariantJob) -> Path:
    """XNNPACK's own PT2E quantizer through the exporter (`PT2EQuantizer`): per-channel int8 weights,
    int8 activations quantized at run time — XNNPACK's dynamically quantized linear kernels."""
    import dataclasses

    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from transformers.exporters import PT2EQuantizer

    xnnpack = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
    config = dataclasses.replace(
        job.make_config(), quantizer=PT2EQuantizer(xnnpack, calibration_dataset=job.calibration)
    )
    job.export(job.model, job.sample, config).save_pretrained(job.work_dir / "variant")
    return job.work_dir / "variant"


def _quantized_kernels(program: Path) -> list[str]:
    """The operators of ExecuTorch's quantized kernel library a `.pte` calls (its operator table
    names them), which a Python runtime registers only when told (`Backend.runtime_ops_import`)."""
    import re

    return sorted({m.decode() for m in re.findall(rb"quantized_decomposed::[A-Za-z0-9_]+", program.read_bytes())})


# Linears whose input width is a multiple of this are int4 in groups of it (XNNPACK's blockwise
# kernels); others (an odd FFN width) stay in float.
INT4_GROUP_SIZE = 32


@register_variant(
    "executorch", VariantKind.DA8W4, file="model_8da4w.pte", package=package_pte, generation=True, single=False
)
def _executorch_8da4w(job: VariantJob) -> Path:
    """optimum-executorch's `--qlinear 8da4w --qembedding 8w`. torchao's
    `Int8DynamicActivationIntxWeightConfig` on the decoder's linears (the LM head included): int4
    weights in groups of `INT4_GROUP_SIZE`, activations quantized per token at run time, which
    XNNPACK's partitioner lowers to its own kernels. The embedding table: int8 weights with a scale
    per row, through ExecuTorch's own `EmbeddingQuantHandler`, whose `quantized_decomposed`
    embedding op the runtime's quantized kernels run (torchao's weight-only embedding would leave
    an op with no ExecuTorch kernel, and the pinned exporter takes no pass that would fuse it)."""
    import copy

    import executorch.kernels.quantized  # noqa: F401  (registers the quantized ops' out variants for to_executorch)
    import torch
    from executorch.examples.models.llama.source_transformation.quantize import EmbeddingQuantHandler
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    model = copy.deepcopy(job.model)
    config = Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4,  # type: ignore[attr-defined]  # torch has it, its stubs do not
        weight_granularity=PerGroup(INT4_GROUP_SIZE),
    )
    quantize_(
        model,
        config,
        filter_fn=lambda module, _: isinstance(module, torch.nn.Linear) and module.in_features % INT4_GROUP_SIZE == 0,
    )
    # Embeddings last: the LM head of a model with tied embeddings is quantized from the float table.
    model = EmbeddingQuantHandler(model, bitwidth=8, group_size=None, packed=False).quantized_model()
    job.export(model, job.sample, job.make_config()).save_pretrained(job.work_dir / "variant")
    job.options["runtime_ops"] = _quantized_kernels(job.work_dir / "variant" / f"{job.component}.pte")
    return job.work_dir / "variant"

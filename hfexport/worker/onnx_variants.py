"""The ONNX variants' recipes (`variants.py` registers them by dotted path): ONNX Runtime's
fusions and quantizer, through `transformers.exporters`, on a backend's validated fp32 export.

Runs in the export worker only. Each recipe takes a `VariantJob` and returns a folder that
`ExportedModel.from_pretrained` loads; what hfexport adds around the exporter's tools is here:
the padding rewired as `mask_index` so the quantizer makes `QAttention`, and the sensitivity pass
that keeps the most outlier-prone projections in float.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..layouts import load_onnx as _load_onnx
from ..variants import Derived, VariantJob

if TYPE_CHECKING:
    import onnx
    import onnx_ir

# ONNX Runtime's own operator domain (the fusions' and the quantizer's ops: Attention, QAttention…).
_MS_DOMAIN = "com.microsoft"

# An int8 graph keeps its most outlier-prone projections in float: that many at each attempt
# (`VariantJob.attempt`: the next where the judge finds one below its floors), within this share of
# the fp32 bytes. Each one kept costs speed (~4 % per FFN output projection). Measured, per-channel
# int8 against eager on 16 sentences the judge never saw, cosine per token / mean-pooled, ORT CPU on
# 2 cores:
#   MiniLM-L6 (22 M):  0 kept 0.9906 pooled; 1 kept 0.992, faster than sentence-transformers' qint8
#   MPNet-base (110 M): 0 kept 0.860 pooled, 3.2x fp32; 6 kept 0.988, 2.3x
#                       12 kept 0.989 / 0.9915, 2.0x, 45 % of the fp32 bytes (the judge: 0.9879)
#                       16 kept 0.993 / 0.994, 1.7x, 51 %;  18 kept 0.994 / 0.994, 1.6x, 54 %
# (MPNet's 8-bit MatMulNBits at int8 compute holds 0.9998 but runs at 0.96x fp32: an encoder's
# batched MatMuls are compute-bound, where fp32 GEMM is as fast.) Past this share of the fp32 bytes
# the file is not a small one any more: the pass stops there and the judge's verdict stands. No
# 12-kept step: on MPNet it missed the judge's floor, and each attempt is a quantization and a judging.
INT8_BYTE_BUDGET = 0.55
INT8_KEPT_IN_FLOAT = (1, 6, 18)


def _loadable(model: onnx_ir.Model, descriptors: Path, job: VariantJob) -> Derived:
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
    return Derived(folder, runtime_ops=runtime_ops(model))


def runtime_ops(model: onnx_ir.Model) -> list[str]:
    """The operators of ONNX Runtime's own domain `model` runs (its fusions' and quantizer's ops)."""
    return sorted({n.op_type for n in model.graph.all_nodes() if n.domain == _MS_DOMAIN})


def optimized(job: VariantJob) -> Derived:
    """The exporter's own fusion into ONNX Runtime's CPU ops: `_fused_for_ort`."""
    graph, _ = _fused_for_ort(job)
    return _loadable(_load_onnx(graph), graph.parent, job)


def _fused_for_ort(job: VariantJob) -> tuple[Path, bool]:
    """The export's graph fused by the exporter into ONNX Runtime's CPU ops: the fp32 graph itself
    where it was exported with eager attention (`Backend.attention`, `_fused_copy`), else the model
    exported again so (`OnnxConfig(ort_fusions="cpu")`). Eager attention, because the fusions
    recognise attention written out (into ORT's `Attention`), not the SDPA lowering, which they
    leave as a dozen ops per layer (MiniLM, paired rounds against optimum's graph: 1.01x with SDPA,
    1.12x eager).

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
        if not _fused_copy(job, staging):
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


def _fused_copy(job: VariantJob, staging: Path) -> bool:
    """The fp32 export's own graph (`job.base_dir`) fused into ONNX Runtime's CPU ops, saved in
    `staging` the exporter's way beside its manifest; False (nothing written) unless that graph was
    exported with eager attention, or where the fusions fail on it (the model is exported again).
    MiniLM: its int8 file in 5.3 s instead of 10.7, the same file (cosine to eager 0.991989 both)."""
    import shutil
    import sys

    import onnx_ir
    from transformers.exporters.onnxruntime_fusions import fuse_for_onnxruntime

    if getattr(job.model.config, "_attn_implementation", None) != "eager":
        return False
    graph = _load_onnx(job.base_dir / f"{job.component}.onnx")
    try:
        fuse_for_onnxruntime(graph, "cpu")
    except Exception as e:  # the exporter's path below fuses the program as it converts it
        print(
            f"fusing the exported graph failed ({type(e).__name__}: {e}); exporting it fused instead", file=sys.stderr
        )
        return False
    staging.mkdir(parents=True)
    for name in ("export.json", "config.json"):
        if (job.base_dir / name).exists():
            shutil.copy(job.base_dir / name, staging / name)
    name = f"{job.component}.onnx"
    onnx_ir.save(graph, staging / name, external_data=f"{name}.data")
    return True


def _padding_as_mask_index(model: onnx_ir.Model) -> bool:
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
            or node.attributes.get_int("unidirectional")
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


def fp16(job: VariantJob) -> Derived:
    import dataclasses

    folder = _fp16_program(job)
    model = _load_onnx(folder / f"{job.component}.onnx")
    return dataclasses.replace(_loadable(model, folder, job), float_inputs="float16")


def _fp16_program(job: VariantJob) -> Path:
    """The exporter's own float16 program (float inputs — pixels, audio — float16 too, as users feed
    them), saved the exporter's way: built once per export in `job.shared_dir`, for `fp16` and `q4f16`."""
    import copy
    import shutil

    import torch

    folder = (job.shared_dir or job.work_dir) / f"fp16-{job.component}"
    if not folder.exists():
        staging = job.work_dir / "fp16-staging"  # moved into place whole, or not at all
        sample = {k: v.to(torch.float16) if v.is_floating_point() else v for k, v in job.sample.items()}
        job.export(copy.deepcopy(job.model).to(torch.float16), sample, job.make_config()).save_pretrained(staging)
        shutil.move(staging, folder)
    return folder


def int8(job: VariantJob) -> Derived:
    """ONNX Runtime dynamic quantization: per-channel symmetric int8 weights (the kernels' fast path;
    on MiniLM uint8 weights scored 0.001 more cosine and ran 7 % slower), activations quantized at
    run time. Of the encoder's graph fused into ORT's ops where its attention quantizes whole
    (`QAttention`, see `_fused_for_ort`), else of the fp32 export's graph.

    Dynamic per-tensor activation ranges are what hurts: a projection whose input has a few huge
    values (the FFN output projections of BERT-like models) loses its bulk to rounding. A
    sensitivity pass on the calibration inputs ranks projections by that outlier ratio and keeps
    the worst in float: `INT8_KEPT_IN_FLOAT[attempt]` of them, within `INT8_BYTE_BUDGET`."""
    import dataclasses
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

    # What every attempt reads alike — the all-int8 graph's bytes, the projections ranked — is
    # measured at the first and kept beside the export: the attempts differ in how many they keep.
    kept_plan = (job.shared_dir or job.work_dir) / f"int8-plan-{job.component}.json"
    room = INT8_BYTE_BUDGET * _onnx_bytes(job.base_dir, job.component)
    everything = None
    if kept_plan.exists():
        plan = json.loads(kept_plan.read_text())
    else:
        everything = _loadable(quantized([]), job.base_dir, job)
        int8_bytes = _onnx_bytes(everything.folder, job.component)
        plan = {"int8_bytes": int8_bytes, "ranked": _ranked_projections(graph, job) if room > int8_bytes else []}
        kept_plan.write_text(json.dumps(plan))
    budget = room - plan["int8_bytes"]
    most = INT8_KEPT_IN_FLOAT[min(job.attempt, len(INT8_KEPT_IN_FLOAT) - 1)]
    keep: list[str] = []
    for name, size in plan["ranked"]:
        if len(keep) == most or 0.75 * size > budget:  # int8 weights: a quarter of fp32's
            break
        keep.append(name)
        budget -= 0.75 * size
    made = _loadable(quantized(keep), job.base_dir, job) if keep or everything is None else everything
    return dataclasses.replace(
        made,
        kept_in_float=keep,
        settings=f"per-channel int8, {len(keep)} most outlier-prone projection{'s' * (len(keep) != 1)} in float",
        # More may be kept at the next attempt: this one kept all it was allowed, within the budget.
        more_accurate=len(keep) == most and job.attempt + 1 < len(INT8_KEPT_IN_FLOAT),
    )


def _onnx_bytes(folder: Path, component: str) -> int:
    return sum(
        p.stat().st_size for p in (folder / f"{component}.onnx", folder / f"{component}.onnx.data") if p.exists()
    )


def _ranked_projections(graph: Path, job: VariantJob) -> list[tuple[str, int]]:
    """The MatMul/Gemm nodes with a weight, with their weight's fp32 bytes, the one whose input's
    max/mean |x| on the calibration inputs is largest first; none for a graph the calibration
    inputs do not feed (a decoder's, which takes cache tensors). (On MPNet this ratio ranks the
    projections as quantizing each alone does: its top six hold the five whose int8 costs the
    pooled cosine most.)"""
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
    if not projections:
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
    return [(name, size) for name, _, size in sorted(projections, key=lambda p: ratio[p[0]], reverse=True)]


# ── Weight-only: ONNX Runtime's `MatMulNBits` ────────────────────────────────
# Measured on SmolLM2-135M (real weights, bench/real_models.py), teacher-forced on 2,304 positions of
# prose (pydoc's topics) against eager fp32: KLD (nats) / same top; share of fp32's bytes; decode
# tok/s against the fp32 graph's, interleaved rounds on 2 x86 cores (AVX-512 VNNI), ORT 1.32:
#   8 bits, asymmetric blocks of 32, int8 compute (accuracy level 4)   0.0046 / 96.3 %  28.8 %  2.6x  <- w8
#   8 bits, HQQ's zero points (below), int8 compute                   0.0037 / 96.4 %  31.3 %
#   8 bits, float compute                                              0.0014 / 98.0 %  31.3 %  0.25x
#   4 bits, round-to-nearest (asymmetric), int8 compute                0.28   / 72.8 %  18.6 %  3.0x  <- q4 first
#   4 bits, HQQ's zero points (below), int8 compute                    0.0038 / 95.8 %  21.2 %
#   4 bits, HQQ's zero points (below), float compute                   0.0015 / 98.2 %  21.2 %  2.5x  <- q4 next
# (the embedding table and tied head at 8 bits, int8 compute, in every row: at float compute it
# lifts HQQ's 4 bits to 99.0 % and runs at 0.23x). These weights were dequantized from llama.cpp's
# Q4_1 (asymmetric 4-bit blocks of 32, float minimums): HQQ's optimised float zero points fall back
# onto that grid, which round-to-nearest's integer ones miss; on the trained 1 M-parameter Llama of
# the tests HQQ is ahead too (0.938 / 0.056 top-1 / |Δ log-prob| against 0.932 / 0.082). One
# 576x1536 MatMulNBits at batch 1: fp32 MatMul 31 us; 8 bits at int8 compute 17 us, at float
# compute 583 us (no float kernel for 8 bits); 4 bits with integer zero points 17 us (int8 compute),
# 40 us (float); with HQQ's float zero points 720 us (no fast kernel takes them) — hence
# `_integer_zero_points`.
WEIGHT_ONLY_BLOCK = 32


@dataclass(frozen=True)
class WeightOnly:
    """One weight-only setting: the body's bits and algorithm, the embedding table's and head's bits,
    and the `MatMulNBits` accuracy level ONNX Runtime's CPU kernels compute at."""

    bits: int
    # "rtn": ONNX Runtime's round-to-nearest (`DefaultWeightOnlyQuantConfig`); "hqq": its HQQ
    # (optimised zero points, stored as `_integer_zero_points` says).
    algorithm: str = "rtn"
    symmetric: bool = False
    # The embedding table (and the head it is tied to, or the untied head): 8 bits, where lookups and
    # logits are most sensitive (llama.cpp's K-quants keep them above the body's bits too).
    table_bits: int = 8
    # 4: int8 compute (each block of 32 activations quantized at run time), 0: float compute.
    accuracy_level: int = 4

    @property
    def decodes_fast(self) -> bool:
        """Whether ONNX Runtime's CPU kernels run it faster than the fp32 MatMul (measured above):
        int8 compute, or 4 bits at float compute; 8 bits at float compute have no kernel."""
        return self.accuracy_level == 4 or self.bits == 4

    def describe(self) -> str:
        how = "HQQ" if self.algorithm == "hqq" else ("symmetric" if self.symmetric else "asymmetric")
        return f"{self.bits}-bit {how}, {'int8' if self.accuracy_level == 4 else 'float'} compute"


# Each weight-only kind's settings, fastest first; the next is made only where one misses the
# kind's floors on the model at hand (`VariantJob.attempt`). A generation export's w8 and q4 are
# held to decode faster than fp32 (`Figure.DECODE_SPEEDUP`, `VariantJob.fast_only`): settings that
# do not (`WeightOnly.decodes_fast`) are not made for it. An encoder's w8 (WebGPU's file, no faster
# than fp32 on CPU either way) still takes them.
W8 = (WeightOnly(bits=8), WeightOnly(bits=8, accuracy_level=0))
Q4 = (WeightOnly(bits=4), WeightOnly(bits=4, algorithm="hqq", accuracy_level=0))


def w8(job: VariantJob) -> Derived:
    """8-bit weights in asymmetric blocks of `WEIGHT_ONLY_BLOCK` (`MatMulNBits`); the embedding
    table too (`_weight_only`). int8 compute, else (an encoder's) float compute where that misses the floors."""
    return _weight_only(job, job.base_dir, W8)


def q4(job: VariantJob) -> Derived:
    """4-bit weights in blocks, the embedding table and head at 8 bits (measured above): round-to-
    nearest with int8 compute, else (an encoder's) HQQ with float compute; transformers.js's `q4` (`model_q4.onnx`)."""
    return _weight_only(job, job.base_dir, Q4)


def q4f16(job: VariantJob) -> Derived:
    """`q4`'s settings on the exporter's float16 program: float16 activations and cache, transformers.js's
    `q4f16` (`model_q4f16.onnx`, WebGPU's default for LLMs). ORT's quantizers write float32 scales,
    which a float16 `MatMulNBits` does not take: they are stored in float16, as HQQ's correction is
    (round-to-nearest alone kept 73.5 % teacher-forced top-1 on SmolLM2-135M)."""
    import dataclasses

    return dataclasses.replace(_weight_only(job, _fp16_program(job), Q4, half=True), float_inputs="float16")


def _weight_only(job: VariantJob, source: Path, settings: tuple[WeightOnly, ...], half: bool = False) -> Derived:
    """`source`'s `<component>.onnx` with its MatMul weights quantized by ONNX Runtime's
    `MatMulNBitsQuantizer` as `recipe` says. The embedding table is quantized too, at
    `recipe.table_bits`: its lookup becomes a `GatherBlockQuantized` of a head's quantized blocks —
    the LM head's where the two are tied (the exporter's graph reads the one table through a
    `Transpose`: stored once, quantized), else a head made for the purpose and removed once its
    blocks are taken (ORT's quantizer takes a lookup at 4 bits only, and only at opset 21)."""
    import dataclasses

    import onnx
    import onnx_ir
    from onnxruntime.quantization.matmul_nbits_quantizer import HQQWeightOnlyQuantConfig, MatMulNBitsQuantizer

    every, settings = settings, tuple(s for s in settings if s.decodes_fast or not job.fast_only)
    recipe = settings[job.attempt]
    proto = onnx.load(str(source / f"{job.component}.onnx"))
    table = _untie_head(proto) or _lookup_as_head(proto)
    heads = [table.head] if table else []
    blocks = dict(block_size=WEIGHT_ONLY_BLOCK, accuracy_level=recipe.accuracy_level)
    algorithm = {}
    if recipe.algorithm == "hqq":
        algorithm = dict(algo_config=HQQWeightOnlyQuantConfig(block_size=WEIGHT_ONLY_BLOCK, bits=recipe.bits))
    body = MatMulNBitsQuantizer(
        proto, bits=recipe.bits, is_symmetric=recipe.symmetric, nodes_to_exclude=heads, **blocks, **algorithm
    )
    body.process()
    proto = body.model.model
    if table:
        # int8 compute whatever the body's: 8 bits have no float kernel (SmolLM2's q4 at 0.23x fp32's decode).
        head = MatMulNBitsQuantizer(
            proto,
            bits=recipe.table_bits,
            is_symmetric=True,
            nodes_to_include=heads,
            block_size=WEIGHT_ONLY_BLOCK,
            accuracy_level=4,
        )
        head.process()
        proto = head.model.model
        _share_head_with_lookup(proto, table, recipe.table_bits)
    _integer_zero_points(proto, "float16" if half else "float32")
    if half:
        _half_scales(proto)
    derived = _loadable(onnx_ir.from_proto(proto), source, job)
    return dataclasses.replace(
        derived,
        settings=recipe.describe(),
        more_accurate=job.attempt + 1 < len(settings),
        slower_not_made=len(settings) < len(every),
    )


def _integer_zero_points(proto: onnx.ModelProto, dtype: str) -> None:
    """Each `MatMulNBits` with float zero points (HQQ's) as one with integer zero points plus a float
    correction, the same product, in place: ONNX Runtime's fast kernels take integer zero points only
    (one 576x1536 4-bit MatMul: 40 us against 720). With `z` the float zero point of a block of
    weights, `s` its scale and `zi` the integer nearest `z`, each weight is `s (q - z) = s (q - zi) +
    s (zi - z)`: the second term is one number per block and output column, `C`, so

        A @ W = MatMulNBits(A, q, s, zi) + BlockSums(A) @ C

    `BlockSums(A)` is `A @ S`, `S` a 0/1 matrix of shape [K, K / block] (one per K, shared), and `C`
    [K / block, N] is in `dtype` (SmolLM2-135M's q4: 2.4 % of the fp32 bytes; 98.2 % same top, as
    HQQ's float graph, at 2.5x fp32's decode in one step's timing, 1.7-2.0x in bench/llm_peers.py's
    whole greedy loops, where that graph ran at 0.1x)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    graph = proto.graph
    initializers = {i.name: i for i in graph.initializer}
    numpy_dtype = np.dtype(dtype)
    sums: dict[tuple[str, int, int], str] = {}
    nodes = []
    for node in list(graph.node):
        nodes.append(node)
        zero_points = initializers.get(node.input[3]) if node.op_type == "MatMulNBits" and len(node.input) > 3 else None
        if zero_points is None or zero_points.data_type not in (TensorProto.FLOAT, TensorProto.FLOAT16):
            continue
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        k, n, bits, block = (attributes[name] for name in ("K", "N", "bits", "block_size"))
        blocks = -(-k // block)
        zero = numpy_helper.to_array(zero_points).astype(np.float32).reshape(n, blocks)
        scales = numpy_helper.to_array(initializers[node.input[2]]).astype(np.float32).reshape(n, blocks)
        integer = np.clip(np.round(zero), 0, 2**bits - 1).astype(np.uint8)
        correction = np.ascontiguousarray((scales * (integer - zero)).T).astype(numpy_dtype)
        packed = integer
        if bits == 4:  # two to a byte, the first in the low nibble, each column's padded to whole bytes
            padded = np.pad(integer, ((0, 0), (0, blocks % 2)))
            packed = (padded[:, 0::2] | (padded[:, 1::2] << 4)).astype(np.uint8)
        graph.initializer.remove(zero_points)
        graph.initializer.append(numpy_helper.from_array(packed.reshape(-1), zero_points.name))
        activation = node.input[0]
        if (activation, k, block) not in sums:
            ones = f"hfexport_block_sums_{k}_{block}"
            if ones not in initializers:
                s = np.zeros((k, blocks), numpy_dtype)
                for b in range(blocks):
                    s[b * block : (b + 1) * block, b] = 1
                initializers[ones] = numpy_helper.from_array(s, ones)
                graph.initializer.append(initializers[ones])
            summed = f"{activation}_block_sums_{block}"
            nodes.insert(-1, helper.make_node("MatMul", [activation, ones], [summed], name=summed))
            sums[activation, k, block] = summed
        name = node.name or node.output[0]
        weights = f"{node.input[1]}_zero_point_correction"
        graph.initializer.append(numpy_helper.from_array(correction, weights))
        output = node.output[0]
        node.output[0] = f"{output}_integer_zero_points"
        corrected = f"{output}_correction"
        nodes += [
            helper.make_node("MatMul", [sums[activation, k, block], weights], [corrected], name=corrected),
            helper.make_node("Add", [node.output[0], corrected], [output], name=f"{name}_corrected"),
        ]
    del graph.node[:]
    graph.node.extend(nodes)


def _half_scales(proto: onnx.ModelProto) -> None:
    """Each `MatMulNBits`' float32 scales and (HQQ's float) zero points as float16, in place: a float16
    graph's `MatMulNBits` takes them in its activations' type."""
    import numpy as np
    from onnx import TensorProto, numpy_helper

    initializers = {i.name: i for i in proto.graph.initializer}
    for node in proto.graph.node:
        if node.op_type != "MatMulNBits":
            continue
        for name in node.input[2:4]:
            tensor = initializers.get(name)
            if tensor is not None and tensor.data_type == TensorProto.FLOAT:
                tensor.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(tensor).astype(np.float16), name))


@dataclass(frozen=True)
class _TiedHead:
    lookup: str  # the Gather node reading the embedding table
    head: str  # the MatMul node of the LM head, now reading `table`'s transpose as an initializer
    table: str  # the embedding table's initializer
    # The head was made for the table alone (an untied table): removed once its blocks are taken.
    made: bool = False


def _untie_head(proto: onnx.ModelProto) -> _TiedHead | None:
    """Where the embedding table also feeds the LM head through a `Transpose`, give the head the
    transpose as a weight of its own (a MatMul with a constant weight is what the quantizer
    quantizes), in place; the table's Gather and the head, or None: not tied."""
    import numpy as np
    from onnx import numpy_helper

    graph = proto.graph
    tables = {i.name: i for i in graph.initializer}
    users: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            users.setdefault(name, []).append(node)
    for lookup in graph.node:
        if lookup.op_type != "Gather" or lookup.input[0] not in tables:
            continue
        for transpose in users[lookup.input[0]]:
            heads = [u for u in users.get(transpose.output[0], []) if u.op_type == "MatMul"]
            if (
                transpose.op_type != "Transpose"
                or len(heads) != 1
                or len(users[transpose.output[0]]) != 1
                or not heads[0].name
            ):
                continue
            # The table as read from the graph is freed once transposed, the transposed copy once in the graph
            # (Llama-3.2-1B's table is 1 GB): at most two copies of it beside the graph's own, where there were three.
            transposed = np.ascontiguousarray(numpy_helper.to_array(tables[lookup.input[0]]).T)
            weight = numpy_helper.from_array(transposed, name=f"{lookup.input[0]}_head")
            del transposed
            graph.initializer.append(weight)
            heads[0].input[1] = weight.name
            graph.node.remove(transpose)
            return _TiedHead(lookup.name, heads[0].name, lookup.input[0])
    return None


def _lookup_as_head(proto: onnx.ModelProto) -> _TiedHead | None:
    """An untied embedding table (a Gather of `input_ids` from a 2-D float initializer) given a head
    of its own, in place — a MatMul of its transpose that nothing feeds or reads — so the quantizer
    quantizes its blocks as it does a tied head's; None: the graph looks up no table."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    graph = proto.graph
    tables = {i.name: i for i in graph.initializer if len(i.dims) == 2 and i.data_type == TensorProto.FLOAT}
    lookups = [n for n in graph.node if n.op_type == "Gather" and n.input[0] in tables and n.input[1] == "input_ids"]
    if len(lookups) != 1:
        return None
    lookup = lookups[0]
    transposed = np.ascontiguousarray(numpy_helper.to_array(tables[lookup.input[0]]).T)
    weight = numpy_helper.from_array(transposed, name=f"{lookup.input[0]}_blocks")
    del transposed
    graph.initializer.append(weight)
    name = "hfexport_table_blocks"
    graph.node.append(helper.make_node("MatMul", [f"{name}_input", weight.name], [f"{name}_output"], name=name))
    return _TiedHead(lookup.name, name, lookup.input[0], made=True)


def _share_head_with_lookup(proto: onnx.ModelProto, tied: _TiedHead, bits: int) -> None:
    """Replace the table's Gather by ONNX Runtime's `GatherBlockQuantized` over the head's
    `MatMulNBits` blocks, in place, and drop the float table. The head's weight `[K, N]` is quantized
    per output column in blocks along K — the table `[N, K]` per row in blocks along its width —, so
    its packed data `[N, blocks, block bytes]` is the table quantized on axis 1 once reshaped."""
    import numpy as np
    from onnx import helper, numpy_helper

    graph = proto.graph
    head = next(n for n in graph.node if n.op_type == "MatMulNBits" and n.name == f"{tied.head}_Q{bits}")
    # Symmetric blocks carry no zero points: both ops then take the middle of the range (2^(bits-1)).
    assert len(head.input) == 3 or not head.input[3], head.input
    lookup = next(n for n in graph.node if n.name == tied.lookup)
    data, scales = (next(i for i in graph.initializer if i.name == name) for name in head.input[1:3])
    rows, blocks, block_bytes = data.dims
    per_byte = 8 // bits
    shapes = {
        f"{tied.table}_lookup_data_shape": [rows, blocks * block_bytes],
        f"{tied.table}_lookup_scales_shape": [rows, blocks],
    }
    graph.initializer.extend(numpy_helper.from_array(np.array(s, dtype=np.int64), name=n) for n, s in shapes.items())
    (data_shape, scales_shape) = shapes
    nodes = [
        helper.make_node("Reshape", [data.name, data_shape], [f"{tied.table}_lookup_data"]),
        helper.make_node("Reshape", [scales.name, scales_shape], [f"{tied.table}_lookup_scales"]),
        helper.make_node(
            "GatherBlockQuantized",
            [f"{tied.table}_lookup_data", lookup.input[1], f"{tied.table}_lookup_scales"],
            list(lookup.output),
            name=lookup.name,
            domain=_MS_DOMAIN,
            bits=bits,
            block_size=block_bytes * per_byte,
            quantize_axis=1,
            gather_axis=0,
        ),
    ]
    at = list(graph.node).index(lookup)
    graph.node.remove(lookup)
    for offset, node in enumerate(nodes):
        graph.node.insert(at + offset, node)
    graph.initializer.remove(next(i for i in graph.initializer if i.name == tied.table))
    if tied.made:  # its blocks are the lookup's now; the head itself computes nothing
        graph.node.remove(head)

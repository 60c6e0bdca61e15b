"""The files of an export as the ecosystem's loaders read them, not only as the exporter saved them.

`transformers.exporters` saves an ONNX graph as `model.onnx` + `model.onnx.data` (so graphs past
protobuf's 2 GB limit save too), and `ExportedModel.from_pretrained` asks the Hub for both. Every
other loader of Hub ONNX files — transformers.js, optimum's ORTModel, sentence-transformers'
ONNX backend, a plain `ort.InferenceSession(hf_hub_download(...))` — downloads `model.onnx`
alone and expects it to be self-contained under 2 GB, or its weights in `model.onnx_data`
beyond. So, after validation, each graph is rewritten that way; the exporter's `.onnx.data` name
stays as an empty file, which its loader requires to exist and never reads (the graph no longer
points at it).

A decoder LLM's one decode program (the prompt on an empty cache, then each new token) is, graph
for graph, what optimum and transformers.js call a decoder with past ("merged" decoder): only the
names differ. It is published under theirs — `model.onnx` (`model_quantized.onnx` …), inputs
`past_key_values.N.key/value`, outputs `present.N.key/value`, the batch axis `batch_size` and the
head axes static — so `pipeline("text-generation", repo)` in transformers.js and optimum's
`ORTModelForCausalLM` load it — a sliding-window LLM's too (Mistral, Gemma 2: the mask applies
the window, and the sliding layers' fill level the graph only hands back is dropped). An
encoder-decoder's `encoder` and merged `decode` are published as `encoder_model.onnx` and
`decoder_model_merged.onnx` (cache `past_key_values.N.decoder.key/value`, fed
`encoder_hidden_states` and `encoder_attention_mask`): the two sessions transformers.js 4 opens,
and what optimum's `ORTModelForSeq2SeqLM` / `ORTModelForSpeechSeq2Seq` find. An image-text model's
three programs are transformers.js's three sessions: `vision_encoder.onnx` (its one output named
`image_features`), `embed_tokens.onnx` (`inputs_embeds`) and `decoder_model_merged.onnx` over
embeddings. Each split declares those names once (`LoadersNames`, `ExportSplit.loaders`).
`ExportedModel` binds inputs by the exporter's names, so such a folder carries no `export.json`
(`Layout.for_loaders`; the card says which loaders read it).
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .report import Layout

# Protobuf refuses messages over 2 GiB; leave room for the graph itself.
SELF_CONTAINED_LIMIT = int(1.8e9)
# Past it, the weights go in files of at most this many bytes, as transformers.js reads them in a
# browser: `<file>_data`, then `<file>_data_1`, `_data_2` … (`use_external_data_format: N` fetches N
# of them, each into one typed array, and hands them to onnxruntime-web). A browser's fetch and
# typed arrays, and Node's `readFile`, stop at 2 GiB; a single tensor larger than this is a chunk
# of its own. ONNX Runtime reads each tensor from the file its graph names: optimum and ORT alone
# read the chunks once they are downloaded beside the graph (the card's blocks download them).
EXTERNAL_DATA_CHUNK = 2 * 10**9


# What torch.onnx records on every node for debugging (its FX node, stack trace, module scope):
# ~1.4 kB a node, 0.48 MB of a 1 M-parameter Llama's 4.3 MB graph (11 %) and the same 0.48 MB again
# in each of its quantized files. No runtime reads it.
_DEBUG_NODE_METADATA = ("namespace", "pkg.torch.onnx.")


def write_onnx(model, out_dir: Path, file: str, consume: bool = False) -> list[Path]:
    """`model` (an `onnx_ir.Model`; its weights in memory or still in the files it was loaded from)
    as `file` in `out_dir`: one self-contained file under `SELF_CONTAINED_LIMIT` bytes of weights,
    else `file` + `<file>_data` (transformers.js and optimum's naming; past `EXTERNAL_DATA_CHUNK`,
    also `<file>_data_1` …: `data_files`), without the exporter's
    per-node debug records or its intermediate shapes (`_drop_intermediate_shapes`). Either way
    the weights stream to disk one tensor at a time: no copy of the whole graph is ever held (a
    protobuf `SerializeToString` of a self-contained 1.45 GB graph held two more, +2.9 GB on a
    362 M model). `consume`: the files `model` was loaded from are not read again, so a weights
    file it reads whole may be moved rather than copied (`_move_weights_file`). Returns the files
    written."""
    import onnx_ir

    for node in model.graph.all_nodes():
        _drop_debug_records(node.metadata_props)
    _drop_intermediate_shapes(model)
    weights = sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)
    if weights > EXTERNAL_DATA_CHUNK:
        chunks = _save_in_chunks(model, out_dir, file)
        _release(model)
        return [out_dir / file, *chunks]
    if weights > SELF_CONTAINED_LIMIT:
        if not (consume and _move_weights_file(model, out_dir, file)):
            onnx_ir.save(model, out_dir / file, external_data=f"{file}_data")
        _release(model)
        return [out_dir / file, out_dir / f"{file}_data"]
    _save_self_contained(model, out_dir / file)
    return [out_dir / file]


def data_files(file: str, chunks: int) -> list[str]:
    """The names of `file`'s weights in `chunks` files, as transformers.js asks for them:
    `model.onnx_data`, `model.onnx_data_1`, …"""
    return [f"{file}_data" + (f"_{i}" if i else "") for i in range(chunks)]


# Where each tensor starts in a chunk: a multiple of this, as onnx's own external-data writer aligns.
_ALIGN = 4096
# Tensors under this stay in the graph, as onnx's writer keeps them (its `size_threshold`): ONNX
# Runtime infers shapes from such constants when it loads a graph, and cannot from external ones
# ("Cannot parse data from external tensors", an `Unsqueeze`'s axes on a 587 M Llama).
_INLINE_BELOW = 1024


def _save_in_chunks(model, out_dir: Path, file: str) -> list[Path]:
    """Write `model` as `file` with its weights in files of at most `EXTERNAL_DATA_CHUNK` bytes
    (`data_files`), filled in the graph's order, one tensor read at a time; its initializers then
    point at them. Returns the chunks written."""
    import onnx_ir

    values = [v for graph in model.graphs() for v in graph.initializers.values() if v.const_value is not None]
    chunks: list[Path] = []
    handle = None
    try:
        for value in values:
            tensor = value.const_value
            size = tensor.nbytes
            if size < _INLINE_BELOW:
                value.const_value = onnx_ir.Tensor(tensor.numpy(), name=value.name)
                continue
            offset = handle.tell() if handle is not None else 0
            offset += -offset % _ALIGN
            if handle is None or (offset + size > EXTERNAL_DATA_CHUNK and handle.tell() > 0):
                if handle is not None:
                    handle.close()
                chunks.append(out_dir / data_files(file, len(chunks) + 1)[-1])
                handle, offset = open(chunks[-1], "wb"), 0
            handle.seek(offset)
            handle.write(tensor.tobytes())
            if hasattr(tensor, "release"):
                tensor.release()
            value.const_value = onnx_ir.ExternalTensor(
                chunks[-1].name, offset, size, tensor.dtype, shape=tensor.shape, name=value.name, base_dir=out_dir
            )
    finally:
        if handle is not None:
            handle.close()
    onnx_ir.save(model, out_dir / file)
    return chunks


# Weights a graph may carry inline beside a moved weights file (constants its renaming added).
_INLINE_LIMIT = 64 * 2**20


def _move_weights_file(model, out_dir: Path, file: str) -> bool:
    """Write `model` as `file` with its weights in `<file>_data` by moving the one file they are
    already in (the exporter's `.onnx.data`) to that name instead of copying them; False (nothing
    written) where they are not all in one such file on this filesystem, or where that file holds
    bytes the graph no longer reads. Moved, not linked: onnx refuses weights in a file of several
    links ("a potential hardlink attack").

    Why: at 1.24 B parameters (`bench/scale.py`'s `1b`, `--variants none`), streaming the 4.9 GB of
    weights into a new file made the layout stage 21.0 s of a 144 s ONNX export; moved, 8.5 s, most
    of it the loaders' run that checks the files."""
    import os

    import onnx_ir

    values = [v for graph in model.graphs() for v in graph.initializers.values() if v.const_value is not None]
    external = [v for v in values if isinstance(v.const_value, onnx_ir.ExternalTensor)]
    sources = {Path(v.const_value.path).resolve() for v in external}
    inline = sum(v.const_value.nbytes for v in values if not isinstance(v.const_value, onnx_ir.ExternalTensor))
    if len(sources) != 1 or inline > _INLINE_LIMIT:
        return False
    (source,) = sources
    if sum(v.const_value.length or 0 for v in external) < source.stat().st_size:
        return False
    target = out_dir / f"{file}_data"
    if os.stat(source).st_dev != os.stat(out_dir).st_dev:  # another filesystem: streamed instead
        return False
    os.replace(source, target)
    for value in external:
        tensor = value.const_value
        value.const_value = onnx_ir.ExternalTensor(
            target.name,
            tensor.offset,
            tensor.length,
            tensor.dtype,
            shape=tensor.shape,
            name=tensor.name,
            base_dir=out_dir,
        )
    onnx_ir.save(model, out_dir / file)
    return True


def _drop_intermediate_shapes(model) -> None:
    """Forget the type and shape onnxscript recorded for each value inside the main graph (its
    `value_info`), in place; the graph's inputs and outputs keep theirs. The computation is the
    same: a runtime infers those itself when it loads the graph.

    Why: given them, ONNX Runtime (1.32, CPU) fuses every residual `Add` + `LayerNormalization`
    into its `SkipLayerNormalization`, which runs slower on this machine's CPU than the two ops it
    replaces (all-MiniLM-L6-v2, 1 thread: 3.08 ms against 0.4 ms + the adds per run); without them
    it leaves the pair as it leaves optimum's graph. Paired rounds against optimum's `model.onnx`
    (`bench/run.py`, 128 tokens): 0.915x -> 0.996x at 1 thread, 0.952x -> 1.006x at 2; SmolLM2-135M's
    decode step at 128 past tokens 0.988x -> 1.035x at 1 thread, unchanged at 2 (1.04x)."""
    for node in model.graph:
        for value in node.outputs:
            if not value.is_graph_output():
                value.type = None
                value.shape = None
                _drop_debug_records(value.metadata_props)


def _drop_debug_records(metadata_props) -> None:
    """torch.onnx's debug records (`_DEBUG_NODE_METADATA`) out of a node's or value's metadata, in place."""
    for key in [k for k in metadata_props if k.startswith(_DEBUG_NODE_METADATA)]:
        del metadata_props[key]


def _save_self_contained(model, path: Path) -> None:
    """The graph without its weights, then each weight as a message of its own: protobuf parses
    concatenated messages as one, merged (a repeated field's entries appended), so the file is the
    same model `onnx_ir.save` would write, and only one tensor is serialized at a time."""
    import onnx
    import onnx_ir
    from onnx_ir import serde

    weights = [model.graph.initializers.pop(name) for name in list(model.graph.initializers)]
    with open(path, "wb") as f:
        f.write(serde.serialize_model(model).SerializeToString())
        for value in weights:
            fragment = onnx.ModelProto()
            tensor = fragment.graph.initializer.add()
            weight = value.const_value
            if isinstance(weight, onnx_ir.ExternalTensor):  # its bytes, not a reference to its file
                tensor.dims.extend(weight.shape.numpy())
                tensor.data_type = weight.dtype
                tensor.raw_data = weight.tobytes()
            else:
                serde.serialize_tensor_into(tensor, weight)
            tensor.name = value.name
            f.write(fragment.SerializeToString())
            del fragment, tensor
            if hasattr(value.const_value, "release"):
                value.const_value.release()  # unmap what was read: its pages leave this process


def _release(model) -> None:
    """Unmap the weights a lazily loaded graph has read so far."""
    for value in model.graph.initializers.values():
        if hasattr(value.const_value, "release"):
            value.const_value.release()


def load_onnx(path: Path):
    """An ONNX graph with its weights in memory, wherever they were stored (a quantizer needs them so;
    to rename or repack a graph, `onnx_ir.load` alone maps them and `write_onnx` streams them)."""
    import onnx_ir

    model = onnx_ir.load(path)
    onnx_ir.external_data.load_to_model(model)
    return model


# The exporter's names for a cache's leaves → optimum's and transformers.js's. An encoder-decoder's
# decoder (it reads `encoder_hidden_states`) names its self-attention cache `.decoder.` there.
def _cache_names(infix: str) -> tuple[tuple[re.Pattern, str], ...]:
    return (
        (re.compile(r"^input\.cache\.layers\.(\d+)\.keys$"), rf"past_key_values.\1.{infix}key"),
        (re.compile(r"^input\.cache\.layers\.(\d+)\.values$"), rf"past_key_values.\1.{infix}value"),
        (re.compile(r"^output\.cache\.layers\.(\d+)\.keys$"), rf"present.\1.{infix}key"),
        (re.compile(r"^output\.cache\.layers\.(\d+)\.values$"), rf"present.\1.{infix}value"),
    )


# A cache's states (LFM2, Granite 4, Falcon-H1, Qwen3-Next), as transformers.js names them
# (`getCacheNames` in its configs.js, 4.3.2): `past_conv.N`, and the recurrent state `past_ssm.N` for
# Mamba-style layers or `past_recurrent.N` for linear attention; `present_*` on the way out.
_STATES = (
    (re.compile(r"^input\.cache\.layers\.(\d+)\.conv_states\.0$"), r"past_conv.\1"),
    (re.compile(r"^input\.cache\.layers\.(\d+)\.recurrent_states\.0$"), r"past_{recurrent}.\1"),
    (re.compile(r"^output\.cache\.layers\.(\d+)\.conv_states\.0$"), r"present_conv.\1"),
    (re.compile(r"^output\.cache\.layers\.(\d+)\.recurrent_states\.0$"), r"present_{recurrent}.\1"),
)
# Families whose recurrent state transformers.js calls `ssm` (a Mamba mixer's); any other: `recurrent`.
SSM_STATE_FAMILIES = frozenset({"granitemoehybrid", "falcon_h1", "nemotron_h"})


def state_names(model_type: str | None) -> tuple[tuple[re.Pattern, str], ...]:
    """The state patterns with the recurrent state named as transformers.js names it for `model_type`."""
    recurrent = "ssm" if model_type in SSM_STATE_FAMILIES else "recurrent"
    return tuple((pattern, new.replace("{recurrent}", recurrent)) for pattern, new in _STATES)


_DECODER_NAMES = _cache_names("")
_SEQ2SEQ_NAMES = _cache_names("decoder.")
_PLAIN = {"input_ids", "inputs_embeds", "attention_mask", "position_ids", "logits"}
_SEQ2SEQ_PLAIN = {"input_ids", "encoder_hidden_states", "encoder_attention_mask", "logits"}


def as_decoder_with_past(model, model_type: str | None = None) -> bool:
    """Rename a decode graph's inputs, outputs and axes, in place, as optimum and transformers.js
    name a decoder with past: a decoder LLM's (`past_key_values.N.key`), or an encoder-decoder's
    merged decoder (`past_key_values.N.decoder.key`, fed `encoder_hidden_states`).
    transformers.js sizes the empty first cache from the graph's input shapes: it knows
    `batch_size`, reads numbers as they are, and takes any other symbol as 0 — so the head axes
    must be numbers (the exporter leaves them as symbols named "2", "8").
    Returns False (and changes nothing) if the graph is not such a decoder."""
    import onnx_ir

    names = {v.name for v in [*model.graph.inputs, *model.graph.outputs]}
    seq2seq = "encoder_hidden_states" in names
    patterns, plain = (
        (_SEQ2SEQ_NAMES, _SEQ2SEQ_PLAIN) if seq2seq else (_DECODER_NAMES + state_names(model_type), _PLAIN)
    )
    cache = {n for n in names if any(pattern.match(n) for pattern, _ in patterns)}
    passed_through = _passed_through_state(model)
    # Only keys, values and the states transformers.js names: a cache with more has no such layout.
    if not {"input_ids", "inputs_embeds"} & names or not cache or names - plain - cache - passed_through.keys():
        return False
    tokens = "input_ids" if "input_ids" in names else "inputs_embeds"  # an image-text decoder reads embeddings
    for name, node in passed_through.items():
        if node is not None:  # the output's Identity goes with its input
            model.graph.outputs.remove(node.outputs[0])
            model.graph.remove(node)
    for value in [v for v in model.graph.inputs if v.name in passed_through]:
        model.graph.inputs.remove(value)
    for value in [*model.graph.inputs, *model.graph.outputs]:
        for pattern, new in patterns:
            value.name = pattern.sub(new, value.name)
    inputs = {v.name: v for v in model.graph.inputs}

    def symbol(name: str, axis: int) -> str | None:
        dim = inputs[name].shape[axis] if name in inputs and inputs[name].shape is not None else None
        return dim.value if isinstance(dim, onnx_ir.SymbolicDim) else None

    axes = {symbol(name, 0): "batch_size" for name in inputs}
    # Every layer's past length, one name: a hybrid cache was traced with its sliding layers cut to
    # the window and its full ones not, so the exporter gave them symbols of their own.
    past = "past_decoder_sequence_length" if seq2seq else "past_sequence_length"
    axes |= {symbol(name, 2): past for name in inputs if name.startswith("past_key_values.")}
    if seq2seq:
        axes |= {
            symbol(tokens, 1): "decoder_sequence_length",
            symbol("encoder_hidden_states", 1): "encoder_sequence_length",
        }
    else:
        axes |= {
            symbol(tokens, 1): "sequence_length",
            symbol("attention_mask", 1): "total_sequence_length",
        }
    axes.pop(None, None)
    token = re.compile(r"\b(?:" + "|".join(re.escape(str(a)) for a in axes) + r")\b") if axes else None

    def renamed(dim):
        if not isinstance(dim, onnx_ir.SymbolicDim) or dim.value is None:
            return dim
        if dim.value.isdigit():
            return int(dim.value)
        return onnx_ir.SymbolicDim(token.sub(lambda m: axes[m.group(0)], dim.value) if token else dim.value)

    values = [*model.graph.inputs, *model.graph.outputs, *(out for node in model.graph for out in node.outputs)]
    for value in values:
        if value.shape is not None:
            value.shape = onnx_ir.Shape([renamed(dim) for dim in value.shape])
    return True


# A sliding-window layer's fill level (`DynamicSlidingWindowLayer._sliding_window_tensor`), a leaf
# of the cache's pytree. The exporter traces those layers as full ones (the mask applies the
# window; transformers.exporters' `_patch_sliding_window_layer`), so the graph only hands it back.
_SLIDING_STATE = re.compile(r"^input\.cache\.layers\.(\d+)\._sliding_window_tensor$")


def _passed_through_state(model) -> dict:
    """The sliding layers' fill levels that the graph reads for nothing but to return them (each
    input's only use an Identity to its output): name → that Identity node (None for the output's
    own entry, and for an input nothing reads). Another use leaves it out: the graph needs it."""
    outputs = {v.name: v for v in model.graph.outputs}
    found: dict = {}
    for value in model.graph.inputs:
        match = _SLIDING_STATE.match(value.name)
        if not match:
            continue
        uses = [use.node for use in value.uses()]
        twin = f"output.cache.layers.{match.group(1)}._sliding_window_tensor"
        if not uses:
            found[value.name] = None
        elif len(uses) == 1 and uses[0].op_type == "Identity" and uses[0].outputs[0] is (passed := outputs.get(twin)):
            if passed is not None and len(passed.uses()) == 0:
                found[value.name], found[twin] = uses[0], None
    return found


@dataclass(frozen=True)
class LoadersNames:
    """How optimum and transformers.js name a split's files (`ExportSplit.loaders`): the layout they
    make, each component's file stem, and — for a graph without a cache that they read one output
    of by name — that output's name."""

    layout: Layout
    files: dict[str, str]
    outputs: dict[str, str] = field(default_factory=dict)


def onnx_layout(
    out_dir: Path, components: list[str], loaders: LoadersNames | None = None
) -> tuple[Layout, dict[str, str]]:
    """Rewrite each validated `<component>.onnx` (+ `.onnx.data`) in the loaders' layout, in place.
    `loaders`: the split's components by the file names optimum and transformers.js read (a decoder
    LLM's `decode` → `model`; an encoder-decoder's `encoder` → `encoder_model`, `decode` →
    `decoder_model_merged`; an image-text model's three sessions). Those graphs, and their variants
    (`<component>_quantized.onnx` …), are renamed so, their decoder as a decoder with past — where it
    is one (a cache of keys and values only; else nothing is renamed). Returns the layout and the
    files it renamed (old name → new)."""
    import onnx_ir

    if loaders and set(loaders.files) == set(components):
        renamed = _loaders_layout(out_dir, loaders)
        if renamed:
            return loaders.layout, renamed
    for component in components:
        graph = out_dir / f"{component}.onnx"
        model = onnx_ir.load(graph)
        staged = out_dir / ".layout"
        staged.mkdir()
        written = write_onnx(model, staged, graph.name, consume=True)
        del model
        (staged / f"{graph.name}.data").write_bytes(b"")  # ExportedModel asks for it; nothing reads it
        # Renamed over the old files, never rewritten in place: a session may still map the old weights.
        for path in [*written, staged / f"{graph.name}.data"]:
            path.replace(out_dir / path.name)
        staged.rmdir()
    return Layout.EXPORTER, {}


def unfuse_transposed_weights(model) -> int:
    """Each ONNX Runtime `FusedMatMul` of an activation by a weight read transposed (the exporter's CPU
    fusion of an LM head tied to its embedding table) as the `Transpose` and `MatMul` it fused, in
    place; how many. ONNX Runtime's CPU provider fuses them again when it opens the graph; its WebGPU
    provider has no `FusedMatMul`, so a fused head — SmolLM2-135M's, the graph's largest MatMul — ran
    on the CPU under WebGPU."""
    import onnx_ir as ir
    from onnx_ir.convenience import replace_nodes_and_values

    defaults = {"alpha": 1.0, "transA": 0, "transB": 0, "transBatchA": 0, "transBatchB": 0}
    transposed_weight = {**defaults, "transB": 1}  # nothing scaled, no activation or batch transposed
    count = 0
    for node in list(model.graph):
        if node.op_type != "FusedMatMul" or node.domain != "com.microsoft" or len(node.inputs) != 2:
            continue
        attributes = {name: node.attributes[name].value for name in defaults if name in node.attributes}
        weight = node.inputs[1]
        if {**defaults, **attributes} != transposed_weight or weight is None or not weight.is_initializer():
            continue
        transpose = ir.node("Transpose", [weight], attributes={"perm": [1, 0]})
        matmul = ir.node("MatMul", [node.inputs[0], transpose.outputs[0]], name=node.name)
        replace_nodes_and_values(model.graph, node, [node], [transpose, matmul], node.outputs, matmul.outputs)
        count += 1
    return count


def _loaders_layout(out_dir: Path, loaders: LoadersNames) -> dict[str, str]:
    """Each component's graph and its variants under the loaders' names, the graph with a cache
    renamed as a decoder with past, a graph's one output named as they read it; {} (nothing
    touched) if those fp32 graphs are not such."""
    import onnx_ir

    def has_cache(graph) -> bool:
        return any(v.name.startswith("input.cache.") for v in graph.graph.inputs)

    def output_named(graph, name: str | None) -> bool:
        if name is not None and len(graph.graph.outputs) == 1:
            graph.graph.outputs[0].name = name
        return name is None or [v.name for v in graph.graph.outputs] == [name]

    config = out_dir / "config.json"
    model_type = json.loads(config.read_text()).get("model_type") if config.exists() else None
    fp32 = {c: onnx_ir.load(out_dir / f"{c}.onnx") for c in loaders.files}  # graphs, no weights
    if not any(has_cache(g) for g in fp32.values()) or not all(
        as_decoder_with_past(g, model_type) if has_cache(g) else output_named(g, loaders.outputs.get(c))
        for c, g in fp32.items()
    ):
        return {}
    renamed = {}
    for component, stem in loaders.files.items():
        # `<component>.onnx` and its variants `<component>_<kind>.onnx`, nothing else of that prefix.
        for graph in sorted({out_dir / f"{component}.onnx", *out_dir.glob(f"{component}_*.onnx")}):
            model = onnx_ir.load(graph)
            if has_cache(model) and not as_decoder_with_past(model, model_type):
                continue
            if not has_cache(model) and not output_named(model, loaders.outputs.get(component)):
                continue
            name = stem + graph.name.removeprefix(component)
            staged = out_dir / ".layout"
            staged.mkdir()
            written = write_onnx(model, staged, name, consume=True)
            del model
            for path in written:
                path.replace(out_dir / path.name)
            staged.rmdir()
            if name != graph.name:  # transformers.js's name may be the component's (`vision_encoder`)
                graph.unlink()
            graph.with_name(f"{graph.name}.data").unlink(missing_ok=True)  # its weights are in the graph now
            renamed[graph.name] = name
    # It describes programs by the exporter's input names, which these graphs no longer take.
    (out_dir / "export.json").unlink(missing_ok=True)
    return renamed


def package_onnx(folder: Path, out_dir: Path, component: str, file: str) -> list[Path]:
    """A variant's validated graph (saved the exporter's way in `folder`) as one published `file`."""
    import onnx_ir

    return write_onnx(onnx_ir.load(folder / f"{component}.onnx"), out_dir, file)


def package_pte(folder: Path, out_dir: Path, component: str, file: str) -> list[Path]:
    """A variant's validated `.pte` program under its published name (one file: nothing to repack)."""
    shutil.copy(folder / f"{component}.pte", out_dir / file)
    return [out_dir / file]

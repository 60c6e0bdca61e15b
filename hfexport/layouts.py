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
`ORTModelForCausalLM` load it. `ExportedModel` binds inputs by the exporter's names, so that
folder carries no `export.json` (`Layout.DECODER_WITH_PAST`; the card says which loaders read it).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from .report import Layout

# Protobuf refuses messages over 2 GiB; leave room for the graph itself.
SELF_CONTAINED_LIMIT = int(1.8e9)


def write_onnx(model, out_dir: Path, file: str) -> list[Path]:
    """`model` (an `onnx_ir.Model` with its weights loaded) as `file` in `out_dir`: one self-contained
    file under `SELF_CONTAINED_LIMIT` bytes of weights, else `file` + `<file>_data` (transformers.js
    and optimum's naming). Returns the files written."""
    import onnx_ir

    weights = sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)
    large = weights > SELF_CONTAINED_LIMIT
    onnx_ir.save(model, out_dir / file, external_data=f"{file}_data" if large else None)
    return [out_dir / file, *([out_dir / f"{file}_data"] if large else [])]


def load_onnx(path: Path):
    """An ONNX graph with its weights in memory, wherever they were stored."""
    import onnx_ir

    model = onnx_ir.load(path)
    onnx_ir.external_data.load_to_model(model)
    return model


# The exporter's names for a cache's leaves → optimum's and transformers.js's.
_CACHE_NAMES = (
    (re.compile(r"^input\.cache\.layers\.(\d+)\.keys$"), r"past_key_values.\1.key"),
    (re.compile(r"^input\.cache\.layers\.(\d+)\.values$"), r"past_key_values.\1.value"),
    (re.compile(r"^output\.cache\.layers\.(\d+)\.keys$"), r"present.\1.key"),
    (re.compile(r"^output\.cache\.layers\.(\d+)\.values$"), r"present.\1.value"),
)


def as_decoder_with_past(model) -> bool:
    """Rename a decode graph's inputs, outputs and axes, in place, as optimum and transformers.js
    name a decoder with past. transformers.js sizes the empty first cache from the graph's input
    shapes: it knows `batch_size`, reads numbers as they are, and takes any other symbol as 0 —
    so the head axes must be numbers (the exporter leaves them as symbols named "2", "8").
    Returns False (and changes nothing) if the graph is not such a decoder."""
    import onnx_ir

    names = {v.name for v in [*model.graph.inputs, *model.graph.outputs]}
    plain = {"input_ids", "attention_mask", "position_ids", "logits"}
    cache = {n for n in names if any(pattern.match(n) for pattern, _ in _CACHE_NAMES)}
    # Only keys and values: a cache with more state (a sliding layer's fill level) has no such layout.
    if "input_ids" not in names or not cache or names - plain - cache:
        return False
    for value in [*model.graph.inputs, *model.graph.outputs]:
        for pattern, new in _CACHE_NAMES:
            value.name = pattern.sub(new, value.name)
    inputs = {v.name: v for v in model.graph.inputs}

    def symbol(name: str, axis: int) -> str | None:
        dim = inputs[name].shape[axis] if name in inputs and inputs[name].shape is not None else None
        return dim.value if isinstance(dim, onnx_ir.SymbolicDim) else None

    axes = {symbol(name, 0): "batch_size" for name in inputs}
    past = next(name for name in inputs if name.startswith("past_key_values."))
    axes |= {
        symbol("input_ids", 1): "sequence_length",
        symbol(past, 2): "past_sequence_length",
        symbol("attention_mask", 1): "total_sequence_length",
    }
    axes.pop(None, None)
    token = re.compile(r"\b(?:" + "|".join(map(re.escape, axes)) + r")\b") if axes else None

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


def onnx_layout(out_dir: Path, components: list[str], decoder: str | None = None) -> tuple[Layout, dict[str, str]]:
    """Rewrite each validated `<component>.onnx` (+ `.onnx.data`) in the loaders' layout, in place.
    `decoder`: the component a decoder LLM's split publishes as a decoder with past
    (`ExportSplit.loaders_decoder`): its graph and variants (`<decoder>_quantized.onnx` …) are
    renamed so where they are one (a cache of keys and values only). Returns the layout and the
    files it renamed (old name → new)."""
    if decoder is not None and components == [decoder]:
        renamed = _decoder_with_past(out_dir, decoder)
        if renamed:
            return Layout.DECODER_WITH_PAST, renamed
    for component in components:
        graph = out_dir / f"{component}.onnx"
        model = load_onnx(graph)
        staged = out_dir / ".layout"
        staged.mkdir()
        written = write_onnx(model, staged, graph.name)
        del model
        (staged / f"{graph.name}.data").write_bytes(b"")  # ExportedModel asks for it; nothing reads it
        # Renamed over the old files, never rewritten in place: a session may still map the old weights.
        for path in [*written, staged / f"{graph.name}.data"]:
            path.replace(out_dir / path.name)
        staged.rmdir()
    return Layout.EXPORTER, {}


def _decoder_with_past(out_dir: Path, decoder: str) -> dict[str, str]:
    """`<decoder>.onnx` and its variants renamed as a decoder with past (`model.onnx` …); {}
    (nothing touched) if the fp32 graph is not one."""
    import onnx_ir

    if not as_decoder_with_past(onnx_ir.load(out_dir / f"{decoder}.onnx")):  # the graph alone, not its weights
        return {}
    renamed = {}
    for graph in sorted(out_dir.glob(f"{decoder}*.onnx")):
        model = load_onnx(graph)
        if not as_decoder_with_past(model):
            continue
        name = graph.name.replace(decoder, "model", 1)
        staged = out_dir / ".layout"
        staged.mkdir()
        written = write_onnx(model, staged, name)
        del model
        for path in written:
            path.replace(out_dir / path.name)
        staged.rmdir()
        graph.unlink()
        graph.with_name(f"{graph.name}.data").unlink(missing_ok=True)
        renamed[graph.name] = name
    # It describes programs by the exporter's input names, which these graphs no longer take.
    (out_dir / "export.json").unlink(missing_ok=True)
    return renamed


def package_onnx(folder: Path, out_dir: Path, component: str, file: str) -> list[Path]:
    """A variant's validated graph (saved the exporter's way in `folder`) as one published `file`."""
    return write_onnx(load_onnx(folder / f"{component}.onnx"), out_dir, file)


def package_pte(folder: Path, out_dir: Path, component: str, file: str) -> list[Path]:
    """A variant's validated `.pte` program under its published name (one file: nothing to repack)."""
    shutil.copy(folder / f"{component}.pte", out_dir / file)
    return [out_dir / file]

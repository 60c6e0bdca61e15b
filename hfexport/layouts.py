"""The files of an export as the ecosystem's loaders read them, not only as the exporter saved them.

`transformers.exporters` saves an ONNX graph as `model.onnx` + `model.onnx.data` (so graphs past
protobuf's 2 GB limit save too), and `ExportedModel.from_pretrained` asks the Hub for both. Every
other loader of Hub ONNX files — transformers.js, optimum's ORTModel, sentence-transformers'
ONNX backend, a plain `ort.InferenceSession(hf_hub_download(...))` — downloads `model.onnx`
alone and expects it to be self-contained under 2 GB, or its weights in `model.onnx_data`
beyond. So, after validation, each graph is rewritten that way; the exporter's `.onnx.data` name
stays as an empty file, which its loader requires to exist and never reads (the graph no longer
points at it).
"""

from __future__ import annotations

import shutil
from pathlib import Path

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


def onnx_layout(out_dir: Path, components: list[str]) -> None:
    """Rewrite each validated `<component>.onnx` (+ `.onnx.data`) in the loaders' layout, in place."""
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


def package_onnx(folder: Path, out_dir: Path, component: str, file: str) -> list[Path]:
    """A variant's validated graph (saved the exporter's way in `folder`) as one published `file`."""
    return write_onnx(load_onnx(folder / f"{component}.onnx"), out_dir, file)


def package_pte(folder: Path, out_dir: Path, component: str, file: str) -> list[Path]:
    """A variant's validated `.pte` program under its published name (one file: nothing to repack)."""
    shutil.copy(folder / f"{component}.pte", out_dir / file)
    return [out_dir / file]

"""onnxruntime-web's WebGPU execution provider: where a browser with a GPU runs each node of a file.

transformers.js loads `onnxruntime-web/webgpu` in browsers: ORT's native WebGPU provider, compiled
into the package's `.wasm` (not the older JavaScript kernels beside it), so which operators it has
kernels for is known only to that build. `placement` asks it: `ort_webgpu.mjs` opens a session on
each graph in headless Chromium — its software adapter, SwiftShader, where the machine has no GPU —
and reads ONNX Runtime's verbose log of where it placed every node. A node placed on the CPU
provider runs in wasm, with copies to and from the GPU around it.

ORT also keeps integer index arithmetic on the CPU on purpose (`Shape`, a `Slice` of
`position_ids`: the WebGPU provider takes no int64), so `missing_on_webgpu` names only the nodes
that compute on floats or quantized values: those are the ones a user's model loses the GPU for.

Chromium is found as `HFEXPORT_CHROMIUM`, else `chromium-headless-shell` or `chromium` on PATH;
without it the check is not run and the card says so.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..settings import chromium as named_chromium
from .runtimes import WebRuntimeMissing, locate
from .wasm import graph_facts

SERVER = Path(__file__).with_name("ort_webgpu.mjs")
CPU = "CPUExecutionProvider"


def chromium() -> str:
    """The Chromium that runs WebGPU here.

    Raises:
        WebRuntimeMissing: none is installed; its message says how to get one.
    """
    named = named_chromium()
    found = named or shutil.which("chromium-headless-shell") or shutil.which("chromium")
    if not found:
        raise WebRuntimeMissing(
            "no Chromium (Debian's `chromium-headless-shell`, or HFEXPORT_CHROMIUM naming one) to run WebGPU in"
        )
    return found


@dataclass
class Placement:
    """Where onnxruntime-web's WebGPU provider placed one graph's nodes."""

    on_cpu: list[tuple[str, str]] = field(default_factory=list)  # (op type, node name) kept on the CPU
    on_webgpu: list[tuple[str, str]] = field(default_factory=list)  # (op type, node name) on the GPU
    nodes_on_webgpu: int = 0  # how many (where all are, ORT names none of them)
    error: str | None = None  # the session did not open


def placement(graphs: list[Path], timeout: float = 600) -> list[Placement]:
    """Each graph opened in onnxruntime-web's WebGPU provider (one browser for all), in order.

    Raises:
        WebRuntimeMissing: node, onnxruntime-web, playwright-core or Chromium is missing.
        RuntimeError: the browser could not be driven (its message).
    """
    node, package = locate()
    if not (package.parent / "playwright-core").is_dir():
        raise WebRuntimeMissing("playwright-core is not installed beside onnxruntime-web (the pins' `npm ci`)")
    browser = chromium()
    request = [{"graph": str(g), "external": [[n, str(g.parent / n)] for n in graph_facts(g)[0]]} for g in graphs]
    done = subprocess.run(
        [node, str(SERVER), str(package), browser],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode != 0:  # node's own last line is its version: the error is the first that says so
        lines = done.stderr.strip().splitlines()
        said = next((line for line in lines if "Error" in line or "error:" in line), lines[-1] if lines else "")
        raise RuntimeError(f"onnxruntime-web (WebGPU) in Chromium: {said.strip()[:500] or f'exit {done.returncode}'}")
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    return [
        Placement(
            on_cpu=[(op, name) for op, name in a.get("placed", {}).get(CPU, [])],
            on_webgpu=[(op, name) for p, nodes in a.get("placed", {}).items() if p != CPU for op, name in nodes],
            nodes_on_webgpu=sum(n for p, n in a.get("counts", {}).items() if p != CPU),
            error=a.get("error"),
        )
        for a in answers
    ]


def missing_on_webgpu(graph: Path, placed: Placement) -> list[str]:
    """The op types the WebGPU provider ran none of in `graph` and kept on the CPU where they compute
    on floats or quantized values: those it has no kernel for. Left out: an op type some node of
    which ran on the GPU (its CPU nodes are other types, int64 ones), and integer index arithmetic
    (every output int64 or bool: `Shape`, a `Slice` of `position_ids`; or int32 from integer inputs
    alone: ONNX Runtime GenAI's graphs cast the mask's lengths to int32 for GroupQueryAttention),
    which ORT keeps on the CPU. int32 made from 8-bit inputs is quantized compute (`MatMulInteger`)."""
    import onnx

    model = onnx.load(str(graph), load_external_data=False)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    values = (*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input)
    kinds = {v.name: v.type.tensor_type.elem_type for v in values}
    kinds.update({t.name: t.data_type for t in model.graph.initializer})
    nodes = {n.name: n for n in model.graph.node if n.name}  # a node ORT made: not there
    index = {onnx.TensorProto.INT64, onnx.TensorProto.BOOL}
    on_gpu = {op for op, _ in placed.on_webgpu}
    missing = []
    for op, name in placed.on_cpu:
        if op in on_gpu or op in missing:
            continue
        node = nodes.get(name)
        produced = [kinds.get(o) for o in node.output if o] if node is not None else []
        taken = [kinds.get(i) for i in node.input if i] if node is not None else []
        if produced and all(kind in index for kind in produced):
            continue
        integer = index | {onnx.TensorProto.INT32}
        if produced and all(kind in integer for kind in (*produced, *taken)):
            continue
        missing.append(op)
    return missing

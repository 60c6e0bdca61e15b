"""onnxruntime-web's wasm backend, driven from Python: the runtime a transformers.js user's browser
runs a published file on.

ONNX Runtime for CPU (Python) and onnxruntime-node load a file that the browser's runtime may still
refuse or answer wrong on: another build, other kernels (transformers.js#1728, onnxruntime#26367).
`WasmRuntime` starts node on `ort_wasm.mjs`, which loads the bundle transformers.js imports in a
browser (`onnxruntime-web/webgpu`; its wasm provider, `device: "wasm"`, transformers.js's default
there) — the JavaScript and .wasm a browser runs — and hands it each graph and its external data as
bytes, as a browser fetches them. The package's plain `wasm` entry is another build: it has
`GatherBlockQuantized`, the webgpu bundle's wasm does not (1.31.0-dev.20260914), so a check on it
said `wasm ✓` of LLM files transformers.js cannot open. Its sessions answer as ONNX Runtime's
Python sessions do (`run(None, feed)`, `get_inputs()`), so the worker's loops feed them exactly as
they feed ORT for CPU.

Where node or the package is missing (`locate`), the check is not run and the card says why, in
words of no path here; a `pip install` gets the package on first use (`runtimes.ensure`).
"""

from __future__ import annotations

import json
import subprocess
import types
from pathlib import Path
from typing import Any

import numpy as np

from .runtimes import locate

SERVER = Path(__file__).with_name("ort_wasm.mjs")
# V8's baseline compiler alone. Node 20 compiles that bundle's 27 MB wasm with its optimising tier
# too, in the background, and waits for it to finish at exit: a node that opened one graph took 48 s
# of CPU to exit (0.6 s with `--liftoff-only`), so each push's check sat 30 s in `close` before the
# process was killed. A browser tiers up only its hot functions. The same code, answering the same.
NODE_FLAGS = ("--liftoff-only",)
# What each ONNX element type is called by onnxruntime-web's `Tensor`.
_TYPES = {
    "float32": np.float32,
    "float16": np.float16,
    "int64": np.int64,
    "int32": np.int32,
    "int8": np.int8,
    "uint8": np.uint8,
    "bool": np.bool_,
    "float64": np.float64,
}
_NAMES = {np.dtype(kind): name for name, kind in _TYPES.items()}


class WasmRuntime:
    """One node process running onnxruntime-web's wasm backend; `open` a graph in it.

    Raises:
        WebRuntimeMissing: from `locate`.
    """

    def __init__(self) -> None:
        node, package = locate()
        self.process = subprocess.Popen(
            [node, *NODE_FLAGS, str(SERVER), str(package)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        ready = self._answer()
        self.version = ready.get("version")

    def open(self, path: Path) -> WasmSession:
        """A session on the graph at `path`, its external data files read from beside it."""
        external, types_ = graph_facts(path)
        header = {"op": "open", "path": str(path), "external": [[n, str(path.parent / n)] for n in external]}
        answer = self._ask(header)
        return WasmSession(self, answer["session"], answer["inputs"], answer["outputs"], types_)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()  # type: ignore[union-attr]
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()

    def __enter__(self) -> WasmRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ask(self, header: dict, body: list[bytes] = ()) -> dict:  # type: ignore[assignment]
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write((json.dumps(header) + "\n").encode())
            for part in body:
                stdin.write(part)
            stdin.flush()
        except BrokenPipeError:
            pass  # it died: `_answer` says how
        return self._answer()

    def _answer(self) -> dict:
        stdout = self.process.stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            self.process.wait()
            said = self.process.stderr.read().decode(errors="replace").strip() if self.process.stderr else ""
            raise RuntimeError(f"onnxruntime-web (node) ended (exit {self.process.returncode}): {said[-1000:]}")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"onnxruntime-web (wasm): {answer['error']}")
        return dict(answer)

    def _read(self, size: int) -> bytes:
        stdout = self.process.stdout
        assert stdout is not None
        data = stdout.read(size)
        if len(data) != size:
            raise RuntimeError("onnxruntime-web (node) ended in the middle of an answer")
        return bytes(data)


class WasmSession:
    """A graph open in onnxruntime-web's wasm backend, answering as `onnxruntime.InferenceSession`."""

    def __init__(
        self, runtime: WasmRuntime, session: int, inputs: list[str], outputs: list[str], input_types: dict[str, str]
    ):
        self.runtime, self.session = runtime, session
        self.input_names, self.output_names = inputs, outputs
        self.input_types = input_types  # ONNX Runtime's words: `tensor(float16)`

    def get_inputs(self) -> list[types.SimpleNamespace]:
        return [types.SimpleNamespace(name=n, type=self.input_types.get(n, "")) for n in self.input_names]

    def get_outputs(self) -> list[types.SimpleNamespace]:
        return [types.SimpleNamespace(name=name) for name in self.output_names]

    def run(self, names: list[str] | None, feed: dict[str, Any]) -> list[np.ndarray]:
        """The outputs `names` (None: all, in the graph's order) for `feed` (numpy arrays by name)."""
        arrays = {name: np.ascontiguousarray(value) for name, value in feed.items()}
        feeds = [
            {"name": name, "type": _NAMES[array.dtype], "dims": list(array.shape), "bytes": array.nbytes}
            for name, array in arrays.items()
        ]
        answer = self.runtime._ask(
            {"op": "run", "session": self.session, "feeds": feeds}, [a.tobytes() for a in arrays.values()]
        )
        got = {}
        for output in answer["outputs"]:
            data = self.runtime._read(output["bytes"])
            kind = _TYPES[output["type"]]
            got[output["name"]] = np.frombuffer(data, dtype=kind).reshape(output["dims"]).copy()
        return [got[name] for name in (names or self.output_names)]

    def close(self) -> None:
        self.runtime._ask({"op": "close", "session": self.session})


def graph_facts(path: Path) -> tuple[list[str], dict[str, str]]:
    """The external data files the graph at `path` reads (names beside it, in first use order), and
    its inputs' types in ONNX Runtime's words (`tensor(float16)`). Its weights are not read."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    names: list[str] = []
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = next((e.value for e in tensor.external_data if e.key == "location"), None)
            if location and location not in names:
                names.append(location)
    kinds = {}
    for value in model.graph.input:
        element = value.type.tensor_type.elem_type
        kinds[value.name] = f"tensor({np.dtype(onnx.helper.tensor_dtype_to_np_dtype(element)).name})"
    return names, kinds

"""The backends hfexport offers, as a registry: everything hfexport knows about a backend is here.

A backend is a `transformers.exporters` export format plus what hfexport adds around it: the
folder its files go to on the Hub, the card tags it adds, how the card shows loading it with the
runtime alone, the tolerance its validation is held to, and what hardware it needs. Adding one is
"write a config function and decorate it" — no other module changes:

    @register_backend("onnx", export_format="onnx", subfolder="onnx", tags=("onnx",),
                      packages=("onnxruntime",), snippet=onnx_snippet, snippet_tensors="np")
    def onnx(dynamic_shapes):
        return OnnxConfig(dynamic=True, dynamic_shapes=dynamic_shapes)

The config function receives the plan's `dynamic_shapes` (or `None` for a generation split, where
the exporter marks every axis dynamic itself) and returns a `transformers.exporters` config. It
runs in the export worker, which imports the module that registered the backend first, so a
backend registered outside hfexport works as long as its module is importable there.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import UnknownBackendError
from .layouts import onnx_layout
from .report import Split

# `snippet(path, inputs) -> lines of Python` running the file with the backend's runtime alone:
# `path` is an expression for its local path (an `hf_hub_download(...)` call); `inputs` the names
# of the inputs the program takes, in traced order, when the card has made them as `inputs`
# (tensors of `Backend.snippet_tensors`), else None (then: load it and show what it takes). Its
# import lines go to the top of the block (`card/snippets.py` renders the whole program).
Snippet = Callable[[str, "list[str] | None"], list[str]]

# Max abs diff allowed between eager and exported outputs, per dtype. XNNPACK and ONNX Runtime
# fuse and reorder float ops, so they get a looser bound than the torch program itself.
_TOLERANCE_EXACT = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
_TOLERANCE_FUSED = {"float32": 1e-3, "float16": 2e-2, "bfloat16": 1e-1}


@dataclass(frozen=True)
class Cost:
    """One backend's measured cost, linear in the bytes of the weights in the dtype it exports them
    in (`Weights.exported_bytes`): the peak memory of its worker (import and tracing overhead, then
    copies of the weights) exporting and validating, what building its variants adds on top, and
    the disk its output takes."""

    base_memory: float  # bytes
    memory_per_weight_byte: float
    disk_per_weight_byte: float
    variants_memory_per_weight_byte: float = 0.0

    def memory(self, weight_bytes: int, variants: bool = True) -> int:
        slope = self.memory_per_weight_byte + (self.variants_memory_per_weight_byte if variants else 0.0)
        return int(self.base_memory + slope * weight_bytes)

    def disk(self, weight_bytes: int) -> int:
        return int(self.disk_per_weight_byte * weight_bytes)


# Measured by bench/scale.py (docs/benchmarks-scale.md, one run on an idle machine, 2026-12-03):
# Llama-shaped models of SmolLM2-135M's, SmolLM2-360M's and Llama-3.2-1B's shapes, random weights
# stored in fp32, each backend alone with its default variants; peak RSS of the largest process
# (the worker; its peak when validation ended, before any variant, for the export alone) and the
# output folder's bytes. Each line rounded up so that every measured peak is under it. Peaks per
# fp32 weight byte measured: onnx 2.60x / 1.66x / 1.35x exporting and validating, 3.27x / 2.19x /
# 2.04x with the weight-only variants (each built and judged with what the last one freed handed
# back: 4.38x / 3.39x / 3.35x before); dynamo 2.29x / 1.59x / 1.55x; executorch 6.78x / 4.74x, and
# 3.53x at 1 B (where that run failed its validation after the peak). Output: onnx's is the fp32
# graph, w8 (29 %) and q4 (17 %) when both pass. A backend never measured is costed as
# `UNMEASURED`, the dearest of these.
ONNX_COST = Cost(
    base_memory=0.8e9, memory_per_weight_byte=1.2, disk_per_weight_byte=1.3, variants_memory_per_weight_byte=0.7
)
DYNAMO_COST = Cost(base_memory=0.6e9, memory_per_weight_byte=1.45, disk_per_weight_byte=1.05)
EXECUTORCH_COST = Cost(base_memory=1.7e9, memory_per_weight_byte=3.65, disk_per_weight_byte=1.25)
UNMEASURED = EXECUTORCH_COST


@dataclass(frozen=True)
class Backend:
    name: str
    export_format: str
    # Where its files go, in the output folder and in the Hub repo.
    subfolder: str
    make_config: Callable[[dict | None], Any]
    # The module that registered it: the export worker imports it to find the backend.
    module: str
    # Card metadata tags added when it publishes (format names: `onnx`, `executorch`, ...).
    tags: tuple[str, ...] = ()
    # What users call the format, in the PR's title ("ONNX", "ExecuTorch (XNNPACK)"); default: `name`.
    title: str = ""
    snippet: Snippet | None = None
    # What `snippet` is fed: "np" (numpy arrays) or "pt" (torch tensors).
    snippet_tensors: str = "pt"
    # Said on the card instead, when there is no runtime-alone snippet.
    snippet_note: str | None = None
    # A variant's file may run operators beyond the runtime's defaults (`VariantResult.runtime_ops`):
    # what the card says of it (`{file}`, `{ops}`), and the line a Python program loading it starts with.
    runtime_ops_note: str | None = None
    runtime_ops_import: str | None = None
    packages: tuple[str, ...] = ()
    needs_cuda: bool = False
    tolerance: dict[str, float] = field(default_factory=lambda: dict(_TOLERANCE_FUSED))
    # Offered only when its packages are installed (OpenVINO); others are always listed.
    optional: bool = False
    runner_device: str | None = None
    # Its files are what transformers.js runs in browsers: each is run on onnxruntime-web's wasm
    # backend too (`worker/web_check.py`), and the card says where it runs.
    runs_in_browsers: bool = False
    # The attention implementation a single graph (an encoder, a head) is exported and judged with;
    # None: the model's own.
    attention: str | None = None
    # The exporter's fusions into the runtime's own ops a decoder LLM's program is exported with
    # (`OnnxConfig.ort_fusions`: "cpu"); None: none. Its users' loaders all run ONNX Runtime.
    generation_fusions: str | None = None
    # `module:function` returning the runner options (`ExportedModel.from_pretrained`'s) a program is
    # opened with where its outputs are only checked, never timed; None: the runner's defaults.
    checking_options: str | None = None
    # `layout(out_dir, components, loaders) -> (Layout, {old file: new})`: rewrite the validated files
    # as the ecosystem's loaders read them (`hfexport.layouts`), in the worker, after validation;
    # `loaders`: how the loaders name the split's files (`ExportSplit.loaders`, a `layouts.LoadersNames`).
    layout: Callable[[Any, list[str], Any], tuple[Any, dict[str, str]]] | None = None
    # `limits(plan) -> reason | None`: a model this backend's pinned exporter cannot export, said
    # up front (the backend is reported skipped with the reason) instead of failing mid-lowering.
    limits: Callable[[Any], str | None] | None = None
    # Images at the traced size only, where the plan lets their size vary: ExecuTorch plans memory
    # for the largest shape a program accepts, and a program that takes up to 2048² images fails to
    # load (measured: SegFormer, error 0x21). Its validation then varies the batch alone.
    fixed_image_size: bool = False
    # transformers.js and optimum read this backend's folder (`subfolder="onnx"`, their default):
    # the card shows their blocks.
    ecosystem_loaders: bool = False
    # `module:function` that exports and judges a decoder LLM as the runtime's own LLM runner reads
    # it (`worker/llm_runner.py`), instead of the exporter's decode program with its cache passed in and out.
    llm_runner: str | None = None
    # The precisions its programs are exported in. A checkpoint stored in one of them is exported as
    # stored (a bfloat16 model is not doubled to float32); any other in `dtypes[0]`, and
    # `float32_because` says why (in the report and on the card).
    dtypes: tuple[str, ...] = ("float32",)
    float32_because: str | None = None
    # Its worker's peak memory and disk per weight byte, as bench/scale.py measured them; None: never
    # measured (preflight then assumes `UNMEASURED`, the dearest measured).
    cost: Cost | None = None

    def checking_runner_options(self) -> dict[str, Any]:
        """The runner options of a program opened only to check its outputs (`checking_options`,
        imported here: in the worker, never the parent)."""
        if self.checking_options is None:
            return {}
        module, _, function = self.checking_options.partition(":")
        options: dict[str, Any] = getattr(importlib.import_module(module), function)()
        return options

    def precision(self, stored: str) -> tuple[str, str | None]:
        """The dtype a checkpoint stored in `stored` is exported in by this backend, and why it is
        not `stored` (None where it is).

        Args:
            stored: the checkpoint's dtype (`ExportPlan.source_dtype`: "float32", "bfloat16"…).

        Returns:
            (dtype, reason or None).
        """
        if stored in self.dtypes:
            return stored, None
        return self.dtypes[0], self.float32_because or f"{self.name} exports in {self.dtypes[0]}"

    def unavailable_reason(self) -> str | None:
        """Why this backend cannot run on this machine, or `None` if it can."""
        missing = [p for p in self.packages if importlib.util.find_spec(p) is None]
        if missing:
            return f"package(s) not installed: {', '.join(missing)} (pip install {' '.join(missing)})"
        if self.needs_cuda:
            import torch

            if not torch.cuda.is_available():
                return "needs a CUDA GPU and none is visible (run it on a GPU runner)"
        return None

    def cannot_export(self, plan) -> str | None:
        """Why this backend cannot export `plan`'s model (known limits of its exporter), or None."""
        return self.limits(plan) if self.limits is not None else None


BACKENDS: dict[str, Backend] = {}


def register_backend(name: str, **options: Any) -> Callable:
    """Decorator: register `fn(dynamic_shapes) -> ExportConfig` as backend `name`."""

    def decorate(fn: Callable[[dict | None], Any]) -> Callable:
        BACKENDS[name] = Backend(name=name, make_config=fn, module=fn.__module__, **options)
        return fn

    return decorate


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise UnknownBackendError(
            f"Unknown backend {name!r}.",
            f"Use one of: {', '.join(offered_backends())} (--backends dynamo,onnx on the command line, "
            "backends=[...] in Python).",
        ) from None


def backends_help() -> str:
    """The backends as `--help` lists them, from the registry: "dynamo, onnx, … (openvino if installed)"."""
    always = [n for n, b in BACKENDS.items() if not b.optional]
    optional = [n for n, b in BACKENDS.items() if b.optional]
    return ", ".join(always) + (f" ({', '.join(optional)} if installed)" if optional else "")


def offered_backends() -> list[str]:
    """Backends a user may ask for here: every non-optional one, and optional ones whose packages are installed."""
    return [n for n, b in BACKENDS.items() if not b.optional or b.unavailable_reason() is None]


def default_backends(into: str | None = None) -> list[str]:
    """What a push makes when not told: into a repo named for one format (`me/model-ONNX`,
    `me/model-executorch`: a default backend's tag as the name's last part), that format alone —
    a user who named the repo so asked for nothing else; otherwise `DEFAULT_BACKENDS`."""
    if into is not None:
        last = into.rsplit("-", 1)[-1].lower()
        named = [name for name in DEFAULT_BACKENDS if last in get_backend(name).tags]
        if named:
            return named
    return list(DEFAULT_BACKENDS)


def parse_backends(spec: str | list[str] | None, into: str | None = None) -> list[str]:
    """`"dynamo,onnx"` or a list → validated, de-duplicated names in the given order; None: the
    defaults for the destination (`default_backends`)."""
    if spec is None:
        return default_backends(into)
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    names = [n.strip() for n in names if n.strip()]
    if not names:
        raise UnknownBackendError(
            "No backend was named.",
            f"Pass some of: {', '.join(offered_backends())} (--backends on the command line, backends= in Python).",
        )
    for n in names:
        get_backend(n)
    return list(dict.fromkeys(names))


def keyed_packages() -> tuple[str, ...]:
    """The packages whose version changes what some backend's export holds (each backend's
    `packages`; torch is pinned with hfexport): the export cache's key names their versions."""
    named = (p for b in BACKENDS.values() for p in b.packages)
    return tuple(sorted({p for p in named if p != "torch"}))


def export_folders() -> tuple[str, ...]:
    """The top-level repo folders backends write to: not part of the model (nor of its identity)."""
    return tuple(dict.fromkeys(b.subfolder.split("/")[0] for b in BACKENDS.values()))


# ── The built-in backends ────────────────────────────────────────────────────


def _onnx_snippet(path: str, inputs: list[str] | None) -> list[str]:
    lines = ["import onnxruntime as ort", f"session = ort.InferenceSession({path})"]
    if inputs is None:
        return [*lines, "print([(i.name, i.shape) for i in session.get_inputs()])"]
    return [
        *lines,
        "outputs = session.run(None, {i.name: inputs[i.name] for i in session.get_inputs()})",
        "print([output.shape for output in outputs])",
    ]


def _executorch_snippet(path: str, inputs: list[str] | None) -> list[str]:
    lines = ["from executorch.runtime import Runtime", f"program = Runtime.get().load_program({path})"]
    if inputs is None:
        return [*lines, "print(program.method_names)"]
    return [
        *lines,
        # The program's method takes its inputs positionally, in the order they were traced.
        f'outputs = program.load_method("forward").execute([inputs[name] for name in {inputs!r}])',
        "print([tuple(output.shape) for output in outputs])",
    ]


# ExecuTorch's Python runtime registers its quantized kernels (the int8 embedding lookup of an
# 8da4w program) only once `executorch.kernels.quantized` is imported; without it the method fails
# to load ("Missing operator: quantized_decomposed::embedding_byte.dtype_out").
_EXECUTORCH_QUANTIZED_KERNELS = {
    "runtime_ops_note": "`{file}` runs ExecuTorch's quantized kernels ({ops}): in Python, import "
    "`executorch.kernels.quantized` before loading it; an app links them (`quantized_ops_lib`).",
    "runtime_ops_import": "import executorch.kernels.quantized  # noqa: F401  (the quantized kernels it runs)",
}


def _sliding_window_limit(plan) -> str | None:
    if plan.sliding_window is None:
        return None
    # Measured with transformers 5.24: a sliding layer keeps its fill level as a Python int, which
    # the exporter writes into the program's input structure; the .pte runner matches that structure
    # exactly, so a program traced on one prompt length refuses every other. (The .pt2's runs: its
    # decode step is captured as traced and fed in its traced structure, `splits.conform`; a decoder
    # LLM's ExecuTorch program is the LLM runner's, below.)
    return (
        f"its cache has sliding-window layers (window {plan.sliding_window}), which this backend's pinned "
        "exporter cannot run past the traced length: export it with onnx"
    )


def _executorch_limits(plan) -> str | None:
    if plan.sliding_window is not None:
        return _sliding_window_limit(plan)
    return _executorch_input_limits(plan)


def _executorch_runner_limits(plan) -> str | None:
    # A decoder LLM goes to ExecuTorch's LLM runner layout (`worker/llm_runner.py`), whose static
    # cache takes sliding-window layers as full ones, the mask applying the window: measured on the
    # tiny Mistral and Gemma 2 (window 4, prompts of 10), eager generate()'s tokens.
    if plan.sliding_window is not None and plan.split == Split.DECODER:
        return _executorch_input_limits(plan)
    return _executorch_limits(plan)


def _executorch_input_limits(plan) -> str | None:
    if 1 in plan.dynamic_axes.get("input_values", {}):  # raw audio, its length dynamic
        # Measured with executorch 1.4.1: torch.export keeps the conv encoder's length guards as
        # runtime asserts that use `**`, which ExecuTorch's symbolic ops lack; tracing lengths as a
        # multiple of the strides instead lowers, but XNNPACK then fails to propagate the shapes.
        return (
            "raw audio with a dynamic length (input_values) does not lower to ExecuTorch with the pinned "
            "executorch: export it with dynamo or onnx"
        )
    return None


@register_backend(
    "dynamo",
    title="torch.export (.pt2)",
    export_format="dynamo",
    subfolder="dynamo",
    tags=("torch-export",),
    # torch.export.load alone cannot rebuild the program's outputs: they are transformers' classes,
    # which ExportedModel registers before loading.
    snippet_note="`.pt2` programs return transformers' output classes: load them with `ExportedModel` (above), "
    "which registers those classes first.",
    packages=("torch",),
    cost=DYNAMO_COST,
    tolerance=dict(_TOLERANCE_EXACT),
    # A `.pt2` runs in whatever dtype it was traced in, on any device torch has.
    dtypes=("float32", "bfloat16", "float16"),
)
def _dynamo(dynamic_shapes):
    from transformers.exporters import DynamoConfig

    return DynamoConfig(dynamic=True, dynamic_shapes=dynamic_shapes)


@register_backend(
    "onnx",
    title="ONNX",
    export_format="onnx",
    subfolder="onnx",
    tags=("onnx",),
    snippet=_onnx_snippet,
    snippet_tensors="np",
    packages=("onnx", "onnxscript", "onnxruntime"),
    cost=ONNX_COST,
    layout=onnx_layout,
    checking_options="hfexport.worker.validate:ort_checking_options",
    runs_in_browsers=True,
    # Attention written out: ONNX Runtime's fusions recognise it (its `Attention`, then `QAttention`),
    # so the fused and int8 files derive from this one graph instead of a second export; and the
    # graph runs faster than the SDPA lowering (MiniLM, paired rounds against optimum's model.onnx:
    # 1.014x against 0.996x at 1 thread, 1.010x against 1.006x at 2).
    attention="eager",
    # ONNX Runtime's rotary embeddings, skip norms and packed projections in an LLM's `model.onnx`:
    # onnxruntime-node (transformers.js), onnxruntime (optimum) and onnxruntime-web's wasm and WebGPU
    # providers run them; other ONNX runtimes do not (the card says so).
    generation_fusions="cpu",
    ecosystem_loaders=True,
    runtime_ops_note="`{file}` runs ONNX Runtime's own operators ({ops}): it loads in ONNX Runtime (Python, node, "
    "web), not in other ONNX runtimes.",
    # transformers.js (dtype "fp32", its default in node) and optimum read `model.onnx` as float32,
    # and ONNX Runtime's CPU kernels compute a float16 graph's ops in float32 through casts.
    float32_because="the loaders' default `model.onnx` is float32 (transformers.js, optimum; ONNX Runtime's CPU "
    "kernels run float16 ops through casts); the float16 file is the fp16 variant beside it",
)
def _onnx(dynamic_shapes):
    from transformers.exporters import OnnxConfig

    return OnnxConfig(dynamic=True, dynamic_shapes=dynamic_shapes)


@register_backend(
    "executorch",
    title="ExecuTorch (XNNPACK)",
    export_format="executorch",
    subfolder="executorch/xnnpack",
    tags=("executorch",),
    snippet=_executorch_snippet,
    packages=("executorch", "torchao"),
    cost=EXECUTORCH_COST,
    limits=_executorch_runner_limits,
    fixed_image_size=True,
    llm_runner="hfexport.worker.llm_runner:run",
    float32_because="hfexport's int8 and 8da4w recipes quantize a float32 program",
    **_EXECUTORCH_QUANTIZED_KERNELS,
)
def _executorch_xnnpack(dynamic_shapes):
    from transformers.exporters import ExecutorchConfig

    return ExecutorchConfig(dynamic=True, dynamic_shapes=dynamic_shapes, backend="xnnpack")


@register_backend(
    "executorch-cuda",
    title="ExecuTorch (CUDA)",
    export_format="executorch",
    subfolder="executorch/cuda",
    tags=("executorch",),
    snippet=_executorch_snippet,
    packages=("executorch",),
    # Measured on XNNPACK's lowering (no GPU in bench/scale.py's run): the same program, lowered by another partitioner.
    cost=EXECUTORCH_COST,
    limits=_executorch_limits,
    fixed_image_size=True,
    needs_cuda=True,
    # The CUDA partitioner casts to bfloat16 (AOTInductor kernels), whatever the source dtype.
    tolerance={"float32": 5e-2, "float16": 5e-2, "bfloat16": 1e-1},
    runner_device="cuda",
    float32_because="traced in float32; the CUDA partitioner casts the program to bfloat16 itself",
)
def _executorch_cuda(dynamic_shapes):
    from transformers.exporters import ExecutorchConfig

    return ExecutorchConfig(dynamic=True, dynamic_shapes=dynamic_shapes, backend="cuda")


@register_backend(
    "openvino",
    export_format="openvino",
    subfolder="openvino",
    tags=("openvino",),
    packages=("openvino",),
    optional=True,
)
def _openvino(dynamic_shapes):
    from transformers.exporters import OpenVINOConfig

    return OpenVINOConfig(dynamic=True, dynamic_shapes=dynamic_shapes)


@functools.cache  # read once a process: every plan asks, and the installed builder does not change under it
def builder_architectures() -> tuple[str, ...]:
    """The architectures ONNX Runtime GenAI's pinned model builder builds: the names its `create_model`
    compares `config.architectures[0]` with, read from its source (not imported: the builder imports
    torch and transformers, and the parent plans without them)."""
    import ast

    spec = importlib.util.find_spec("onnxruntime_genai")
    if spec is None or not spec.submodule_search_locations:
        return ()
    tree = ast.parse((Path(spec.submodule_search_locations[0]) / "models" / "builder.py").read_text())
    create = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "create_model")
    return tuple(
        dict.fromkeys(
            c.comparators[0].value
            for c in ast.walk(create)
            if isinstance(c, ast.Compare)
            and "architectures" in ast.unparse(c.left)
            and isinstance(c.comparators[0], ast.Constant)
            and isinstance(c.comparators[0].value, str)
        )
    )


# ONNX Runtime's `GroupQueryAttention`, which every builder graph attends with, takes head sizes that
# are multiples of 16 (measured: a head of 8 fails its first run, "head_size shall be a multiple of 16").
_GQA_HEAD_MULTIPLE = 16


def _ort_genai_limits(plan) -> str | None:
    if plan.split != Split.DECODER:
        return (
            "ONNX Runtime GenAI's model builder makes decoder LLMs (text generation with a cache) in this backend; "
            f"this export is {plan.task}: export it with onnx"
        )
    built = builder_architectures()
    if plan.architecture not in built:
        return (
            f"ONNX Runtime GenAI's model builder does not build {plan.architecture}: it builds "
            f"{', '.join(sorted(built))}. Export it with onnx"
        )
    head = plan.head_dim
    if head is not None and head % _GQA_HEAD_MULTIPLE:
        return (
            f"its attention heads are {head} wide, and ONNX Runtime's GroupQueryAttention (every builder graph's) "
            f"takes multiples of {_GQA_HEAD_MULTIPLE}: export it with onnx"
        )
    return None


@register_backend(
    "ort-genai",
    title="ONNX Runtime GenAI",
    # The builder writes ONNX graphs of ONNX Runtime's own operators.
    export_format="onnx",
    subfolder="onnxruntime",
    tags=("onnx", "onnxruntime-genai"),
    # The builder writes through onnx and onnx_ir (onnxscript's), and its folders run on onnxruntime.
    packages=("onnxruntime_genai", "onnxruntime", "onnx", "onnxscript"),
    limits=_ort_genai_limits,
    # Its builder, not transformers' exporter, writes every model it takes (`worker/ort_genai.py`).
    llm_runner="hfexport.worker.ort_genai:run",
    # Compared with eager by ONNX Runtime's fused kernels (GroupQueryAttention, SkipLayerNorm).
    tolerance=dict(_TOLERANCE_FUSED),
    float32_because="its fp32 folder is the one every quantized folder is judged against",
)
def _ort_genai(dynamic_shapes):
    """Never called: every model this backend takes goes through ONNX Runtime GenAI's builder."""
    raise NotImplementedError("ONNX Runtime GenAI's folders are written by its model builder")


DEFAULT_BACKENDS = ("dynamo", "onnx", "executorch")
DEFAULT_BACKEND_LIST = ",".join(DEFAULT_BACKENDS)  # as the CLI's options take them

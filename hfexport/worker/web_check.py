"""Stage "web runtimes": every published ONNX file set run on onnxruntime-web's wasm backend.

The runtime a transformers.js user's browser runs (`hfexport/web/wasm.py`), fed as transformers.js
feeds it: the same greedy loop and cache names as the loaders' ONNX Runtime check (`loaders_run`),
or one forward for a single graph. Each set is held to what it was already judged by: the float
programs to the backend's tolerance (and eager's tokens), a variant to its own floors. What that
says lands in the report (`WebRuntimes`) and the card's "runs on" cell.

A float program or a variant asked for by name that fails there stays published (it runs in ONNX
Runtime for CPU) and the card says so; a variant the push chose by default that fails there is
not published, since a default is what a browser user gets without asking.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ..proc import injected_web_refusal
from ..report import BackendResult, Check, Status, VariantKind, VariantResult, WebRuntimes
from ..settings import FAULT
from ..variants import misses
from ..web.runtimes import WebRuntimeMissing
from ..web.wasm import WasmRuntime, graph_facts
from ..web.webgpu import missing_on_webgpu, placement
from .memory import available_memory
from .validate import Reference, compare_forward, compare_generation, generation_quality, loaders_run, quality_figures

# The most a file set may weigh to be run on wasm: its session holds the weights in one 32-bit wasm
# memory (4 GiB at most, with ORT's own copies and arena). Measured with onnxruntime-web
# 1.31.0-dev under node, a graph in 2 GB chunks as `layouts.write_onnx` writes it: 2.4 GB of
# weights opened in 11 s; 3.0 GB and 3.6 GB failed to allocate (`std::bad_alloc`), as they would
# in a browser's wasm backend.
WASM_MAX_BYTES = int(2.5e9)
# What node holds meanwhile: the fetched chunks and the wasm memory, 2.9x the set's bytes in that
# run (6.95 GB). A set that would not fit in the memory free now is not run.
NODE_MEMORY_PER_BYTE = 3
# WebGPU's placement is read in a headless Chromium on a software adapter, which holds its own
# copy of every weight besides; past this, it is not read.
WEBGPU_MAX_BYTES = 2 * 10**9


def check_on_web(
    result: BackendResult,
    split: Any,
    reference: Reference,
    traced: dict[str, set[str]],
    other: dict,
    judged: Any,
    out_dir: Path,
    tolerance: float,
    defaults: set[VariantKind],
    variant_paths: Callable[[VariantResult], dict[str, Path] | None],
) -> None:
    """Fill `result.web` and each published variant's `web`; unpublish a default variant (`defaults`:
    their kinds) that fails on wasm and does not run whole on WebGPU either — one that runs there
    (a weight-only file, whose `GatherBlockQuantized` the webgpu bundle's wasm lacks) is WebGPU's file,
    offered to that device only (`card.snippets.device_files`). `tolerance`: what validation held the
    float programs to.
    `variant_paths(v)`: each component's file for a variant, as the loaders read them (None: it has
    none of its own).

    Never raises: a runtime that fails to start is each set's `wasm_note`.
    """

    paths = {c: out_dir / f for c, f in result.programs.items()}
    sets: list[tuple[VariantResult | None, dict[str, Path]]] = [(None, paths)]
    for published in result.variants:
        own = variant_paths(published) if published.ok else None
        if own:
            sets.append((published, {**paths, **own}))
    try:
        runtime = WasmRuntime()
    except (WebRuntimeMissing, OSError, RuntimeError) as e:
        for each, _ in sets:
            _record(result, each, WebRuntimes(wasm=None, wasm_note=f"not run: {e}"))
        _place_on_webgpu(result, sets)
        return
    try:
        for variant, files in sets:
            if runtime.process.poll() is not None:  # the last set ended it (out of wasm memory, say): a fresh one
                try:
                    runtime = WasmRuntime()
                except (WebRuntimeMissing, OSError, RuntimeError) as e:
                    _record(result, variant, WebRuntimes(wasm=None, wasm_note=f"not run: {e}"))
                    continue
            web = _judge(runtime, tolerance, result, split, reference, traced, other, judged, variant, files)
            _record(result, variant, web)
    finally:
        runtime.close()
    _place_on_webgpu(result, sets)
    for variant, _ in sets:
        ran = variant.web if variant is not None else None
        if variant is None or ran is None or ran.wasm is not False or ran.webgpu or variant.kind not in defaults:
            continue
        for file in variant.published_files:
            (out_dir / file).unlink(missing_ok=True)
        variant.status, variant.file, variant.files = Status.FAILED, None, []
        variant.error = (
            f"on onnxruntime-web (wasm), the browser's runtime: {ran.wasm_note}, and not on its WebGPU provider "
            "either (a default: not published)"
        )


def _place_on_webgpu(result: BackendResult, sets: list[tuple[VariantResult | None, dict[str, Path]]]) -> None:
    """Each set's graphs opened on onnxruntime-web's WebGPU provider (`web.webgpu`, one browser for
    all): a set runs there where every graph opens and none keeps a computing node on the CPU."""

    graphs = sorted({path for _, files in sets for path in files.values()})
    heavy = [g for g in graphs if _weight(g) > WEBGPU_MAX_BYTES]
    try:
        placed = dict(zip(graphs, placement([g for g in graphs if g not in heavy])))
    except (WebRuntimeMissing, OSError, RuntimeError, subprocess.SubprocessError) as e:
        for variant, _ in sets:
            web = result.web if variant is None else variant.web
            if web is not None:
                web.webgpu_note = f"not run: {e}"
        return
    for variant, files in sets:
        web = result.web if variant is None else variant.web
        if web is None:
            continue
        if any(path in heavy for path in files.values()):
            web.webgpu_note = f"not run: past the {WEBGPU_MAX_BYTES / 1e9:.0f} GB this check reads placement for"
            continue
        errors = [p.error for path in files.values() if (p := placed[path]).error]
        try:
            missing = [op for path in files.values() for op in missing_on_webgpu(path, placed[path])]
        except Exception as e:  # the graph's types could not be read back: no verdict
            web.webgpu_note = f"not run: {type(e).__name__}: {str(e).strip()[:200]}"
            continue
        web.webgpu = not errors and not missing
        web.webgpu_cpu = list(dict.fromkeys(missing))
        web.webgpu_note = errors[0] if errors else None


def _weight(graph: Path) -> int:
    """A graph's bytes with its external data's."""

    return sum(p.stat().st_size for p in [graph, *(graph.parent / n for n in graph_facts(graph)[0])] if p.exists())


def _record(result: BackendResult, variant: VariantResult | None, web: WebRuntimes) -> None:
    if variant is None:
        result.web = web
    else:
        variant.web = web


def _judge(
    runtime,
    tolerance: float,
    result: BackendResult,
    split,
    reference: Reference,
    traced: dict[str, set[str]],
    other: dict,
    judged,
    variant: VariantResult | None,
    files: dict[str, Path],
) -> WebRuntimes:

    weight = sum(_weight(f) for f in files.values())
    if weight > WASM_MAX_BYTES:
        return WebRuntimes(
            wasm=None,
            wasm_note=f"not run: {weight / 1e9:.1f} GB is past the {WASM_MAX_BYTES / 1e9:.1f} GB a 32-bit wasm "
            "memory loads",
        )
    free = available_memory()
    if free is not None and NODE_MEMORY_PER_BYTE * weight > free:
        return WebRuntimes(
            wasm=None,
            wasm_note=f"not run: it needs ~{NODE_MEMORY_PER_BYTE * weight / 1e9:.1f} GB of memory here, "
            f"{free / 1e9:.1f} GB is free",
        )
    sessions: list = []

    def open_session(path: Path):
        session = runtime.open(path)
        sessions.append(session)
        return session

    try:
        if variant is not None and injected_web_refusal(variant.kind):
            raise RuntimeError(f"onnxruntime-web (wasm): a refusal injected by the {FAULT} test hook")
        if split.generates:
            if not result.layout.for_loaders:
                return WebRuntimes(wasm=None, wasm_note="not run: its graphs are not laid out for transformers.js")
            run = loaders_run(files, reference.config, open_session)
            if variant is None:
                return _verdict(compare_generation("wasm", reference, split, run, traced, other), tolerance, runtime)
            figures = generation_quality(reference, split, run, traced, other, judged)
        else:
            (path,) = files.values()
            forward = _forward(open_session(path))
            if variant is None:
                return _verdict(compare_forward("wasm", reference, forward, other), tolerance, runtime)
            with torch.inference_mode():
                figures = quality_figures(split.plan.task, reference.forward(other), forward(**other), other)
    except Exception as e:  # the runtime refused the file or a feed: exactly what this stage is for
        # The runtime's own refusals (`RuntimeError`) already say "onnxruntime-web (wasm): …".
        said = str(e).strip()[:300] if isinstance(e, RuntimeError) else f"{type(e).__name__}: {str(e).strip()[:300]}"
        if runtime.process.poll() is not None:  # node itself ended (killed for memory, say): no verdict on the file
            return WebRuntimes(wasm=None, wasm_note=f"not run: {said}", version=runtime.version)
        return WebRuntimes(wasm=False, wasm_note=said, version=runtime.version)
    finally:
        for session in sessions:
            try:
                session.close()
            except RuntimeError:
                pass
    missed = misses(figures, variant.thresholds)
    note = ", ".join(missed) if missed else None
    return WebRuntimes(wasm=not missed, wasm_note=note, figures=figures, version=runtime.version)


def _forward(session) -> Callable[..., dict[str, torch.Tensor]]:
    """A single graph's forward on `session`, fed as transformers.js feeds it: the inputs the graph
    takes, each in the type it declares (a float16 graph's pixels in float16)."""
    import numpy as np

    kinds = {i.name: i.type for i in session.get_inputs()}

    def forward(**inputs) -> dict[str, torch.Tensor]:
        feed = {}
        for name, kind in kinds.items():
            value = inputs[name].numpy()
            if kind == "tensor(float16)":
                value = value.astype(np.float16)
            feed[name] = value
        got = session.run(None, feed)
        return {name: torch.from_numpy(value) for name, value in zip(session.output_names, got)}

    return forward


def _verdict(check: Check, tolerance: float, runtime) -> WebRuntimes:
    """A float program's check on wasm held to the backend's tolerance, as validation held it."""
    problem = check.error or check.over(tolerance)
    if problem is None and check.tokens_equal is False:
        problem = f"tokens differ from eager's: {check.exported_tokens} against {check.eager_tokens}"
    figures = {"max_abs_diff": check.worst()}
    if check.tokens_equal is not None:
        figures["tokens_equal"] = float(check.tokens_equal)
    return WebRuntimes(wasm=problem is None, wasm_note=problem, figures=figures, version=runtime.version)

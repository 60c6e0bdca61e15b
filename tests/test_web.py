"""hfexport/web: onnxruntime-web's wasm backend driven from Python, as the worker's web check drives it.

Real graphs (built with onnx's helpers, their weights in an external data file as the exporter
writes them) through the real package under node; the scenarios that run whole exports through
it are in test_card_snippets.py (an encoder and its int8 file) and test_loaders_llm.py (a trained
decoder LLM and its weight-only files)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tiny_models

import hfexport
from hfexport import settings
from hfexport.report import WebRuntimes
from hfexport.web import runtimes, wasm

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not (wasm.SERVER.parent / "node_modules").exists(),
    reason="onnxruntime-web is installed by `make test` (npm ci --prefix hfexport/web)",
)


def _graph(folder, weight: np.ndarray, name: str = "model.onnx"):
    """y = x @ weight + 1, float32, its weight in `<name>.data` beside it (as torch.onnx writes)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "one"], ["y"])]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", weight.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", weight.shape[1]])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.ones(1, np.float32), "one")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = folder / name
    onnx.save(model, path, save_as_external_data=True, location=f"{name}.data", size_threshold=0)
    return path


def test_a_graph_with_external_data_runs_on_wasm_as_in_onnx_runtime(tmp_path):
    """The graph and its external data handed over as bytes, as a browser fetches them; the answer
    is ONNX Runtime for CPU's to float32 rounding, and the session reads its inputs' types."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    path = _graph(tmp_path, rng.standard_normal((16, 8)).astype(np.float32))
    assert wasm.graph_facts(path) == (["model.onnx.data"], {"x": "tensor(float32)"})
    x = rng.standard_normal((3, 16)).astype(np.float32)
    with wasm.WasmRuntime() as runtime:
        assert runtime.version == runtimes.version()
        session = runtime.open(path)
        assert [i.type for i in session.get_inputs()] == ["tensor(float32)"]
        (got,) = session.run(None, {"x": x})
    (expected,) = ort.InferenceSession(str(path)).run(None, {"x": x})
    assert got.shape == (3, 8) and np.abs(got - expected).max() < 1e-5


def test_a_refused_feed_is_an_error_naming_it_and_the_runtime_goes_on(tmp_path):
    """A feed of the wrong shape: onnxruntime-web's own message, raised here; the same node process
    then answers the next call (the worker checks every file in one)."""
    path = _graph(tmp_path, np.ones((4, 2), np.float32))
    with wasm.WasmRuntime() as runtime:
        session = runtime.open(path)
        with pytest.raises(RuntimeError, match="onnxruntime-web \\(wasm\\)"):
            session.run(None, {"x": np.ones((1, 5), np.float32)})
        (got,) = session.run(None, {"x": np.ones((1, 4), np.float32)})
        assert got.tolist() == [[5.0, 5.0]]


def test_a_folder_named_without_onnxruntime_web_is_said_and_the_check_not_run(tmp_path, monkeypatch):
    monkeypatch.setenv("HFEXPORT_ONNXRUNTIME_WEB", str(tmp_path / "nowhere"))
    with pytest.raises(
        runtimes.WebRuntimeMissing, match="onnxruntime-web is not installed where HFEXPORT_ONNXRUNTIME_WEB points"
    ):
        wasm.WasmRuntime()
    assert runtimes.version() is None


def _pip_installed(tmp_path) -> Path:
    """hfexport laid out as `pip install` lays it out: the package and its web pins, no node_modules."""
    site = tmp_path / "site-packages"
    package = Path(hfexport.__file__).parent
    shutil.copytree(package, site / "hfexport", ignore=shutil.ignore_patterns("node_modules", "__pycache__"))
    return site


def test_without_npm_a_pip_install_says_why_the_browser_checks_do_not_run_in_words_of_no_path(tmp_path, monkeypatch):
    """Node alone on PATH (no npm), nothing installed: nothing is fetched, the run is told why, and
    the reason the card prints names no folder of this machine."""
    only_node = tmp_path / "bin"
    only_node.mkdir()
    (only_node / "node").symlink_to(shutil.which("node"))
    monkeypatch.setenv("PATH", str(only_node))
    monkeypatch.setenv("HFEXPORT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HFEXPORT_WEB_CHECKS", "1")
    monkeypatch.setattr(settings, "WEB_PINS", _pip_installed(tmp_path) / "hfexport" / "web")
    said: list[str] = []
    runtimes.ensure(said.append)
    (line,) = said
    assert "npm, which installs it, is not" in line and "not run (install Node.js)" in line, said
    with pytest.raises(runtimes.WebRuntimeMissing) as missing:
        runtimes.locate()
    assert (
        str(missing.value)
        == f"onnxruntime-web {runtimes.pinned_version()} is not installed, and npm, which installs it, is not"
    )
    assert not (tmp_path / "cache" / "web").exists() or not any((tmp_path / "cache" / "web").iterdir())


def test_a_pip_install_gets_the_browser_runtimes_on_its_first_onnx_export_and_checks_its_files_on_them(tmp_path):
    """hfexport without node_modules (a `pip install`) exporting a tiny BERT to ONNX, as a user runs
    it: the run says it installs the pinned onnxruntime-web and playwright-core into the user's
    cache, once, and the file is then run on wasm and placed on WebGPU from there (playwright-core
    imported by path, beside onnxruntime-web). A second export installs nothing."""
    site = _pip_installed(tmp_path)
    model = tiny_models.bert(tmp_path / "model")
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        "HFEXPORT_CACHE": str(tmp_path / "cache"),
        "HFEXPORT_WEB_CHECKS": "1",
        "COLUMNS": "200",
        # npm from its cache alone (`make test`'s own `npm ci` of the same pins filled it): no network.
        "npm_config_offline": "true",
    }
    env.pop("HFEXPORT_ONNXRUNTIME_WEB", None)
    runs = []
    for out in ("first", "second"):
        args = ["export", str(model), "--backends", "onnx", "--variants", "none", "--out", str(tmp_path / out)]
        done = subprocess.run(
            [sys.executable, "-m", "hfexport", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        (b,) = json.loads((tmp_path / out / "hfexport-report.json").read_text())["backends"]
        assert b["web"]["wasm"] is True and b["web"]["webgpu"] is True, b["web"]
        runs.append(done.stderr)
    (folder,) = (tmp_path / "cache" / "web").iterdir()  # one folder per pins, no `.partial` left behind
    assert (folder / "node_modules" / "onnxruntime-web" / "dist" / runtimes.BUNDLE).is_file()
    assert (folder / "node_modules" / "playwright-core").is_dir()
    assert (
        f"installing onnxruntime-web {runtimes.pinned_version()}" in runs[0]
        and "browser runtimes: installed" in runs[0]
    )
    assert "browser runtimes" not in runs[1], runs[1]


def test_the_cards_cell_says_where_a_file_runs():
    assert WebRuntimes(wasm=True, webgpu=True).cell() == "ORT CPU ✓ · wasm ✓ · WebGPU ✓"
    refused = WebRuntimes(wasm=False, wasm_note="cosine_mean 0.41 < 0.99", webgpu=False, webgpu_cpu=["QAttention"])
    assert refused.cell() == "ORT CPU ✓ · wasm ✗ (cosine_mean 0.41 < 0.99) · WebGPU ✗ (QAttention)"
    missing = WebRuntimes(wasm=None, wasm_note="not run: node is not installed", webgpu_note="not run: no Chromium")
    assert missing.cell() == "ORT CPU ✓ · wasm not checked · WebGPU not checked"


def test_webgpu_places_an_int8_encoders_quantized_attention_on_the_cpu(tmp_path):
    """Where onnxruntime-web's WebGPU provider puts each node, read in headless Chromium: a float
    graph's computing nodes all on the GPU; an int8 encoder's dynamically quantized MatMul and ORT's
    QAttention kept on the CPU (no kernel), its int64 index arithmetic left out of the answer."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from hfexport.web import webgpu

    try:
        webgpu.chromium()
    except runtimes.WebRuntimeMissing as e:
        pytest.skip(str(e))
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((16, 8)).astype(np.float32)
    plain = _graph(tmp_path, weight)
    nodes = [
        helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "scale", "zero"], name="quantize"),
        helper.make_node("MatMulInteger", ["q", "w", "zero", "w_zero"], ["acc"], name="matmul"),
        helper.make_node("Cast", ["acc"], ["acc_f"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("Mul", ["acc_f", "scale"], ["y"], name="scale"),
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),  # int64 index arithmetic
    ]
    graph = helper.make_graph(
        nodes,
        "int8",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [
            numpy_helper.from_array(rng.integers(-127, 127, (16, 8)).astype(np.int8), "w"),
            numpy_helper.from_array(np.array(0, np.int8), "w_zero"),
        ],
    )
    quantized = tmp_path / "model_quantized.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), quantized)
    placed = webgpu.placement([plain, quantized])
    assert all(p.error is None for p in placed), placed
    assert webgpu.missing_on_webgpu(plain, placed[0]) == [] and placed[0].nodes_on_webgpu == 2, placed[0]
    missing = webgpu.missing_on_webgpu(quantized, placed[1])
    assert "MatMulInteger" in missing and "Shape" not in missing, placed[1]


def test_a_default_variant_the_browsers_runtime_refuses_is_left_out_and_a_named_one_keeps_its_cross(tmp_path):
    """The real MiniLM with its default int8 and a named fp16, the browser's runtime made to refuse
    both (the test hook: no file of ours fails there on its own). The fp32 graph passes there; the
    int8 file, chosen by default, is not published and says why; the fp16 file, asked for by name,
    stays — it runs in ONNX Runtime for CPU — and the card's cell says where it does not."""
    import json

    import tiny_models
    from conftest import run_cli

    from hfexport.card.section import render_section
    from hfexport.report import Report

    out = tmp_path / "out"
    result = run_cli(
        "export", str(tiny_models.minilm_folder()), "--backends", "onnx", "--variants", "default,fp16",
        "--out", str(out), env={"HFEXPORT_FAULT": "web:int8,web:fp16", "HFEXPORT_WEB_CHECKS": "1"}, timeout=900,
    )  # fmt: skip
    report = Report.from_dict(json.loads((out / "hfexport-report.json").read_text()))
    (onnx,) = report.backends
    assert result.returncode == 0 and onnx.web is not None and onnx.web.wasm is True, (result.stderr[-2000:], onnx.web)
    variants = {v.kind: v for v in onnx.variants}
    int8, fp16 = variants["int8"], variants["fp16"]
    assert int8.status == "failed" and int8.file is None and "a default: not published" in (int8.error or ""), int8
    assert not (out / "onnx" / "model_quantized.onnx").exists()
    assert fp16.ok and fp16.web is not None and fp16.web.wasm is False and (out / "onnx" / "model_fp16.onnx").exists()
    card = render_section("o/minilm", report)
    (row,) = [line for line in card.splitlines() if line.startswith("| onnx | fp16 |")]
    assert "| ORT CPU ✓ · wasm ✗ (onnxruntime-web (wasm): a refusal injected by" in row, row
    assert "| onnx | int8 |" not in card  # the card lists what is published


def test_a_runtime_killed_mid_check_says_it_ended_not_that_the_file_failed(tmp_path):
    """node killed under a check (the out-of-memory killer's pick, say): the call raises that the
    runtime ended, and the process is seen gone — which the web check reports as "not run", never
    as the file's failure (a default variant is unpublished only for a real refusal)."""
    import signal

    path = _graph(tmp_path, np.ones((4, 2), np.float32))
    with wasm.WasmRuntime() as runtime:
        session = runtime.open(path)
        runtime.process.send_signal(signal.SIGKILL)
        with pytest.raises(RuntimeError, match="onnxruntime-web \\(node\\) ended"):
            session.run(None, {"x": np.ones((1, 4), np.float32)})
        assert runtime.process.poll() is not None

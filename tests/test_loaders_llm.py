"""Decoder LLMs in the runtimes their users deploy with: sliding-window attention with past in ONNX
Runtime, hybrid caches in transformers.js, the weight-only ONNX variants of a trained model in
transformers.js and optimum — each from the Hub, as eager writes. ExecuTorch's LLM runner and
optimum-executorch on the `.pte`: `test_loaders_executorch_llm.py`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import tiny_models
from card_runs import (
    WEB,
    card_blocks,
    device_options,
    eager_continuation,
    eager_text,
    node_script,
    plumbing_only,
    push_with_bot,
    record,
    run_every_block,
    run_js,
    run_loader,
    run_python,
    webgpu_script,
)


@pytest.mark.parametrize("family", ["mistral", "gemma2"])
def test_a_sliding_window_llm_is_published_as_a_decoder_with_past_and_generates_as_eager(hub, family, tmp_path):
    """Mistral (every layer sliding) and Gemma 2 (sliding and full in turn), window 4, pushed with
    ONNX and its int8 variant (its floors lifted: random weights): the folder is `model.onnx` with
    keys and values only (the window is the graph's mask; a sliding layer's fill level, which the
    graph only handed back, is gone).
    Every block of the card runs on the PR and merged; transformers.js's text-generation pipeline
    writes eager `generate()`'s text with the fp32 graph, and loads the int8 one with `dtype: 'q8'`.
    optimum's ORTModelForCausalLM generates eager's ids wherever the card says it loads the folder
    (and the card names it nowhere it does not)."""
    from transformers import AutoTokenizer

    folder = getattr(tiny_models, f"{family}_with_tokenizer")(tmp_path / "model")
    repo = f"sliding-{family}/tiny"
    api, outcome = push_with_bot(hub, f"sliding-{family}", repo, folder, "onnx", "onnx:int8", *plumbing_only("int8"))
    (onnx,) = outcome["report"]["backends"]
    assert onnx["layout"] == "decoder-with-past" and onnx["programs"] == {"decode": "model.onnx"}, onnx
    assert any(c["name"] == "loaders_layout" and c["tokens_equal"] for c in onnx["validation"]["checks"])
    ran = run_every_block(api, repo, outcome["pr_num"], tmp_path, r"\(1, \d+, 128\)|'input_ids'", r"\S")
    js_output = ran.js
    text = "hfexport validated this file against the original model."
    ids = eager_continuation(folder, text)
    assert len(set(ids)) >= 3 and len(AutoTokenizer.from_pretrained(folder)(text)["input_ids"]) > 4, ids
    eager = f"{text} {AutoTokenizer.from_pretrained(folder).decode(ids, skip_special_tokens=True)}"
    assert js_output and set(js_output.values()) == {eager}, (js_output, eager)
    record(outcome, "transformers.js `text-generation`", "eager's text")
    card = Path(api.hf_hub_download(repo, "README.md")).read_text()
    (js,) = card_blocks(card, "js")
    q8 = run_js(js.replace('dtype: "fp32"', 'dtype: "q8"'), tmp_path / "js-q8")
    assert q8.returncode == 0 and q8.stdout.strip(), (q8.stdout, q8.stderr[-2000:])
    assert {p.name for p in (tmp_path / "js-q8" / "cache").rglob("*.onnx")} == {"model_quantized.onnx"}
    record(outcome, "transformers.js `text-generation` (`dtype: 'q8'`)", "loads the int8 graph, generates")
    prompt = json.dumps(AutoTokenizer.from_pretrained(folder)(text)["input_ids"])
    named = "`ORTModelForCausalLM.from_pretrained(repo)` load this folder" in card
    assert named == bool(ran.optimum)  # its block is on the card where the card names it
    if named:
        assert set(ran.optimum.values()) == {eager_text(folder, text)}, ran.optimum
        assert run_loader(tmp_path / "optimum", "optimum-causal-lm", repo, "main", prompt, "8") == ids
        record(outcome, "optimum `ORTModelForCausalLM`", "eager's text")
    else:
        failed = run_loader(tmp_path / "optimum", "optimum-causal-lm", repo, "main", prompt, "8", check=False)
        assert failed.returncode != 0, "optimum loads this folder: the card should name it"
        why = re.findall(r"Got invalid dimensions for input: \S+", failed.stderr) or failed.stderr.splitlines()[-1:]
        record(outcome, "optimum `ORTModelForCausalLM`", f"fails (not on the card): {why[0]}")


@pytest.mark.parametrize("family", ["lfm2", "qwen3-next"])
def test_a_hybrid_cache_llm_is_published_as_transformers_js_reads_it_and_generates_as_eager(hub, family, tmp_path):
    """LFM2 (a short conv, then attention) and Qwen3-Next (linear attention's conv and recurrent
    states, then attention), pushed with ONNX: `model.onnx` takes its states as transformers.js names
    them (`past_conv.N`, `past_recurrent.N`, beside `past_key_values.N.key`), judged again under those
    names in ONNX Runtime, and transformers.js's text-generation pipeline — which builds the first
    step's zero states from the graph's own input shapes — writes eager `generate()`'s text."""
    folder = tiny_models.hybrid_with_tokenizer(tmp_path / "model", family)
    repo = f"hybrid-{family}/tiny"
    api, outcome = push_with_bot(hub, f"hybrid-{family}", repo, folder, "onnx", "none")
    (onnx,) = outcome["report"]["backends"]
    assert onnx["layout"] == "decoder-with-past" and onnx["programs"] == {"decode": "model.onnx"}, onnx
    assert any(c["name"] == "loaders_layout" and c["tokens_equal"] for c in onnx["validation"]["checks"])
    card = Path(api.hf_hub_download(repo, "README.md", revision=f"refs/pr/{outcome['pr_num']}")).read_text()
    (js,) = card_blocks(card, "js")
    ran = run_js(js.replace('"main"]; //', f'"refs/pr/{outcome["pr_num"]}"]; //', 1), tmp_path / "js")
    assert ran.returncode == 0, ran.stderr[-3000:]
    text = "hfexport validated this file against the original model."
    ids = eager_continuation(folder, text)
    assert len(set(ids)) >= 3, ids  # varied tokens: a text that a wrong state would change
    from transformers import AutoTokenizer

    eager = f"{text} {AutoTokenizer.from_pretrained(folder).decode(ids, skip_special_tokens=True)}"
    assert ran.stdout.strip() == eager, (ran.stdout[-2000:], eager)
    record(outcome, "transformers.js `text-generation`", "eager's text")


def test_a_trained_llms_default_push_publishes_weight_only_files_its_loaders_run(hub, tmp_path):
    """A trained decoder LLM (`trained_lm.py`: real, peaked distributions), pushed with the default
    variants and q4f16: the PR carries the weight-only files — `model_w8.onnx` (8-bit blocks, its
    tied embedding table and head stored once), `model_q4.onnx`, `model_q4f16.onnx` — each judged on
    teacher-forced top-1 as eager too, and none of dynamic int8 (not a default for generation: on
    this model it misses its thresholds). transformers.js's `text-generation` pipeline loads the q4
    and q4f16 files by `dtype` and generates; optimum's `ORTModelForCausalLM` loads the w8 file by
    the `file_name` the card gives and writes eager's text."""
    import trained_lm

    folder = trained_lm.trained_llama(tmp_path / "model")
    repo = "trained-owner/tiny-trained"
    # A 1 M-parameter model decodes at the runtime's dispatch speed whatever its weights (w8 0.97x fp32,
    # q4 0.97x): the decode-speed floor is lifted here, the loaders are what this proves (the floor's own
    # scenario is test_variants', the speed on a real model bench/llm_peers.py's).
    lifted = ("--min-quality", "w8.decode_speedup=0", "--min-quality", "q4.decode_speedup=0")
    api, outcome = push_with_bot(hub, "trained-owner", repo, folder, "onnx", "default,q4f16", *lifted)
    (b,) = outcome["report"]["backends"]
    variants = {v["kind"]: v for v in b["variants"]}
    assert list(variants) == ["w8", "q4", "q4f16"], variants
    for kind, v in variants.items():
        assert v["status"] == "ok" and v["file"] == f"model_{kind}.onnx", v
        # The tied table: one lookup; beside the fusions the fp32 graph was exported with (its head's
        # `FusedMatMul` now a `MatMulNBits`).
        quantized = {"GatherBlockQuantized", "MatMulNBits"}
        assert quantized <= set(v["runtime_ops"]) <= quantized | set(b["runtime_ops"]), (v, b["runtime_ops"])
        judged = {"token_agreement", "forced_top1_agreement", "logprob_delta_mean", "kld_mean", "kld_se"}
        assert judged | {"forced_tokens"} <= set(v["quality"]), v["quality"]
        assert v["settings"] and v["settings"].startswith("8-bit" if kind == "w8" else "4-bit"), v
    w8, q4 = variants["w8"], variants["q4"]
    assert w8["quality"]["forced_top1_agreement"] >= 0.98 and w8["quality"]["logprob_delta_mean"] <= 0.05, w8
    # Issue 39's goals (w8 <= 30 %, q4 <= 22 % of fp32): on this 1 M-parameter model w8's asymmetric blocks
    # measured 29.9 %, q4's 4-bit blocks ~21 %; teacher-forced on 200 prose tokens w8 0.990 / 0.011, q4
    # 0.93 / 0.1 (whichever settings held: `settings` in the report).
    assert w8["size_share"] <= 0.30 and q4["size_share"] <= 0.22, (q4, w8)
    assert q4["quality"]["forced_top1_agreement"] >= 0.85, q4
    pr = f"refs/pr/{outcome['pr_num']}"
    files = set(api.list_repo_files(repo, revision=pr))
    assert {f"onnx/model_{k}.onnx" for k in variants} <= files and "onnx/model_quantized.onnx" not in files

    card = Path(api.hf_hub_download(repo, "README.md", revision=pr)).read_text()
    text = "hfexport validated this file against the original model."
    (js,) = card_blocks(card, "js")
    for dtype in ("q4", "q4f16"):
        assert f"`onnx/model_{dtype}.onnx` ({dtype}) — transformers.js: `dtype: '{dtype}'`" in card
        on_pr = js.replace('"main"]; //', f'"{pr}"]; //', 1).replace('dtype: "fp32"', f'dtype: "{dtype}"')
        ran = run_js(on_pr, tmp_path / f"js-{dtype}")
        written = ran.stdout.strip()
        assert ran.returncode == 0 and written.startswith(text) and len(written) > len(text), ran.stderr[-2000:]
        record(outcome, f"transformers.js `text-generation` (`dtype: '{dtype}'`)", "generates")
    # The browser's runtime, the bundle transformers.js imports there (`onnxruntime-web/webgpu`): hfexport
    # ran the fp32 graph and every variant on its wasm provider, fed as transformers.js feeds it. The fp32
    # graph runs there; the weight-only files do not — that build has no `GatherBlockQuantized`, their
    # table's lookup — and the card says so, and offers them to no wasm device.
    assert b["web"]["wasm"] is True and b["web"]["figures"]["tokens_equal"] == 1.0, b["web"]
    for v in variants.values():
        assert v["web"]["wasm"] is False and "GatherBlockQuantized" in v["web"]["wasm_note"], v["web"]
    # On WebGPU (its placement in headless Chromium): every computing node of the fp32 graph and of
    # the weight-only files on the GPU — MatMulNBits and GatherBlockQuantized have kernels there.
    assert b["web"]["webgpu"] is True and all(v["web"]["webgpu"] is True for v in variants.values()), variants
    rows = [line for line in card.splitlines() if line.startswith("| onnx |")]
    assert len(rows) == 4 and rows[0].endswith("| ORT CPU ✓ · wasm ✓ · WebGPU ✓ |"), rows
    assert all("wasm ✗ (" in row and row.endswith("· WebGPU ✓ |") for row in rows[1:]), rows
    offered = {"cpu": {"dtype": "fp32"}, "wasm": {"dtype": "fp32"}, "webgpu": {"dtype": "q4"}}
    assert device_options(js) == offered, js
    # And it is true of transformers.js on that runtime (tests/js/runtime.mjs): from the fp32 graph the
    # text it writes on onnxruntime-node (eager's tokens, above).
    args = (hub.url, repo, pr, "text-generation", "fp32", text, "8")
    eager_written = node_script("generate.mjs", tmp_path / "node-fp32", *args)
    written = node_script("generate.mjs", tmp_path / "web-fp32", *args, runtime=WEB)
    assert written == eager_written, (written, eager_written)
    record(outcome, "transformers.js on onnxruntime-web (wasm) `text-generation` (`dtype: 'fp32'`)", "eager's text")
    # And in the browser itself, each device's file as the card's block picks it: transformers.js's
    # browser bundle in headless Chromium (SwiftShader), greedy — the fp32 graph on wasm writes eager's
    # text, the 4-bit file on WebGPU a continuation.
    given = json.dumps(text)
    for device, options in device_options(js).items():
        if device == "cpu":
            continue
        home = tmp_path / f"browser-{device}"
        written = webgpu_script(api, repo, pr, home, "text-generation", {**options, "device": device}, given, "8")
        assert written.startswith(text) and len(written) > len(text), (device, written)
        assert options["dtype"] != "fp32" or written == eager_written, (device, written, eager_written)
        record(outcome, f"transformers.js in Chromium, `device: '{device}'` (`{options}`)", "generates")
    call = 'ORTModelForCausalLM.from_pretrained(repo, file_name="model_w8.onnx")'
    by_name = "transformers.js: `dtype: 'fp32', model_file_name: 'model_w8'`"
    assert f"`onnx/model_w8.onnx` (w8) — {by_name}; optimum: `{call}`" in card
    # The graphs are fused for ONNX Runtime (rotary embeddings, skip norms): the card says where they load.
    assert {"RotaryEmbedding", "SkipSimplifiedLayerNormalization"} <= set(b["runtime_ops"]), b["runtime_ops"]
    for file, ops in (("model.onnx", b["runtime_ops"]), ("model_w8.onnx", variants["w8"]["runtime_ops"])):
        assert f"`onnx/{file}` runs ONNX Runtime's own operators ({', '.join(ops)})" in card, (file, ops)
    (optimum,) = [block for block in card_blocks(card) if "ORTModelForCausalLM" in block]
    w8_block = optimum.replace('"main"  #', f'"{pr}"  #', 1).replace(
        "from_pretrained(repo, revision=revision)",
        'from_pretrained(repo, file_name="model_w8.onnx", revision=revision)',
    )
    ran = run_python(w8_block, tmp_path / "optimum-w8" / "hf-home")
    assert ran.returncode == 0 and ran.stdout.strip() == eager_text(folder, text), (ran.stdout, ran.stderr[-2000:])
    record(outcome, 'optimum `ORTModelForCausalLM` (`file_name="model_w8.onnx"`)', "eager's text")

"""A model past protobuf's 2 GiB: published as `model.onnx` + its weights in files of at most 2 GB
(`model.onnx_data`, `model.onnx_data_1`: what transformers.js fetches in a browser) and read so by
ONNX Runtime alone, optimum and transformers.js from the local Hub (tests/card_runs.py runs them).

In the slow lane (`make test-slow`): 166 s on one of CI's two workers (2.35 GB written, uploaded,
exported and downloaded by three loaders) is not a tiny model's test."""

from __future__ import annotations

import pytest
import tiny_models
from card_runs import eager_continuation, push_with_bot, run_every_block

pytestmark = pytest.mark.slow


def test_a_graph_past_2_gb_is_published_as_onnx_data_that_its_loaders_read(hub, tmp_path):
    """A Llama of 587 M random parameters (2.35 GB in fp32, past protobuf's 2 GiB), uploaded in
    three safetensors shards and pushed to ONNX (both uploads through LFS): the worker's peak stays within 2.5x its fp32
    weights (its eager model is gone before ONNX Runtime loads the graph); the PR carries the graph
    as transformers.js names one past 2 GB — `model.onnx` (the graph alone) and its weights in
    `model.onnx_data` and `model.onnx_data_1`, none over 2 GB (a browser's fetch, its typed arrays
    and Node's `readFile` stop at 2 GiB) — and, merged, every block of the card runs as printed: ONNX
    Runtime alone and optimum's `ORTModelForCausalLM` (both chunks downloaded beside the graph) and
    transformers.js's pipeline (told `use_external_data_format: { "model.onnx": 2 }`) each writing
    eager's text."""
    from transformers import AutoTokenizer

    folder = tiny_models.large_llama_with_tokenizer(tmp_path / "model")
    assert len(list(folder.glob("model-*-of-00003.safetensors"))) == 3
    weights = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    repo = "large-owner/llama-past-2gb"
    api, outcome = push_with_bot(hub, "large-owner", repo, folder, "onnx", "none", lfs=True)
    (b,) = outcome["report"]["backends"]
    assert b["status"] == "ok" and b["layout"] == "decoder-with-past", b["error"]
    sizes = {f["path"]: f["size"] for f in b["files"]}
    chunks = [sizes["model.onnx_data"], sizes["model.onnx_data_1"]]
    assert sum(chunks) > 2**31 and max(chunks) <= 2 * 10**9 and sizes["model.onnx"] < 2**20, sizes
    # Issue 26's goal: measured 3.12 GB at peak here (1.33x), 7.7 GB (5.3x) on a 362 M model before.
    assert b["peak_rss_mb"] * 2**20 <= 2.5 * weights, (b["peak_rss_mb"], b["stage_peaks_mb"], weights)
    # The browser's runtime: onnxruntime-web's wasm backend, handed both chunks as a browser fetches
    # them, generates eager's tokens from them (its 32-bit memory holds 2.4 GB of weights).
    assert b["web"]["wasm"] is True and b["web"]["figures"]["tokens_equal"] == 1.0, b["web"]
    pr_files = set(api.list_repo_files(repo, revision=f"refs/pr/{outcome['pr_num']}"))
    assert {"onnx/model.onnx", "onnx/model.onnx_data", "onnx/model.onnx_data_1"} <= pr_files, pr_files

    ran = run_every_block(api, repo, outcome["pr_num"], tmp_path, r"next token: ", r"\S", on_pr=False)
    downloads = ('"onnx/model.onnx_data"', '"onnx/model.onnx_data_1"')
    assert any(all(d in block for d in downloads) for block in ran.blocks), ran.blocks  # ONNX Runtime alone
    assert all(downloads[1] in block for block in ran.blocks if "optimum" in block), ran.blocks
    assert all('use_external_data_format: { "model.onnx": 2 }' in block for block in ran.js_blocks), ran.js_blocks
    text = "hfexport validated this file against the original model."
    tokenizer, new = AutoTokenizer.from_pretrained(folder), eager_continuation(folder, text)
    continuation = tokenizer.decode(new, skip_special_tokens=True)
    assert set(ran.js.values()) == {f"{text} {continuation}"}, ran.js
    eager_text = tokenizer.decode(tokenizer(text)["input_ids"] + new, skip_special_tokens=True)  # as `eager_text`
    assert set(ran.optimum.values()) == {eager_text}, ran.optimum

"""The card's "How to load" code runs as printed, and the ecosystem's own loaders read the files.

A real push of MiniLM (dynamo, onnx, executorch, and the default ONNX variants: int8 and the
weight-only 8-bit file WebGPU runs) and of a tiny decoder
LLM with its tokenizer to the local Hub; then every block of the card it wrote — each one a whole
program, Python or JavaScript (transformers.js from npm) — runs in a process of its own, with a
fresh cache and no token: against the pull request (the one line the card says to change) and,
after the owner merges, exactly as printed. transformers.js must match eager embeddings and
generate eager's text; sentence-transformers and optimum, in a venv of their own (tests/loaders),
read the same PRs and must match eager too. (The other families' cards: tests/test_loaders_*.py.)
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from itertools import product
from pathlib import Path

import pytest
import tiny_models
from card_runs import (
    JS,
    TEXTS,
    WEB,
    card_blocks,
    device_options,
    eager_continuation,
    eager_text,
    node_script,
    push_with_bot,
    record,
    run_every_block,
    run_js,
    run_loader,
    webgpu_script,
)
from conftest import run_cli

REPO = "snippets-owner/minilm"


@pytest.fixture(scope="module")
def pushed(hub):
    from huggingface_hub import HfApi

    owner, bot = hub.add_user("snippets-owner"), hub.add_user("snippets-bot")
    api = HfApi(endpoint=hub.url, token=owner)
    api.create_repo(REPO)
    api.upload_folder(repo_id=REPO, folder_path=tiny_models.minilm_folder())
    result = run_cli(
        "push",
        REPO,
        "--backends",
        "dynamo,onnx,executorch",
        "--variants",
        "default",
        "--json",
        env={"HF_TOKEN": bot, "HFEXPORT_WEB_CHECKS": "1"},
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout)
    assert outcome["action"] == "opened", outcome
    # The real all-MiniLM-L6-v2, every backend validated; the readable table on stderr, one row each,
    # and none of the libraries' known-harmless noise.
    report = outcome["report"]
    assert report["plan"]["architecture"] == "BertModel" and len(report["source"]["sha"]) == 40
    assert [(b["backend"], b["status"]) for b in report["backends"]] == [
        ("dynamo", "ok"),
        ("onnx", "ok"),
        ("executorch", "ok"),
    ]
    assert all(name in result.stderr for name in ("dynamo", "onnx", "executorch", "max abs diff"))
    assert "Failed to load" not in result.stderr and "register_constant()" not in result.stderr
    # int8 of the encoder's fused graph: its attention quantized whole (ORT's QAttention), the one
    # most outlier-prone projection kept in float at its first attempt, within 30 % of the fp32 bytes.
    int8, w8 = report["backends"][1]["variants"]
    assert int8["status"] == "ok" and "QAttention" in int8["runtime_ops"] and len(int8["kept_in_float"]) == 1, int8
    assert int8["size_share"] <= 0.30 and int8["quality"]["cosine_mean"] >= 0.99, int8
    # The weight-only 8-bit file: MatMulNBits (WebGPU has kernels for it), nearer eager than int8.
    assert w8["kind"] == "w8" and w8["status"] == "ok" and "MatMulNBits" in w8["runtime_ops"], w8
    assert w8["size_share"] <= 0.32 and w8["quality"]["cosine_mean"] >= 0.999, w8
    return api, outcome


def _eager(texts: list[str]):
    import torch
    from transformers import AutoModel, AutoTokenizer

    folder = tiny_models.minilm_folder()
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)


@pytest.mark.skipif(
    shutil.which("node") is None or not (JS / "node_modules").exists(),
    reason="transformers.js is installed by `make test` (npm ci in tests/js)",
)
def test_transformers_js_loads_the_pr_from_the_hub_and_matches_eager(pushed, hub, tmp_path):
    """transformers.js fetches `onnx/model.onnx` alone (fp32), `onnx/model_quantized.onnx` (q8) or
    `onnx/model_w8.onnx` (by `model_file_name`) from the PR's revision, as from any Hub repo, on
    onnxruntime-node and on the browser's runtime (the wasm provider of `onnxruntime-web/webgpu`, the
    bundle transformers.js imports there): fp32 embeddings match eager to cosine >= 0.9999, w8's to
    0.995, q8's to 0.98 — which is what the card's "runs on" cells say of the files, from hfexport's
    own wasm run; that wasm build has no `GatherBlockQuantized` (w8's table lookup), and the card says
    w8 does not run there. The card's block names the file each device takes: fp32 in Node, q8 on
    wasm, and on WebGPU, which runs none of int8's quantized attention, the weight-only file — which
    transformers.js then runs on WebGPU as eager."""
    import torch

    api, outcome = pushed
    revision = f"refs/pr/{outcome['pr_num']}"
    eager = _eager(TEXTS)
    w8_file = {"dtype": "fp32", "model_file_name": "model_w8"}
    files = (("fp32", "fp32", 0.9999), ("q8", "q8", 0.98), ("model_w8", json.dumps(w8_file), 0.995))
    for runtime, (name, dtype, floor) in product((None, WEB), files):
        if runtime == WEB and name == "model_w8":
            continue  # not offered on wasm: the card says why (below)
        got = torch.tensor(
            node_script(
                "embed.mjs",
                tmp_path / f"{name}-{runtime}",
                hub.url,
                REPO,
                revision,
                dtype,
                json.dumps(TEXTS),
                runtime=runtime,
            )
        )
        cosine = torch.nn.functional.cosine_similarity(got, eager, dim=-1)
        print(f"transformers.js {name} on {runtime or 'onnxruntime-node'}: cosine to eager {cosine.tolist()}")
        assert got.shape == eager.shape and float(cosine.min()) >= floor, (name, runtime, cosine)
        on = " on onnxruntime-web (wasm)" if runtime else ""
        picked = f"model_file_name: '{name}'" if name.startswith("model_") else f"dtype: '{name}'"
        loader = f"transformers.js{on} `feature-extraction` (`{picked}`)"
        record(pushed[1], loader, "1 − cosine to eager", 1 - float(cosine.min()))
    # hfexport's own run of the files on wasm, as the card says it.
    onnx = next(b for b in outcome["report"]["backends"] if b["backend"] == "onnx")
    int8, w8 = onnx["variants"]
    assert all(f["web"]["wasm"] is True for f in (onnx, int8)), (onnx["web"], int8["web"])
    assert w8["web"]["wasm"] is False and "GatherBlockQuantized" in w8["web"]["wasm_note"], w8["web"]
    assert int8["web"]["figures"]["cosine_mean"] >= 0.99, int8["web"]
    # On WebGPU (its placement in headless Chromium): the float graph and the weight-only one whole on
    # the GPU; the int8 one's quantized attention and dynamically quantized MatMuls have no kernel there.
    assert onnx["web"]["webgpu"] is True and w8["web"]["webgpu"] is True, (onnx["web"], w8["web"])
    assert int8["web"]["webgpu"] is False, int8["web"]
    assert {"QAttention", "DynamicQuantizeLinear"} <= set(int8["web"]["webgpu_cpu"]), int8["web"]
    card = Path(api.hf_hub_download(REPO, "README.md", revision=revision)).read_text()
    fp32_row, int8_row, w8_row = [line for line in card.splitlines() if line.startswith("| onnx |")]
    assert fp32_row.endswith("| ORT CPU ✓ · wasm ✓ · WebGPU ✓ |"), fp32_row
    assert "| ORT CPU ✓ · wasm ✗ (" in w8_row and w8_row.endswith("· WebGPU ✓ |"), w8_row
    assert int8_row.endswith(f"| ORT CPU ✓ · wasm ✓ · WebGPU ✗ ({', '.join(int8['web']['webgpu_cpu'])}) |"), int8_row
    assert "wasm is onnxruntime-web 1.31.0" in card and "WebGPU is where its WebGPU provider" in card
    # The card's block: each device's file, as hfexport ran it there.
    (js,) = card_blocks(card, "js")
    assert device_options(js) == {"cpu": {"dtype": "fp32"}, "wasm": {"dtype": "q8"}, "webgpu": w8_file}, js
    # And on WebGPU itself: transformers.js's browser bundle in headless Chromium (SwiftShader), the
    # PR's files with `device: 'webgpu'`: eager's embeddings from each, the int8 file's CPU nodes too.
    for name, options, floor in (("fp32", {"dtype": "fp32"}, 0.9999), ("q8", {"dtype": "q8"}, 0.98)):
        given = json.dumps(TEXTS)
        got = torch.tensor(
            webgpu_script(api, REPO, revision, tmp_path / f"webgpu-{name}", "feature-extraction", options, given)
        )
        cosine = torch.nn.functional.cosine_similarity(got, eager, dim=-1)
        print(f"transformers.js {name} on WebGPU (SwiftShader): cosine to eager {cosine.tolist()}")
        assert got.shape == eager.shape and float(cosine.min()) >= floor, (name, cosine)
    got = torch.tensor(
        webgpu_script(
            api, REPO, revision, tmp_path / "webgpu-card", "feature-extraction", device_options(js)["webgpu"], given
        )
    )
    cosine = torch.nn.functional.cosine_similarity(got, eager, dim=-1)
    print(f"transformers.js, the card's WebGPU file, on WebGPU (SwiftShader): cosine to eager {cosine.tolist()}")
    assert got.shape == eager.shape and float(cosine.min()) >= 0.995, cosine
    record(
        pushed[1],
        "transformers.js on WebGPU `feature-extraction` (the card's `model_w8`)",
        "1 − cosine to eager",
        1 - float(cosine.min()),
    )


def test_every_card_snippet_runs_after_the_merge_as_printed(pushed, tmp_path):
    """Every block of the card — ExportedModel and the runtime alone for each backend, the variant —
    runs in a fresh cache with no token and prints the shapes of a real call on the two sentences
    it tokenizes, merged, exactly as printed (the other cards' blocks also run from their PRs)."""
    api, outcome = pushed
    ran = run_every_block(api, REPO, outcome["pr_num"], tmp_path, r"\(2, \d+", r"\[ 2, 384 \]", on_pr=False)
    blocks, js_output = ran.blocks, ran.js
    # sentence-transformers' block, as printed (in its own venv): the repo's pooling and
    # normalization, one embedding a sentence, whose similarity is eager's pooled embeddings'.
    (index,) = [i for i, b in enumerate(blocks) if 'SentenceTransformer(repo, backend="onnx"' in b]
    printed = ran.python[("merged", index)]
    assert "(2, 384)" in printed, printed
    similarity = float(re.findall(r"-?\d+\.\d+", printed.split("(2, 384)", 1)[1])[1])
    eager = _eager(["hfexport validated this file against the original model.", "Short one."])
    assert abs(similarity - float(eager[0] @ eager[1])) < 1e-3, (printed, eager[0] @ eager[1])

    files = {"onnx/model.onnx", "onnx/model_quantized.onnx", "executorch/xnnpack/model.pte"}
    assert all(any(f'"{f}"' in b for b in blocks) for f in files), blocks
    assert sum("ExportedModel.from_pretrained" in b for b in blocks) == 3
    assert len(js_output) == 1  # transformers.js's feature-extraction pipeline, merged
    card = Path(api.hf_hub_download(REPO, "README.md")).read_text()
    assert "`onnx/model_quantized.onnx` runs ONNX Runtime's own operators (BiasGelu, QAttention, " in card
    # transformers.js pools as the repo does (the pipeline's options); the variant by ST's file_name.
    assert 'pooling: "mean", normalize: true' in card
    assert 'SentenceTransformer(repo, backend="onnx", model_kwargs={"file_name": "onnx/model_quantized.onnx"})' in card


LLM_REPO = "snippets-owner/tiny-llm"


@pytest.fixture(scope="module")
def pushed_llm(hub, tmp_path_factory):
    """A decoder LLM with its tokenizer, pushed with every CPU backend and the fp16 ONNX variant.
    Returns the API, the outcome and the model's folder."""
    folder = tiny_models.llama_with_tokenizer(tmp_path_factory.mktemp("model-llama-tokenizer"))
    api, outcome = push_with_bot(hub, "snippets-owner", LLM_REPO, folder, "dynamo,onnx,executorch", "onnx:fp16")
    return api, outcome, folder


def test_a_generative_models_card_snippets_run_a_real_prompt(pushed_llm, tmp_path):
    """A decoder LLM's card: the ExportedModel blocks (`.pt2`, `.pte`) run the one decode program on
    a tokenized prompt and print the logits' shape and the next token; its ONNX folder, laid out as
    a decoder with past, runs one step in ONNX Runtime alone (the fp32 graph and the fp16 variant)
    and generates in transformers.js's pipeline the text eager `generate()` writes, with the fp32
    graph and with `dtype: 'fp16'`. PR first, then merged."""
    from transformers import AutoTokenizer

    api, outcome, folder = pushed_llm
    repo = LLM_REPO
    onnx = next(b for b in outcome["report"]["backends"] if b["backend"] == "onnx")
    assert onnx["layout"] == "decoder-with-past" and onnx["programs"] == {"decode": "model.onnx"}
    assert any(c["name"] == "loaders_layout" and c["tokens_equal"] for c in onnx["validation"]["checks"])
    ran = run_every_block(
        api, repo, outcome["pr_num"], tmp_path, r"\(1, \d+, 128\) next token: |'input_ids'|forward", r"\S"
    )
    blocks, js_output = ran.blocks, ran.js
    # ExportedModel for the .pt2; the ONNX folder is optimum's and transformers.js's layout, the
    # ExecuTorch one its LLM runner's (a word-level tokenizer, which that runner cannot read: said).
    assert sum('model.runners["decode"]' in b for b in blocks) == 1
    assert any('"onnx/model.onnx"' in b for b in blocks) and any(
        "executorch/xnnpack/fp32/model.pte" in b for b in blocks
    )
    card = Path(api.hf_hub_download(repo, "README.md")).read_text()
    assert "Not run in the runner here: ExecuTorch's LLM runner cannot read the repo's tokenizer.json" in card
    # transformers.js's text-generation pipeline, greedy: the text eager generate() writes.
    text = "hfexport validated this file against the original model."
    continuation = AutoTokenizer.from_pretrained(folder).decode(
        eager_continuation(folder, text), skip_special_tokens=True
    )
    eager = f"{text} {continuation}"  # the pipeline keeps the prompt as given
    assert set(js_output.values()) == {eager}, (js_output, eager)
    record(outcome, "transformers.js `text-generation`", "eager's text")
    # optimum's ORTModelForCausalLM, as the card prints it: the prompt and eager's continuation;
    # optimum-executorch's ExecuTorchModelForCausalLM (a venv of its own) eager's continuation.
    by_loader = {"ORTModelForCausalLM": set(), "ExecuTorchModelForCausalLM": set()}
    for (_, index), printed in ran.optimum.items():
        by_loader[next(c for c in by_loader if c in blocks[index])].add(printed)
    assert by_loader["ORTModelForCausalLM"] == {eager_text(folder, text)}, ran.optimum
    assert by_loader["ExecuTorchModelForCausalLM"] == {continuation}, (ran.optimum, continuation)
    assert len(ran.optimum) == 4, ran.optimum  # each on the PR and merged
    record(outcome, "optimum `ORTModelForCausalLM`", "eager's text")
    # The card lists the fp16 variant with the dtype that picks it; so picked, transformers.js
    # loads `model_fp16.onnx` (a float16 cache) and writes the same text.
    (js,) = card_blocks(card, "js")
    assert "`onnx/model_fp16.onnx` (fp16) — transformers.js: `dtype: 'fp16'`" in card
    ran = run_js(js.replace('dtype: "fp32"', 'dtype: "fp16"'), tmp_path / "js-fp16")
    assert ran.returncode == 0 and ran.stdout.strip() == eager, (ran.stdout, ran.stderr[-2000:])
    record(outcome, "transformers.js `text-generation` (`dtype: 'fp16'`)", "eager's text")


@pytest.mark.parametrize("family", ["llama", "vit"])
def test_a_bfloat16_checkpoint_keeps_its_precision_where_the_runtime_serves_it_and_its_card_says_so(
    hub, family, tmp_path
):
    """A checkpoint stored in bfloat16 (an LLM with its tokenizer, an image classifier with its
    processor): its `.pt2` is bfloat16, at the checkpoint's size rather than float32's double, and
    validated in it, and the card says so. Every block of the card runs as printed (the `.pt2` fed
    bfloat16 pixels, or an empty bfloat16 cache). (ONNX stays float32, an unchanged export: the
    card's note for it is in test_card.)"""
    make = {"llama": tiny_models.llama_with_tokenizer, "vit": tiny_models.vit_with_processor}[family]
    folder = tiny_models.stored_as(make(tmp_path / "model"), "bfloat16")
    stored = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    repo = f"bf16-owner/tiny-{family}"
    api, outcome = push_with_bot(hub, "bf16-owner", repo, folder, "dynamo", "none")
    report = outcome["report"]
    assert report["plan"]["source_dtype"] == "bfloat16"
    by_name = {b["backend"]: b for b in report["backends"]}
    dynamo = by_name["dynamo"]
    assert dynamo["status"] == "ok" and dynamo["dtype"] == "bfloat16" and dynamo["dtype_note"] is None
    # The weights the `.pt2` archive holds (its `data/weights/` entries): the stored bytes, not twice them.
    (program,) = [f["path"] for f in dynamo["files"] if f["path"].endswith(".pt2")]
    pt2 = api.hf_hub_download(repo, f"dynamo/{program}", revision=f"refs/pr/{outcome['pr_num']}")
    with zipfile.ZipFile(pt2) as archive:
        weights = sum(i.file_size for i in archive.infolist() if re.search(r"/data/weights/weight_\d+$", i.filename))
    assert 0.9 * stored < weights <= stored, (weights, stored)
    card = Path(api.hf_hub_download(repo, "README.md", revision=f"refs/pr/{outcome['pr_num']}")).read_text()
    assert "The checkpoint is stored in bfloat16: `dynamo/` keeps it, at its size." in card
    printed = r"\(1, \d+, 128\) next token: |'input_ids'" if family == "llama" else r"\(1, 5\)"
    ran = run_every_block(api, repo, outcome["pr_num"], tmp_path, printed, r"\S", on_pr=False)
    assert any("torch.bfloat16" in b for b in ran.blocks), ran.blocks


def test_the_ecosystems_python_loaders_read_the_prs(pushed, pushed_llm, tmp_path):
    """sentence-transformers' ONNX backend reads MiniLM's PR — `onnx/model.onnx` by default, the int8
    variant by its file name — and matches eager (cosine >= 0.9999 fp32, >= 0.98 int8); optimum's
    ORTModelForCausalLM finds the decoder LLM's `onnx/model.onnx` by itself and generates, greedy,
    the tokens eager `generate()` does. Each in a venv of its own (their pins are not ours)."""
    import torch
    from transformers import AutoTokenizer

    _, outcome = pushed
    eager = _eager(TEXTS)
    for file, floor in (("model.onnx", 0.9999), ("model_quantized.onnx", 0.98)):
        got = torch.tensor(
            run_loader(
                tmp_path / f"st-{file}",
                "sentence-transformers",
                REPO,
                f"refs/pr/{outcome['pr_num']}",
                file,
                json.dumps(TEXTS),
            )
        )
        cosine = torch.nn.functional.cosine_similarity(got, eager, dim=-1)
        print(f"sentence-transformers onnx/{file}: cosine to eager {[round(float(c), 6) for c in cosine]}")
        assert got.shape == eager.shape and float(cosine.min()) >= floor, (file, cosine)
        record(outcome, f"sentence-transformers (`onnx/{file}`)", "1 − cosine to eager", 1 - float(cosine.min()))

    _, llm, folder = pushed_llm
    text = "hfexport validated this file against the original model."
    ids = AutoTokenizer.from_pretrained(folder)(text)["input_ids"]
    got = run_loader(
        tmp_path / "optimum", "optimum-causal-lm", LLM_REPO, f"refs/pr/{llm['pr_num']}", json.dumps(ids), "8"
    )
    assert got == eager_continuation(folder, text), got
    record(llm, "optimum `ORTModelForCausalLM` (token ids in)", "eager's token ids")

"""The card's "How to load" code runs as printed, and the ecosystem's own loaders read the files.

A real push of MiniLM (dynamo, onnx, executorch, and the int8 ONNX variant) to the local Hub; then
every Python block of the card it wrote — each one a whole program — runs in a process of its own,
with a fresh cache and no token: against the pull request (the one line the card says to change)
and, after the owner merges, exactly as printed. transformers.js, from npm, loads the PR's ONNX
files as it loads any Hub repo's and must match eager embeddings.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tiny_models
from conftest import run_cli
from hfexport.hub.card import END, START

REPO = "snippets-owner/minilm"
JS = Path(__file__).parent / "js"
TEXTS = ["hfexport validated this file against the original model.", "Short one.", "A third sentence, somewhat longer than the others."]


@pytest.fixture(scope="module")
def pushed(hub):
    from huggingface_hub import HfApi

    owner, bot = hub.add_user("snippets-owner"), hub.add_user("snippets-bot")
    api = HfApi(endpoint=hub.url, token=owner)
    api.create_repo(REPO)
    api.upload_folder(repo_id=REPO, folder_path=tiny_models.minilm_folder())
    result = run_cli("push", REPO, "--backends", "dynamo,onnx,executorch", "--variants", "onnx:int8", "--json",
                     env={"HF_TOKEN": bot}, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout)
    assert outcome["action"] == "opened", outcome
    # The real all-MiniLM-L6-v2, every backend validated; the readable table on stderr, one row each,
    # and none of the libraries' known-harmless noise.
    report = outcome["report"]
    assert report["plan"]["architecture"] == "BertModel" and len(report["source"]["sha"]) == 40
    assert [(b["backend"], b["status"]) for b in report["backends"]] == [("dynamo", "ok"), ("onnx", "ok"), ("executorch", "ok")]
    assert all(name in result.stderr for name in ("dynamo", "onnx", "executorch", "max abs diff"))
    assert "Failed to load" not in result.stderr and "register_constant()" not in result.stderr
    return api, outcome


def _blocks(card: str) -> list[str]:
    section = card.split(START, 1)[1].split(END, 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def _run_python(code: str, home: Path) -> subprocess.CompletedProcess:
    """`code` as a user runs it: its own process, a fresh HF_HOME, no token, this Hub."""
    home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HFEXPORT_"))}
    env.update(HF_ENDPOINT=os.environ["HF_ENDPOINT"], HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env,
                          cwd=home.parent)


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


@pytest.mark.skipif(shutil.which("node") is None or not (JS / "node_modules").exists(),
                    reason="transformers.js is installed by `make test` (npm ci in tests/js)")
def test_transformers_js_loads_the_pr_from_the_hub_and_matches_eager(pushed, hub, tmp_path):
    """transformers.js fetches `onnx/model.onnx` alone (fp32) or `onnx/model_quantized.onnx` (q8) from
    the PR's revision, as from any Hub repo: fp32 embeddings match eager to cosine >= 0.9999, q8's to 0.98."""
    import torch

    _, outcome = pushed
    revision = f"refs/pr/{outcome['pr_num']}"
    eager = _eager(TEXTS)
    for dtype, floor in (("fp32", 0.9999), ("q8", 0.98)):
        run = subprocess.run(
            ["node", str(JS / "embed.mjs"), hub.url, REPO, revision, dtype, json.dumps(TEXTS)],
            capture_output=True, text=True, timeout=300, env={**os.environ, "TRANSFORMERS_JS_CACHE": str(tmp_path / dtype)},
        )
        assert run.returncode == 0, run.stderr[-3000:]
        got = torch.tensor(json.loads(run.stdout.strip().splitlines()[-1]))
        cosine = torch.nn.functional.cosine_similarity(got, eager, dim=-1)
        print(f"transformers.js {dtype}: cosine to eager {[round(float(c), 6) for c in cosine]}")
        assert got.shape == eager.shape and float(cosine.min()) >= floor, (dtype, cosine)


def _run_every_block(api, repo: str, num: int, tmp_path: Path, printed: str) -> list[str]:
    """Every Python block of the PR's card, run against the PR (with the revision the card says to
    set), then, once merged, exactly as printed. Each must exit 0 and print `printed` (a regex)."""
    card = Path(api.hf_hub_download(repo, "README.md", revision=f"refs/pr/{num}")).read_text()
    blocks = _blocks(card)
    assert all('"main"  # to try the pull request before it is merged: "refs/pr/<number>"' in b for b in blocks)

    def run_all(label: str, edit) -> None:
        for index, block in enumerate(blocks):
            ran = _run_python(edit(block), tmp_path / f"{label}-{index}" / "hf-home")
            assert ran.returncode == 0, f"{label} block {index}:\n{block}\n{ran.stderr[-3000:]}"
            assert re.search(printed, ran.stdout), (block, ran.stdout)

    run_all("pr", lambda block: block.replace('"main"  #', f'"refs/pr/{num}"  #', 1))
    api.merge_pull_request(repo, num)
    run_all("merged", lambda block: block)
    return blocks


def test_every_card_snippet_runs_on_the_pr_and_after_the_merge(pushed, tmp_path):
    """Every block of the card — ExportedModel and the runtime alone for each backend, the variant —
    runs in a fresh cache with no token and prints the shapes of a real call on the two sentences
    it tokenizes; first against the PR, then, merged, exactly as printed."""
    api, outcome = pushed
    blocks = _run_every_block(api, REPO, outcome["pr_num"], tmp_path, r"\(2, \d+")
    files = {"onnx/model.onnx", "onnx/model_quantized.onnx", "executorch/xnnpack/model.pte"}
    assert all(any(f'"{f}"' in b for b in blocks) for f in files), blocks
    assert sum("ExportedModel.from_pretrained" in b for b in blocks) == 3


def test_a_generative_models_card_snippets_run_a_real_prompt(hub, workspace, tmp_path):
    """A decoder LLM with its tokenizer, pushed with every CPU backend: each ExportedModel block runs
    the one decode program on a tokenized prompt and prints the logits' shape and the next token;
    the runtime-alone blocks load the ONNX graph and the `.pte`. PR first, then merged."""
    from huggingface_hub import HfApi

    repo = "snippets-owner/tiny-llm"
    owner, bot = hub.add_user("snippets-owner"), hub.add_user("snippets-bot")
    api = HfApi(endpoint=hub.url, token=owner)
    api.create_repo(repo)
    api.upload_folder(repo_id=repo, folder_path=tiny_models.llama_with_tokenizer(workspace / "model-llama-tokenizer"))
    result = run_cli("push", repo, "--backends", "dynamo,onnx,executorch", "--variants", "none", "--json",
                     env={"HF_TOKEN": bot}, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout)
    blocks = _run_every_block(api, repo, outcome["pr_num"], tmp_path, r"\(1, \d+, 128\) next token: |'input_ids'|forward")
    assert sum('model.runners["decode"]' in b for b in blocks) == 3
    assert any('"onnx/decode.onnx"' in b for b in blocks) and any('"executorch/xnnpack/decode.pte"' in b for b in blocks)

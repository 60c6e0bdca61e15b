"""ONNX Runtime GenAI's folders (`--backends ort-genai`): built by its pinned model builder in the
worker, judged through `onnxruntime_genai`'s own Generator, published as onnx-community lays them out
(`onnxruntime/cpu_and_mobile/<target>/`) with a card block that runs as printed from the Hub. Tiny
models with 16-wide heads (ONNX Runtime's GroupQueryAttention takes no narrower); quality on a
trained model is bench/llm_peers.py's (docs/benchmarks-llm-peers.md)."""

from __future__ import annotations

import json
from pathlib import Path

import families
import pytest
from card_runs import card_blocks, eager_continuation, plumbing_only, push_with_bot, record, run_every_block, run_python
from conftest import run_cli

# (config class, model class, sizes): 64 wide in 4 heads of 16, over the byte-level tokenizer the
# builder copies into each folder (`families._llm(runner=True)`).
BUILT = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16}),
    # max_position_embeddings equal to the original: Phi-3 mini 4k's short rotary embeddings.
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"original_max_position_embeddings": 128}),
    "gemma3-text": ("Gemma3TextConfig", "Gemma3ForCausalLM", {"head_dim": 16, "sliding_window": 4}),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {}),
}
BASE = "onnxruntime/cpu_and_mobile/cpu-fp32"


def _build(name: str, folder: Path) -> Path:
    config, model, sizes = BUILT[name]
    return families._llm(config, model, runner=True, hidden_size=64, **sizes)(folder)


def _export(folder: Path, out: Path) -> dict:
    result = run_cli("export", str(folder), "--backends", "ort-genai", "--variants", "none", "--out", str(out))
    report = json.loads((out / "hfexport-report.json").read_text())
    (backend,) = report["backends"]
    return {"returncode": result.returncode, "stderr": result.stderr, "report": report, **backend}


# Qwen 3's through a push `--into` a derived repo (below), Qwen 2's through a PR.
@pytest.mark.parametrize("family", ["phi3"])
def test_a_family_the_builder_supports_is_built_and_writes_eagers_ids_in_its_generator(family, tmp_path):
    """A tiny Phi-3 through `hfexport export --backends ort-genai`: the builder's fp32 folder
    (`model.onnx` + `.data`, `genai_config.json`, the tokenizer) gives eager's logits through the
    Generator on prompts of other lengths, and the Generator's own greedy search writes eager's 32 ids."""
    b = _export(_build(family, tmp_path / "model"), tmp_path / "out")
    assert b["returncode"] == 0 and b["status"] == "ok" and b["layout"] == "onnxruntime-genai", b.get("error")
    checks = {c["name"]: c for c in b["validation"]["checks"]}
    assert checks["generation_other_shape"]["tokens_equal"] is True, checks
    assert checks["generation_other_shape"]["max_abs_diff"]["logits"] < 1e-4, checks
    generator = checks["onnxruntime_genai"]
    assert generator["tokens_equal"] is True and len(generator["exported_tokens"][0]) == 32, generator
    files = {f["path"] for f in b["files"]}
    wanted = {"model.onnx", "model.onnx.data", "genai_config.json", "tokenizer.json"}
    assert {f"cpu_and_mobile/cpu-fp32/{name}" for name in wanted} <= files, files
    assert b["versions"]["onnxruntime_genai"] == "0.18.0", b["versions"]
    loader, diff = "ONNX Runtime GenAI `og.Generator` (`cpu-fp32/`)", checks["generation_other_shape"]["max_abs_diff"]
    record(b, loader, "eager's 32 greedy tokens; logits max abs diff", diff["logits"])


def test_a_family_the_builder_lacks_is_skipped_with_its_list_and_one_it_breaks_on_with_the_cause(tmp_path):
    """GPT-2 is not among the builder's architectures: skipped before any model is loaded, naming the
    builder's list. Gemma 3 is, but the pinned builder fails on the rotary settings transformers 5
    writes per layer type: refused before it runs, naming that cause and the backend that exports it."""
    gpt2 = _export(_build("gpt2", tmp_path / "gpt2"), tmp_path / "out-gpt2")
    assert gpt2["status"] == "skipped", gpt2
    assert "does not build GPT2LMHeadModel" in gpt2["error"] and "LlamaForCausalLM" in gpt2["error"], gpt2["error"]
    gemma = _export(_build("gemma3-text", tmp_path / "gemma"), tmp_path / "out-gemma")
    assert gemma["status"] == "failed" and gemma["returncode"] != 0, gemma
    assert "one per layer type (full_attention, sliding_attention)" in gemma["error"], gemma["error"]
    assert "--backends onnx" in gemma["error"] and not gemma["files"], gemma


def test_an_llm_is_published_as_onnx_runtime_genai_folders_whose_card_block_generates_eagers_text(hub, tmp_path):
    """A tiny Qwen 2 pushed with `--backends ort-genai` and its default variants (their floors lifted:
    random weights say nothing of quality, and a tiny model decodes at dispatch speed): the PR holds
    the fp32, int8 and int4 folders as onnx-community names them, each whole (graph, weights,
    `genai_config.json`, tokenizer), judged with their figures in the report; the card's
    `onnxruntime_genai` block, downloading one folder alone, writes eager `generate()`'s text from the
    PR in a fresh cache, and again once merged."""
    from transformers import AutoTokenizer

    folder = _build("qwen2", tmp_path / "model")
    repo = "genai-owner/tiny-qwen2"
    lifted = plumbing_only("w8", "q4", "q4-webgpu")
    api, outcome = push_with_bot(hub, "genai-owner", repo, folder, "ort-genai", "default", *lifted)
    (b,) = outcome["report"]["backends"]
    assert b["status"] == "ok" and b["layout"] == "onnxruntime-genai", b["error"]
    variants = {v["kind"]: v for v in b["variants"]}
    assert set(variants) == {"w8", "q4", "q4-webgpu"}, variants
    assert all(v["status"] == "ok" for v in variants.values()), variants
    assert variants["w8"]["file"] == "cpu_and_mobile/cpu-int8-rtn-block-32-acc-level-4/model.onnx", variants["w8"]
    assert variants["q4"]["file"].startswith("cpu_and_mobile/cpu-int4-"), variants["q4"]
    for v in variants.values():
        assert {"kld_mean", "kld_se", "forced_top1_agreement"} <= set(v["quality"]), v
        assert v["size_share"] < 1 and v["settings"].startswith("builder -p int"), v
    assert {"decode_speedup", "decode_tok_s"} <= set(variants["w8"]["quality"]) & set(variants["q4"]["quality"])
    # WebGPU's folder: every computing node placed on onnxruntime-web's WebGPU provider in Chromium.
    webgpu = variants["q4-webgpu"]
    assert webgpu["file"] == "webgpu/webgpu-int4-rtn-block-32/model.onnx" and webgpu["web"]["webgpu"] is True, webgpu
    pr_files = set(api.list_repo_files(repo, revision=f"refs/pr/{outcome['pr_num']}"))
    for target in (BASE, *(f"onnxruntime/{Path(v['file']).parent}" for v in variants.values())):
        each = ("model.onnx", "model.onnx.data", "genai_config.json", "tokenizer.json")
        assert {f"{target}/{name}" for name in each} <= pr_files, (target, pr_files)

    # The card's block reads the smallest folder published (int4 here: its tokens are a random model's
    # quantized ones); the same block on the fp32 folder, as the card says, writes eager's text.
    text = "hfexport validated this file against the original model."
    eager = AutoTokenizer.from_pretrained(folder).decode(eager_continuation(folder, text), skip_special_tokens=True)
    pr = f"refs/pr/{outcome['pr_num']}"
    card = Path(api.hf_hub_download(repo, "README.md", revision=pr)).read_text()
    (block,) = [block for block in card_blocks(card) if "onnxruntime_genai" in block]
    int4 = f"onnxruntime/{Path(variants['q4']['file']).parent}"
    assert f'allow_patterns=["{int4}/*"]' in block and f"`{BASE}/`" in card, block
    fp32 = block.replace(int4, BASE).replace('"main"  #', f'"{pr}"  #', 1)
    ran = run_python(fp32, tmp_path / "fp32" / "hf-home")
    assert ran.returncode == 0 and ran.stdout.strip() == eager.strip(), (ran.stdout, eager, ran.stderr[-3000:])
    # The revision line is proven above (the block ran from the PR): every block once merged, as printed.
    ran_all = run_every_block(api, repo, outcome["pr_num"], tmp_path, r"\S", r"\S", on_pr=False)
    assert sum("onnxruntime_genai" in block for block in ran_all.blocks) == 1, ran_all.blocks
    record(outcome, "ONNX Runtime GenAI `og.Generator` (`cpu-fp32/`, one folder downloaded)", "eager's text")


def test_a_derived_repo_holds_the_folders_on_main_and_its_card_block_generates_as_eager(hub, tmp_path):
    """A tiny Qwen 3, `hfexport push --into` a repo of the bot's own with `--backends ort-genai`: its fp32
    folder validated (eager's logits, the Generator's own 32 greedy ids) is on the derived repo's
    `main`, and the derived card's Generator block, run as printed (no PR revision), writes eager's text."""
    from huggingface_hub import HfApi
    from transformers import AutoTokenizer

    folder = _build("qwen3", tmp_path / "model")
    owner, bot = hub.add_user("genai-src"), hub.add_user("genai-bot")
    HfApi(endpoint=hub.url, token=owner).create_repo("genai-src/tiny")
    HfApi(endpoint=hub.url, token=owner).upload_folder(repo_id="genai-src/tiny", folder_path=folder)
    into = "genai-bot/tiny-genai"
    args = ("push", "genai-src/tiny", "--into", into, "--backends", "ort-genai", "--variants", "none", "--json")
    pushed = run_cli(*args, env={"HF_TOKEN": bot})
    assert pushed.returncode == 0, pushed.stderr[-3000:]
    outcome = json.loads(pushed.stdout)
    (b,) = outcome["report"]["backends"]
    checks = {c["name"]: c for c in b["validation"]["checks"]}
    assert outcome["action"] == "created" and checks["onnxruntime_genai"]["tokens_equal"] is True, checks
    diff = checks["generation_other_shape"]["max_abs_diff"]["logits"]
    assert checks["generation_other_shape"]["tokens_equal"] is True and diff < 1e-4, checks
    record(
        outcome,
        "ONNX Runtime GenAI `og.Generator` (`cpu-fp32/`)",
        "eager's 32 greedy tokens; logits max abs diff",
        diff,
    )
    api = HfApi(endpoint=hub.url, token=bot)
    assert f"{BASE}/model.onnx" in set(api.list_repo_files(into)) and "onnxruntime-genai" in api.model_info(into).tags
    card = Path(api.hf_hub_download(into, "README.md")).read_text()
    (block,) = [block for block in card_blocks(card) if "onnxruntime_genai" in block]
    assert into in block and "refs/pr" not in block, block
    text = "hfexport validated this file against the original model."
    eager = AutoTokenizer.from_pretrained(folder).decode(eager_continuation(folder, text), skip_special_tokens=True)
    ran = run_python(block, tmp_path / "derived" / "hf-home")
    assert ran.returncode == 0 and ran.stdout.strip() == eager.strip(), (ran.stdout, eager, ran.stderr[-3000:])


# A repo's module that, imported by the builder's process, writes a file into the folder it is
# building (its `-o`), where the folder would publish it; imported anywhere else it is a Qwen 3.
_BUILDER_PROBE = """
import sys
from pathlib import Path

if any("onnxruntime_genai" in a for a in sys.argv):
    built = Path(sys.argv[sys.argv.index("-o") + 1])
    built.mkdir(parents=True, exist_ok=True)
    (built / "repo-code-ran-in-the-builder").write_text("it ran")

from transformers import Qwen3Config, Qwen3ForCausalLM


class ProbeConfig(Qwen3Config):
    model_type = "qwen3"


class ProbeModel(Qwen3ForCausalLM):
    config_class = ProbeConfig
"""


def test_the_builder_runs_none_of_the_repos_code_even_where_the_user_trusts_it(tmp_path):
    """A repo whose config names code of its own (`auto_map`), exported with `--trust-remote-code`: the
    eager model runs that code in the sandboxed worker, as the user allowed; the builder, run with
    `hf_remote=false`, builds transformers' own class from the same weights and never imports it (the
    code would have written a file into the folder being built), and the folder still validates
    against the trusted eager model."""
    folder = _build("qwen3", tmp_path / "model")
    (folder / "probe_model.py").write_text(_BUILDER_PROBE)
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "probe_model.ProbeConfig", "AutoModelForCausalLM": "probe_model.ProbeModel"}
    (folder / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out"
    args = ("export", str(folder), "--backends", "ort-genai", "--variants", "none", "--trust-remote-code")
    result = run_cli(*args, "--out", str(out))
    (b,) = json.loads((out / "hfexport-report.json").read_text())["backends"]
    assert result.returncode == 0 and b["status"] == "ok", (b.get("error"), result.stderr[-2000:])
    assert not list(out.rglob("repo-code-ran-in-the-builder")), sorted(p.name for p in out.rglob("*"))
    assert all(f["path"].startswith("cpu_and_mobile/cpu-fp32/") and "probe" not in f["path"] for f in b["files"])

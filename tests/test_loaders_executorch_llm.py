"""Decoder LLMs' ExecuTorch programs in the runtimes their users deploy them with: ExecuTorch's own LLM
runner (`TextLLMRunner`) and optimum-executorch, each from the Hub, as eager writes. A file of its own:
at ~110 s a case, beside `test_loaders_llm.py` they made one file too long for two CI workers to share."""

from __future__ import annotations

from pathlib import Path

import pytest
import tiny_models
from card_runs import card_blocks, push_with_bot, record, run_every_block, run_python, runner_wrote


# Llama's through transformers' exportable module; LFM2's through ExecuTorch's own LLM export
# (`worker/executorch_llm.py`: its conv states). The runner's own check (`llm_runner.runner_check`) also
# runs on every family the sweep exports with a byte-level tokenizer (Falcon in CI).
@pytest.mark.parametrize("family", ["llama", "lfm2"])
def test_a_decoder_llms_executorch_program_writes_eager_text_in_executorchs_own_llm_runner(hub, family, tmp_path):
    """A Llama and an LFM2 over a byte-level BPE tokenizer, pushed with ExecuTorch and 8da4w: the folder holds
    `fp32/model.pte` as ExecuTorch's LLM runner reads it (no exporter manifest), the 8da4w program
    in a folder of its own, smaller, needing the runtime's quantized kernels. From the PR in a fresh
    cache, the card's runner block — `TextLLMRunner` with the repo's `tokenizer.json`, greedy —
    writes eager `generate()`'s text, and its optimum-executorch block (`ExecuTorchModelForCausalLM`,
    in a venv of its own) eager's tokens; every block runs again once merged, and the 8da4w program
    runs in both loaders. (Its figures on random weights say nothing of quality, so its floor is
    lifted: this test is about the loaders taking it.)"""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if family == "lfm2":
        import families

        folder = families.BY_NAME[family].build(tmp_path / "model")
    else:
        folder = tiny_models.decoder_with_byte_level_tokenizer(tmp_path / "model", family)
    owner = f"runner-{family}"
    repo = f"{owner}/tiny"
    kinds = "8da4w,int8" if family == "llama" else "8da4w"
    variants = (kinds, "--min-quality", "8da4w.token_agreement=0")
    api, outcome = push_with_bot(hub, owner, repo, folder, "executorch", *variants)
    (b,) = outcome["report"]["backends"]
    pr = f"refs/pr/{outcome['pr_num']}"
    assert b["layout"] == "executorch-llm-runner" and b["programs"] == {"decode": "fp32/model.pte"}, b
    checks = {c["name"]: c for c in b["validation"]["checks"]}
    assert checks["llm_runner"]["tokens_equal"] is True and checks["generation_other_shape"]["tokens_equal"] is True

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder).eval()
    text = "hfexport validated this file against the original model."
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        new = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False)
    eager = tokenizer.decode(new[0, ids.shape[1] :], skip_special_tokens=True)
    assert len(set(new[0, ids.shape[1] :].tolist())) >= 3, new  # varied tokens, not one repeated id

    card = Path(api.hf_hub_download(repo, "README.md", revision=pr)).read_text()
    (runner,) = [block for block in card_blocks(card) if "TextLLMRunner" in block]
    assert f"--seq_len {b['max_seq_len']}" in card
    on_pr = runner.replace('"main"  #', f'"{pr}"  #', 1)
    loader = "ExecuTorch `TextLLMRunner` (`fp32/model.pte`, `tokenizer.json`)"
    ran = run_python(on_pr, tmp_path / "runner" / "hf-home")  # from the PR, in a fresh cache
    assert ran.returncode == 0 and runner_wrote(ran.stdout) == eager, (ran.stdout, eager, ran.stderr[-2000:])
    (optimum,) = [block for block in card_blocks(card) if "ExecuTorchModelForCausalLM" in block]
    optimum_on_pr = optimum.replace('"main"  #', f'"{pr}"  #', 1)
    ran = run_python(optimum_on_pr, tmp_path / "optimum-executorch" / "hf-home")
    assert ran.returncode == 0 and ran.stdout.strip() == eager.strip(), (ran.stdout, eager, ran.stderr[-2000:])
    record(outcome, "optimum-executorch `ExecuTorchModelForCausalLM` (`fp32/`)", "eager's text")
    if family != "llama":
        # ExecuTorch's own 8da4w recipe (its `qmode`), judged as every variant; the runner generates with it.
        (variant,) = b["variants"]
        assert variant["status"] == "ok" and variant["file"] == "8da4w/model.pte", variant
        quantized = on_pr.replace("executorch/xnnpack/fp32/model.pte", "executorch/xnnpack/8da4w/model.pte")
        ran = run_python(quantized, tmp_path / "8da4w" / "hf-home")
        assert ran.returncode == 0 and "PyTorchObserver" in ran.stdout, ran.stderr[-3000:]
        record(outcome, "ExecuTorch `TextLLMRunner` (`8da4w/model.pte`, ExecuTorch's own LLM export)", "generates")
        record(outcome, loader, "eager's text")
        return

    # 8da4w: int4 grouped weights and int8 dynamic activations on the linears (torchao, lowered by
    # XNNPACK), an int8 embedding table looked up by the runtime's quantized kernel, which a program
    # registers by importing it (the card says so) or cannot run. ExecuTorch's int8 (PT2E) has no
    # generation support: reported skipped, not silently dropped.
    variant, int8 = b["variants"]
    assert int8["kind"] == "int8" and int8["status"] == "skipped" and "generation" in int8["error"], int8
    assert variant["status"] == "ok" and variant["file"] == "8da4w/model.pte", variant
    judged = {"token_agreement", "forced_top1_agreement", "logprob_delta_mean", "kld_mean", "kld_se", "forced_tokens"}
    assert set(variant["quality"]) == judged, variant
    assert variant["runtime_ops"] == ["quantized_decomposed::embedding_byte"], variant
    sizes = {f["path"]: f["size"] for f in b["files"]}
    assert set(sizes) == {"fp32/model.pte", "8da4w/model.pte", "config.json", "generation_config.json"}
    assert sizes["8da4w/model.pte"] == variant["size"] < sizes["fp32/model.pte"]
    assert "executorch/xnnpack/8da4w/model.pte" in card and "executorch.kernels.quantized" in card
    quantized = on_pr.replace("executorch/xnnpack/fp32/model.pte", "executorch/xnnpack/8da4w/model.pte")
    for registers, runs in (("", False), ("import executorch.kernels.quantized\n", True)):
        ran = run_python(registers + quantized, tmp_path / f"8da4w-{runs}" / "hf-home")
        assert (ran.returncode == 0 and "PyTorchObserver" in ran.stdout) == runs, ran.stderr[-3000:]
    record(outcome, "ExecuTorch `TextLLMRunner` (`8da4w/model.pte`)", "generates")
    # optimum-executorch registers the quantized kernels itself: the variant's folder as `subfolder`.
    ran = run_python(optimum_on_pr.replace("/fp32", "/8da4w", 1), tmp_path / "optimum-8da4w" / "hf-home")
    assert ran.returncode == 0 and ran.stdout.endswith("\n"), ran.stderr[-3000:]
    record(outcome, "optimum-executorch `ExecuTorchModelForCausalLM` (`8da4w/`)", "generates")

    # Every block once merged, as printed (the runner's already ran from the PR, above).
    ran = run_every_block(api, repo, outcome["pr_num"], tmp_path, r"next token: |PyTorchObserver", r"\S", on_pr=False)
    written = {runner_wrote(out) for (_, index), out in ran.python.items() if "TextLLMRunner" in ran.blocks[index]}
    assert written == {eager}, (written, eager)
    assert set(ran.optimum.values()) == {eager}, (ran.optimum, eager)
    record(outcome, loader, "eager's text")

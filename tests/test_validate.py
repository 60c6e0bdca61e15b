"""hfexport/worker/validate.py's `Reference`: eager's side of every check, computed once, on the
tiny Llama in this process (no export)."""

from __future__ import annotations

import pytest
import torch

import tiny_models
from hfexport.pipeline.plan import make_plan
from hfexport.worker.splits import split_for
from hfexport.worker.validate import Reference, eager_generate


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from transformers import LlamaForCausalLM

    folder = tiny_models.llama(tmp_path_factory.mktemp("llama"))
    split = split_for(make_plan(folder, ["onnx"]))
    model = LlamaForCausalLM.from_pretrained(folder).eval()
    split.prepare(model)
    prompt = split.inputs(folder, model.config, split.plan.validation, seed=1)
    traced = {"decode": {"input_ids", "attention_mask", "position_ids", "cache_position", "cache"}}
    return model, split, traced, prompt


def test_the_eager_loop_writes_generates_tokens_and_runs_once(llama):
    """The greedy loop on the eager components writes generate()'s tokens; asked again, the same
    objects come back (no second run)."""
    model, split, traced, prompt = llama
    reference = Reference(model, split, traced)
    n = split.plan.validation.new_tokens
    tokens, logits = reference.loop(prompt, n)
    expected, _ = eager_generate(model, prompt, n)
    assert torch.equal(tokens, expected) and len(logits) == n
    assert reference.loop(prompt, n)[1] is logits
    assert reference.generate(prompt, n)[0] is reference.generate(prompt, n)[0]


def test_after_release_the_prepared_results_remain_and_anything_else_is_an_error(llama, tmp_path):
    """`prepare` then `release`: the model's weights are on the meta device, the validation's results
    (and the variants' forced run) are still answered, and a result never prepared raises instead of
    running a model that is gone."""
    from transformers import LlamaForCausalLM

    _, split, traced, prompt = llama
    model = LlamaForCausalLM.from_pretrained(tiny_models.llama(tmp_path / "llama")).eval()
    split.prepare(model)
    other = {k: v.clone() for k, v in prompt.items()}
    reference = Reference(model, split, traced)
    reference.prepare(prompt, other, judged_tokens=24)
    n = split.plan.validation.new_tokens
    before = reference.loop(other, 24, force=True)
    reference.release()
    assert all(p.device.type == "meta" for p in model.parameters())
    assert reference.loop(other, 24, force=True) is before
    assert reference.loop(prompt, n)[0].shape[1] == n
    with pytest.raises(RuntimeError, match="was not prepared"):
        reference.loop(prompt, 24, force=True)

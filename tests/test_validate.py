"""hfexport/worker/validate.py's `Reference`: eager's side of every check, computed once, on the
tiny Llama in this process (no export)."""

from __future__ import annotations

import pytest
import tiny_models
import torch

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

    from hfexport.worker.inputs import Judged

    _, split, traced, prompt = llama
    model = LlamaForCausalLM.from_pretrained(tiny_models.llama(tmp_path / "llama")).eval()
    split.prepare(model)
    other = {k: v.clone() for k, v in prompt.items()}
    reference = Reference(model, split, traced)
    judged = Judged(other, None, 24, "eager's continuation")
    reference.prepare(prompt, other, judged)
    n = split.plan.validation.new_tokens
    before = reference.forced(judged)
    reference.release()
    assert all(p.device.type == "meta" for p in model.parameters())
    assert reference.forced(judged) is before
    assert reference.loop(prompt, n)[0].shape[1] == n
    with pytest.raises(RuntimeError, match="was not prepared"):
        reference.forced(Judged(prompt, None, 24, "eager's continuation"))


def test_the_tolerance_follows_the_logits_scale_and_still_rejects_a_wrong_program(llama, tmp_path):
    """Logits of magnitude ~3e4 (the head scaled): a correct program — the same weights through
    another attention kernel — is off by ~6e-3, over an absolute 1e-3 and within 1e-3 of the scale;
    a program whose one matrix is off by 0.01 is off by ~7e2 and rejected."""
    from transformers import LlamaForCausalLM

    from hfexport.report import Validation
    from hfexport.worker.validate import compare_generation

    _, split, traced, prompt = llama
    folder = tiny_models.llama(tmp_path / "llama")

    def loaded(attention: str, wrong: float = 0.0):
        model = LlamaForCausalLM.from_pretrained(folder, attn_implementation=attention).eval()
        with torch.no_grad():
            model.lm_head.weight.mul_(1e4)
            model.model.layers[0].mlp.down_proj.weight.add_(wrong)
        split.prepare(model)
        return split.eager(model)

    reference = Reference(LlamaForCausalLM.from_pretrained(folder).eval(), split, traced)
    with torch.no_grad():
        reference.model.lm_head.weight.mul_(1e4)
    split.prepare(reference.model)
    reference._eager = split.eager(reference.model)

    def check(components):
        return compare_generation("other_shape", reference, split, lambda c, **kw: components[c](**kw), traced, prompt)

    right, wrong = check(loaded("eager")), check(loaded("eager", wrong=0.01))
    assert right.scale["logits"] > 1e4 and 1e-3 < right.worst() < 1e-3 * right.scale["logits"]
    assert Validation(1e-3, [right]).passed
    assert not Validation(1e-3, [wrong]).passed and wrong.worst() > 10
    assert "× scale" in (Validation(1e-3, [wrong]).first_problem() or "")


def test_a_detector_whose_eager_queries_are_picked_among_tied_scores_says_so_in_its_failure():
    """An RT-DETR of default initialisation scores its anchors all alike: eager and the export each
    decode another pick of equals, every score equal and the boxes 0.19 off. The failure says the
    tie, not only the diff; a detector whose k-th anchor scores above the next is compared as before."""
    from hfexport.report import Check, Validation
    from hfexport.worker.validate import tied_selection

    anchors = torch.zeros(1, 12, 3)
    anchors[0, :2, 0] = 2.0  # two anchors above the rest, ten tied below
    tied = {"logits": torch.zeros(1, 4, 3), "enc_outputs_class": anchors, "enc_topk_logits": torch.zeros(1, 4, 3)}
    said = tied_selection(tied)
    assert said is not None and "tie at its top-4 boundary (10 anchors share the 4th score, 0)" in said, said
    apart = anchors.clone()
    apart[0, 2:] = -torch.arange(10, dtype=torch.float32)[:, None]  # every anchor its own score
    assert tied_selection({**tied, "enc_outputs_class": apart}) is None
    assert tied_selection({"logits": torch.zeros(1, 4, 3)}) is None  # not a detector that picks anchors

    failed = Validation(1e-3, [Check("sample", {"pred_boxes": 0.19}, note=said)])
    over = "'pred_boxes' max abs diff 1.90e-01 > tolerance 0.001"
    assert failed.first_problem() == f"validation 'sample': {over}; {said}"

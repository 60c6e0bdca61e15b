"""The split registry (`worker/splits.py`) and the cache helpers it feeds a step with
(`worker/caches.py`), alone: no model, no export, well under a second after torch's import."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hfexport.report import ExportPlan, Split
from hfexport.worker.caches import one_tensor, positions
from hfexport.worker.splits import SPLITS, split_for

PLAN = ExportPlan("feature-extraction", "BertModel", "BertModel", "bert", "single", "text", False, "single", ["onnx"])


@pytest.mark.parametrize(
    ("split", "components", "generates"),
    [
        (Split.SINGLE, ("model",), False),
        (Split.DECODER, ("decode",), True),
        (Split.ENCODER_DECODER, ("encoder", "decode"), True),
        (Split.IMAGE_TEXT_DECODER, ("vision_encoder", "embed_tokens", "decode"), True),
    ],
)
def test_the_plan_names_the_split_and_the_split_its_components(split, components, generates):
    chosen = split_for(dataclasses.replace(PLAN, split=split))
    assert (chosen.name, chosen.components, chosen.generates) == (split, components, generates)


def test_every_split_the_plan_can_name_is_registered_and_no_other_name_is():
    assert set(SPLITS) == set(Split)
    with pytest.raises(KeyError, match="no split 'two-stage' is registered"):
        split_for(dataclasses.replace(PLAN, split="two-stage"))


def test_positions_count_a_left_padded_rows_real_tokens_from_zero_as_generate_does():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert positions(mask).tolist() == [[1, 1, 0, 1, 2], [0, 1, 2, 3, 4]]


def test_one_tensor_takes_a_tensor_or_the_first_tensor_of_an_output():
    logits = torch.ones(2, 3)
    assert one_tensor(logits) is logits
    assert one_tensor({"past": None, "logits": logits}) is logits
    assert one_tensor((None, logits)) is logits

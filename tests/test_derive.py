"""The variant pass's bookkeeping (`worker/derive.py`) alone: which variant an export gets, the
figures as the report keeps them, each variant's share of the fp32 bytes as published."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from hfexport.report import ExportPlan, Split, Status, VariantKind, VariantResult
from hfexport.variants import VARIANTS
from hfexport.worker.derive import rebase_shares, reported, why_skipped
from hfexport.worker.splits import split_for

PLAN = ExportPlan("feature-extraction", "BertModel", "BertModel", "bert", "single", "text", False, "single", ["onnx"])


def test_figures_keep_six_decimals_and_a_non_finite_one_as_its_text():
    assert reported({"cosine": 0.99912345678, "max_abs_diff": math.inf, "top1": math.nan}) == {
        "cosine": 0.999123,
        "max_abs_diff": "inf",
        "top1": "nan",
    }


def test_a_variant_of_one_program_is_refused_for_an_export_of_several_with_the_ones_it_gets():
    seq2seq = split_for(dataclasses.replace(PLAN, split=Split.ENCODER_DECODER))
    fp16 = VARIANTS[("onnx", VariantKind.FP16)]  # re-exports the model as one program
    why = why_skipped(fp16, seq2seq, "onnx")
    assert why is not None and "(encoder, decode)" in why and "int8" in why
    assert why_skipped(VARIANTS[("onnx", VariantKind.INT8)], seq2seq, "onnx") is None  # per component
    assert why_skipped(fp16, split_for(PLAN), "onnx") is None


def test_a_decoder_llm_variant_is_refused_for_a_single_graph():
    why = why_skipped(VARIANTS[("onnx", VariantKind.Q4F16)], split_for(PLAN), "onnx")
    assert why == "q4f16 is for decoder LLMs (generation exports)"


def test_shares_are_of_the_fp32_programs_as_published_not_counting_descriptors_or_variants(tmp_path: Path):
    (tmp_path / "model.onnx").write_bytes(b"x" * 1000)
    (tmp_path / "config.json").write_bytes(b"{}" * 300)  # a descriptor: not a program
    (tmp_path / "model_quantized.onnx").write_bytes(b"x" * 250)
    int8 = VariantResult(VariantKind.INT8, Status.OK, file="model_quantized.onnx", size=250)
    failed = VariantResult(VariantKind.FP16, Status.FAILED)
    rebase_shares([int8, failed], tmp_path)
    assert (int8.size_share, failed.size_share) == (0.25, None)

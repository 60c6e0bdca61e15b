"""The `ort-genai` backend's contract, without building anything: what it takes (the pinned builder's
own list, read from its source), what it refuses up front and why, and the folders its kinds go to."""

from __future__ import annotations

import pytest

from hfexport.backends import builder_architectures, get_backend
from hfexport.report import ExportPlan, Split, VariantKind
from hfexport.variants import parse_variants, variants_of


def _plan(architecture: str, split: Split = Split.DECODER, head_dim: int | None = 64) -> ExportPlan:
    task = "text-generation-with-past" if split == Split.DECODER else "feature-extraction"
    return ExportPlan(
        task, architecture, architecture, "x", "generation", "text", False, split, ["ort-genai"], head_dim=head_dim
    )


def test_the_builders_list_is_read_from_its_own_source():
    """The names its `create_model` dispatches on: the decoder families it builds, none it does not."""
    built = builder_architectures()
    assert {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Phi3ForCausalLM", "MistralForCausalLM"} <= set(
        built
    )
    assert "GPT2LMHeadModel" not in built and len(built) == len(set(built)) > 20, built


@pytest.mark.parametrize(
    ("plan", "said"),
    [
        (_plan("LlamaForCausalLM"), None),
        (_plan("GPT2LMHeadModel"), "does not build GPT2LMHeadModel: it builds"),
        (_plan("LlamaForCausalLM", head_dim=8), "heads are 8 wide"),
        (_plan("BertModel", Split.SINGLE, None), "decoder LLMs"),
    ],
)
def test_what_the_builder_cannot_take_is_said_before_a_worker_starts(plan, said):
    reason = get_backend("ort-genai").cannot_export(plan)
    if said is None:
        assert reason is None
    else:
        assert reason is not None and said in reason and "export it with onnx" in reason.lower(), reason


def test_each_kind_goes_to_the_folder_onnx_community_names_for_its_settings():
    from hfexport.worker.ort_genai import ATTEMPTS, FP32

    assert FP32.folder == "cpu_and_mobile/cpu-fp32"
    assert [t.folder for t in ATTEMPTS[VariantKind.W8]] == ["cpu_and_mobile/cpu-int8-rtn-block-32-acc-level-4"]
    assert [t.folder for t in ATTEMPTS[VariantKind.Q4]] == [
        "cpu_and_mobile/cpu-int4-rtn-block-32-acc-level-4",
        "cpu_and_mobile/cpu-int4-kquant-mixed-block-32-acc-level-4",
    ]
    (webgpu,) = ATTEMPTS[VariantKind.Q4_WEBGPU]
    assert webgpu.folder == "webgpu/webgpu-int4-rtn-block-32" and "use_webgpu_fp32=true" in webgpu.settings
    folders = [t.folder for targets in ATTEMPTS.values() for t in targets]
    assert len(folders) == len(set(folders)) and not any(
        a.startswith(b + "-") or a.startswith(b + "/") for a in folders for b in folders if a != b
    )


def test_its_kinds_are_a_generation_default_and_named_like_any_other():
    assert [v.kind for v in variants_of("ort-genai", ["default"], generates=True)] == ["w8", "q4", "q4-webgpu"]
    assert variants_of("ort-genai", ["default"], generates=False) == []
    assert parse_variants("ort-genai:q4-webgpu,w8") == ["ort-genai:q4-webgpu", "w8"]
    spec = get_backend("ort-genai")
    assert spec.llm_runner == "hfexport.worker.ort_genai:run" and spec.subfolder == "onnxruntime"

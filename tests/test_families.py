"""Model families with heads of their own: the head decides the task (`hfexport.tasks`).

Each tiny random-weight model is planned with its head's task, exported, reloaded on each
runtime and validated — the head's own outputs (boxes, masks, depth, CTC logits) — on an input
of another shape than the traced one: another batch, for raw audio another length (its time
axis is dynamic; a speech model that takes one length is not a speech model), for convolutional
vision models another image size. A head hfexport
cannot export is refused before anything is written: exit 2, the head's name, the tasks it does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny_models
from conftest import _exported, run_cli

from hfexport.report import Split, Status

# name, builder, the task its head decides, the backends, and an output only the head produces.
FAMILIES = [
    ("detr", tiny_models.detr, "object-detection", "dynamo,onnx", "pred_boxes"),
    ("segformer", tiny_models.segformer, "image-segmentation", "dynamo,onnx,executorch", "logits"),
    ("maskformer", tiny_models.maskformer, "instance-segmentation", "dynamo,onnx,executorch", "masks_queries_logits"),
    ("detr-panoptic", tiny_models.detr_panoptic, "universal-segmentation", "dynamo,onnx", "pred_masks"),
    ("glpn", tiny_models.glpn, "depth-estimation", "dynamo,onnx", "predicted_depth"),
    ("wav2vec2-ctc", tiny_models.wav2vec2_ctc, "automatic-speech-recognition", "dynamo,onnx,executorch", "logits"),
    ("wav2vec2-classifier", tiny_models.wav2vec2_classifier, "audio-classification", "dynamo,onnx", "logits"),
    ("clip", tiny_models.clip, "zero-shot-image-classification", "dynamo,onnx", "logits_per_image"),
    ("siglip", tiny_models.siglip, "zero-shot-image-classification", "dynamo,onnx", "logits_per_image"),
]

# Encoder-decoders with the generation configs their checkpoints ship: generate() applies forced,
# banned and n-gram rules from them, and so must the loop that judges the export.
# Whisper's spectrogram has a fixed number of frames, so it lowers to ExecuTorch too (raw audio does not).
GENERATIVE = [
    ("bart", tiny_models.bart, {"forced_eos_token_id": 2, "no_repeat_ngram_size": 3}, "dynamo,onnx"),
    ("marian", tiny_models.marian, {"forced_eos_token_id": 0, "bad_words_ids": [[127]]}, "dynamo,onnx"),
    (
        "whisper",
        tiny_models.whisper,
        {"suppress_tokens": [1, 2, 7, 8, 9, 10, 11, 12], "lang_to_id": {"<|en|>": 101, "<|fr|>": 102}},
        "dynamo,onnx,executorch",
    ),
    # English-only checkpoints ship no language or task tables: the start token, then the prompt.
    ("whisper_english", tiny_models.whisper_english, {"suppress_tokens": [1, 2, 7, 8, 9, 10, 11, 12]}, "dynamo,onnx"),
]


@pytest.mark.parametrize(("name", "build", "task", "backends", "head_output"), FAMILIES, ids=[f[0] for f in FAMILIES])
def test_a_family_is_planned_with_its_own_head_and_validated_on_another_shape(
    workspace, name, build, task, backends, head_output
):
    folder, report = _exported(workspace, name, build, backends=backends)
    architecture = json.loads((folder / "config.json").read_text())["architectures"][0]
    assert report.plan.task == task and report.plan.model_class == architecture, report.plan
    assert [b.backend for b in report.backends] == backends.split(",")
    for b in report.backends:
        if name == "wav2vec2-ctc" and b.backend == "executorch":
            # Said up front, not a failure mid-lowering: raw audio of any length doesn't lower yet.
            assert b.status == Status.SKIPPED and "raw audio" in b.error, (b.status, b.error)
            continue
        assert b.status == Status.OK, (b.backend, b.error)
        checks = {c.name: c for c in b.validation.checks}
        assert set(checks) == {"sample", "other_shape"}, b.backend
        # The head's own output was compared, within the backend's tolerance.
        assert all(head_output in c.max_abs_diff for c in checks.values()), (b.backend, checks)
        assert b.validation.passed and all(c.worst() <= b.validation.tolerance for c in checks.values())
    if report.plan.modality == "text-vision":
        # Both towers, each with a batch of its own: any number of texts against any number of images.
        assert report.plan.dynamic_axes["pixel_values"][0].dim == "images"
        assert report.plan.dynamic_axes["input_ids"][0].dim == "batch"
    if report.plan.modality == "vision" and name != "maskformer":
        # Convolutional heads take images of any size (their processors keep the aspect ratio):
        # validated on another height and width than traced. MaskFormer's Swin has windows of one size.
        assert set(report.plan.dynamic_axes["pixel_values"]) == {0, 2, 3}
        assert report.plan.sample.image != report.plan.validation.image
    if report.plan.modality == "audio":
        # Raw audio is as long as the recording: validated on another length than the traced one.
        assert report.plan.dynamic_axes["input_values"][1].dim == "audio_samples"
        assert report.plan.sample.sequence != report.plan.validation.sequence


def test_an_encoder_with_split_ops_takes_another_batch_on_executorch(workspace):
    """ModernBERT's `chunk` and `unbind` (GPT-2's `split` alike) return lists of tensors whose first
    axis is the batch: ExecuTorch's edge verifier used to pin that axis to the traced batch, and the
    program failed on any other one (error 0x12). Its program now takes another batch and length."""
    _, report = _exported(workspace, "modernbert-split-ops", tiny_models.modernbert, backends="executorch")
    assert report.plan.task == "fill-mask"
    assert report.plan.validation.batch != report.plan.sample.batch
    assert report.plan.validation.sequence != report.plan.sample.sequence
    (executorch,) = report.backends
    assert executorch.status == Status.OK, executorch.error
    checks = {c.name: c for c in executorch.validation.checks}
    assert set(checks) == {"sample", "other_shape"} and checks["other_shape"].error is None
    assert "logits" in checks["other_shape"].max_abs_diff and executorch.validation.passed


def test_a_gpt2_llm_runs_in_executorchs_llm_runner_as_eager(workspace):
    """GPT-2 (learned positions, fused QKV, a tied head) goes to ExecuTorch's LLM runner layout like
    Llama and Qwen2: its program gives eager's tokens on prompts of other lengths than its trace, and
    `TextLLMRunner` with its byte-level `tokenizer.json` writes eager's text."""
    _, report = _exported(
        workspace, "gpt2-runner", lambda f: tiny_models.decoder_with_byte_level_tokenizer(f, "gpt2"), "executorch"
    )
    (executorch,) = report.backends
    assert executorch.status == Status.OK and executorch.layout == "executorch-llm-runner", executorch.error
    checks = {c.name: c for c in executorch.validation.checks}
    assert checks["generation_other_shape"].tokens_equal and checks["llm_runner"].tokens_equal, checks
    assert checks["llm_runner"].note is None  # the runner read the tokenizer and ran


@pytest.mark.parametrize(("name", "build", "rules", "backends"), GENERATIVE, ids=[g[0] for g in GENERATIVE])
def test_an_encoder_decoder_with_its_shipped_generation_config_matches_generate_token_for_token(
    workspace, name, build, rules, backends
):
    """generate()'s own logits processors, built from the model's generation config, are applied in
    the loop over the exported encoder and decoder as in eager generate(): token parity on
    both runtimes, and the rules visibly at work (the forced EOS closes every row; no suppressed
    token appears). Whisper's decoder prompt names its language and task explicitly: transformers'
    base generate() is traced and judged, not Whisper's language detection."""
    folder, report = _exported(workspace, name, build, backends=backends)
    assert [b.backend for b in report.backends] == backends.split(",")
    shipped = json.loads((folder / "generation_config.json").read_text())
    assert all(shipped[key] == value for key, value in rules.items())
    task = "automatic-speech-recognition-with-past" if name.startswith("whisper") else "text2text-generation-with-past"
    assert report.plan.task == task and report.plan.split == Split.ENCODER_DECODER
    for b in report.backends:
        assert b.status == Status.OK, (b.backend, b.error)
        for check in b.validation.checks:
            assert check.error is None and check.tokens_equal, (b.backend, check)
            assert check.exported_tokens == check.eager_tokens
            if "forced_eos_token_id" in rules:
                assert all(row[-1] == rules["forced_eos_token_id"] for row in check.eager_tokens), check.eager_tokens
            if "suppress_tokens" in rules:
                assert not {t for row in check.eager_tokens for t in row} & set(rules["suppress_tokens"]), (
                    check.eager_tokens
                )


@pytest.mark.parametrize("name", ["mistral", "gemma2"])
def test_a_sliding_window_cache_validates_on_every_backend_past_its_window(workspace, name):
    """Mistral (every layer sliding) and Gemma 2 (sliding and full in turn), window 4, prompts and
    8 new tokens well past it: ONNX reproduces generate() token for token, and so does ExecuTorch's
    LLM runner program (its static cache takes the sliding layers as full ones, the mask applies the
    window), prompt by prompt. The `.pt2` too: its decode step is captured under the exporter's own
    patches (sliding layers traced as full ones) and fed in the structure it was traced with; it was
    skipped before ("cannot run past the traced length")."""
    folder, report = _exported(workspace, name, getattr(tiny_models, name))
    assert report.plan.sliding_window == 4 and report.plan.validation.sequence > 4
    by_name = {b.backend: b for b in report.backends}
    onnx = by_name["onnx"]
    assert onnx.status == Status.OK, onnx.error
    assert all(c.tokens_equal and c.error is None for c in onnx.validation.checks)
    # The window is the graph's mask: keys and values only, published as a decoder with past and
    # judged again as optimum and transformers.js feed it.
    assert onnx.layout == "decoder-with-past" and onnx.programs == {"decode": "model.onnx"}, onnx.layout
    assert any(c.name == "loaders_layout" and c.tokens_equal for c in onnx.validation.checks)
    executorch = by_name["executorch"]
    assert executorch.status == Status.OK and executorch.layout == "executorch-llm-runner", executorch.error
    (runtime,) = [c for c in executorch.validation.checks if c.name == "generation_other_shape"]
    assert runtime.tokens_equal is True and len(runtime.exported_tokens) == report.plan.validation.batch
    dynamo = by_name["dynamo"]
    assert dynamo.status == Status.OK, dynamo.error
    assert all(c.tokens_equal and c.error is None for c in dynamo.validation.checks), dynamo.validation.checks
    assert report.ok


def test_an_image_text_model_matches_generate_over_its_vision_encoder_embeddings_and_decoder(workspace):
    """LLaVA (a CLIP tower, a projector, a Llama) with its repo's processor: prompts of an image and
    a sentence each, padded, turned into placeholder tokens by the processor. Exported as the
    vision encoder (one image's projected features), the token embeddings and one decoder over
    embeddings; the loop puts each image's features in its placeholders and must reproduce eager
    generate() token for token, on another batch and length than traced, on every CPU runtime."""
    folder, report = _exported(workspace, "llava", tiny_models.llava, backends="dynamo,onnx,executorch")
    assert report.plan.task == "image-text-to-text" and report.plan.modality == "image-text"
    assert report.plan.split == Split.IMAGE_TEXT_DECODER
    for b in report.backends:
        assert b.status == Status.OK, (b.backend, b.error)
        assert b.inputs["vision_encoder"] == ["pixel_values"] and "inputs_embeds" in b.inputs["decode"], b.inputs
        assert "input_ids" not in b.inputs["decode"], b.inputs
        for check in b.validation.checks:
            assert check.error is None and check.tokens_equal and check.exported_tokens == check.eager_tokens, check
        # Padded prompts of another batch: the image's features land in their placeholders row by row.
        assert len(b.validation.checks[-1].eager_tokens) == report.plan.validation.batch


def test_an_image_text_repo_without_its_processor_is_refused_up_front(tmp_path):
    """Only the processor knows how many placeholder tokens an image takes: without it, exit 2
    naming what is missing, before any export starts."""
    folder = tiny_models.llava(tmp_path / "model")
    (folder / "processor_config.json").unlink()
    result = run_cli("export", str(folder), "--backends", "onnx", "--out", str(tmp_path / "out"), timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    message = " ".join(result.stderr.split())
    assert "no processor" in message and "processor.save_pretrained" in message, message
    assert not (tmp_path / "out").exists()


def _bert_for_pretraining(folder: Path) -> Path:
    from transformers import BertConfig, BertForPreTraining

    config = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37)
    BertForPreTraining(config).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(
    ("build", "named"),
    [
        # A row of the table that hfexport refuses, with its reason.
        (tiny_models.sam, ["SamModel", "mask-generation", "points or boxes"]),
        # A head no row lists: named with the Auto class transformers keeps it under.
        (_bert_for_pretraining, ["BertForPreTraining", "AutoModelForPreTraining"]),
    ],
    ids=["mask-generation-head", "pretraining-head"],
)
def test_a_head_hfexport_cannot_export_is_refused_by_name_with_the_tasks_it_can(tmp_path, build, named):
    """Never exported as its base model under another task's name: exit 2, the head named, the
    tasks hfexport exports listed with the way to export the base model on purpose; nothing written."""
    folder = build(tmp_path / "model")
    out = tmp_path / "out"
    result = run_cli("export", str(folder), "--backends", "onnx", "--out", str(out), timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    message = " ".join(result.stderr.split())
    assert all(word in message for word in named), message
    assert "object-detection" in message and "--task feature-extraction" in message, message
    assert not out.exists()


def test_the_docs_list_the_planners_own_task_table():
    """docs/export.md's table of tasks is the one `hfexport tasks --markdown` prints from the table
    the planner reads: a task added there and not here fails this test."""
    from hfexport.tasks import tasks_markdown

    readme = (Path(__file__).parent.parent / "docs" / "export.md").read_text()
    assert "\n".join(tasks_markdown()) in readme
    printed = run_cli("tasks", "--markdown")
    assert printed.returncode == 0 and printed.stdout.strip() == "\n".join(tasks_markdown())

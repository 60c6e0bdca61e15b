"""The plan stage and the input builders, without exporting anything."""

from __future__ import annotations

import json

import tiny_models
import torch

from hfexport.pipeline.plan import Shape, make_plan
from hfexport.report import Axis, Split
from hfexport.worker.splits import split_for


def test_plans_follow_the_architecture(tmp_path):
    bert = make_plan(tiny_models.bert(tmp_path / "bert"), ["onnx"])
    assert (bert.task, bert.mode, bert.split, bert.modality) == ("feature-extraction", "single", Split.SINGLE, "text")
    assert bert.dynamic_axes["input_ids"] == {0: Axis("batch", 1, 64), 1: Axis("sequence", 1, 128)}
    llama = make_plan(tiny_models.llama(tmp_path / "llama"), ["onnx"])
    assert (llama.task, llama.mode, llama.split) == ("text-generation-with-past", "generation", Split.DECODER)
    single = make_plan(tmp_path / "llama", ["onnx"], task="text-generation")
    assert (single.mode, single.split) == ("single", Split.SINGLE)
    t5 = make_plan(tiny_models.t5(tmp_path / "t5"), ["onnx"])
    assert t5.split == Split.ENCODER_DECODER and t5.is_encoder_decoder
    vit = make_plan(tiny_models.vit(tmp_path / "vit"), ["onnx"])
    assert (vit.modality, vit.task, vit.dynamic_axes) == (
        "vision",
        "image-classification",
        {"pixel_values": {0: Axis("batch", 1, 64)}},
    )
    # The sample never has a size-1 axis, and validation differs from it on every varying axis.
    for plan in (bert, llama, t5, vit):
        assert plan.sample.batch >= 2 and plan.sample.sequence >= 2 and plan.sample.decoder_prompt >= 2
        assert plan.validation.batch != plan.sample.batch and plan.validation.sequence != plan.sample.sequence
    assert bert.digest() != make_plan(tmp_path / "bert", ["dynamo"]).digest()
    assert (
        make_plan(tmp_path / "bert", ["onnx", "dynamo"]).digest()
        == make_plan(tmp_path / "bert", ["dynamo", "onnx"]).digest()
    )


def test_text_inputs_use_the_tokenizer_and_pad(tmp_path):
    folder = tiny_models.minilm_folder()
    plan = make_plan(folder, ["onnx"])
    inputs = split_for(plan).inputs(folder, None, plan.validation, seed=1)
    assert inputs["input_ids"].shape == (plan.validation.batch, plan.validation.sequence)
    assert inputs["input_ids"][:, 0].eq(101).all()  # [CLS]: real tokenizer output, not random ids
    assert (inputs["attention_mask"] == 0).any()  # a padded row


def test_decoders_are_left_padded(tmp_path):
    from transformers import AutoConfig

    folder = tiny_models.llama(tmp_path / "llama")
    plan = make_plan(folder, ["onnx"])
    inputs = split_for(plan).inputs(folder, AutoConfig.from_pretrained(folder), plan.sample, seed=0)
    mask = inputs["attention_mask"]
    assert (mask[:, -1] == 1).all() and (mask[:, 0] == 0).any()


def test_vision_and_audio_inputs_go_through_the_repos_preprocessor(tmp_path):
    from transformers import ViTConfig, ViTImageProcessor, WhisperConfig, WhisperFeatureExtractor

    vit = tiny_models.vit(tmp_path / "vit")
    ViTImageProcessor(size={"height": 32, "width": 32}, image_mean=[0.5] * 3, image_std=[0.5] * 3).save_pretrained(vit)
    plan = make_plan(vit, ["onnx"])
    pixels = split_for(plan).inputs(vit, ViTConfig.from_pretrained(vit), Shape(batch=3, sequence=8), seed=0)[
        "pixel_values"
    ]
    assert (
        pixels.shape == (3, 3, 32, 32) and -1.0 <= pixels.min() and pixels.max() <= 1.0
    )  # normalised by the processor

    from transformers import WhisperForConditionalGeneration

    torch.manual_seed(0)
    config = WhisperConfig(
        vocab_size=64,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=16,
        decoder_ffn_dim=16,
        num_mel_bins=16,
        max_source_positions=1500,
        max_target_positions=32,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
    )
    whisper = tmp_path / "whisper"
    WhisperForConditionalGeneration(config).save_pretrained(whisper)
    WhisperFeatureExtractor(feature_size=16).save_pretrained(whisper)
    plan = make_plan(whisper, ["onnx"])
    assert plan.modality == "audio" and plan.task == "automatic-speech-recognition-with-past"
    inputs = split_for(plan).inputs(whisper, config, plan.sample, seed=0)
    assert inputs["input_features"].shape == (plan.sample.batch, 16, 3000)
    assert inputs["decoder_input_ids"].shape == (plan.sample.batch, plan.sample.decoder_prompt)


def test_the_plan_records_the_dtype_the_checkpoint_is_stored_in(tmp_path):
    """config.json's `dtype` (what `save_pretrained` writes); one no backend exports in reads as float32."""
    folder = tiny_models.bert(tmp_path / "bert")
    assert make_plan(folder, ["dynamo"]).source_dtype == "float32"
    tiny_models.stored_as(folder, "bfloat16")
    assert make_plan(folder, ["dynamo"]).source_dtype == "bfloat16"
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "dtype": "float64"}))
    assert make_plan(folder, ["dynamo"]).source_dtype == "float32"


def test_a_sentence_transformers_repo_is_planned_as_an_embedder_whatever_head_its_config_names(tmp_path):
    folder = tiny_models.bert(tmp_path / "st")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["BertForMaskedLM"]}))
    assert make_plan(folder, ["onnx"]).task == "fill-mask"
    (folder / "modules.json").write_text(json.dumps([{"type": "sentence_transformers.models.Transformer"}]))
    plan = make_plan(folder, ["onnx"])
    assert plan.task == "feature-extraction" and plan.model_class == "BertModel"
    assert make_plan(folder, ["onnx"], task="fill-mask").task == "fill-mask"  # asked for: the worker judges it


def test_a_sentence_transformers_module_folder_travels_with_the_support_files(tmp_path):
    """`1_Pooling/config.json` is what sentence-transformers reads its pooling from: an output
    folder (and a derived repo) without it cannot be loaded. A path outside the folder is never one."""
    from hfexport.pipeline.package import support_files
    from hfexport.pipeline.plan import module_folders

    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "../outside", "type": "sentence_transformers.models.Normalize"},
    ]
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "modules.json").write_text(json.dumps(modules))
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "model" / "1_Pooling").mkdir()
    (tmp_path / "model" / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.json").write_text("{}")
    assert module_folders(tmp_path / "model") == ["1_Pooling"]
    assert support_files(tmp_path / "model") == ["1_Pooling/config.json", "config.json", "modules.json"]

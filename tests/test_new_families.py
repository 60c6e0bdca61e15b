"""Families published in 2025–26: CI's share of the family sweep (`tests/sweep_families.py`).

Each family marked `ci` in `tests/families.py` is built from its own config class, planned with its
own head, exported on its CI backends and validated as every family is: on another batch and
length than traced, a generation family token for token against eager `generate()` on both, a
single graph on its head's outputs. A backend that cannot take the family refuses it with the words
the registry names (said before anything is exported), never with a stack trace from mid-lowering.
"""

from __future__ import annotations

import families
import pytest
import torch
from conftest import _exported, run_cli

from hfexport.report import Split, Status

CI = [f for f in families.FAMILIES if f.ci]


@pytest.mark.parametrize("family", CI, ids=[f.name for f in CI])
def test_a_new_family_exports_validates_or_is_refused_with_its_reason(workspace, family):
    _, report = _exported(workspace, f"new-{family.name}", family.build, backends=family.ci)
    assert report.plan.task == family.task, report.plan.task
    assert [b.backend for b in report.backends] == family.ci.split(",")
    for b in report.backends:
        words = family.refused.get(b.backend)
        if words is not None:
            assert b.status != Status.OK and words in (b.error or ""), (b.backend, b.status, b.error)
            assert not b.files, b.files  # refused before anything was exported
            continue
        assert b.status == Status.OK, (b.backend, b.error)
        checks = {c.name: c for c in b.validation.checks}
        assert b.validation.passed, checks
        if report.plan.split == Split.SINGLE:
            assert set(checks) == {"sample", "other_shape"}, checks
            assert report.plan.validation.batch != report.plan.sample.batch
        else:
            # Another batch and prompt length than traced, eager's tokens on each.
            other = checks["generation_other_shape"]
            assert other.error is None and other.tokens_equal, other
            assert len(other.eager_tokens) == report.plan.validation.batch
            if b.backend == "executorch":  # its LLM runner program: TextLLMRunner wrote eager's text
                runner = checks["llm_runner"]
                assert runner.error is None and runner.tokens_equal, runner


def test_a_spectrogram_model_takes_recordings_of_any_length(workspace):
    """wav2vec2-BERT reads a spectrogram as long as the recording (Whisper's is padded to 30 s): the
    plan reads its time axis off the repo's feature extractor, and the export validates on another
    number of frames than it was traced on (it was traced static: "Guard failed: input_features.size()[1] == 52")."""
    from hfexport.pipeline.plan import make_plan

    family = families.BY_NAME["wav2vec2-bert"]
    folder = family.build(workspace / "model-spectrogram-axes")
    plan = make_plan(folder, ["onnx"])
    axes = plan.dynamic_axes["input_features"]
    assert axes[1].dim == "audio_frames" and axes[1].min < 60 < axes[1].max, axes
    assert 2 not in axes  # the features per frame are the model's


def test_a_raw_audio_encoder_takes_recordings_as_long_as_its_positions_hold(tmp_path):
    """SpeechT5 with 600 speech positions, as an independent sweep built it: its time axis ends where
    its positions do, 320 samples a position, and no minute is asked of it (torch.export refused one
    on both backends: "Constraints violated (audio_samples)"). wav2vec2's positions are a convolution:
    it keeps the minute."""
    import json

    import tiny_models

    from hfexport.pipeline.plan import make_plan

    # The family's own build, its config saying 600 speech positions (the plan reads the config alone).
    folder = families.BY_NAME["speecht5-asr"].build(tmp_path / "speecht5")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_speech_positions": 600}))
    axis = make_plan(folder, ["onnx"]).dynamic_axes["input_values"][1]
    assert (axis.dim, axis.max) == ("audio_samples", 320 * 600), axis
    axis = make_plan(tiny_models.wav2vec2_ctc(tmp_path / "wav2vec2"), ["onnx"]).dynamic_axes["input_values"][1]
    assert axis.max == 16000 * 60, axis


def test_a_processor_saved_whole_by_transformers_5_is_read_for_its_image_settings(tmp_path):
    """SigLIP 2 with its processor saved by `save_pretrained` (transformers 5 writes one
    `processor_config.json`, the image processor's settings inside it): planned with its patch
    inputs, as from a `preprocessor_config.json`; before, its images axis went to torch.export alone
    and was refused ("Constraints violated (images)")."""
    import transformers
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from hfexport.pipeline.plan import make_plan

    torch.manual_seed(0)
    tower = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=2)
    config = transformers.Siglip2Config(text_config=dict(tower, vocab_size=128), vision_config=tower)
    folder = tmp_path / "siglip2"
    transformers.Siglip2Model(config).save_pretrained(folder)
    words = Tokenizer(models.WordLevel({"<pad>": 0, "<unk>": 1, "a": 2, "photo": 3}, unk_token="<unk>"))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, pad_token="<pad>", unk_token="<unk>")
    image_processor = transformers.Siglip2ImageProcessor()
    transformers.Siglip2Processor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(folder)
    assert not (folder / "preprocessor_config.json").exists()
    axes = make_plan(folder, ["onnx"]).dynamic_axes
    assert {"pixel_values", "pixel_attention_mask", "spatial_shapes"} <= set(axes), axes


def test_a_checkpoint_its_own_model_cannot_run_is_said_so_not_blamed_on_the_export(tmp_path):
    """An OWLv2 whose projection width (16) differs from its towers' (32), as an independent build made
    it: transformers' own forward fails on it ("einsum(): subscript d has size 16 …"), so the export
    fails with the model's error said as the checkpoint's, and a fix to its config — not a stack trace
    from mid-tracing read as an exporter bug."""
    import transformers

    import hfexport
    from hfexport.report import Status

    tower = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=2)
    config = transformers.Owlv2Config(
        text_config=dict(tower, vocab_size=128),
        vision_config=dict(tower, image_size=32, patch_size=8),
        projection_dim=16,
    )
    torch.manual_seed(0)
    transformers.Owlv2ForObjectDetection(config).save_pretrained(tmp_path / "owlv2")
    report = hfexport.export(str(tmp_path / "owlv2"), tmp_path / "out", backends="onnx", variants="none", progress=None)
    (onnx,) = report.backends
    assert onnx.status == Status.FAILED and not onnx.files, onnx
    assert "does not run on this checkpoint in transformers" in onnx.error and "einsum()" in onnx.error, onnx.error
    assert "Fix: Fix config.json" in onnx.error, onnx.error


def test_a_vision_language_model_whose_features_need_each_images_size_is_refused_before_anything_runs(tmp_path):
    """LLaVA-OneVision's processor loads here without its video part (which needs torchvision), and its
    image features need each image's size (`image_sizes`: anyres tiling and unpadding) beside the
    pixels, which the image-text export's vision encoder is not fed: `hfexport export` exits 2 naming
    that input, and writes nothing."""
    folder = families.BY_NAME["llava-onevision"].build(tmp_path / "model")
    result = run_cli("export", str(folder), "--backends", "onnx", "--out", str(tmp_path / "out"), timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    message = " ".join(result.stderr.split())
    assert "LlavaOnevisionForConditionalGeneration's image features need `image_sizes`" in message, message
    assert "torchvision" not in message and "Traceback" not in message, message
    assert not (tmp_path / "out").exists()


def test_a_processor_missing_a_package_for_its_image_part_names_the_package_and_its_install(tmp_path, monkeypatch):
    """Only a video part that needs torchvision is left out: SmolVLM's processor without num2words (its
    image prompts need it) is refused naming that package and its install, before anything runs."""
    from hfexport.errors import ConfigError
    from hfexport.processors import load_processor

    folder = families.BY_NAME["smolvlm"].build(tmp_path / "model")
    assert type(load_processor(folder, "SmolVLM")).__mro__[1].__name__ == "SmolVLMProcessor"
    import transformers.models.smolvlm.processing_smolvlm as smolvlm

    monkeypatch.setattr(smolvlm, "num2words", None)  # as transformers leaves it where the package is missing
    try:
        load_processor(folder, "SmolVLMForConditionalGeneration")
    except ConfigError as error:
        assert "SmolVLMForConditionalGeneration's processor does not load" in str(error), error
        assert "num2words" in str(error) and "pip install" in error.fix, (error, error.fix)
    else:
        raise AssertionError("the processor loaded without num2words")

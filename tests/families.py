"""The families people publish now, each as a tiny random model built from its own config class.

One registry (`FAMILIES`) feeds the family sweep (`tests/sweep_families.py`, documented in
docs/development.md) and the CI tests that take a share of it (`tests/test_new_families.py`):
adding a family is one `Family(...)` line here. Sizes are the suite's (2 layers, width 32); a
family's own knobs (its window, its experts, its state sizes) are set small enough to matter
(a sliding window shorter than the validation prompts, more experts than are routed to).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tiny_models
import torch

_SPECIAL = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
_SIZES = dict(
    vocab_size=128,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=37,
    max_position_embeddings=128,
)


@dataclasses.dataclass(frozen=True)
class Family:
    """A family: its name, how its tiny model is built, the task its head decides, and the
    backends it must export, validate and load on (the others are refused up front, with why)."""

    name: str
    build: Callable[[Path], Path]
    task: str
    backends: str = "dynamo,onnx,executorch"
    # The backends CI's default run exports it on (`tests/test_new_families.py`); None: the sweep's only.
    ci: str | None = None
    # Backends that refuse it, each with words its reason must hold (said before anything is exported).
    refused: dict[str, str] = dataclasses.field(default_factory=dict)


def _generating(model):
    """`model` as the suite's generating models are: its head scaled (x8) so that greedy tokens vary
    instead of repeating one id, and the special ids' generation config."""
    from transformers import GenerationConfig

    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8)
    model.generation_config = GenerationConfig(**_SPECIAL)
    return model


def _llm(config_name: str, model_name: str, runner: bool = False, **overrides: Any) -> Callable[[Path], Path]:
    """A builder of a random causal LM from the family's own config class, its head scaled as the
    suite's tiny Llama's is (varied greedy tokens). `runner`: over a byte-level BPE tokenizer's ids
    (`tiny_models.byte_level_tokenizer`: every token whole characters), saved beside it, so ExecuTorch's
    `TextLLMRunner` (which reads byte-level BPE, SentencePiece and tiktoken files) runs it too."""

    def build(folder: Path) -> Path:
        import transformers

        special = dict(bos_token_id=0, eos_token_id=0, pad_token_id=1) if runner else _SPECIAL
        # Its trained vocabulary is smaller than 256: ids past it a random head would write, and the
        # runner cannot (measured: eager's 177, a token the tokenizer lacks; the runner another).
        vocab = {"vocab_size": len(tiny_models.byte_level_tokenizer())} if runner else {}
        # Untied: a tied head at this size repeats one token, and a loader's text would prove nothing.
        sizes = {**_SIZES, **special, **vocab, "tie_word_embeddings": False, **overrides}
        sizes = {k: v for k, v in sizes.items() if v is not None}
        torch.manual_seed(0)
        config = getattr(transformers, config_name)(**sizes)
        model = _generating(getattr(transformers, model_name)(config).eval())
        if runner:
            from transformers import GenerationConfig

            model.generation_config = GenerationConfig(**special)
            tiny_models._save_tokenizer(tiny_models.byte_level_tokenizer(), folder)
        return tiny_models._save(model, folder)

    build.__name__ = model_name
    return build


GEN = "text-generation-with-past"

FAMILIES: list[Family] = [
    # Sliding windows (every layer, or in turn with full ones).
    Family(
        "gemma3-text", _llm("Gemma3TextConfig", "Gemma3ForCausalLM", head_dim=8, sliding_window=4), GEN, ci="dynamo"
    ),
    Family("exaone4", _llm("Exaone4Config", "Exaone4ForCausalLM", sliding_window=4, sliding_window_pattern=2), GEN),
    Family("starcoder2", _llm("Starcoder2Config", "Starcoder2ForCausalLM", sliding_window=4), GEN),
    Family(
        "gpt-oss",
        _llm(
            "GptOssConfig",
            "GptOssForCausalLM",
            intermediate_size=32,  # its experts' grouped matmul takes rows of 16 bytes
            head_dim=8,
            sliding_window=4,
            num_local_experts=4,
            num_experts_per_tok=2,
            layer_types=["sliding_attention", "full_attention"],
        ),
        GEN,
    ),
    Family(
        "modernbert-decoder",
        _llm(
            "ModernBertDecoderConfig",
            "ModernBertDecoderForCausalLM",
            num_key_value_heads=None,
            local_attention=4,
            global_attn_every_n_layers=2,
        ),
        GEN,
    ),
    # Caches of other shapes than heads x head_dim: one key/value head, latent attention.
    Family(
        "falcon",
        _llm(
            "FalconConfig",
            "FalconForCausalLM",
            runner=True,
            num_key_value_heads=None,
            intermediate_size=None,
            max_position_embeddings=None,
            multi_query=True,
            new_decoder_architecture=False,
        ),
        GEN,
        ci="dynamo,executorch",
    ),
    Family(
        "deepseek-v3",
        _llm(
            "DeepseekV3Config",
            "DeepseekV3ForCausalLM",
            runner=True,
            num_key_value_heads=None,
            moe_intermediate_size=16,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_group=1,
            topk_group=1,
            first_k_dense_replace=1,
            q_lora_rank=16,
            kv_lora_rank=16,
            qk_rope_head_dim=4,
            qk_nope_head_dim=8,
            v_head_dim=8,
        ),
        GEN,
        ci="dynamo",
    ),
    # State-space and hybrid caches.
    Family(
        "mamba",
        _llm(
            "MambaConfig",
            "MambaForCausalLM",
            num_attention_heads=None,
            num_key_value_heads=None,
            intermediate_size=64,
            max_position_embeddings=None,
            state_size=8,
        ),
        GEN,
        ci="dynamo",
        # Its scan steps through the tokens in Python under export: the program would take two only.
        refused=dict.fromkeys(("dynamo", "onnx", "executorch"), "decode program takes exactly 2 new token(s)"),
    ),
    Family(
        "mamba2",
        _llm(
            "Mamba2Config",
            "Mamba2ForCausalLM",
            runner=True,
            num_attention_heads=None,
            num_key_value_heads=None,
            intermediate_size=None,
            max_position_embeddings=None,
            num_heads=8,
            head_dim=8,
            state_size=8,
            n_groups=1,
            expand=2,
        ),
        GEN,
        ci="dynamo",  # a left-padded prompt: generate() drops the mask its program needs (`Decoder.masked`)
    ),
    Family(
        "lfm2",
        _llm("Lfm2Config", "Lfm2ForCausalLM", runner=True, layer_types=["conv", "full_attention"], block_ff_dim=37),
        GEN,
        # Its ExecuTorch program (ExecuTorch's own LFM2 export) runs in the loaders' test, every block.
        ci="dynamo,onnx",
    ),
    Family(
        "granite4-hybrid",
        _llm(
            "GraniteMoeHybridConfig",
            "GraniteMoeHybridForCausalLM",
            runner=True,
            intermediate_size=32,  # its experts' grouped matmul takes rows of 16 bytes
            layer_types=["mamba", "attention"],
            mamba_n_heads=4,
            mamba_d_head=16,
            mamba_d_state=8,
            mamba_n_groups=1,
            num_local_experts=4,
            num_experts_per_tok=2,
            shared_intermediate_size=16,
        ),
        GEN,
        # Its runner program holds transformers' StaticCache, states and all (`llm_runner.StatefulDecoder`),
        # judged in ExecuTorch's runtime and TextLLMRunner.
        ci="executorch",
    ),
    Family(
        "qwen3-next",
        _llm(
            "Qwen3NextConfig",
            "Qwen3NextForCausalLM",
            runner=True,
            head_dim=8,
            layer_types=["linear_attention", "full_attention"],
            linear_num_value_heads=4,
            linear_num_key_heads=2,
            linear_key_head_dim=8,
            linear_value_head_dim=8,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=16,
        ),
        GEN,
    ),
    Family(
        "falcon-h1",
        _llm(
            "FalconH1Config",
            "FalconH1ForCausalLM",
            runner=True,
            head_dim=8,
            mamba_n_heads=4,
            mamba_d_head=16,
            mamba_d_state=8,
            mamba_n_groups=1,
            mamba_d_ssm=64,
        ),
        GEN,
    ),
]


def _carrying_signal(model, pixels: tuple[int, ...]):
    """`model` re-initialised so that an image's signal reaches its heads, as a trained one's does.

    The families' own inits are made for training from scratch, and at these sizes they damp: in
    RT-DETR (zero-mean convolutions of fan-in 8 behind batch norms at their unit init) the encoder's
    output had a spread of 4e-8, every query's score tied, and the top-k that picks the decoder's
    queries was a coin toss between runtimes (ONNX 0.19 off on boxes, the model's fault, not the
    export's). He-initialised weights, unit norms and batch-norm statistics gathered on four random
    batches give a spread of about 1 and distinct scores (exported programs then agree to 4e-5).
    """
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() > 1:
                parameter.normal_(0, (2.0 / parameter[0].numel()) ** 0.5)
            elif name.endswith("weight"):
                parameter.fill_(1.0)
        norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        for norm in norms:
            norm.reset_running_stats()
            norm.momentum = None  # a plain average over the batches below
            norm.train()
        for _ in range(4):
            model(pixel_values=torch.randn(4, *pixels[1:]))
    return model.eval()


def _model(
    config_name: str,
    model_name: str,
    preprocessor: tuple[str, dict] | None = None,
    pixels: tuple[int, ...] | None = None,
    tokenizer: Callable[[Path], None] | None = None,
    generating: bool = False,
    **config: Any,
) -> Callable[[Path], Path]:
    """A builder of any random model from its family's config class (sub-configs as dicts), with
    the preprocessor its repos ship (`(class name, its settings)`) and its `tokenizer` (a writer),
    as a real repo has them; `pixels` (an image batch's shape): re-initialised to carry an image's
    signal (`_carrying_signal`); `generating`: its head scaled as the suite's generators' (`_generating`)."""

    def build(folder: Path) -> Path:
        import transformers

        torch.manual_seed(0)
        model = getattr(transformers, model_name)(getattr(transformers, config_name)(**config)).eval()
        if pixels is not None:
            model = _carrying_signal(model, pixels)
        if generating:
            model = _generating(model)
        if preprocessor is not None:
            name, settings = preprocessor
            getattr(transformers, name)(**settings).save_pretrained(folder)
        if tokenizer is not None:
            tokenizer(folder)
        return tiny_models._save(model, folder)

    build.__name__ = model_name
    return build


def _words(folder: Path) -> None:
    """A word-level tokenizer over the 128 ids of a tiny generating model (`tiny_models`)."""
    tiny_models._save_tokenizer(tiny_models._word_tokenizer(), folder)


def _letters(folder: Path) -> None:
    """A CTC model's character tokenizer over its 12 ids, as wav2vec2-style checkpoints ship one
    (`vocab.json`): the blank (pad) first, `|` between words."""
    import json

    from transformers import Wav2Vec2CTCTokenizer

    letters = ["<pad>", "<s>", "</s>", "<unk>", "|", "e", "t", "a", "o", "n", "s", "h"]
    (folder / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(letters)}))
    Wav2Vec2CTCTokenizer(str(folder / "vocab.json")).save_pretrained(folder)


# RT-DETR and its v2: a 3-stage ResNet backbone of transformers' own, one encoder layer.
_RT_DETR = dict(
    backbone_config=dict(
        model_type="rt_detr_resnet",
        embedding_size=8,
        hidden_sizes=[8, 16, 16],
        depths=[1, 1, 1],
        out_features=["stage1", "stage2", "stage3"],
    ),
    encoder_hidden_dim=16,
    encoder_in_channels=[8, 16, 16],
    encoder_ffn_dim=32,
    d_model=16,
    decoder_ffn_dim=32,
    encoder_layers=1,
    num_queries=5,
    num_labels=3,
    decoder_in_channels=[16, 16, 16],
    use_pretrained_backbone=False,
)
_ENCODER = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37)
_TOWER = dict(_ENCODER, num_hidden_layers=1)

FAMILIES += [
    # Speech: the time axis is the recording's length.
    Family(
        "wav2vec2-bert",
        _model(
            "Wav2Vec2BertConfig",
            "Wav2Vec2BertForCTC",
            ("SeamlessM4TFeatureExtractor", dict(feature_size=8, num_mel_bins=8)),
            tokenizer=_letters,
            **_ENCODER,
            vocab_size=12,
            feature_projection_input_dim=16,
            conv_depthwise_kernel_size=3,
            position_embeddings_type="relative_key",
            add_adapter=False,
        ),
        "automatic-speech-recognition",
        "dynamo,onnx",
        ci="dynamo",
    ),
    Family(
        "parakeet-ctc",
        _model(
            "ParakeetCTCConfig",
            "ParakeetForCTC",
            ("ParakeetFeatureExtractor", dict(feature_size=16)),
            tokenizer=_letters,
            vocab_size=12,
            encoder_config=dict(
                **_ENCODER,
                num_mel_bins=16,
                subsampling_conv_channels=8,
                conv_kernel_size=3,
            ),
        ),
        "automatic-speech-recognition",
        "dynamo,onnx",
        ci="dynamo",
    ),
    Family(
        "speecht5-asr",
        _model(
            "SpeechT5Config",
            "SpeechT5ForSpeechToText",
            ("SpeechT5FeatureExtractor", {}),
            vocab_size=128,
            hidden_size=32,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=37,
            decoder_ffn_dim=37,
            # The checkpoints' feature encoder (stride 320): a minute of audio fits its 4,000 positions.
            conv_dim=(16,) * 7,
            conv_stride=(5, 2, 2, 2, 2, 2, 2),
            conv_kernel=(10, 3, 3, 3, 3, 2, 2),
            num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=2,
            speech_decoder_prenet_units=16,
            **_SPECIAL,
            decoder_start_token_id=1,
        ),
        "automatic-speech-recognition-with-past",
        "dynamo,onnx",
        ci="dynamo",
    ),
    Family(
        "moonshine",
        _model(
            "MoonshineConfig",
            "MoonshineForConditionalGeneration",
            (
                "Wav2Vec2FeatureExtractor",
                dict(feature_size=1, padding_value=0.0, do_normalize=False, return_attention_mask=True),
            ),
            tokenizer=_words,
            generating=True,
            tie_word_embeddings=False,  # tied, the scaled head scales the input embeddings too
            vocab_size=128,
            hidden_size=32,
            intermediate_size=37,
            encoder_num_hidden_layers=1,
            decoder_num_hidden_layers=1,
            encoder_num_attention_heads=2,
            decoder_num_attention_heads=2,
            **_SPECIAL,
            decoder_start_token_id=1,
        ),
        "automatic-speech-recognition-with-past",
        "dynamo,onnx",
        ci="dynamo",
    ),
    # Vision.
    Family(
        "siglip2",
        _model(
            "Siglip2Config",
            "Siglip2Model",
            ("Siglip2ImageProcessor", dict(patch_size=8, max_num_patches=16)),
            text_config=dict(_TOWER, vocab_size=128),
            vision_config=dict(_TOWER, num_patches=16, patch_size=8),
        ),
        "zero-shot-image-classification",
        "dynamo,onnx",
        ci="dynamo",
    ),
    Family(
        "mobilenet-v2",
        _model(
            "MobileNetV2Config",
            "MobileNetV2ForImageClassification",
            ("MobileNetV2ImageProcessor", dict(size={"shortest_edge": 36}, crop_size={"height": 32, "width": 32})),
            image_size=32,
            depth_multiplier=0.25,
            num_labels=3,
        ),
        "image-classification",
        ci="dynamo",
    ),
    Family(
        "rt-detr",
        _model(
            "RTDetrConfig",
            "RTDetrForObjectDetection",
            ("RTDetrImageProcessor", dict(size={"height": 64, "width": 64})),
            (1, 3, 64, 64),
            **_RT_DETR,
            decoder_layers=1,
        ),
        "object-detection",
        ci="dynamo",
    ),
    Family(
        "rt-detr-v2",
        _model(
            "RTDetrV2Config",
            "RTDetrV2ForObjectDetection",
            ("RTDetrImageProcessor", dict(size={"height": 64, "width": 64})),
            (1, 3, 64, 64),
            **_RT_DETR,
            decoder_layers=2,  # its box heads are tied from the second layer on
        ),
        "object-detection",
    ),
    Family(
        "owlv2",
        _model(
            "Owlv2Config",
            "Owlv2ForObjectDetection",
            text_config=dict(_TOWER, vocab_size=128),
            vision_config=dict(_TOWER, image_size=32, patch_size=8),
            projection_dim=32,
        ),
        "zero-shot-object-detection",
        "dynamo,onnx",
        ci="dynamo",
    ),
]

BY_NAME = {f.name: f for f in FAMILIES}


def _gemma3_vision(folder: Path) -> Path:
    """Gemma 3 with its vision tower (SigLIP) and its processor: `<start_of_image>` in a prompt becomes
    the image's soft tokens (4 here) between its begin and end tokens, as the checkpoints' does."""
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3ImageProcessorPil,
        Gemma3Processor,
        PreTrainedTokenizerFast,
    )

    named = {"boi_token": "<start_of_image>", "image_token": "<image_soft_token>", "eoi_token": "<end_of_image>"}
    words = tiny_models._word_tokenizer(dict(zip((100, 101, 102), named.values())))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=words.backend_tokenizer,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
        extra_special_tokens=named,
    )
    torch.manual_seed(0)
    config = Gemma3Config(
        text_config=dict(_SIZES, **_SPECIAL, head_dim=8, sliding_window=4, tie_word_embeddings=False),
        vision_config=dict(_TOWER, image_size=32, patch_size=8),
        mm_tokens_per_image=4,
        boi_token_index=100,
        image_token_index=101,
        eoi_token_index=102,
        **_SPECIAL,
    )
    model = _generating(Gemma3ForConditionalGeneration(config).eval())
    processor = Gemma3Processor(
        image_processor=Gemma3ImageProcessorPil(size={"height": 32, "width": 32}),
        tokenizer=tokenizer,
        image_seq_length=4,
    )
    processor.save_pretrained(folder)
    return tiny_models._save(model, folder)


FAMILIES += [Family("gemma3-vision", _gemma3_vision, "image-text-to-text", ci="dynamo")]
BY_NAME = {f.name: f for f in FAMILIES}


def _vlm(
    config_name: str,
    model_name: str,
    special: dict[int, str],
    processor: dict[str, Any],
    settings: dict[str, Any] | None = None,
    **config: Any,
) -> Callable[[Path], Path]:
    """A builder of a vision-language model with the processor files its checkpoints ship, written as
    JSON: their processors build a video processor that needs torchvision, which hfexport does not
    install (and which does not import beside torch 2.13's CPU build), so no class can write them here.
    `settings`: the processor's own (`processor_config.json`), as the checkpoints' set them."""

    def build(folder: Path) -> Path:
        import json

        import transformers

        torch.manual_seed(0)
        model = getattr(transformers, model_name)(getattr(transformers, config_name)(**config, **_SPECIAL))
        tiny_models._save(model.eval(), folder)
        tiny_models._save_tokenizer(tiny_models._word_tokenizer(special), folder)
        (folder / "preprocessor_config.json").write_text(json.dumps(processor, indent=2))
        if settings is not None:
            named = {"processor_class": processor["processor_class"], **settings}
            (folder / "processor_config.json").write_text(json.dumps(named, indent=2))
        return folder

    build.__name__ = model_name
    return build


_VISION_TOWER = dict(_TOWER, image_size=32, patch_size=8)

FAMILIES += [
    Family(
        "qwen2.5-vl",
        _vlm(
            "Qwen2_5_VLConfig",
            "Qwen2_5_VLForConditionalGeneration",
            {100: "<|image_pad|>", 101: "<|video_pad|>", 102: "<|vision_start|>"},
            {
                "image_processor_type": "Qwen2VLImageProcessor",
                "processor_class": "Qwen2_5_VLProcessor",
                "patch_size": 4,
                "merge_size": 2,
                "temporal_patch_size": 2,
                # An image resized to 512–2048 pixels: 8 to 32 tokens of 8×8 pixels.
                "min_pixels": 512,
                "max_pixels": 2048,
            },
            text_config=dict(_SIZES, **_SPECIAL, rope_scaling={"type": "mrope", "mrope_section": [2, 1, 1]}),
            # A windowed block (windows of 16 pixels: 2×2 tokens) before a full one, as the model's are.
            vision_config=dict(
                depth=2,
                hidden_size=32,
                intermediate_size=37,
                num_heads=2,
                out_hidden_size=32,
                patch_size=4,
                spatial_merge_size=2,
                temporal_patch_size=2,
                window_size=16,
                fullatt_block_indexes=[1],
            ),
            image_token_id=100,
            video_token_id=101,
            vision_start_token_id=102,
        ),
        "image-text-to-text",
        # Its vision encoder fed each image's grid and geometry, validated on another grid (ExecuTorch's
        # runtime has no kernel for the int64 sort that undoes its window order: `test_failures`).
        ci="onnx",
    ),
    Family(
        "smolvlm",
        _vlm(
            "SmolVLMConfig",
            "SmolVLMForConditionalGeneration",
            {100: "<image>", 101: "<fake_token_around_image>", 102: "<global-img>"},
            {
                "image_processor_type": "SmolVLMImageProcessor",
                "processor_class": "SmolVLMProcessor",
                "size": {"longest_edge": 64},
                "max_image_size": {"longest_edge": 32},
            },
            # A 32-pixel image is 4×4 patches of 8, merged 2×2 (`scale_factor`): 4 tokens.
            {"image_seq_len": 4},
            text_config=dict(_SIZES, model_type="llama"),
            vision_config=_VISION_TOWER,
            image_token_id=100,
            scale_factor=2,
        ),
        "image-text-to-text",
    ),
    Family(
        "llava-onevision",
        _vlm(
            "LlavaOnevisionConfig",
            "LlavaOnevisionForConditionalGeneration",
            {100: "<image>", 101: "<video>"},
            {
                "image_processor_type": "LlavaOnevisionImageProcessor",
                "processor_class": "LlavaOnevisionProcessor",
                "size": {"height": 32, "width": 32},
                "image_grid_pinpoints": [[32, 32], [32, 64]],
            },
            # As llava-onevision-qwen2-0.5b-ov-hf's: every patch a token (4×4 of 8 pixels here).
            {"num_image_tokens": 16, "vision_feature_select_strategy": "full"},
            text_config=dict(_SIZES, model_type="qwen2"),
            vision_config=dict(_VISION_TOWER, model_type="siglip_vision_model"),
            image_token_index=100,
            video_token_index=101,
            image_grid_pinpoints=[[32, 32], [32, 64]],
        ),
        "image-text-to-text",
        refused=dict.fromkeys(("dynamo", "onnx", "executorch"), "need `image_sizes` beside the pixels"),
    ),
]
BY_NAME = {f.name: f for f in FAMILIES}

"""Sample and validation inputs, one builder per modality (a registry, like the backends).

A builder takes the model folder, its config and a `Shape`, and returns the tensors the model's
forward (or `generate()`) takes. It prefers the repo's own preprocessor (tokenizer, image
processor, feature extractor) so the values look like real use, and falls back to synthetic
values sized from the config. Builders are deterministic for a given seed: the export worker and
the validation rebuild the same tensors from the plan instead of shipping them between processes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..processors import load_processor
from ..report import ExportPlan, Shape

if TYPE_CHECKING:
    from transformers import PretrainedConfig

# builder(model_dir, config, plan, shape, seed, left) -> tensors; `left`: pad prompts on the left.
InputBuilder = Callable[[Path, "PretrainedConfig", ExportPlan, Shape, int, bool], dict[str, torch.Tensor]]
INPUT_BUILDERS: dict[str, InputBuilder] = {}


def register_inputs(modality: str) -> Callable[[InputBuilder], InputBuilder]:
    def decorate(fn: InputBuilder) -> InputBuilder:
        INPUT_BUILDERS[modality] = fn
        return fn

    return decorate


def build_inputs(
    model_dir: Path, config: PretrainedConfig, plan: ExportPlan, shape: Shape, seed: int, *, left: bool = False
) -> dict[str, torch.Tensor]:
    """The model's inputs of this modality and shape (the split adds what its components need:
    `ExportSplit.inputs`). `left`: prompts padded on the left, as generation pads them."""
    return INPUT_BUILDERS[plan.modality](Path(model_dir), config, plan, shape, seed, left)


def as_dtype(inputs: dict, dtype: torch.dtype) -> dict:
    """`inputs` with their floating-point tensors (pixels, audio features) in the model's `dtype`;
    token ids, masks and anything not a tensor as they are."""
    return {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in inputs.items()}


def speaks_languages(generation_config) -> bool:
    """A speech model whose decoder prompt names a language and a task (Whisper)."""
    return bool(getattr(generation_config, "lang_to_id", None)) and bool(getattr(generation_config, "task_to_id", None))


def generation_config_of(model_dir: Path):
    """The repo's `generation_config.json`, or None (absent or unreadable)."""
    if not (model_dir / "generation_config.json").exists():
        return None
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model_dir)
    except Exception:
        return None


def decoder_prompt(config: PretrainedConfig, shape: Shape, seed: int, generation_config=None) -> torch.Tensor:
    """The decoder's start token then `decoder_prompt - 1` tokens: a prompt of one token would
    specialise the decode step's cache length to 1. Ordinary tokens, or for a model whose prompt
    names a language and a task (Whisper), those: English if it has it, transcription, then no
    timestamps — set explicitly, as a user does, never left to language detection."""
    generator = torch.Generator().manual_seed(seed + 1)
    start = config.decoder_start_token_id if config.decoder_start_token_id is not None else 0
    low, high = _token_range(config)
    tokens = [start]
    if generation_config is not None and speaks_languages(generation_config):
        languages = generation_config.lang_to_id
        tasks = generation_config.task_to_id
        tokens += [
            languages.get("<|en|>", next(iter(languages.values()))),
            tasks.get("transcribe", next(iter(tasks.values()))),
        ]
        if getattr(generation_config, "no_timestamps_token_id", None) is not None:
            tokens.append(generation_config.no_timestamps_token_id)
    head = torch.tensor(tokens[: shape.decoder_prompt], dtype=torch.long).expand(shape.batch, -1)
    rest = torch.randint(low, high, (shape.batch, shape.decoder_prompt - head.shape[1]), generator=generator)
    return torch.cat([head, rest], dim=1)


# Sentences of clearly different lengths, so a padded batch really has padding.
_SENTENCES = [
    "Exported models should match the original.",
    "A short one.",
    "The quick brown fox jumps over the lazy dog while the exporter traces every operation twice.",
    "Validation runs on shapes that differ from the sample inputs used for tracing.",
    "Hello world.",
]


def _token_range(config: PretrainedConfig) -> tuple[int, int]:
    """Ordinary token ids: above the usual special ids, inside the vocabulary."""
    vocab = int(getattr(config, "vocab_size", 0) or getattr(getattr(config, "text_config", None), "vocab_size", 100))
    return min(5, vocab - 1), vocab


def _load_tokenizer(model_dir: Path):
    if not any((model_dir / name).exists() for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt")):
        return None
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
    except Exception:
        return None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    return tokenizer if tokenizer.pad_token is not None else None


@register_inputs("text")
def text_inputs(
    model_dir: Path, config: PretrainedConfig, plan: ExportPlan, shape: Shape, seed: int, left: bool = False
) -> dict[str, torch.Tensor]:
    # Decoders are padded on the left (generation appends on the right); encoders on the right.
    tokenizer = _load_tokenizer(model_dir)
    if tokenizer is not None:
        tokenizer.padding_side = "left" if left else "right"
        # Pick sentences so the longest tokenises to exactly `shape.sequence` tokens: the shape is a promise.
        texts = [_SENTENCES[(seed + i) % len(_SENTENCES)] for i in range(shape.batch)]
        encoded = tokenizer(
            texts, padding="max_length", truncation=True, max_length=shape.sequence, return_tensors="pt"
        )
        inputs = {k: v for k, v in encoded.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        if shape.padded:
            _ensure_padding(inputs, tokenizer.pad_token_id, left)
        return inputs

    generator = torch.Generator().manual_seed(seed)
    low, high = _token_range(config)
    input_ids = torch.randint(low, high, (shape.batch, shape.sequence), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if shape.padded:
        pad = getattr(config, "pad_token_id", None)
        _ensure_padding(inputs, pad if pad is not None else 0, left)
    return inputs


def _ensure_padding(inputs: dict[str, torch.Tensor], pad_id: int, left: bool) -> None:
    """Make the last row padded by at least a third of the sequence, so masks are exercised."""
    mask = inputs["attention_mask"]
    if (mask == 0).any() or mask.shape[0] < 2:
        return
    n = max(1, mask.shape[1] // 3)
    cols = slice(0, n) if left else slice(mask.shape[1] - n, None)
    mask[-1, cols] = 0
    inputs["input_ids"][-1, cols] = pad_id


@register_inputs("vision")
def vision_inputs(
    model_dir: Path, config: PretrainedConfig, plan: ExportPlan, shape: Shape, seed: int, left: bool = False
) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    processor = _load_processor(model_dir, "AutoImageProcessor")
    vision = getattr(config, "vision_config", config)
    size = getattr(vision, "image_size", 224)
    height, width = shape.image or ((size, size) if isinstance(size, int) else tuple(size)[:2])
    if processor is not None:
        # Photographs (random images where none are installed) through the repo's own processor: its
        # resize, crop and normalisation.
        images = photographs(shape.batch, height, width, seed)
        if images is None:
            images = torch.randint(0, 256, (shape.batch, height, width, 3), generator=generator, dtype=torch.uint8)
            images = images.numpy()
        try:
            encoded = processor(images=list(images), return_tensors="pt")
            # Patch sequences (SigLIP 2's NaFlex) come with their mask and each image's patch grid.
            return {k: encoded[k] for k in ("pixel_values", "pixel_attention_mask", "spatial_shapes") if k in encoded}
        except Exception:
            pass  # an unusual processor: fall back to the config's sizes
    channels = getattr(vision, "num_channels", 3)
    # Values in the normalised range an image processor produces.
    return {"pixel_values": torch.randn(shape.batch, channels, height, width, generator=generator)}


# Photographs scikit-image ships in its package (`skimage/data`, BSD-licensed, read as files: the
# package is installed `--no-deps` and never imported). Noise images have no objects, edges or
# colour statistics: a quantized vision file is judged on what it will be shown.
PHOTOGRAPHS = ("chelsea.png", "coffee.png", "astronaut.png", "rocket.jpg", "motorcycle_left.png")


def photographs(count: int, height: int, width: int, seed: int = 0):
    """`count` photographs as `[count, height, width, 3]` uint8 (centre-cropped to the aspect ratio,
    resized), from the `seed`-th on; None where scikit-image is not installed."""
    import importlib.util

    import numpy as np
    from PIL import Image

    spec = importlib.util.find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    out = []
    for i in range(count):
        path = folder / PHOTOGRAPHS[(seed + i) % len(PHOTOGRAPHS)]
        if not path.exists():
            return None
        image = Image.open(path).convert("RGB")
        scale = min(image.width / width, image.height / height)
        w, h = int(width * scale), int(height * scale)
        left, top = (image.width - w) // 2, (image.height - h) // 2
        image = image.crop((left, top, left + w, top + h)).resize((width, height), Image.Resampling.BICUBIC)
        out.append(np.asarray(image, dtype=np.uint8))
    return np.stack(out)


@register_inputs("audio")
def audio_inputs(
    model_dir: Path, config: PretrainedConfig, plan: ExportPlan, shape: Shape, seed: int, left: bool = False
) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    # The model's own main input (the plan's audio axes are keyed by it): SpeechT5's config has mel
    # bins for its speech output, and its recognizer still reads raw audio.
    main = next((k for k in ("input_features", "input_values") if k in plan.dynamic_axes), "")
    extractor = _load_processor(model_dir, "AutoFeatureExtractor")
    if extractor is not None:
        rate = getattr(extractor, "sampling_rate", 16000)
        # One to two seconds of noise per example, of different lengths: the extractor pads them.
        waves = [torch.randn(rate + 997 * i, generator=generator).numpy() for i in range(shape.batch)]
        try:
            features = extractor(waves, sampling_rate=rate, return_tensors="pt")
            key = main if main in features else ("input_features" if "input_features" in features else "input_values")
            return {key: features[key]}
        except Exception:
            pass
    mel_bins = getattr(config, "num_mel_bins", None)
    if mel_bins and main != "input_values":
        # Whisper-style encoders take a fixed number of frames: 2 per source position.
        frames = 2 * int(getattr(config, "max_source_positions", 1500))
        return {"input_features": torch.randn(shape.batch, mel_bins, frames, generator=generator)}
    samples = 1600 * shape.sequence
    return {"input_values": torch.randn(shape.batch, samples, generator=generator)}


@register_inputs("text-vision")
def text_vision_inputs(
    model_dir: Path, config: PretrainedConfig, plan: ExportPlan, shape: Shape, seed: int, left: bool = False
) -> dict[str, torch.Tensor]:
    """Two towers (CLIP, SigLIP): texts through the text builder, and one image more than texts
    through the vision builder — the batches are independent, and equal ones would hide it."""
    from dataclasses import replace

    text_config = config.get_text_config()
    if plan.task == "zero-shot-object-detection":
        # Every image with the same number of text queries (rows image by image): 2 per image.
        texts = text_inputs(model_dir, text_config, plan, replace(shape, batch=2 * shape.batch), seed, left)
        return {**texts, **vision_inputs(model_dir, config, plan, shape, seed, left)}
    texts = text_inputs(model_dir, text_config, plan, shape, seed, left)
    images = vision_inputs(model_dir, config, plan, replace(shape, batch=shape.batch + 1), seed, left)
    return {**texts, **images}


@register_inputs("image-text")
def image_text_inputs(
    model_dir: Path, config: PretrainedConfig, plan: ExportPlan, shape: Shape, seed: int, left: bool = False
) -> dict[str, torch.Tensor]:
    """A prompt of one image and a sentence per row, through the repo's own processor: it alone
    knows how many placeholder tokens an image takes (the plan refuses a repo without one).
    Sentences of different lengths, padded on the left as generation pads."""
    generator = torch.Generator().manual_seed(seed)
    processor = load_processor(model_dir, plan.model_class)
    processor.tokenizer.padding_side = "left"
    if processor.tokenizer.pad_token is None:
        processor.tokenizer.pad_token = processor.tokenizer.eos_token
    size = getattr(config.vision_config, "image_size", 224)
    height, width = (size, size) if isinstance(size, int) else tuple(size)[:2]
    if window := getattr(config.vision_config, "window_size", None):
        # Qwen2.5-VL's windowed attention, which the exporter runs as equal windows ("requires uniform
        # segment lengths"): sides of whole windows, two high and two or three wide (another grid on
        # another shape).
        height, width = 2 * window, (2 + shape.batch % 2) * window
    images = photographs(shape.batch, height, width, seed)
    if images is None:
        images = torch.randint(0, 256, (shape.batch, height, width, 3), generator=generator, dtype=torch.uint8)
        images = images.numpy()
    texts = [f"{processor.image_token} {_SENTENCES[(seed + i) % len(_SENTENCES)]}" for i in range(shape.batch)]
    # One list of images per prompt: how processors that count each prompt's images take them (Gemma 3).
    encoded = processor(images=[[image] for image in images], text=texts, padding=True, return_tensors="pt")
    # Which tokens are the image's, where the processor says (Gemma 3's image tokens attend both ways).
    # Qwen2.5-VL's: each image's patch grid, and which tokens are an image's (its positions read both).
    kept = ("input_ids", "attention_mask", "pixel_values", "token_type_ids", "image_grid_thw", "mm_token_type_ids")
    return {k: encoded[k] for k in kept if k in encoded}


def _load_processor(model_dir: Path, auto_class: str):
    """The repo's image processor or feature extractor, or None when it has none (or it won't load).
    transformers 5 saves a processor's parts in one `processor_config.json`; earlier ones, and most
    repos on the Hub, a `preprocessor_config.json`."""
    if not any((model_dir / name).exists() for name in ("preprocessor_config.json", "processor_config.json")):
        return None
    import transformers

    try:
        return getattr(transformers, auto_class).from_pretrained(model_dir)
    except Exception:
        return None


# ── What variants are judged on: real prose, real speech ─────────────────────
# Random tokens and noise have near-tied logits: a quantized file agrees with eager on them or not by
# chance. A generation variant is judged teacher-forced over at least `JUDGED_TOKENS` positions of
# real text: the Python documentation's prose, which every CPython ships (`pydoc_data.topics`), or
# for a speech model, that prose spoken by espeak-ng (Debian's `espeak-ng`) and its transcript.
JUDGED_TOKENS = 200
# The passages: sorted topic names from the end (the tests' trained LM holds the corpus's last 5 %
# out of its training, `tests/trained_lm.py`), one row each.
_PASSAGES = (-3, -7, -11, -15)


@dataclass
class Judged:
    """A generation variant's judging set: a prompt, and the continuation both eager and the variant
    are fed (teacher forcing), `mask` 1 where a position counts. `forced` None: eager `generate()`'s
    own continuation of `new_tokens` (a repo without a tokenizer: no real text to force)."""

    prompt: dict[str, torch.Tensor]
    forced: torch.Tensor | None
    new_tokens: int
    source: str  # what the continuation is: "prose", "speech", "eager's continuation"
    mask: torch.Tensor | None = None

    def rows(self) -> list[Judged]:
        """One `Judged` per row, the prompt unpadded (what a batch-1 runtime is fed)."""
        return [
            Judged(
                prompt,
                None if self.forced is None else self.forced[i : i + 1],
                self.new_tokens,
                self.source,
                None if self.mask is None else self.mask[i : i + 1],
            )
            for i, prompt in enumerate(unpadded_rows(self.prompt))
        ]


def unpadded_rows(prompt: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """A batch as its rows one by one, each row's padding left out of its `input_ids` and
    `attention_mask` where it has both: what a batch-1 runtime is fed."""
    out = []
    for i in range(len(next(iter(prompt.values())))):
        row = {k: v[i : i + 1] for k, v in prompt.items()}
        if "attention_mask" in row and "input_ids" in row:
            kept = row["attention_mask"][0].bool()
            row = {**row, "input_ids": row["input_ids"][:, kept], "attention_mask": row["attention_mask"][:, kept]}
        out.append(row)
    return out


def prose() -> list[str]:
    """The judging passages, whitespace made single spaces."""
    import pydoc_data.topics

    topics = pydoc_data.topics.topics
    names = sorted(topics)
    return [" ".join(topics[names[i]].split()) for i in _PASSAGES]


def judged_text(model_dir: Path, config: PretrainedConfig, batch: int = 2, prompt_tokens: int = 24) -> Judged | None:
    """Prose prompts (left-padded, of different lengths) and their own next tokens as the forced
    continuation, `JUDGED_TOKENS` in all (fewer where the model's context is shorter); None: the
    repo has no tokenizer that loads."""
    tokenizer = _load_tokenizer(model_dir)
    if tokenizer is None:
        return None
    context = int(getattr(config.get_text_config(), "max_position_embeddings", 0) or 4096)
    new_tokens = min(-(-JUDGED_TOKENS // batch), context - prompt_tokens - 1)
    if new_tokens < 8:
        return None
    rows, lengths = [], [prompt_tokens - 8 * (i % 2) for i in range(batch)]
    for passage, length in zip(prose(), lengths):
        ids = tokenizer(passage, add_special_tokens=False)["input_ids"][: length + new_tokens]
        if len(ids) < length + new_tokens:  # a tokenizer that drops what it does not know: no prose to force
            return None
        start = tokenizer("", add_special_tokens=True)["input_ids"]  # a BOS, where the tokenizer adds one
        rows.append((start + ids[:length], ids[length:]))
    width = max(len(p) for p, _ in rows)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(p)) + p for p, _ in rows])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in rows])
    forced = torch.tensor([f for _, f in rows])
    return Judged({"input_ids": input_ids, "attention_mask": mask}, forced, new_tokens, "prose")


def speech(texts: list[str], rate: int) -> list[torch.Tensor] | None:
    """`texts` spoken by espeak-ng at `rate` Hz (resampled from its 22.05 kHz by FFT), or None
    where espeak-ng is not installed."""
    import shutil
    import subprocess
    import tempfile
    import wave

    import numpy as np

    if shutil.which("espeak-ng") is None:
        return None
    waves = []
    with tempfile.TemporaryDirectory() as folder:
        for i, text in enumerate(texts):
            path = Path(folder) / f"{i}.wav"
            subprocess.run(["espeak-ng", "-w", str(path), text], check=True, capture_output=True, timeout=60)
            with wave.open(str(path)) as file:
                source = file.getframerate()
                x = np.frombuffer(file.readframes(file.getnframes()), dtype=np.int16).astype(np.float64) / 32768
            n = int(round(len(x) * rate / source))
            y = np.fft.irfft(np.fft.rfft(x)[: n // 2 + 1], n) * (n / len(x))
            waves.append(torch.from_numpy(y.astype(np.float32)))
    return waves


def spoken(passage: str, words: int) -> str:
    """The first `words` plain words of `passage` (letters, an apostrophe or hyphen, trailing
    punctuation), as a sentence: the documentation's markup (`**`, `::=`, code) is no speech."""
    import re

    kept = [w for w in passage.split() if re.fullmatch(r"[A-Za-z][A-Za-z'-]*[.,;:]?", w)][:words]
    return " ".join(kept).rstrip(",;:.") + "."


# Spoken sentences: about 50 tokens of transcript each, under Whisper's 30 s window.
def spoken_passages(count: int) -> list[str]:
    """`count` passages of 45 plain words each, for speech."""
    return [spoken(passage, 45) for passage in prose()[:count]]


def judged_speech(
    model_dir: Path, config: PretrainedConfig, decoder_start: torch.Tensor, batch: int = 4
) -> Judged | None:
    """Prose spoken by espeak-ng through the repo's feature extractor, the decoder prompt
    `decoder_start` (`[1, k]`: a start token, language, task), and the transcript's tokens as the
    forced continuation (rows padded with end-of-text, masked out); None: no espeak-ng, no
    feature extractor or tokenizer."""
    extractor = _load_processor(model_dir, "AutoFeatureExtractor")
    tokenizer = _load_tokenizer(model_dir)
    if extractor is None or tokenizer is None:
        return None
    rate = getattr(extractor, "sampling_rate", 16000)
    texts = spoken_passages(batch)
    waves = speech(texts, rate)
    if waves is None:
        return None
    features = extractor([w.numpy() for w in waves], sampling_rate=rate, return_tensors="pt")
    key = "input_features" if "input_features" in features else "input_values"
    transcripts = [tokenizer(" " + t, add_special_tokens=False)["input_ids"] for t in texts]
    limit = int(getattr(config, "max_target_positions", 448)) - decoder_start.shape[1] - 1
    transcripts = [t[:limit] for t in transcripts]
    width = max(len(t) for t in transcripts)
    if min(len(t) for t in transcripts) < 8:  # a tokenizer that drops what it does not know: no transcript
        return None
    end = config.eos_token_id if config.eos_token_id is not None else tokenizer.pad_token_id
    forced = torch.tensor([t + [end] * (width - len(t)) for t in transcripts])
    mask = torch.tensor([[1] * len(t) + [0] * (width - len(t)) for t in transcripts])
    prompt = {key: features[key], "decoder_input_ids": decoder_start.expand(batch, -1).clone()}
    return Judged(prompt, forced, width, "speech", mask)

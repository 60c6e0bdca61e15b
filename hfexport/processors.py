"""A repo's processor, loaded as its users' code loads it — and for an image-text model whose video
processor cannot load here, assembled from the parts an image prompt uses.

Vision-language processors (SmolVLM's, Qwen2.5-VL's, LLaVA-OneVision's) hold a video processor, and
transformers builds every video processor on torchvision, which does not import beside the pinned CPU
torch (measured: "SmolVLMVideoProcessor requires the Torchvision library"). `AutoProcessor` then
refuses the whole processor, though an image prompt never reaches the video part. Here the processor
class is built from its image processor, tokenizer and the repo's processor settings (chat template,
`image_seq_len`, `num_image_tokens`), with no video part: images and text are processed by the
class's own code, exactly as `AutoProcessor`'s would; a video given to it fails in transformers
("no video processor"), which no export here feeds.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from .errors import ConfigError

# The part of a vision-language processor that transformers builds on torchvision.
_VIDEO = "video_processor"


def load_processor(model_dir: Path, owner: str) -> Any:
    """The processor in `model_dir` (of `owner`, the model class its messages name): `AutoProcessor`'s,
    or — when only its video part needs torchvision — the same class without it (`_without_video`).

    Raises:
        ConfigError: the processor needs a package hfexport does not install for a part an image
            prompt uses, naming the package and how to install it.
    """
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(model_dir)
    except ImportError as error:
        first = _first_sentence(error)
        if "VideoProcessor requires the Torchvision" in first:
            try:
                return _without_video(model_dir)
            except ImportError as again:
                first = _first_sentence(again)
        raise _missing_package(owner, first) from None


def _first_sentence(error: ImportError) -> str:
    """What is missing: transformers' import message up to its install advice, on one line."""
    return " ".join(str(error).split()).split(" Check out ")[0][:300]


def _without_video(model_dir: Path) -> Any:
    """The repo's processor class with its image processor and tokenizer, and no video processor: a
    subclass whose attributes leave it out (transformers checks each attribute's class, and the video
    one's is torchvision's), built with the settings the repo's processor config holds."""
    from transformers import AutoImageProcessor, AutoTokenizer
    from transformers.models.auto.processing_auto import processor_class_from_name

    named = _processor_class(model_dir)
    cls = processor_class_from_name(named) if named else None
    if cls is None or _VIDEO not in cls.get_attributes():
        raise ImportError(f"{named} has no video processor to leave out")
    parts = [a for a in cls.get_attributes() if a != _VIDEO]
    images_only = type(cls.__name__, (cls,), {"get_attributes": classmethod(lambda _: parts)})
    settings, _ = cls.get_processor_dict(str(model_dir))
    accepted = inspect.signature(cls.__init__).parameters
    kwargs = {k: v for k, v in settings.items() if k in accepted and k not in cls.get_attributes()}
    return images_only(
        image_processor=AutoImageProcessor.from_pretrained(model_dir),
        tokenizer=AutoTokenizer.from_pretrained(model_dir),
        video_processor=None,
        **kwargs,
    )


def _processor_class(model_dir: Path) -> str | None:
    """The processor class the repo's files name (`processor_config.json`, else the preprocessor's)."""
    import json

    for name in ("processor_config.json", "preprocessor_config.json"):
        path = Path(model_dir) / name
        if path.exists():
            named = json.loads(path.read_text()).get("processor_class")
            if named:
                return named
    return None


def _missing_package(owner: str, first: str) -> ConfigError:
    import torch

    if "torchvision" in first.lower():
        how = f"torchvision's build for torch {torch.__version__.split('+')[0]}, from the index torch came from"
    else:
        how = "the package it names (pip install <name>)"
    return ConfigError(
        f"{owner}'s processor does not load without a package hfexport does not install: {first}",
        f"Install {how} beside hfexport, then export again.",
    )

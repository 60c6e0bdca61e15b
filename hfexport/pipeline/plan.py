"""Stage 3 — plan: decide *what* to export from the config and architecture, before any tracing.

The plan is a small JSON-able contract: the export stage hands it to each isolated backend worker,
the report records it, and publishing hashes it (`ExportPlan.digest`) to recognise its own PRs.

Decisions taken here, and why:
- the task: the model's head decides it (`hfexport.tasks`: transformers' own Auto mappings), and
  a head hfexport cannot export is refused by name — never exported as its base model under
  another task's name.
- single graph vs generation split: a decoder-only model that can `generate()` is exported as ONE
  `decode` component that takes any number of new tokens (the exporter's multi-token decode):
  the prompt on an empty cache, then each step — so its weights are stored once, not once per
  component. Encoder-decoders are split into `encoder` and one `decode` for every step (it projects
  the encoder's output for cross-attention on each call, so it too starts from an empty cache:
  transformers.js's and optimum's `decoder_model_merged`). An image-text-to-text model (LLaVA) is
  split into `vision_encoder` (one image's features, projected), `embed_tokens` and the one
  `decode` over embeddings: the images' features take their placeholder tokens' places between
  the last two, outside any graph, as the exporters leave it to the caller. The rest export as
  one graph.
- sample shapes: batch >= 2 and sequence >= 2, padded, and a 3-token decoder prompt, because
  torch.export specialises any axis traced at size 1 (see docs/design.md, "batch-1 trap").
- validation shapes: a different batch, sequence and prompt length from the sample, so a graph
  that specialised an axis fails validation instead of failing in a user's hands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..backends import parse_backends
from ..errors import ConfigError, RemoteCodeError, UnsupportedArchitectureError, error_class
from ..messages import PlanAnswer, PlanRequest
from ..processors import load_processor
from ..report import Axis, DynamicAxes, ExportPlan, Modality, Mode, Shape, Split
from ..sandbox.identity import check_model_readable, worker_user
from ..sandbox.launch import spawn
from ..tasks import TASKS, Task, auto_classes_of, supported_tasks, task_of_head

__all__ = ["TASKS", "Task", "ExportPlan", "Shape", "check_request", "make_plan"]


# ── Stage 3: plan ────────────────────────────────────────────────────────────


def make_plan(
    model_dir: Path,
    backends: list[str],
    task: str = "auto",
    trust_remote_code: bool = False,
    max_batch: int = 64,
    *,
    checked: dict | None = None,
) -> ExportPlan:
    """Read `config.json` and decide the components, modality, shapes and dynamic axes.

    Args:
        model_dir: a local model folder (see `fetch.py`).
        backends: backend names.
        task: a name from `TASKS`, or `"auto"` to follow `config.architectures`.
        trust_remote_code: allow a config whose architecture lives in the repo's own code.
        max_batch: the largest batch the exports promise to accept.
        checked: what `check_request` returned for this folder, task and backends (the pipeline
            checks first, before starting anything expensive); without it the checks run here.

    Returns:
        The `ExportPlan`.

    Raises:
        ConfigError, RemoteCodeError, UnsupportedArchitectureError.
    """
    if checked is None:
        backends = parse_backends(backends)
        checked = check_request(model_dir, task, trust_remote_code)
    raw = checked
    config = load_config(model_dir, trust_remote_code, raw.get("model_type"))
    architectures = list(getattr(config, "architectures", None) or [])

    model_class, auto_class, task, mode, spec = _head(config, architectures, task, model_dir)
    is_enc_dec = bool(getattr(config, "is_encoder_decoder", False))
    modality, split = _split(model_class, spec, mode, is_enc_dec, model_dir)

    plan = ExportPlan(
        task=task,
        architecture=architectures[0] if architectures else model_class.__name__,
        model_class=model_class.__name__,
        model_type=config.model_type,
        mode=mode,
        modality=modality,
        is_encoder_decoder=is_enc_dec,
        split=split,
        backends=list(backends),
        trust_remote_code=trust_remote_code,
        auto_class=auto_class,
        sliding_window=_sliding_window(config) if mode == "generation" else None,
        head_dim=_head_dim(config) if mode == "generation" else None,
        sentence_transformer=sentence_transformer(model_dir) if task == "feature-extraction" else None,
        source_dtype=_stored_dtype(config),
    )
    main_input = getattr(model_class, "main_input_name", "input_ids")
    plan.dynamic_axes = _dynamic_axes(plan, config, max_batch, main_input, model_dir)
    if "input_features" in plan.dynamic_axes:
        # A spectrogram as long as the recording (wav2vec2-BERT, Parakeet), unless the repo's feature
        # extractor pads every one to a fixed length (Whisper's 30 s): that axis read off the extractor.
        plan.dynamic_axes["input_features"].update(_spectrogram_time_axis(model_dir))
    if 2 in plan.dynamic_axes.get("pixel_values", {}):
        # Multiples of 32 (what the processors of such models produce) and of other aspect ratios.
        plan.sample.image, plan.validation.image = [224, 288], [256, 192]
    return plan


def _head(config: Any, architectures: list[str], task: str, model_dir: Path) -> tuple[Any, str | None, str, Mode, Task]:
    """The class that loads the model and what it is exported as: the model class, the Auto class
    of a model whose classes live in its repo (else None), the task, the mode and the task's row.

    Raises:
        UnsupportedArchitectureError: no class of that name here, or a generation task for a
            model that cannot generate().
    """
    import transformers

    auto_class = None  # for a model whose classes live in its repo: the Auto class that loads it
    auto_map = getattr(config, "auto_map", None) or {}
    if task == "auto" and _is_sentence_transformer(model_dir):
        # Its `modules.json` says it is an embedder, whatever head config.json names: such repos often
        # name `*ForMaskedLM` over weights of the bare encoder (the head would be made up).
        task = "feature-extraction"
    if task == "auto":
        if architectures and hasattr(transformers, architectures[0]):
            model_class = getattr(transformers, architectures[0])
        elif architectures and auto_map:
            # Remote code (trusted above): the Auto class mapped to the architecture decides the head.
            auto_class = _remote_auto_class(auto_map, architectures[0])
            model_class = _auto_class_for(config, auto_class, model_dir)
        elif architectures:
            raise UnsupportedArchitectureError(
                f"transformers {transformers.__version__} has no class {architectures[0]!r} "
                f"(from config.json 'architectures').",
                "Upgrade transformers if the architecture is newer, or pick a generic head (--task, or task= in "
                "Python).",
            )
        else:
            model_class = _auto_class_for(config, "AutoModel")
        spec = _task_of(model_class, auto_class)
        task, mode = spec.name, spec.mode
        if mode == "generation" and not _can_generate(model_class):
            mode, task = "single", "text-generation"  # a causal LM head that cannot generate(): its logits
    else:
        spec = TASKS[task]
        auto_class = spec.auto_class if spec.auto_class in auto_map else None
        model_class = _auto_class_for(config, spec.auto_class, model_dir)
        mode = spec.mode
        if mode == "generation" and not _can_generate(model_class):
            raise UnsupportedArchitectureError(
                f"Task {task!r} needs a model that can generate(), and {model_class.__name__} cannot.",
                "Use task 'auto', or a single-graph task such as feature-extraction (--task / task=).",
            )
    return model_class, auto_class, task, mode, spec


def _split(model_class: Any, spec: Task, mode: Mode, is_enc_dec: bool, model_dir: Path) -> tuple[Modality, str]:
    """The modality and the split (the one place it is decided; `worker/splits.py` knows what each
    is made of).

    Raises:
        ConfigError: an image-text model without the processor that places its image tokens.
    """
    modality = spec.modality or _modality(model_class)
    if modality == "image-text" and not _has_processor(model_dir):
        raise ConfigError(
            f"{model_class.__name__} takes images inside a text prompt, and {model_dir} has no processor "
            "(processor_config.json or preprocessor_config.json with a tokenizer): only the processor knows how "
            "many placeholder tokens an image takes.",
            "Add the model's processor to the repo (processor.save_pretrained(folder)), as its users need it too.",
        )
    if modality == "image-text":
        _check_image_features_take_pixels_only(model_class)
        # Every prompt is built with the processor: it loads here, before anything is exported (a
        # package it needs is named, with its install).
        load_processor(model_dir, model_class.__name__)
    if mode == "single":
        split = Split.SINGLE
    elif modality == "image-text":
        split = Split.IMAGE_TEXT_DECODER
    else:
        split = Split.ENCODER_DECODER if is_enc_dec else Split.DECODER
    return modality, split


def plan_isolated(
    model_dir: Path, backends: list[str], task: str, trust_remote_code: bool, checked: dict
) -> ExportPlan:
    """`make_plan`, in this process when the config is plain data, or — when it names code from
    the repo (`auto_map`, trusted) — in a child process that holds no secret
    (`python -m hfexport.worker.plan`): that code runs when the config is read.

    Raises:
        The same `HfExportError`s as `make_plan`.
    """
    if not (trust_remote_code and checked.get("auto_map")):
        return make_plan(model_dir, backends, task=task, trust_remote_code=trust_remote_code, checked=checked)
    import subprocess
    import sys
    import tempfile

    user = worker_user()
    check_model_readable(model_dir, user)
    request = PlanRequest(str(model_dir), list(backends), task, trust_remote_code)
    with tempfile.TemporaryDirectory(prefix="hfexport-plan-") as home:
        # The repo's code is copied and imported from `home` (HF_MODULES_CACHE), the one folder it may write.
        started = spawn([sys.executable, "-m", "hfexport.worker.plan"], user, Path(home), reads=[model_dir])
        process = subprocess.run(**started, input=request.to_json(), capture_output=True, text=True, timeout=600)
    try:
        answer = PlanAnswer.from_json(process.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError, TypeError, AttributeError):
        raise UnsupportedArchitectureError(
            f"Planning the model's own code failed (exit {process.returncode}): "
            f"{(process.stderr.strip().splitlines() or ['no output'])[-1][:300]}",
            "Check the repo's code (config and modeling files); it must import with the pinned transformers.",
        ) from None
    if answer.error is not None:
        raise error_class(answer.error.type)(answer.error.cause, answer.error.fix)
    if answer.plan is None:
        raise UnsupportedArchitectureError(
            "Planning the model's own code answered neither a plan nor an error.",
            "Report this as a bug in hfexport, with the model's repo id.",
        )
    return answer.plan


def check_request(model_dir: Path, task: str = "auto", trust_remote_code: bool = False) -> dict:
    """The checks that need no torch or transformers import: the task name and `config.json` as JSON.

    Run before anything expensive starts (`api.export` starts the workers after it), so the common
    mistakes fail in well under a second.

    Returns:
        `config.json` as a dict.

    Raises:
        UnsupportedArchitectureError (unknown task), ConfigError, RemoteCodeError.
    """
    if task != "auto" and task not in TASKS:
        raise UnsupportedArchitectureError(
            f"Unknown task {task!r}.", f"Use 'auto' or one of: {', '.join(supported_tasks())} (--task / task=)."
        )
    if task != "auto" and not TASKS[task].supported:
        raise UnsupportedArchitectureError(
            f"Task {task!r} is not exported by hfexport yet: {TASKS[task].refused}.",
            f"Use 'auto' or one of: {', '.join(supported_tasks())} (--task / task=).",
        )
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise ConfigError(
            f"No config.json in {model_dir}.",
            "Point SOURCE at a transformers model folder (one with config.json and weights).",
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConfigError(
            f"config.json in {model_dir} is not valid JSON: {e}.", "Fix or re-download config.json."
        ) from e
    if not isinstance(raw, dict):
        raise ConfigError(f"config.json in {model_dir} is not a JSON object.", "Fix or re-download config.json.")
    if raw.get("auto_map") and not trust_remote_code:
        raise RemoteCodeError(
            f"The model's config names code from its repo (auto_map: {sorted(raw['auto_map'])}); "
            "running it would execute that code.",
            "Read the repo's code, then if you trust it pass --trust-remote-code (trust_remote_code=True in Python).",
        )
    return raw


def load_config(model_dir: Path, trust_remote_code: bool, model_type: str | None = None):
    """`AutoConfig` from the folder (after `check_request`, whose `model_type` names it in errors),
    with errors that say what to do."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(model_dir, trust_remote_code=trust_remote_code)
    except (ValueError, KeyError, OSError) as e:
        raise UnsupportedArchitectureError(
            f"transformers cannot read this config (model_type {model_type!r}): {e}",
            "Check model_type in config.json, or upgrade transformers if the model is newer.",
        ) from e


def _remote_auto_class(auto_map: dict, architecture: str) -> str:
    """The `auto_map` entry (`AutoModelFor...`) whose class is `architecture`, else `AutoModel`."""
    for name, reference in auto_map.items():
        if name.startswith("AutoModel") and isinstance(reference, str) and reference.rsplit(".", 1)[-1] == architecture:
            return name
    if "AutoModel" in auto_map:
        return "AutoModel"
    raise UnsupportedArchitectureError(
        f"config.json's auto_map maps no AutoModel class to {architecture!r} (it maps {sorted(auto_map)}).",
        "Fix auto_map in config.json, or pick a task whose Auto class it maps (--task / task=).",
    )


def _auto_class_for(config, auto_class: str, model_dir: Path | None = None):
    import transformers

    reference = (getattr(config, "auto_map", None) or {}).get(auto_class)
    if isinstance(reference, str) and model_dir is not None:
        # Remote code, trusted by the caller and run only in a process holding no secret (plan_isolated).
        from transformers.dynamic_module_utils import get_class_from_dynamic_module

        return get_class_from_dynamic_module(reference, str(model_dir))
    auto = getattr(transformers, auto_class)
    mapping = auto._model_mapping
    try:
        return mapping[type(config)]
    except KeyError:
        raise UnsupportedArchitectureError(
            f"{auto_class} has no class for model_type {config.model_type!r}.",
            "Pick a task this architecture supports, or 'auto' (--task / task=). Tasks: "
            f"{', '.join(supported_tasks())}.",
        ) from None


def _can_generate(model_class) -> bool:
    try:
        return bool(model_class.can_generate())
    except Exception:
        return False


def _modality(model_class) -> Modality:
    main = getattr(model_class, "main_input_name", "input_ids")
    if main == "pixel_values":
        return "vision"
    if main in ("input_features", "input_values"):
        return "audio"
    return "text"


def _task_of(model_class, auto_class: str | None) -> Task:
    """The task the model's head decides (`hfexport.tasks`), or a refusal naming the head.

    Raises:
        UnsupportedArchitectureError: the head is one hfexport does not export.
    """
    name = model_class.__name__
    can_generate = _can_generate(model_class)
    if auto_class is not None:  # remote code: the Auto class its auto_map maps the architecture to
        rows = [t for t in TASKS.values() if t.auto_class == auto_class]
        spec = next((t for t in rows if (t.mode == "generation") == can_generate), rows[0] if rows else None)
    else:
        spec = task_of_head(name, can_generate)
    fix = (
        f"hfexport exports these tasks: {', '.join(supported_tasks())}. To export the model without its head, "
        "pass --task feature-extraction (task= in Python)."
    )
    if spec is None:
        holders = auto_classes_of(name) if auto_class is None else [auto_class]
        where = (
            f"transformers lists it under {', '.join(holders)}" if holders else "no transformers Auto class lists it"
        )
        raise UnsupportedArchitectureError(f"{name}'s head is not one hfexport exports ({where}).", fix)
    if not spec.supported:
        raise UnsupportedArchitectureError(
            f"{name}'s head ({spec.name}, {spec.auto_class}) is not exported by hfexport yet: {spec.refused}.", fix
        )
    return spec


def _is_sentence_transformer(model_dir: Path) -> bool:
    """Whether the repo is a sentence-transformers embedder: a `modules.json` whose first module is
    the transformer itself (`sentence_transformers.models.Transformer`)."""
    try:
        modules = json.loads((Path(model_dir) / "modules.json").read_text())
        return bool(modules) and str(modules[0].get("type", "")).endswith("models.Transformer")
    except (OSError, ValueError, AttributeError, IndexError, KeyError):
        return False


def module_folders(model_dir: Path) -> list[str]:
    """The folders of a sentence-transformers repo's modules beside the transformer (`1_Pooling`,
    `2_Dense`: each reads its config, and a Dense its weights, from its folder), as `modules.json`
    names them; only folders inside `model_dir` (the file is the repo's text). [] for other repos."""
    if not _is_sentence_transformer(model_dir):
        return []
    root = Path(model_dir).resolve()
    folders = []
    for module in json.loads((root / "modules.json").read_text()):
        path = str(module.get("path") or "") if isinstance(module, dict) else ""
        folder = (root / path).resolve()
        if path and folder.is_dir() and folder.is_relative_to(root) and folder != root:
            folders.append(str(folder.relative_to(root)))
    return folders


# sentence-transformers' pooling modes (its Pooling module's config) as transformers.js names them;
# the others (max, weighted mean) it has no name for.
_POOLING = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls", "pooling_mode_lasttoken": "last_token"}


def sentence_transformer(model_dir: Path) -> dict | None:
    """A sentence-transformers repo's pooling (as transformers.js names it; None where it has no name
    for it) and whether it normalizes, from its `modules.json`; None for any other repo."""
    if not _is_sentence_transformer(model_dir):
        return None
    modules = json.loads((Path(model_dir) / "modules.json").read_text())
    pooling = None
    for module in modules:
        if str(module.get("type", "")).endswith("models.Pooling"):
            try:
                modes = json.loads((Path(model_dir) / module.get("path", "") / "config.json").read_text())
            except (OSError, ValueError):
                modes = {}
            on = [name for name, value in modes.items() if name.startswith("pooling_mode_") and value is True]
            pooling = _POOLING.get(on[0]) if len(on) == 1 else None
    normalize = any(str(m.get("type", "")).endswith("models.Normalize") for m in modules)
    return {"pooling": pooling, "normalize": normalize}


def refuse_made_up_weights(plan: ExportPlan, missing: list[str]) -> None:
    """Refuse a model that loaded with weights the checkpoint lacks (`missing`: transformers'
    `missing_keys`, which it initializes at random): a head with made-up weights validates against
    itself and means nothing.

    Raises:
        ConfigError: naming the weights, and a task whose weights the checkpoint holds.
    """
    if not missing:
        return
    shown = ", ".join(sorted(missing)[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
    raise ConfigError(
        f"The checkpoint holds no weights for {len(missing)} parameter(s) of {plan.model_class} ({shown}): "
        "transformers would initialize them at random, and an export of made-up weights is no export of "
        "this model.",
        "Export a task whose weights the checkpoint holds (--task feature-extraction for the bare model), "
        "or fix config.json's architectures to the class the weights were saved from.",
    )


# What an image-text model's `get_image_features` may ask for beside the pixels that no export of it can
# keep dynamic. LLaVA-OneVision tiles each image by its size and unpads its features to it (anyres,
# `image_sizes`); transformers' exporter feeds those sizes as Python ints (its `image_sizes` input
# preparer), so the program would hold the traced image's size and give any other image wrong features.
# (Qwen2.5-VL's `image_grid_thw` exports: `worker/splits.GridImageFeatures`.)
_IMAGE_GEOMETRY = {
    "image_sizes": "tiles each image by its size and unpads its features to it (anyres)",
}


def _check_image_features_take_pixels_only(model_class: Any) -> None:
    """The model's image features are a function of what its vision encoder is fed (the pixels, or
    each image's grid with them), not of per-image sizes the exporter fixes.

    Raises:
        UnsupportedArchitectureError: naming the per-image input the features also need.
    """
    import inspect

    method = getattr(model_class, "get_image_features", None)
    taken = inspect.signature(method).parameters if method is not None else {}
    for name, what in _IMAGE_GEOMETRY.items():
        if name in taken:
            raise UnsupportedArchitectureError(
                f"{model_class.__name__}'s image features need `{name}` beside the pixels: it {what}. "
                "transformers' exporter takes those sizes as Python ints (its `image_sizes` input preparer), so "
                "an exported vision encoder would hold the traced image's size and give any other image wrong "
                "features.",
                "No option changes this yet: hfexport publishes nothing rather than an image path fixed to one "
                "image size. Vision-language models whose image features are a function of the pixels (LLaVA, "
                "Gemma 3, SmolVLM) or of each image's grid (Qwen2.5-VL) export.",
            )


def _has_processor(model_dir: Path) -> bool:
    files = {p.name for p in Path(model_dir).iterdir()}
    return bool(files & {"processor_config.json", "preprocessor_config.json"}) and bool(
        files & {"tokenizer.json", "tokenizer_config.json", "tokenizer.model"}
    )


def _stored_dtype(config) -> str:
    """The dtype the checkpoint's weights are stored in, as config.json says (`dtype`, formerly
    `torch_dtype`): one of float32, bfloat16, float16; anything else (absent, "auto", float64, a
    quantized format's) is exported from float32."""
    # transformers reads an older config.json's `torch_dtype` into `dtype`; asking for
    # `torch_dtype` itself only prints its deprecation warning (on every model without a dtype).
    raw = getattr(config, "dtype", None)
    name = str(raw).removeprefix("torch.") if raw is not None else "float32"
    return name if name in ("float32", "bfloat16", "float16") else "float32"


def _head_dim(config) -> int | None:
    """The width of the text model's attention heads (`head_dim`, else hidden size over heads), if it says."""
    text = config.get_text_config()
    head = getattr(text, "head_dim", None)
    hidden, heads = getattr(text, "hidden_size", None), getattr(text, "num_attention_heads", None)
    if not isinstance(head, int) and isinstance(hidden, int) and isinstance(heads, int) and heads:
        head = hidden // heads
    return head if isinstance(head, int) else None


def _sliding_window(config) -> int | None:
    """The window of the cache's sliding layers (all of Mistral's; every other of Gemma 2's), if any."""
    text = config.get_text_config()
    window = getattr(text, "sliding_window", None)
    layer_types = getattr(text, "layer_types", None)
    if not isinstance(window, int) or (layer_types is not None and "sliding_attention" not in layer_types):
        return None
    return window


# A minute of audio at 16 kHz: the time axis of a raw-audio encoder, unless its positions end sooner.
_AUDIO_SAMPLES_MAX = 16000 * 60


def _audio_samples_max(config) -> int:
    """The longest recording a raw-audio encoder takes: a minute, or fewer samples where the encoder's
    positions end sooner — its feature encoder's total stride times `max_speech_positions` (SpeechT5:
    320 × 4,000 is 80 s; a build with 600 positions holds 12 s, and torch.export refused the minute:
    "Constraints violated (audio_samples)"). wav2vec2's positions are a convolution: no end."""
    import math

    positions = getattr(config, "max_speech_positions", None)
    stride = math.prod(getattr(config, "conv_stride", None) or (1,))
    return min(_AUDIO_SAMPLES_MAX, stride * positions) if isinstance(positions, int) else _AUDIO_SAMPLES_MAX


def _fixed_image_size(config) -> bool:
    """Whether the model takes images of one size: a patch-embedding transformer (an int
    `patch_size` on its config, its vision config or its backbone's: ViT, CLIP, Swin) has position
    embeddings or windows sized for its `image_size`. Convolutional models take any size. A false
    "fixed" costs flexibility only (the export still validates); a false "any" would fail."""
    return any(
        isinstance(getattr(c, "patch_size", None), int)
        for c in (config, getattr(config, "vision_config", None), getattr(config, "backbone_config", None))
        if c
    )


def _processed_to_one_size(model_dir: Path) -> bool:
    """Whether the repo's image processor hands the model images of one size (read from its
    `preprocessor_config.json`, no code run): a centre crop (MobileNetV2: 224 x 224) or a resize to a
    height and a width (RT-DETR: 640 x 640), where a shortest edge would keep the aspect ratio (DETR).
    Such models' own code may fix the size it was traced at (MobileNetV2's TF padding measured:
    "Constraints violated (height, width)"), and their users never feed another."""
    settings = _processor_settings(model_dir)

    def one_size(size) -> bool:
        return isinstance(size, int) or (isinstance(size, dict) and {"height", "width"} <= set(size))

    if settings.get("do_center_crop") and one_size(settings.get("crop_size")):
        return True
    return bool(settings.get("do_resize")) and one_size(settings.get("size")) and not settings.get("do_pad")


def _patch_sequences(model_dir: Path) -> bool:
    """Whether the repo's image processor hands the model each image as a sequence of patches at its
    own aspect ratio (SigLIP 2's NaFlex: `max_num_patches` in its settings, `_processor_settings`), with
    `pixel_attention_mask` and `spatial_shapes` beside the pixels: their image axis is the batch, the
    patch axis the processor's padded length (one for every image)."""
    return "max_num_patches" in _processor_settings(model_dir)


def _processor_settings(model_dir: Path) -> dict:
    """The repo's image processor or feature extractor settings as written (no code run): its
    `preprocessor_config.json`, or — as transformers 5's `save_pretrained` writes a processor — the
    `image_processor` (or `feature_extractor`) part of `processor_config.json` (measured: a SigLIP 2
    saved so was planned without its patch inputs, and torch.export refused its images axis:
    "Constraints violated (images)"). Empty where it has neither or they do not parse."""
    for name, part in (
        ("preprocessor_config.json", None),
        ("processor_config.json", "image_processor"),
        ("processor_config.json", "feature_extractor"),
    ):
        path = Path(model_dir) / name
        try:
            settings = json.loads(path.read_text()) if path.exists() else {}
        except (OSError, ValueError):
            continue
        settings = settings.get(part) if part is not None and isinstance(settings, dict) else settings
        if isinstance(settings, dict) and settings:
            return settings
    return {}


_PATCH_INPUTS = ("pixel_values", "pixel_attention_mask", "spatial_shapes")


def _max_positions(config) -> int:
    for key in ("max_position_embeddings", "n_positions", "max_target_positions", "max_source_positions"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return 512


def _spectrogram_time_axis(model_dir: Path) -> dict[int, Axis]:
    """The time axis of the repo's feature extractor's `input_features`, from half a second to a
    minute of audio, or none where its length does not follow the recording's (Whisper pads to 30 s).
    Read by running the extractor on silences of three lengths: which axis grows is its own fact."""
    if not _processor_settings(model_dir):
        return {}
    import numpy as np
    from transformers import AutoFeatureExtractor

    try:
        extractor = AutoFeatureExtractor.from_pretrained(model_dir)
        rate = int(getattr(extractor, "sampling_rate", 16000))
        shapes = [
            extractor([np.zeros(int(rate * seconds), dtype=np.float32)], sampling_rate=rate, return_tensors="np")[
                "input_features"
            ].shape
            for seconds in (0.5, 1.5, 60)
        ]
    except Exception:  # noqa: BLE001  (no usable extractor: the axis stays as traced)
        return {}
    grows = [axis for axis in range(1, len(shapes[0])) if shapes[0][axis] < shapes[1][axis]]
    if len(grows) != 1:
        return {}
    axis = grows[0]
    return {axis: Axis("audio_frames", int(shapes[0][axis]), int(shapes[2][axis]))}


def _dynamic_axes(plan: ExportPlan, config, max_batch: int, main_input: str, model_dir: Path) -> DynamicAxes:
    """The axes a user varies, with bounds from the config. Only those; every other axis stays static."""
    batch = Axis("batch", 1, max_batch)
    if plan.modality == "vision":
        if _patch_sequences(model_dir):
            return {name: {0: batch} for name in _PATCH_INPUTS}
        if _fixed_image_size(config) or _processed_to_one_size(model_dir):
            return {"pixel_values": {0: batch}}
        # A convolutional model (DETR, SegFormer, GLPN) takes images of any size: its processor
        # resizes to a shortest edge and keeps the aspect ratio, so a fixed size would not do.
        # From 64: a 32-stride backbone's last feature map would specialise at one pixel.
        return {"pixel_values": {0: batch, 2: Axis("height", 64, 2048), 3: Axis("width", 64, 2048)}}
    if plan.modality == "text-vision":
        # Two towers: any number of texts against any number of images.
        seq = Axis("sequence", 1, _max_positions(config.get_text_config()))
        if plan.task == "zero-shot-object-detection":
            # Each image's text queries, image by image: OWLv2 reshapes them to [images, queries, …],
            # which torch.export guards to at least 4 rows (measured on the tiny OWLv2).
            queries = Axis("queries", 4, 16 * max_batch)
            text = {name: {0: queries, 1: seq} for name in ("input_ids", "attention_mask")}
            return {**text, "pixel_values": {0: batch}}
        text = {name: {0: batch, 1: seq} for name in ("input_ids", "attention_mask")}
        images = Axis("images", 1, max_batch)
        if _patch_sequences(model_dir):
            return {**text, **{name: {0: images} for name in _PATCH_INPUTS}}
        return {**text, "pixel_values": {0: images}}
    if plan.modality == "image-text":
        # The vision encoder takes one image at a time (its features come out as one tensor per
        # image, which torch.export cannot keep dynamic in their number); the prompt is text.
        seq = Axis("sequence", 1, _max_positions(config.get_text_config()))
        return {name: {0: batch, 1: seq} for name in ("input_ids", "attention_mask")}
    if plan.modality == "audio":
        # Raw audio (wav2vec2's input_values) is as long as the recording: its time axis is dynamic,
        # from a tenth of a second at 16 kHz. Spectrogram encoders (Whisper) take a fixed number of frames.
        if main_input == "input_values":
            return {"input_values": {0: batch, 1: Axis("audio_samples", 1600, _audio_samples_max(config))}}
        return {main_input: {0: batch}}
    seq = Axis("sequence", 1, _max_positions(config))
    return {name: {0: batch, 1: seq} for name in ("input_ids", "attention_mask", "token_type_ids")}

"""How an export is split into components: one class per split, each the only place that knows
its components' names, how they are exported, their eager twins and one greedy step.

The plan names the split (`report.Split`, chosen once in `pipeline/plan.py`); the worker asks
`split_for(plan)` and drives it without knowing which it is:

- `SingleGraph` — one graph, `model`: encoders, classifiers, a causal LM head that cannot generate;
- `Decoder` — a decoder LLM's one `decode` program: the prompt on an empty cache, then each new
  token (weights once, no prefill copy);
- `EncoderDecoder` — `encoder` and one `decode` for every step (T5, BART, Marian, Whisper): the
  decoder's weights once, as transformers.js's and optimum's `decoder_model_merged` has them;
- `ImageTextDecoder` — `vision_encoder`, `embed_tokens`, `decode` (LLaVA): the exporters leave an
  image's features and the tokens' embeddings to the caller (`decompose_multimodal`), so each is
  a graph of its own here, and the greedy loop merges them, as the runtime a user deploys does.

Adding a split is writing one class here and decorating it with `@register_split(name)`; the
tests register a toy one (`tests/test_structure.py`) and see it exported, validated and laid out.
Every wrapper calls the model's own methods: nothing of the model is re-implemented here.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, cast

import torch
from transformers.modeling_outputs import BaseModelOutput

from ..errors import UnsupportedArchitectureError
from ..layouts import LoadersNames, unfuse_transposed_weights
from ..report import Check, ExportPlan, Layout, Shape, Split
from . import exporter_fixes  # noqa: F401  (registers them with the exporter's patches)
from .caches import CacheLayout, cache_of, captured_as_traced, conform, one_tensor, positions
from .inputs import (
    JUDGED_TOKENS,
    Judged,
    build_inputs,
    decoder_prompt,
    generation_config_of,
    judged_speech,
    judged_text,
)
from .validate import compare_forward, compare_generation

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel
    from transformers.exporters.configs import DynamoConfig, ExportConfigMixin

    from .validate import Reference

Call = Callable[..., Any]  # call(component, **kwargs) -> that component's output
State = dict[str, Any]  # what a greedy loop carries from one step to the next

SPLITS: dict[str, type[ExportSplit]] = {}


def register_split(name: str) -> Callable[[type[ExportSplit]], type[ExportSplit]]:
    """Register a split class under `name` (the plan's `split`)."""

    def register(cls: type[ExportSplit]) -> type[ExportSplit]:
        cls.name = name
        SPLITS[name] = cls
        return cls

    return register


def split_for(plan: ExportPlan) -> ExportSplit:
    """The split the plan names, bound to that plan.

    Raises:
        KeyError: the plan names a split no class is registered for.
    """
    if plan.split not in SPLITS:
        raise KeyError(f"no split {plan.split!r} is registered (known: {', '.join(sorted(SPLITS))})")
    return SPLITS[plan.split](plan)


@dataclasses.dataclass
class Exporting:
    """What every component is exported with: the backend's exporter and config, and torch.export
    `Dim`s shared by name, so every input's batch axis is one symbol across the graph."""

    plan: ExportPlan
    backend: Any  # a `backends.Backend`
    exporter: Any = None
    dims: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        from transformers.exporters import AutoHfExporter

        self.exporter = AutoHfExporter.from_config({"export_format": self.backend.export_format})

    def dynamic_shapes(self, inputs: Mapping[str, torch.Tensor]) -> dict:
        """The plan's dynamic axes of these inputs, as torch.export takes them."""
        from torch.export import Dim

        shapes = {}
        for name, tensor in inputs.items():
            axes = self.plan.dynamic_axes.get(name, {})
            shapes[name] = {
                index: self.dims.setdefault(axis.dim, Dim(axis.dim, min=axis.min, max=axis.max))
                for index, axis in axes.items()
                if index < tensor.dim()
            } or None
        return shapes

    def config(self, inputs: Mapping[str, torch.Tensor] | None = None, *, deferred: bool = False):
        """The backend's export config: the plan's dynamic axes of `inputs`, or none (the exporter
        marks every axis of a generation component itself: its cache is a pytree). `deferred`: a
        conv encoder's guards become run-time checks (see below) where this exporter takes that."""
        config = self.backend.make_config(self.dynamic_shapes(inputs) if inputs is not None else None)
        sized = self.plan.modality == "audio" or 2 in self.plan.dynamic_axes.get("pixel_values", {})
        if deferred and sized and hasattr(config, "prefer_deferred_runtime_asserts_over_guards"):
            # A conv encoder's output length is a floor division of the samples (or pixels): torch.export
            # cannot prove its guards for every length and would only take multiples of the strides.
            # They hold for any real recording or processed image, so they become checks at run time.
            config = dataclasses.replace(config, prefer_deferred_runtime_asserts_over_guards=True)
        return config

    def one(self, module: torch.nn.Module, inputs: dict, config: ExportConfigMixin) -> Any:
        """`module` exported as one graph: its program."""
        exported = self.exporter.export(module, inputs, config)
        return next(iter(exported.components.values()))


class ExportSplit:
    """One way of splitting an export into components. Subclasses declare their components and
    override what differs; the worker calls these methods and nothing else decides by split."""

    name: ClassVar[str]
    components: ClassVar[tuple[str, ...]]
    # Judged by a greedy loop against eager `generate()` (else by one forward per input set).
    generates: ClassVar[bool] = True
    # The components by the file names optimum and transformers.js read them under: the ONNX layout
    # publishes them so (`layouts.onnx_layout`), the decoder as a decoder with past. None: no such names.
    loaders: ClassVar[LoadersNames | None] = None
    # A teacher-forced continuation goes through in one call (`forced_logits`) rather than a step
    # per token: the same causal logits, as peers measure a file (llama.cpp's perplexity), and what
    # lets every candidate of a variant be judged for the cost of one forward.
    forces_at_once: ClassVar[bool] = False

    def __init__(self, plan: ExportPlan):
        self.plan = plan

    # ── before export ──

    def prepare(self, model: PreTrainedModel) -> None:
        """Set the eager model up as this split exports it (in place)."""
        from transformers.generation.utils import GenerationMixin

        if getattr(type(model), "generate", GenerationMixin.generate) is not GenerationMixin.generate:
            # A generate() of the model's own (Whisper's: language detection, timestamps, its own
            # prompt handling — with or without language tables) is not the loop any runtime drives
            # the exported components with. The decoder prompt is explicit (`inputs.decoder_prompt`:
            # the language and task where the model has them), and transformers' base generate(), with
            # the model's generation config and its logits processors, is the reference.
            setattr(model, "generate", types.MethodType(GenerationMixin.generate, model))  # this instance only

    def pads_left(self) -> bool:
        """Whether prompts are padded on the left (generation appends on the right)."""
        return True

    def inputs(self, model_dir: Path, config: PretrainedConfig, shape: Shape, seed: int) -> dict[str, torch.Tensor]:
        """The inputs of one shape: the model's forward's, or its `generate()`'s."""
        return build_inputs(model_dir, config, self.plan, shape, seed, left=self.pads_left())

    def judged(self, model_dir: Path, config: PretrainedConfig, other: dict) -> Judged:
        """What a generation variant is judged on, teacher-forced (`validate.generation_quality`): here
        `other` and eager `generate()`'s own continuation, `JUDGED_TOKENS` in all; a split whose model
        reads text or speech forces real text instead (`Decoder`, `EncoderDecoder`)."""
        batch = len(next(iter(other.values())))
        text = config.get_text_config()
        context = int(getattr(text, "max_position_embeddings", 0) or getattr(config, "max_target_positions", 0) or 4096)
        used = (
            other["input_ids"].shape[1]
            if "input_ids" in other
            else other.get("decoder_input_ids", torch.ones(1, 4)).shape[1]
        )
        new_tokens = max(self.plan.validation.new_tokens, min(-(-JUDGED_TOKENS // batch), context - used - 1))
        return Judged(other, None, new_tokens, "eager's continuation")

    # ── export ──

    def export(self, x: Exporting, model: PreTrainedModel, sample: dict):
        """The `ExportedModel` of every component, traced on `sample`."""
        return self.export_program(x, model, sample, self.program_config(x, sample))

    def program_config(self, x: Exporting, sample: dict):
        """The config `export_program` exports with (variants re-export through it)."""
        return x.config(None, deferred=True)

    def export_program(self, x: Exporting, model: PreTrainedModel, inputs: dict, config: DynamoConfig):
        """`model` exported as this split's one program: variants re-export a quantized or cast copy
        of the model through it. A split of several programs has none (its variants transform each
        saved program instead, `Variant.per_component`)."""
        raise NotImplementedError(f"the {self.name} split exports several programs, not one")

    # ── validate ──

    def eager(self, model: PreTrainedModel) -> dict[str, Callable]:
        """The components on the eager model, by name: the reference the exports are run against."""
        return {name: model for name in self.components}

    def validate(
        self, reference: Reference, loaded, traced: dict[str, set[str]], sample: dict, other: dict
    ) -> list[Check]:
        """The checks of a reloaded export against eager's results: the sample, and inputs of another shape."""

        def exported_run(component: str, **kwargs):
            runner = loaded.runners[component]
            return runner(**conform(runner, kwargs))

        # The sample prompt and one of a different batch, length and (encoder-decoder) prompt length.
        return [
            compare_generation("generation_sample", reference, self, exported_run, traced, sample),
            compare_generation("generation_other_shape", reference, self, exported_run, traced, other),
        ]

    def start(
        self, call: Call, prompt: dict, config: PretrainedConfig, cache_dtype: torch.dtype
    ) -> tuple[Any, torch.Tensor, State]:
        """The greedy loop's first step on `prompt`: the output, the sequence it extends, the state."""
        raise NotImplementedError

    def step(self, call: Call, output: Any, token: torch.Tensor, state: State) -> Any:
        """One greedy step: `token` (`[batch, 1]`) fed after the previous `output`."""
        raise NotImplementedError


@register_split(Split.SINGLE)
class SingleGraph(ExportSplit):
    components = ("model",)
    generates = False

    def prepare(self, model: PreTrainedModel) -> None:
        if hasattr(model.config, "use_cache"):
            model.config.use_cache = False  # one graph, no cache in or out

    def pads_left(self) -> bool:
        return self.plan.task == "text-generation"  # a causal LM's logits, as generation pads

    def program_config(self, x: Exporting, sample: dict):
        return x.config(sample, deferred=True)

    def export_program(self, x: Exporting, model: PreTrainedModel, inputs: dict, config: DynamoConfig):
        # The backend's attention for an encoder's graph; the eager reference then runs it too: one
        # model, judged as exported. Not for causal attention: on a left-padded row eager attention and
        # SDPA answer the fully masked positions differently (a Llama's logits there 0.73 apart), so
        # the graph would no longer be the model its users load.
        causal = any(getattr(module, "is_causal", False) for module in model.modules())
        if x.backend.attention is not None and not causal:
            try:
                model.set_attn_implementation(x.backend.attention)
            except ValueError:  # a model without it keeps its own
                pass
        return x.exporter.export(model, inputs, config)

    def validate(
        self, reference: Reference, loaded, traced: dict[str, set[str]], sample: dict, other: dict
    ) -> list[Check]:

        return [
            compare_forward("sample", reference, loaded, sample),
            compare_forward("other_shape", reference, loaded, other),
        ]


@register_split(Split.DECODER)
class Decoder(ExportSplit):
    components: ClassVar[tuple[str, ...]] = ("decode",)
    forces_at_once: ClassVar[bool] = True
    loaders: ClassVar[LoadersNames | None] = LoadersNames(Layout.DECODER_WITH_PAST, {"decode": "model"})
    # The model's own cache, read in `prepare` (from the config's names where no model is at hand).
    cache_layout: CacheLayout | None = None

    def prepare(self, model: PreTrainedModel) -> None:
        super().prepare(model)
        self.cache_layout = CacheLayout.of(model)
        self.cache_layout.check_prompt_on_states(model)

    def export_program(self, x: Exporting, model: PreTrainedModel, inputs: dict, config: DynamoConfig):
        from transformers.exporters.utils import decompose_for_generation

        # Weights once: the exporter's multi-token decode takes the prompt on an empty cache as well
        # as each new token, so this one program is the whole decoder (no prefill copy of the weights).
        with captured_as_traced(x.exporter):
            stages = decompose_for_generation(
                model, dict(inputs), generation_config=model.generation_config, multi_token_decode=True
            )
        decoder, decoder_inputs = stages["decode"]
        decoder_inputs = self.decode_inputs(model, self.masked(decoder_inputs))
        axes = varying_axes(config, cast("PreTrainedModel", decoder), decoder_inputs)
        program = _fused_where_it_fuses(x, decoder, decoder_inputs, axes)
        if (count := fixed_token_count(program.components["model"].program)) is not None:
            raise UnsupportedArchitectureError(
                f"{type(model).__name__}'s decode program takes exactly {count} new token(s): torch.export fixed "
                "the count, as the model's forward steps through its tokens in a Python loop when exported "
                "(Mamba: transformers' `mamba_selective_scan`, whose associative scan is off under export, "
                "having no ONNX translation). A runtime feeds a prompt's tokens at once.",
                "Wait for a transformers release whose scan exports over any number of tokens; no export of "
                "this model with the pinned one keeps that count dynamic.",
            )
        program.components = {"decode": program.components["model"]}
        program.generation_config = model.generation_config
        return program

    def decode_inputs(self, model: PreTrainedModel, inputs: dict) -> dict:
        """The captured decode step's inputs as the program takes them."""
        return inputs

    def masked(self, inputs: dict) -> dict:
        """The captured decode step with a 2D mask where generate() dropped it. Mamba's and Mamba 2's
        `prepare_inputs_for_generation` pass none after the prompt, so the program traced without one
        and read a left-padded prompt's padding as text (Mamba 2: 1.09 off on that row alone, exact on
        the others; eager with the mask equals the row run alone). One masked position more than the
        tokens, as `CacheLayout.prefix` holds."""
        if inputs.get("attention_mask") is not None or not (self.cache_layout and self.cache_layout.states):
            return inputs
        tokens = next(inputs[name] for name in ("input_ids", "inputs_embeds") if inputs.get(name) is not None)
        return {**inputs, "attention_mask": torch.ones(tokens.shape[0], tokens.shape[1] + 1, dtype=torch.long)}

    def judged(self, model_dir: Path, config: PretrainedConfig, other: dict) -> Judged:
        """Real prose and its own next tokens, where the repo's tokenizer loads (`inputs.judged_text`)."""
        return judged_text(model_dir, config) or super().judged(model_dir, config, other)

    def tokens(
        self, call: Call, ids: torch.Tensor, prompt: dict | None = None, config: PretrainedConfig | None = None
    ) -> dict:
        """What the decoder takes for these tokens."""
        return {"input_ids": ids}

    def start(
        self, call: Call, prompt: dict, config: PretrainedConfig, cache_dtype: torch.dtype
    ) -> tuple[Any, torch.Tensor, State]:
        mask, ids = prompt["attention_mask"], prompt["input_ids"]
        layout = self.cache_layout or CacheLayout.from_config(config)
        # A cache with states holds one masked position before the prompt (`CacheLayout.prefix`).
        mask = torch.cat([torch.zeros(len(mask), layout.prefix, dtype=mask.dtype), mask], dim=-1)
        # One decoder (weights once): the prompt goes through `decode` on an empty cache.
        where = self.prompt_positions(prompt, mask)
        output = call(
            "decode",
            **self.tokens(call, ids, prompt, config),
            attention_mask=mask,
            position_ids=where[..., layout.prefix :],
            cache_position=torch.arange(layout.prefix, mask.shape[1]),
            cache=layout.empty(config, ids.shape[0], cache_dtype),
        )
        return output, ids, {"mask": mask, "positions": where}

    def prompt_positions(self, prompt: dict, mask: torch.Tensor) -> torch.Tensor:
        """The prompt's position ids as generate() derives them from `mask` (the cache's prefix included)."""
        return positions(mask)

    def forced_logits(
        self, call: Call, prompt: dict, force: torch.Tensor, config: PretrainedConfig, cache_dtype: torch.dtype
    ) -> list[torch.Tensor]:
        """The logits before each of `force`'s tokens (`[batch, n]`), the prompt and the forced tokens
        but the last fed through `decode` at once on an empty cache: `greedy_loop`'s teacher-forced steps."""
        given = force[:, :-1]
        ids = torch.cat([prompt["input_ids"], given], dim=-1)
        mask = torch.cat([prompt["attention_mask"], torch.ones_like(given)], dim=-1)
        output, _, _ = self.start(call, {**prompt, "input_ids": ids, "attention_mask": mask}, config, cache_dtype)
        logits = output["logits"] if isinstance(output, Mapping) else output.logits
        width = prompt["input_ids"].shape[1]
        return [logits[:, width - 1 + step] for step in range(force.shape[1])]

    def step(self, call: Call, output: Any, token: torch.Tensor, state: State) -> Any:
        state["mask"] = mask = torch.cat([state["mask"], torch.ones_like(token)], dim=-1)
        # The next position after each row's last, as generate() extends them (on every row of 3-D ones).
        state["positions"] = where = torch.cat([state["positions"], state["positions"][..., -1:] + 1], dim=-1)
        return call(
            "decode",
            **self.tokens(call, token),
            attention_mask=mask,
            position_ids=where[..., -1:],
            cache_position=torch.tensor([mask.shape[1] - 1]),
            cache=cache_of(output),
        )


@register_split(Split.IMAGE_TEXT_DECODER)
class ImageTextDecoder(Decoder):
    components = ("vision_encoder", "embed_tokens", "decode")
    forces_at_once = False  # its prompt is images and text
    # transformers.js's three sessions of an image-text model (`LlavaForConditionalGeneration`, …).
    loaders: ClassVar[LoadersNames | None] = LoadersNames(
        Layout.IMAGE_TEXT_DECODER_WITH_PAST,
        {"vision_encoder": "vision_encoder", "embed_tokens": "embed_tokens", "decode": "decoder_model_merged"},
        {"vision_encoder": "image_features", "embed_tokens": "inputs_embeds"},
    )

    # Set in `prepare` from the model: its vision encoder fed each image's grid (`GridImageFeatures`),
    # its rotary positions computed from that grid (generate()'s own `_prepare_position_ids_for_generation`),
    # and whether its decoder reads which tokens are an image's (`token_type_ids`, Gemma 3).
    grid: GridImageFeatures | None = None
    rope_positions: Callable | None = None
    reads_token_types: bool = True

    def prepare(self, model: PreTrainedModel) -> None:
        import inspect

        super().prepare(model)
        if "image_grid_thw" in inspect.signature(cast(Callable, model.get_image_features)).parameters:
            self.grid = GridImageFeatures(model)
        if hasattr(getattr(model, "model", model), "get_rope_index"):
            self.rope_positions = cast(Callable, model._prepare_position_ids_for_generation)
        self.reads_token_types = "token_type_ids" in inspect.signature(model.forward).parameters

    def image_features(self, model: PreTrainedModel) -> torch.nn.Module:
        return GridImageFeatures(model) if self.grid is not None else ImageFeatures(model)

    def export(self, x: Exporting, model: PreTrainedModel, sample: dict):
        from transformers.exporters import ExportedModel

        token_inputs = {"input_ids": sample["input_ids"]}
        if self.grid is not None:  # one image a call: the first's patches with their grid and geometry
            first = self.grid.each_image(sample["pixel_values"], sample["image_grid_thw"])[0]
            images = x.one(self.image_features(model), first, x.config())
        else:
            images = self.export_images(x, ImageFeatures(model), sample["pixel_values"])
        graphs = {
            "vision_encoder": images,
            "embed_tokens": x.one(TokenEmbeddings(model), token_inputs, x.config(token_inputs)),
            "decode": self.export_program(x, model, sample, self.program_config(x, sample)).components["decode"],
        }
        return ExportedModel(
            graphs, x.exporter.export_format, config=model.config, generation_config=model.generation_config
        )

    def export_images(self, x: Exporting, features: ImageFeatures, pixels: torch.Tensor) -> Any:
        """The vision encoder over any number of images, as transformers.js feeds it every image of a
        batch's prompts in one call (measured on Gemma 3 traced on one: "Got invalid dimensions for
        input: pixel_values … Got: 2 Expected: 1"); over one image where the model's features come out
        as a tensor per image (LLaVA-NeXT's tiles) and torch.export cannot keep their number dynamic."""
        from torch.export import Dim

        batch = self.plan.dynamic_axes.get("input_ids", {}).get(0)
        images = x.dims.setdefault("images", Dim("images", min=1, max=batch.max if batch else 64))
        if pixels.shape[0] > 1:
            try:
                return x.one(features, {"pixel_values": pixels}, x.backend.make_config({"pixel_values": {0: images}}))
            except Exception as error:  # noqa: BLE001  (the per-image program below is the answer)
                print(f"vision_encoder: one image per call ({type(error).__name__}: {str(error)[:200]})")
        return x.one(features, {"pixel_values": pixels[:1]}, x.config())

    def decode_inputs(self, model: PreTrainedModel, inputs: dict) -> dict:
        # Fed the embeddings of its ids instead: the decoder of an image-text model reads embeddings,
        # so the prompt's images can take their placeholders' places.
        inputs = dict(inputs)
        inputs["inputs_embeds"] = model.get_input_embeddings()(inputs.pop("input_ids"))
        if inputs.get("position_ids") is not None:
            inputs.pop("mm_token_type_ids", None)  # read only to compute positions the program is given
        return inputs

    def eager(self, model: PreTrainedModel) -> dict[str, Callable]:
        return {"vision_encoder": self.image_features(model), "embed_tokens": TokenEmbeddings(model), "decode": model}

    def prompt_positions(self, prompt: dict, mask: torch.Tensor) -> torch.Tensor:
        if self.rope_positions is None:
            return super().prompt_positions(prompt, mask)
        # Qwen2.5-VL: a row of text positions over three of rotary ones (time, height, width), each
        # image's tokens placed on its grid, as generate() computes them for the prompt.
        given = {k: prompt[k] for k in ("mm_token_type_ids", "image_grid_thw") if k in prompt}
        ids = prompt["input_ids"]
        return self.rope_positions(ids, {"input_ids": ids, "attention_mask": mask, **given})

    def judged(self, model_dir: Path, config: PretrainedConfig, other: dict) -> Judged:
        # A prompt holds images: eager's own continuation of the validation's image-text prompts.
        return ExportSplit.judged(self, model_dir, config, other)

    def tokens(
        self, call: Call, ids: torch.Tensor, prompt: dict | None = None, config: PretrainedConfig | None = None
    ) -> dict:
        # Their embeddings, with each of the prompt's images, one `vision_encoder` call each, in its
        # placeholder tokens' places (the merge `decompose_multimodal` leaves to the caller).
        embeds = one_tensor(call("embed_tokens", input_ids=ids))
        if prompt is not None and "pixel_values" in prompt:
            images = prompt["pixel_values"]
            if self.grid is not None:
                each = self.grid.each_image(images, prompt["image_grid_thw"])
            else:
                each = [{"pixel_values": images[i : i + 1]} for i in range(images.shape[0])]
            features = torch.cat([one_tensor(call("vision_encoder", **image)) for image in each])
            assert config is not None  # a prompt with images comes with its model's config
            placeholders = (ids == config.image_token_id).unsqueeze(-1)
            embeds = embeds.masked_scatter(placeholders, features.to(embeds.dtype))
        # Which tokens are an image's, where the decoder reads it (Gemma 3: its image tokens attend
        # to each other both ways); the processor marks them so, and no new token is one.
        if not self.reads_token_types:
            return {"inputs_embeds": embeds}
        image_token = getattr(config, "image_token_id", None) if config is not None else None
        types = (ids == image_token).long() if image_token is not None else torch.zeros_like(ids)
        return {"inputs_embeds": embeds, "token_type_ids": types}


@register_split(Split.ENCODER_DECODER)
class EncoderDecoder(ExportSplit):
    """T5, BART, Marian, Whisper: the `encoder`, and one `decode` program for every step (`MergedDecoder`:
    the prompt on an empty self-attention cache, then each token on the cache it returned), so the
    decoder's weights are stored once — what transformers.js and optimum call `decoder_model_merged`."""

    components = ("encoder", "decode")
    loaders: ClassVar[LoadersNames | None] = LoadersNames(
        Layout.ENCODER_DECODER_WITH_PAST, {"encoder": "encoder_model", "decode": "decoder_model_merged"}
    )

    def prepare(self, model: PreTrainedModel) -> None:
        super().prepare(model)
        self.cache_shape = MergedDecoder.cache_shape(model)

    def pads_left(self) -> bool:
        return False  # the encoder reads the whole prompt; the decoder has a prompt of its own

    def inputs(self, model_dir: Path, config: PretrainedConfig, shape: Shape, seed: int) -> dict[str, torch.Tensor]:
        inputs = super().inputs(model_dir, config, shape, seed)
        inputs["decoder_input_ids"] = decoder_prompt(config, shape, seed, generation_config_of(Path(model_dir)))
        return inputs

    def judged(self, model_dir: Path, config: PretrainedConfig, other: dict) -> Judged:
        """A speech model: prose spoken by espeak-ng and its transcript (`inputs.judged_speech`), with
        the validation's decoder prompt (start, language, task); else eager's own continuation."""
        if self.plan.modality == "audio":
            start = other["decoder_input_ids"][:1]
            spoken = judged_speech(model_dir, config, start)
            if spoken is not None:
                return spoken
        return super().judged(model_dir, config, other)

    def export(self, x: Exporting, model: PreTrainedModel, sample: dict):
        from transformers.exporters import ExportedModel

        encoder_inputs = self.encoder_inputs(sample)
        encoder = model.get_encoder()
        # Raw audio's conv encoder (SpeechT5, Moonshine) guards its lengths as wav2vec2's does: deferred.
        graphs = {"encoder": x.one(encoder, encoder_inputs, x.config(encoder_inputs, deferred=True))}
        # Traced on a filled cache and more new tokens than it holds (sizes that differ from the batch
        # and from each other, so torch.export keeps every axis its own symbol); run on an empty one for
        # the prompt. The exporter marks every axis dynamic (the cache is a pytree).
        decoder = MergedDecoder(model)
        with torch.no_grad():
            state = self.decoder_state(one_tensor(encoder(**encoder_inputs)), sample)
            prompt = sample["decoder_input_ids"]
            filled = decoder(input_ids=prompt, cache=self.empty(len(prompt)), **state)["cache"]
        tokens = torch.cat([prompt, prompt[:, :1]], dim=-1)
        inputs = {"input_ids": tokens, "cache": filled, **state}
        graphs["decode"] = x.one(decoder, inputs, varying_axes(x.config(), model, inputs))
        return ExportedModel(
            graphs, x.exporter.export_format, config=model.config, generation_config=model.generation_config
        )

    @staticmethod
    def encoder_inputs(prompt: dict) -> dict:
        return {k: v for k, v in prompt.items() if k != "decoder_input_ids"}

    @staticmethod
    def decoder_state(hidden: torch.Tensor, prompt: dict) -> State:
        """What the decoder reads of the encoder at every step: its output, and the prompt's mask
        where it has one (Whisper's spectrogram has none)."""
        state = {"encoder_hidden_states": hidden}
        if "attention_mask" in prompt:
            state["encoder_attention_mask"] = prompt["attention_mask"]
        return state

    def empty(self, batch: int, dtype: torch.dtype = torch.float32):
        """The self-attention cache of a decoder that has read nothing yet: every layer zero long."""
        from transformers import DynamicCache

        layers, heads, head_dim = self.cache_shape
        cache = DynamicCache()
        for index in range(layers):
            empty = torch.zeros(batch, heads, 0, head_dim, dtype=dtype)
            cache.update(empty, empty.clone(), index)
        return cache

    def eager(self, model: PreTrainedModel) -> dict[str, Callable]:
        return {"encoder": model.get_encoder(), "decode": MergedDecoder(model)}

    def start(
        self, call: Call, prompt: dict, config: PretrainedConfig, cache_dtype: torch.dtype
    ) -> tuple[Any, torch.Tensor, State]:
        state = self.decoder_state(one_tensor(call("encoder", **self.encoder_inputs(prompt))), prompt)
        ids = prompt["decoder_input_ids"]
        return call("decode", input_ids=ids, cache=self.empty(len(ids), cache_dtype), **state), ids, state

    def step(self, call: Call, output: Any, token: torch.Tensor, state: State) -> Any:
        return call("decode", input_ids=token, cache=cache_of(output), **state)


@dataclasses.dataclass
class EncoderOutput(BaseModelOutput):
    """The encoder's output as a decoder reads it: its hidden states, and no mask of its own where
    a decoder asks for one (Moonshine reads `encoder_outputs.attention_mask`, its downsampled
    mask, which a batch without padding does not need)."""

    attention_mask: torch.Tensor | None = None


class MergedDecoder(torch.nn.Module):
    """An encoder-decoder's decoder as one program for every step: its self-attention cache in and
    out, and the cross-attention keys and values computed from the encoder's output on each call (a
    fresh cross-attention cache: the model's own attention then projects them, as on generate()'s
    first step), so the first step and every later one run the same graph. The model's own forward."""

    def __init__(self, model: PreTrainedModel):
        super().__init__()
        self.model = model

    def forward(self, input_ids, encoder_hidden_states, cache, encoder_attention_mask=None):
        from transformers import DynamicCache, EncoderDecoderCache

        output = self.model(
            encoder_outputs=EncoderOutput(last_hidden_state=encoder_hidden_states),
            attention_mask=encoder_attention_mask,
            decoder_input_ids=input_ids,
            past_key_values=EncoderDecoderCache(cache, DynamicCache()),
            use_cache=True,
        )
        return {"logits": output.logits, "cache": output.past_key_values.self_attention_cache}

    @classmethod
    def cache_shape(cls, model: PreTrainedModel) -> tuple[int, int, int]:
        """(layers, heads, head dim) of the decoder's self-attention cache, read off one step of the
        model itself (T5's head dim is its `d_kv`, not `d_model / heads`)."""
        from transformers import DynamicCache

        config = model.config
        width = getattr(config, "d_model", None) or config.get_text_config().hidden_size
        start = config.decoder_start_token_id if config.decoder_start_token_id is not None else 0
        with torch.no_grad():
            cache = cls(model)(torch.tensor([[start]]), torch.zeros(1, 1, width), DynamicCache())["cache"]
        keys = cache.layers[0].keys
        return len(cache.layers), keys.shape[1], keys.shape[3]


# ── Components the exporters leave to the caller, as modules that export as graphs of their own ──


class _WithImageFeatures(Protocol):
    """A model whose images the language model reads through its own `get_image_features`."""

    def get_image_features(self, *, pixel_values: torch.Tensor) -> Any: ...


class ImageFeatures(torch.nn.Module):
    """Images' features as the language model reads them: the vision tower, the layer and tokens
    the config selects, the projector (`get_image_features`), `[images, tokens, hidden]`. A model
    that returns a tensor per image is stacked (and exported one image per call)."""

    def __init__(self, model: PreTrainedModel):
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        if pixel_values.ndim == 5:
            # Prompts × their images (SmolVLM's tiles and global view): all of them as one prompt's, in
            # order. Per prompt, the model splits its features by a count read off the data
            # (`split(….tolist())`), on which torch.export fixes the number of prompts ("Constraints
            # violated (images)"); as one prompt, any number of images traces. `[1, tokens, hidden]`:
            # transformers.js reads them flat (`image_features.view(-1, hidden)`), as `tokens` does.
            pixel_values = pixel_values.reshape(1, -1, *pixel_values.shape[2:])
        features = cast(_WithImageFeatures, self.model).get_image_features(pixel_values=pixel_values).pooler_output
        return features if isinstance(features, torch.Tensor) else torch.stack(list(features))


class GridImageFeatures(torch.nn.Module):
    """One image's features where the vision encoder takes its flat patches with its grid (Qwen2.5-VL's
    `image_grid_thw`): `[tokens, hidden]`, merged as the language model reads them.

    The encoder derives its geometry from the grid's values in Python (`.tolist()` loops: patch
    positions, window order, cumulative lengths), which torch.export cannot keep dynamic; the program
    takes them as inputs, computed outside it by transformers' own `precompute_export_inputs`, as the
    exporter feeds them (`each_image`). One image a call: the exporter's vision attention cuts a call's
    patches into equal segments, which images of different sizes are not (measured: a guard on
    `window_index` failed for three images traced as two)."""

    def __init__(self, model: PreTrainedModel):
        super().__init__()
        self.visual = model.get_encoder(modality="image")
        self.config = self.visual.config  # what the geometry helpers read

    def forward(self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor, **geometry: Any) -> torch.Tensor:
        pixels = pixel_values.to(next(self.visual.parameters()).dtype)
        return self.visual(pixels, grid_thw=image_grid_thw, **geometry).pooler_output

    def each_image(self, pixel_values: torch.Tensor, grid: torch.Tensor) -> list[dict[str, Any]]:
        """Each image's inputs: its rows of `pixel_values`, its grid row and their geometry."""
        from transformers.exporters.utils import precompute_export_inputs

        images = []
        for patches, row in zip(torch.split(pixel_values, grid.prod(-1).tolist()), grid.split(1)):
            given: dict[str, Any] = {"hidden_states": patches, "grid_thw": row}
            with torch.no_grad():
                precompute_export_inputs(self.visual, given)
            geometry = {k: v for k, v in given.items() if k not in ("hidden_states", "grid_thw") and v is not None}
            images.append({"pixel_values": patches, "image_grid_thw": row, **geometry})
        return images


class TokenEmbeddings(torch.nn.Module):
    """`input_ids` → the decoder's `inputs_embeds` (the model's own input embeddings)."""

    def __init__(self, model: PreTrainedModel):
        super().__init__()
        self.embeddings = model.get_input_embeddings()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embeddings(input_ids)


# Fusing holds a second copy of the weights while it packs the projections: a 587 M Llama's ONNX
# export peaked at 6.5 GB (2.9x its fp32 weights) fused, 3.1 GB (1.33x) not. What fusing gains is the
# small ops' overhead, which weighs where the matrices are small (SmolLM2-135M: 1.07x the decode
# speed, its w8 file 1.14x): graphs of up to this many bytes of weights are fused (Gemma 3 270M's
# 1.07 GB: a peak of ~3 GB).
FUSED_MAX_BYTES = 3 * 10**9 // 2


def _fused_where_it_fuses(x: Exporting, decoder: Any, inputs: dict, config: DynamoConfig) -> Any:
    """A decoder LLM's program, fused by the exporter into the runtime's own ops where its backend
    says so (`Backend.generation_fusions`: ONNX Runtime's rotary embeddings, skip norms, packed
    projections) and its weights are at most `FUSED_MAX_BYTES` (docs/benchmarks-llm-peers.md). The
    fused head (`FusedMatMul`), which WebGPU has no kernel for, is unfused again
    (`layouts.unfuse_transposed_weights`). A graph the fusions fail on is exported as it was, and said."""
    import sys

    fusions = x.backend.generation_fusions
    weights = sum(p.numel() * p.element_size() for p in decoder.parameters()) if hasattr(decoder, "parameters") else 0
    if fusions and weights <= FUSED_MAX_BYTES:
        try:
            fused = dataclasses.replace(cast(Any, config), ort_fusions=fusions)  # an OnnxConfig
            program = x.exporter.export(decoder, inputs, fused)
            unfuse_transposed_weights(program.components["model"].program)  # for WebGPU
            return program
        except Exception as e:
            said = f"{type(e).__name__}: {e}"
            print(f"fusing the decoder for {fusions} failed ({said}); exported unfused", file=sys.stderr)
    return x.exporter.export(decoder, inputs, config)


def fixed_token_count(program: Any) -> int | None:
    """How many new tokens a decode program (a `.pt2` program or an ONNX graph) takes where its export
    fixed that count, else None."""
    names = ("input_ids", "inputs_embeds")
    if isinstance(program, torch.export.ExportedProgram):
        shapes = [n.meta["val"].shape for n in program.graph.nodes if n.op == "placeholder" and n.name in names]
    else:  # an ONNX graph (onnx_ir): its inputs' shapes, a symbolic dim where it varies
        inputs = getattr(getattr(program, "graph", None), "inputs", ())
        shapes = [v.shape for v in inputs if v.name in names and v.shape is not None]
    # A fixed size can still be a symbol that export specialized: `2` in the `.pt2` program's
    # `Size([s17, 2])`, `SymbolicDim('2')` in the ONNX graph (measured on Mamba).
    sizes = [str(shape[1]) for shape in shapes if len(shape) > 1]
    return int(sizes[0]) if sizes and sizes[0].isdigit() else None


def varying_axes(config: DynamoConfig, model: PreTrainedModel, inputs: dict) -> DynamoConfig:
    """`config` with the dynamic shapes of a generation program's `inputs` marked where they vary,
    instead of every axis of every input (what the exporter marks given none: its cache is a pytree).

    The exporter's own `Dim.AUTO` spec, narrowed to the axes a runtime changes: a cache's leaves vary
    in their batch (axis 0) and, for keys and values `[batch, heads, positions, dim]`, their length
    (axis 2); heads, widths, conv kernels and state sizes are the model's. Embeddings' width is the
    model's too. Every other axis of every other input stays `Dim.AUTO`: one too many is only slower,
    one too few would fix a size users vary. (The exporter's own warning says this "exports
    significantly faster"; `bench/exporter_per_layer.py` measured no change on a Llama decode
    program, 2.36 against 2.42 s per layer: the specs say what varies, the speed came elsewhere.)"""
    from transformers.cache_utils import Cache
    from transformers.exporters.exporter_dynamo import get_auto_dynamic_shapes, register_cache_pytrees_for_model
    from transformers.exporters.utils import _OUTPUT_FLAGS

    if getattr(config, "dynamic_shapes", None) is not None or not getattr(config, "dynamic", False):
        return config
    register_cache_pytrees_for_model(model)  # the spec mirrors the cache's pytree, as the export's

    def narrowed(spec: Any) -> Any:
        if isinstance(spec, dict):  # one leaf tensor's axes
            return {axis: dim for axis, dim in spec.items() if axis == 0 or (axis == 2 and len(spec) == 4)}
        if isinstance(spec, (list, tuple)):
            return type(spec)(narrowed(child) for child in spec)
        return spec

    # The exporter takes its output flags (`use_cache`, `return_dict`) out of the inputs it traces.
    inputs = {name: value for name, value in inputs.items() if name not in _OUTPUT_FLAGS}
    spec = get_auto_dynamic_shapes(inputs)
    for name, value in inputs.items():
        if isinstance(value, Cache):
            spec[name] = narrowed(spec[name])
        elif name == "inputs_embeds" and isinstance(spec.get(name), dict):
            spec[name] = {axis: dim for axis, dim in spec[name].items() if axis != value.dim() - 1}
    return dataclasses.replace(config, dynamic_shapes=spec)

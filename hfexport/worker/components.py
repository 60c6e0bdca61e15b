"""Components the exporters leave to the caller, as modules that export as graphs of their own.

5.24's `export_for_generation` exports what `generate()` calls *after* it has run the encoders:
the decoder steps. An image-text-to-text model (LLaVA) also needs its images' features and its
tokens' embeddings, which the decoder then reads in place of ids (`decompose_multimodal` leaves
the merge of the two to the caller; so do we, in the greedy loop). Each wrapper calls the model's
own method — nothing of the model is re-implemented here — and `eager_components` gives the
validation the same components on the eager model, so both sides run the same loop.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class ImageFeatures(torch.nn.Module):
    """One image's features as the language model reads them: the vision tower, the layer and
    tokens the config selects, the projector (`get_image_features`). One image per call: the
    model returns a tensor per image, and torch.export cannot keep their number dynamic."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return torch.stack(list(self.model.get_image_features(pixel_values=pixel_values).pooler_output))


class TokenEmbeddings(torch.nn.Module):
    """`input_ids` → the decoder's `inputs_embeds` (the model's own input embeddings)."""

    def __init__(self, model):
        super().__init__()
        self.embeddings = model.get_input_embeddings()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.embeddings(input_ids)


def on_embeddings(model, decode_inputs: dict) -> dict:
    """A captured decode step fed the embeddings of its ids instead: the decoder of an image-text
    model reads embeddings, so the prompt's images can take their placeholders' places."""
    inputs = dict(decode_inputs)
    inputs["inputs_embeds"] = model.get_input_embeddings()(inputs.pop("input_ids"))
    return inputs


def eager_components(model, plan) -> dict[str, Callable]:
    """The plan's components on the eager model, by name: the reference the exports are run against."""
    eager: dict[str, Callable] = {"prefill": model, "decode": model}
    if plan.is_encoder_decoder:
        eager["encoder"] = model.get_encoder()
    if plan.modality == "image-text":
        eager["vision_encoder"] = ImageFeatures(model)
        eager["embed_tokens"] = TokenEmbeddings(model)
    return eager

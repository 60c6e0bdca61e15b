"""A decoder LLM exported by ExecuTorch's own LLM export, for the families transformers' exportable
module cannot hold.

`llm_runner.py` exports a decoder through transformers' `TorchExportableModuleForDecoderOnlyLM`, whose
static cache holds keys and values only: a model with conv or recurrent states has no place there.
ExecuTorch ships its own definitions of some such families beside Llama's (`examples/models/lfm2`: LFM2's
short-conv blocks, their state a buffer of the program) with a converter of the Hub's weights, and
`export_llama` lowers them with XNNPACK for its `TextLLMRunner` — the path ExecuTorch maintains for
phones. Here a family is registered with the definition ExecuTorch names it by and the parameters its
`params.json` takes, read off the model (each measured: the FFN width off its weights, not re-derived from
the config's rounding rules); the weights go through ExecuTorch's converter, the export through
`export_llama`. hfexport writes no lowering and no model of its own.

Its program is fed as the runner feeds it: `forward(tokens, input_pos)`, `input_pos` the first token's
position, one tensor of one element; it returns the last token's logits. Measured on the tiny LFM2
(`tests/families.py`): eager's token ids, logits 5e-7 off.

What ExecuTorch's LFM2 does not do: reset its conv state when a new text starts at position 0. A second
prompt run in the same loaded program starts from the first one's last conv inputs (measured: 1.2e-4 off
eager on the tiny model's second prompt, within tolerance). The runner's apps
load the program once; `compare` runs every prompt in one loaded program, as they do, so the figure is
in the check.
"""

from __future__ import annotations

import contextlib
import json
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .executorch_variants import INT4_GROUP_SIZE

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel


@dataclass(frozen=True)
class ExecuTorchDefinition:
    """A family ExecuTorch's LLM export defines: the `ModelType` it names the definition by, the dotted
    path of its converter of Hub weights to that definition's, and the `params.json` a model's config
    and converted weights make."""

    model_type: str
    convert: str
    params: Callable[[PretrainedConfig, dict[str, torch.Tensor]], dict[str, Any]]


_DEFINITIONS: dict[str, ExecuTorchDefinition] = {}


def register(hub_model_type: str, model_type: str, convert: str):
    """Register `fn(config, weights) -> params` for models whose config.json says `hub_model_type`."""

    def decorator(fn):
        _DEFINITIONS[hub_model_type] = ExecuTorchDefinition(model_type, convert, fn)
        return fn

    return decorator


def definition_of(config: PretrainedConfig) -> ExecuTorchDefinition | None:
    """ExecuTorch's own definition of this model's family, or None."""
    return _DEFINITIONS.get(config.get_text_config().model_type)


@register("lfm2", "lfm2_350m", "executorch.examples.models.lfm2.convert_weights.lfm_2_to_meta")
def _lfm2(config: PretrainedConfig, weights: dict[str, torch.Tensor]) -> dict[str, Any]:
    """As ExecuTorch's `examples/models/lfm2/config/lfm2_350m_config.json` sets LFM2-350M's: Hugging
    Face's rotary layout, query and key norms before the rotation, each layer conv or attention."""
    text = config.get_text_config()
    rope = (getattr(text, "rope_parameters", None) or {}).get("rope_theta") or getattr(text, "rope_theta", None)
    return {
        "dim": text.hidden_size,
        "ffn_dim_multiplier": 1,
        "hidden_dim": next(w.shape[0] for name, w in weights.items() if name.endswith("feed_forward.w1.weight")),
        "n_heads": text.num_attention_heads,
        "n_kv_heads": text.num_key_value_heads,
        "n_layers": text.num_hidden_layers,
        "norm_eps": text.norm_eps,
        "rope_theta": float(rope if rope is not None else 10000.0),
        "use_scaled_rope": False,
        "vocab_size": text.vocab_size,
        "use_hf_rope": True,
        "use_qk_norm": True,
        "qk_norm_before_rope": True,
        "layer_types": list(text.layer_types),
    }


def _converted(model: PreTrainedModel, convert: str) -> dict[str, torch.Tensor]:
    """The model's weights through ExecuTorch's converter. Its checkpoints tie the head to the
    embeddings, so the converter makes `output.weight` from them and passes an untied `lm_head.weight`
    through under its own name: that one is renamed to the head the definition reads."""
    import importlib

    module, _, function = convert.rpartition(".")
    weights = getattr(importlib.import_module(module), function)(dict(model.state_dict()))
    if "lm_head.weight" in weights:
        weights["output.weight"] = weights.pop("lm_head.weight")
    return weights


def export(model: PreTrainedModel, path: Path, seq_len: int, metadata: dict[str, Any], quantized: bool) -> None:
    """`model` as ExecuTorch's LLM export writes it, at `path`: XNNPACK, fp32, its KV cache and states
    inside, `seq_len` positions; `metadata` (the runner's constant methods: BOS, EOS) as its own.
    `quantized`: ExecuTorch's 8da4w recipe (`qmode` 8da4w, int4 groups of `INT4_GROUP_SIZE`).

    Raises:
        ValueError: the model's family has no ExecuTorch definition here (`definition_of`).
    """
    from executorch.examples.models.llama.export_llama_lib import export_llama
    from executorch.extension.llm.export.config.llm_config import DtypeOverride, LlmConfig, ModelType

    found = definition_of(model.config)
    if found is None:
        raise ValueError(f"ExecuTorch's LLM export defines no {model.config.model_type} model here")
    with tempfile.TemporaryDirectory(prefix="hfexport-et-llm-") as scratch:
        weights = _converted(model, found.convert)
        (Path(scratch) / "params.json").write_text(json.dumps(found.params(model.config, weights)))
        torch.save(weights, Path(scratch) / "weights.pth")
        del weights
        config = LlmConfig()
        config.base.model_class = ModelType(found.model_type)
        config.base.params = str(Path(scratch) / "params.json")
        config.base.checkpoint = str(Path(scratch) / "weights.pth")
        config.base.metadata = json.dumps({k: metadata[k] for k in ("get_bos_id", "get_eos_ids") if k in metadata})
        config.model.use_kv_cache = True
        # ExecuTorch's own LFM2 recipe swaps in its custom SDPA and cache ops, which a process registers
        # by importing `executorch.extension.llm.custom_ops` or cannot load the program ("Missing
        # operator: llama::update_cache.out", measured in TextLLMRunner): the card's blocks and
        # optimum-executorch would each need that import. Without them the program runs on the
        # portable ops every runtime registers.
        config.model.use_sdpa_with_kv_cache = False
        config.model.enable_dynamic_shape = True
        config.model.dtype_override = DtypeOverride("fp32")
        config.export.max_seq_length = seq_len
        config.export.max_context_length = seq_len
        config.export.output_name = str(path)  # a path: export_llama writes the name as given
        config.backend.xnnpack.enabled = True
        config.backend.xnnpack.extended_ops = True
        if quantized:
            config.quantization.qmode = "8da4w"
            config.quantization.group_size = INT4_GROUP_SIZE
        # Its progress goes to stdout, which is the worker's channel to its parent.
        with contextlib.redirect_stdout(sys.stderr):
            export_llama(config)


def feeds_start_position(method: Any) -> bool:
    """Whether a loaded `forward` is fed the first token's position alone (ExecuTorch's LLM export:
    `input_pos` of one element) rather than every token's (transformers' module: `cache_position`)."""
    meta = method.metadata
    return meta.num_inputs() == 2 and list(meta.input_tensor_meta(1).sizes()) == [1] and meta.num_outputs() == 1

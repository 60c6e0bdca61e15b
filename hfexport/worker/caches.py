"""Caches and positions, as `generate()` builds them: what the generation splits (`splits.py`)
and the LLM runner (`llm_runner.py`) feed a decode step with.

`CacheLayout` reads each layer's cache off one eager step; `conform` puts a cache in the structure
a program was traced with; `positions`, `cache_of` and `one_tensor` read a step's inputs and outputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from ..errors import UnsupportedArchitectureError

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel


@dataclasses.dataclass(frozen=True)
class CacheLayout:
    """Each layer's cache as the model's own cache class fills it, read off one eager step (not
    derived from config names: Falcon's one key/value head, DeepSeek's latent keys wider than its
    values, a state-space layer's conv and recurrent states are each their family's own).

    `attention[i]`: layer i's (heads, key dim, value dim); `states[i]`: layer i's conv and recurrent
    states' shapes without the batch, by state index (Mamba, LFM2, Qwen3-Next, Falcon-H1)."""

    attention: dict[int, tuple[int, int, int]]
    states: dict[int, dict[str, dict[int, tuple[int, ...]]]]

    @property
    def prefix(self) -> int:
        """Masked positions an empty cache holds before the prompt: one where the cache has states.
        Their layers' mask is the 2D mask's last `tokens` columns (`create_recurrent_attention_mask`),
        a slice torch.export traced on a decode step (mask longer than tokens) and guarded so: the
        `.pt2` program refused a prompt on an empty cache ("attention_mask.size()[1] !=
        input_ids.size()[1]", LFM2). A left-padded position changes no logit (it is masked, as
        generate() masks padding), and the mask is then longer than the tokens on every step."""
        return 1 if self.states else 0

    @classmethod
    def of(cls, model: PreTrainedModel) -> CacheLayout:
        from transformers import DynamicCache

        config = model.config
        text = config.get_text_config()
        token = next((t for t in (text.bos_token_id, text.eos_token_id, 0) if isinstance(t, int)), 0)
        with torch.no_grad():
            output = model(input_ids=torch.tensor([[token, token]]), cache=DynamicCache(config=config), use_cache=True)
        attention, states = {}, {}
        for index, layer in enumerate(cache_of(output).layers):
            if getattr(layer, "keys", None) is not None:
                attention[index] = (layer.keys.shape[1], layer.keys.shape[3], layer.values.shape[3])
            if hasattr(layer, "conv_states"):
                states[index] = {
                    kind: {i: tuple(t.shape[1:]) for i, t in getattr(layer, kind).items() if t is not None}
                    for kind in ("conv_states", "recurrent_states")
                }
        return cls(attention, states)

    @classmethod
    def from_config(cls, config: PretrainedConfig) -> CacheLayout:
        """Without the model (benches reading a report): keys and values of every layer, sized by the
        config's names."""
        text = config.get_text_config()
        heads = text.num_attention_heads
        head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
        kv_heads = getattr(text, "num_key_value_heads", None) or heads
        return cls({i: (kv_heads, head_dim, head_dim) for i in range(text.num_hidden_layers)}, {})

    def check_prompt_on_states(self, model: PreTrainedModel) -> None:
        """A cache with states is exported as one decode step of several tokens on a state, and the
        prompt goes through that same step on zero states: the model's own forward must give the same
        logits that way as from the start, on a padded batch as validation's, and again for the
        tokens after it, on the state the prompt left. The cache goes in as `cache=`: Mamba's and Mamba 2's
        forward (transformers 5.24) take the deprecated `past_key_values=` without reading it, and
        start from zero states (measured: 13 off their forward from the start; 4e-6 as `cache=`).
        Mamba's layers take the mask as long as their new tokens ("The size of tensor a (4) must match
        the size of tensor b (5)"), where Mamba 2's model trims it itself (`create_recurrent_attention_mask`):
        such a model is fed its mask's last columns (`trim_mask_to_tokens`), as runtimes feed a
        decoder the whole mask, and checked again.

        Raises:
            UnsupportedArchitectureError: naming the model, what differed, and the export that works (no cache).
        """
        if not self.states:
            return
        why = self._prompt_on_states(model)
        if why is not None and "must match the size of tensor" in why:
            trim_mask_to_tokens(model)
            why = self._prompt_on_states(model)
        if why is not None:
            raise UnsupportedArchitectureError(
                f"{type(model).__name__}'s cache holds states that its own cached forward does not carry: run on a "
                f"state over {why}; no decode program over its cache can be right.",
                "Export it as one graph without a cache (--task text-generation), or with a transformers "
                "release whose cached forward matches its full one.",
            )

    def _prompt_on_states(self, model: PreTrainedModel) -> str | None:
        """What differed from the forward from the start, run on states (None: nothing)."""
        config = model.config
        vocab = config.get_text_config().vocab_size
        low = min(5, vocab - 1)
        ids = torch.arange(low, low + 6).clamp(max=vocab - 1).repeat(2, 1)
        # Two prompts, the second left-padded, as the validation's batches are; two tokens after them.
        given = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
        mask = torch.cat([torch.zeros(2, self.prefix, dtype=torch.long), given], dim=-1)
        where = positions(mask)
        why = None
        with torch.no_grad():
            fresh = model(input_ids=ids, attention_mask=given, position_ids=positions(given)).logits
            cache = self.empty(config, 2, fresh.dtype)
            scale = 1e-3 * max(1.0, float(fresh.abs().max()))
            try:
                for what, start, stop in (("a prompt", 0, 4), ("the tokens after a prompt", 4, 6)):
                    end = self.prefix + stop
                    step = model(
                        input_ids=ids[:, start:stop],
                        attention_mask=mask[:, :end],
                        position_ids=where[:, self.prefix + start : end],
                        cache_position=torch.arange(self.prefix + start, end),
                        cache=cache,
                        use_cache=True,
                    )
                    cache = cache_of(step)
                    real = given[:, start:stop].bool()  # the padded positions' logits are no one's
                    diff = float((step.logits - fresh[:, start:stop])[real].abs().max())
                    if not diff <= scale:
                        why = f"{what}, its logits were {diff:.2g} off its forward from the start"
                        break
            except Exception as error:  # noqa: BLE001  (the model's own code refusing is the answer)
                why = f"{what}, it raised {type(error).__name__}: {str(error)[:160]}"
        return why

    def empty(self, config: PretrainedConfig, batch: int, dtype: torch.dtype = torch.float32):
        """A cache that has read nothing: every attention layer `prefix` (masked) positions long, every state zero
        (a causal conv over zeros and a recurrence from zero are how a prompt starts), marked as
        holding a previous state: the program was traced on one and takes any number of new tokens."""
        from transformers import DynamicCache

        cache = DynamicCache(config=config)
        for index, (heads, key_dim, value_dim) in self.attention.items():
            keys = torch.zeros(batch, heads, self.prefix, key_dim, dtype=dtype)
            values = torch.zeros(batch, heads, self.prefix, value_dim, dtype=dtype)
            cache.update(keys, values, index)
        for index, kinds in self.states.items():
            layer: Any = cache.layers[index]  # a linear-attention layer: its states by index
            for kind, shapes in kinds.items():
                for state, shape in shapes.items():
                    zeros = torch.zeros(batch, *shape, dtype=dtype)
                    layer.lazy_initialization(**{kind: zeros}, state_idx=state)
                    layer.has_previous_state[state] = True
        return cache


def captured_as_traced(exporter: Any) -> Any:
    """The eager run a decode step is captured from, under the patches the exporter traces it with:
    a torch.export-based exporter traces a sliding-window layer as a full one (the mask applies the
    window; `exporter_dynamo._patch_sliding_window_layer`), so the captured cache must hold every
    position too. Captured cut to the window, the `.pt2` program kept the guard "mask longer than
    tokens + cache" and refused every cache the program itself returns (Starcoder2, window 4)."""
    import contextlib

    from transformers.exporters.exporter_dynamo import DynamoExporter
    from transformers.exporters.utils import apply_patches

    return apply_patches("dynamo") if isinstance(exporter, DynamoExporter) else contextlib.nullcontext()


def conform(runner, kwargs: dict) -> dict:
    """`kwargs` in the structure the program was traced with: a cache's Python constants (a sliding
    layer's token counter, a state's flags) are part of a program's input spec, and the `.pt2`
    runner matches that spec exactly. The tensors are the caller's; only constants come from the spec."""
    import torch.utils._pytree as pytree
    from transformers.exporters.metadata import load_treespec

    spec = getattr(runner.metadata, "in_spec", None)
    if not spec:
        return kwargs
    traced = load_treespec(spec).children_specs[1]
    by_name = dict(zip(traced.context, traced.children_specs))
    conformed = dict(kwargs)
    for name, value in kwargs.items():
        child = by_name.get(name)
        if child is None or child.is_leaf() or isinstance(value, torch.Tensor):
            continue
        leaves = pytree.tree_leaves(value)
        if len(leaves) == child.num_leaves:
            conformed[name] = child.unflatten(leaves)
    return conformed


def positions(mask: torch.Tensor) -> torch.Tensor:
    """Position ids as `generate()` derives them from a left-padded mask."""
    ids = mask.long().cumsum(-1) - 1
    return ids.masked_fill(mask == 0, 1)


def cache_of(output: Any):
    for key in ("cache", "past_key_values"):
        value = output.get(key) if isinstance(output, Mapping) else getattr(output, key, None)
        if value is not None:
            return value
    raise ValueError("The prefill/decode output holds no cache to feed the next step.")


def one_tensor(output: Any) -> torch.Tensor:
    """A one-output component's tensor, whichever way its runtime returns it."""
    if isinstance(output, torch.Tensor):
        return output
    return next(v for v in (output.values() if isinstance(output, Mapping) else output) if isinstance(v, torch.Tensor))


def trim_mask_to_tokens(model: PreTrainedModel) -> None:
    """Feed `model`'s base model the 2D mask's last columns, one per new token: what Mamba 2's
    `create_recurrent_attention_mask` does inside the model, for a model whose layers multiply by the
    mask as given (Mamba). Runtimes feed a decoder the mask of all its positions, and the export
    traces the hook with the model, so the program takes that mask too."""

    def hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        mask = kwargs.get("attention_mask")
        given = (*args[:1], kwargs.get("input_ids"), kwargs.get("inputs_embeds"))  # ids come positionally too
        tokens = next((t for t in given if t is not None), None)
        if mask is not None and mask.ndim == 2 and tokens is not None:
            kwargs["attention_mask"] = mask[:, -tokens.shape[1] :]
        return args, kwargs

    model.base_model.register_forward_pre_hook(hook, with_kwargs=True)

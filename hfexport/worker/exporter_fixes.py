"""Fixes for bugs of the pinned stack that `transformers.exporters` does not carry yet.

Each is registered in the exporters' own patch registry (`register_patch`), so it applies exactly
while the exporter applies its own patches and nowhere else; each names the upstream line it works
around and what it measured. Delete one when the pin carries the fix upstream: the test that
needed it (named in its docstring) says whether it still holds.
"""

from __future__ import annotations

import torch
from transformers.exporters.utils import register_patch


@register_patch("executorch", "executorch.exir.verification.arg_validator.EdgeOpArgValidator.run_node")
def _one_tensor_list_return(original):
    """Keep a dynamic batch through ExecuTorch's edge-dialect verifier.

    `EdgeOpArgValidator.call_function` (executorch 1.4.1) takes a node's value as the sequence of its
    returns; an op that returns one `Tensor[]` (`split`, `chunk`, `unbind`) has a list for a value, so
    its first tensor is taken for the list and `len()` of it guards the tensor's first axis to its
    traced size. When that axis is the batch, the program keeps it dynamic in its inputs but plans
    the tensors after it at the traced size: ModernBERT (`chunk` in its MLP, `unbind` of its QKV)
    traced on batch 2 failed on batch 3 with "Attempted to resize a static tensor" (0x12). Shown
    one return, the validator reads the list as the list. Needed by
    `test_families.py::test_an_encoder_with_split_ops_takes_another_batch_on_executorch`.
    """

    def patch(self, node):
        value = node.meta.get("val")
        returns = getattr(getattr(node.target, "_schema", None), "returns", ())
        if len(returns) != 1 or not isinstance(value, list):
            return original(self, node)
        node.meta["val"] = (value,)
        try:
            return original(self, node)
        finally:
            node.meta["val"] = value

    return patch


@register_patch("dynamo", "builtins.len")
@register_patch("onnx", "builtins.len")
@register_patch("executorch", "builtins.len")
def _a_tensors_length_stays_symbolic(original):
    """Keep a dynamic batch through `batch_size = len(source_flatten)`.

    RT-DETR's encoder-decoder bridge (`modeling_rt_detr.py:1661` in transformers 5.24, and the same
    line in RT-DETR v2, D-FINE, DEIMv2, PP-DocLayout) takes the batch as `len()` of a tensor; the
    builtin must return an `int`, so under torch.export it guards the symbolic batch to the traced
    one: "Constraints violated (batch)". Called as a function (as these models do), a tensor whose
    first axis is symbolic answers that symbol — what `tensor.shape[0]` answers; anything else, the
    builtin. Needed by (the `rt-detr` case of)
    `tests/test_new_families.py::test_a_new_family_exports_validates_or_is_refused_with_its_reason`.
    """

    def patch(obj):
        if isinstance(obj, torch.Tensor) and obj.dim() > 0 and isinstance(obj.shape[0], torch.SymInt):
            return obj.shape[0]
        return original(obj)

    return patch


@register_patch(
    "executorch", "executorch.backends.xnnpack.partition.config.node_configs.MaxDimConfig.check_constraints"
)
def _max_over_a_last_axis_stays_portable(original):
    """Keep `max(dim=-1)` of a 4-d tensor out of the XNNPACK delegate, which cannot lower it.

    XNNPACK's partitioner (executorch 1.4.1, `MaxDimConfig.check_constraints`) takes `max.dim` of
    any 4-d tensor; its lowering (`op_max_dim.py:47`, `MaxDim.define_node`) pools over dim 2 or 3
    as written and raises on anything else, -1 included. gpt-oss's attention sinks take
    `max(dim=-1, keepdim=True)` of its 4-d scores: "amax.default only supports dim == 2 or dim == 3"
    mid-lowering. Claimed only where the lowering takes it, the op runs on ExecuTorch's portable
    kernel instead. Needed by the `gpt-oss` case of
    `tests/test_new_families.py::test_a_new_family_exports_validates_or_is_refused_with_its_reason`.
    """

    def patch(self, node, ep):
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        return dim in (2, 3) and original(self, node, ep)

    return patch


@register_patch("onnx", "onnxscript.rewriter._matcher.SimplePatternMatcher.match")
def _multi_output_rules_look_at_their_own_ops(original):
    """Keep the ONNX optimizer's cost linear in the graph's size.

    `SimplePatternMatcher.match` (onnxscript 0.7.0 and 0.7.2, `_matcher.py:393`), given a pattern of
    several output nodes (the default rules' `SlicesSplit`), indexes every node of the graph by op
    before it looks at the node it was given, and the rewrite pass asks it of every node: quadratic.
    On SmolLM2-135M's decode program (30 layers) that index was 19 of the exporter's 42 sampled
    seconds (py-spy). A node that is not the pattern's first output op cannot start a match — the
    enumeration fixes it as the first node and `_match_node` rejects it on op type or domain — so it is
    turned away before the index; every other node goes through the matcher as before. Measured by
    `bench/exporter_per_layer.py`: 2.36 -> 1.77 s per layer between 6 and 30 layers, 70.4 -> 53.5 s at 30.
    """
    from onnxscript.rewriter import _basics

    def patch(self, model, graph_or_function, node, **kwargs):
        if not self.pattern.has_single_output_node:
            first = self.pattern.output_nodes[0]
            if not (first.op.matches(node.op_type) and first.domain.matches(node.domain)):
                return _basics.MatchResult().fail(f"OpType mismatch: expected {first.op}, got {node.op_type}.", node)
        return original(self, model, graph_or_function, node, **kwargs)

    return patch

"""Fixes for bugs of the pinned stack that `transformers.exporters` does not carry yet.

Each is registered in the exporters' own patch registry (`register_patch`), so it applies exactly
while the exporter applies its own patches and nowhere else; each names the upstream line it works
around and what it measured. Delete one when the pin carries the fix upstream: the test that
needed it (named in its docstring) says whether it still holds.
"""

from __future__ import annotations

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

"""The ExecuTorch variants' recipes (`variants.py` registers them by dotted path): XNNPACK's
PT2E int8 through the exporter's quantizer, and torchao's 8da4w with ExecuTorch's int8 embeddings.

Runs in the export worker only; each recipe takes a `VariantJob` and returns a folder that
`ExportedModel.from_pretrained` loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..variants import Derived, VariantJob

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def int8(job: VariantJob) -> Derived:
    """XNNPACK's own PT2E quantizer through the exporter (`PT2EQuantizer`): per-channel int8 weights,
    int8 activations quantized at run time — XNNPACK's dynamically quantized linear kernels."""
    import dataclasses

    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from transformers.exporters import PT2EQuantizer

    xnnpack = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=True))
    config = dataclasses.replace(
        job.make_config(), quantizer=PT2EQuantizer(xnnpack, calibration_dataset=job.calibration)
    )
    job.export(job.model, job.sample, config).save_pretrained(job.work_dir / "variant")
    return Derived(job.work_dir / "variant")


def quantized_kernels(program: Path) -> list[str]:
    """The operators of ExecuTorch's quantized kernel library a `.pte` calls (its operator table
    names them), which a Python runtime registers only when told (`Backend.runtime_ops_import`)."""
    import re

    return sorted({m.decode() for m in re.findall(rb"quantized_decomposed::[A-Za-z0-9_]+", program.read_bytes())})


# Linears whose input width is a multiple of this are int4 in groups of it (XNNPACK's blockwise
# kernels); others (an odd FFN width) stay in float.
INT4_GROUP_SIZE = 32


def quantize_8da4w(model: PreTrainedModel):
    """optimum-executorch's `--qlinear 8da4w --qembedding 8w`, on a copy of `model`. torchao's
    `Int8DynamicActivationIntxWeightConfig` on the decoder's linears (the LM head included): int4
    weights in groups of `INT4_GROUP_SIZE`, activations quantized per token at run time, which
    XNNPACK's partitioner lowers to its own kernels. The embedding table: int8 weights with a scale
    per row, through ExecuTorch's own `EmbeddingQuantHandler`, whose `quantized_decomposed`
    embedding op the runtime's quantized kernels run (torchao's weight-only embedding would leave
    an op with no ExecuTorch kernel, and the pinned exporter takes no pass that would fuse it)."""
    import copy

    import executorch.kernels.quantized  # noqa: F401  (registers the quantized ops' out variants for to_executorch)
    import torch
    from executorch.examples.models.llama.source_transformation.quantize import EmbeddingQuantHandler
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    model = copy.deepcopy(model)
    config = Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4,  # type: ignore[attr-defined]  # torch has it, its stubs do not
        weight_granularity=PerGroup(INT4_GROUP_SIZE),
    )
    quantize_(
        model,
        config,
        filter_fn=lambda module, _: isinstance(module, torch.nn.Linear) and module.in_features % INT4_GROUP_SIZE == 0,
    )
    # Embeddings last: the LM head of a model with tied embeddings is quantized from the float table.
    return EmbeddingQuantHandler(model, bitwidth=8, group_size=None, packed=False).quantized_model()


def da8w4(job: VariantJob) -> Derived:
    """The 8da4w program (`quantize_8da4w`) exported as the fp32 one was."""
    job.export(quantize_8da4w(job.model), job.sample, job.make_config()).save_pretrained(job.work_dir / "variant")
    folder = job.work_dir / "variant"
    return Derived(folder, runtime_ops=quantized_kernels(folder / f"{job.component}.pte"))

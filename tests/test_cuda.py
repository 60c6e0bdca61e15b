"""ExecuTorch CUDA (the partitioner compiles Triton kernels through AOTInductor): GPU machines only.

Marked `cuda`: skipped with the reason where no GPU is visible (conftest), run by `.ci/run-gpu`.
"""

from __future__ import annotations

import pytest
import torch

import hfexport

pytestmark = pytest.mark.cuda


def test_executorch_cuda_exports_and_validates_on_the_gpu(tmp_path, tiny_bert_folder):
    report = hfexport.export(str(tiny_bert_folder), tmp_path / "out", backends="executorch-cuda")
    (result,) = report.backends
    assert result.status == "ok", result.error
    assert result.subfolder == "executorch/cuda"
    assert any(f.path.endswith(".pte") for f in result.files)
    assert result.validation.passed and result.validation.max_abs_diff <= result.validation.tolerance
    assert torch.cuda.is_available()


def test_executorch_cuda_generation_split(tmp_path, workspace):
    import tiny_models

    folder = tiny_models.llama(workspace / "cuda-llama")
    report = hfexport.export(str(folder), tmp_path / "out", backends="executorch-cuda")
    (result,) = report.backends
    assert result.status == "ok", result.error
    checks = {c.name: c for c in result.validation.checks}
    assert checks["generation_other_shape"]["tokens_equal"] is True

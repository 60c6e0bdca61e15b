"""Real exports of tiny random models on dynamo, onnx and executorch, reloaded on their own
runtimes. Each model is exported once per session (see conftest). The real pretrained MiniLM goes
through a whole push in test_card_snippets.py, where its card is run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from hfexport.report import REPORT_FILE, Layout, Report

CPU_BACKENDS = ["dynamo", "onnx", "executorch"]


def _load(out: Path, backend: str):
    from transformers.exporters import ExportedModel

    # The report says whether loading runs pickled code (the exporter class's requires_trust_remote_code).
    b = next(b for b in Report.from_dict(json.loads((out / REPORT_FILE).read_text())).backends if b.backend == backend)
    return ExportedModel.from_pretrained(out, subfolder=b.subfolder, trust_remote_code=b.trust_remote_code)


def _assert_all_validated(report, components):
    assert report.ok, [(b.backend, b.status, b.error) for b in report.backends]
    assert [b.backend for b in report.backends] == CPU_BACKENDS
    for b in report.backends:
        assert b.status == "ok", (b.backend, b.error)
        assert b.components == components
        assert b.validation.passed is True
        assert b.validation.max_abs_diff <= b.validation.tolerance
        names = [c.name for c in b.validation.checks]
        assert any("other_shape" in n for n in names), names
        assert b.size_bytes > 0 and b.files
        for f in b.files:
            assert (Path(report.out_dir) / b.subfolder / f.path).stat().st_size == f.size


def _check_fresh_shape(model, out: Path, inputs: dict, atol: float = 1e-3):
    """Independently of the worker: reload each backend here and compare on yet another shape."""
    with torch.inference_mode():
        expected = model(**inputs)
    for backend in CPU_BACKENDS:
        exported = _load(out, backend)
        got = exported(**inputs)
        for key, value in expected.items():
            if isinstance(value, torch.Tensor):
                assert torch.allclose(got[key], value, atol=atol), (backend, key, (got[key] - value).abs().max())


def test_bert_encoder(bert_export):
    folder, report = bert_export
    _assert_all_validated(report, ["model"])
    assert report.plan.mode == "single" and report.plan.task == "feature-extraction"
    from transformers import BertModel

    model = BertModel.from_pretrained(folder).eval()
    ids = torch.randint(5, 128, (4, 5))
    mask = torch.ones_like(ids)
    mask[0, 3:] = 0
    _check_fresh_shape(model, Path(report.out_dir), {"input_ids": ids, "attention_mask": mask})
    # Batch 1 and sequence 1 are inside the promised bounds too.
    _check_fresh_shape(model, Path(report.out_dir), {"input_ids": ids[:1, :1], "attention_mask": mask[:1, :1]})


def test_vit_vision(vit_export):
    folder, report = vit_export
    _assert_all_validated(report, ["model"])
    assert report.plan.modality == "vision" and report.plan.task == "image-classification"
    from transformers import ViTForImageClassification

    model = ViTForImageClassification.from_pretrained(folder).eval()
    _check_fresh_shape(model, Path(report.out_dir), {"pixel_values": torch.randn(5, 3, 32, 32)})


def test_llama_single_graph(llama_single_export):
    folder, report = llama_single_export
    _assert_all_validated(report, ["model"])
    assert report.plan.mode == "single" and report.plan.task == "text-generation"
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(folder, use_cache=False).eval()
    ids = torch.randint(5, 128, (3, 9))
    mask = torch.ones_like(ids)
    mask[1, :4] = 0  # left-padded row
    _check_fresh_shape(model, Path(report.out_dir), {"input_ids": ids, "attention_mask": mask})


def _generation_checks(report):
    for b in report.backends:
        checks = {c.name: c for c in b.validation.checks}
        if b.layout == Layout.LLM_RUNNER:
            # ExecuTorch's runner program: ExecuTorch's runtime on prompts of other lengths than its
            # trace, then the runner itself (a tiny model without a tokenizer.json: said, not run).
            assert set(checks) == {"generation_other_shape", "llm_runner"}, set(checks)
            runner = checks.pop("llm_runner")
            assert runner.tokens_equal is None and "no tokenizer.json" in (runner.note or ""), runner
        else:
            # A graph renamed for the ecosystem's loaders is run again, as they run it.
            relaid = {"loaders_layout"} if b.layout != Layout.EXPORTER else set()
            assert set(checks) == {"generation_sample", "generation_other_shape"} | relaid
        for check in checks.values():
            assert check.error is None, (b.backend, check)
            assert check.tokens_equal is True, (b.backend, check)
            assert check.exported_tokens == check.eager_tokens
            # 8 new tokens per row: prefill then 7 decode steps, far past the second one.
            assert all(len(row) == 8 for row in check.exported_tokens)
        yield b, checks


def test_llama_generation_split_token_parity(llama_generation_export, workspace):
    folder, report = llama_generation_export
    _assert_all_validated(report, ["decode"])
    assert report.plan.task == "text-generation-with-past"
    # Weights once: one decoder program per backend (the prompt runs through it on an empty cache).
    for b in report.backends:
        programs = [f.path for f in b.files if not f.path.endswith(".json")]
        assert all(p.startswith("decode.") for p in programs) or b.backend != "dynamo", (b.backend, programs)
        assert "prefill" not in str(b.files), (b.backend, programs)
    # ExecuTorch: the program its own LLM runner reads, the cache inside, no manifest of the exporter's.
    executorch = next(b for b in report.backends if b.backend == "executorch")
    assert executorch.layout == Layout.LLM_RUNNER and executorch.programs == {"decode": "fp32/model.pte"}
    assert executorch.max_seq_len == 128 and "export.json" not in {f.path for f in executorch.files}
    # ONNX: one graph, as optimum and transformers.js name a decoder with past (their loaders read it).
    onnx = next(b for b in report.backends if b.backend == "onnx")
    assert onnx.layout == Layout.DECODER_WITH_PAST and onnx.programs == {"decode": "model.onnx"}
    assert [f.path for f in onnx.files if f.path.endswith(".onnx")] == ["model.onnx"]
    for backend, checks in _generation_checks(report):
        other = checks["generation_other_shape"]
        assert len(other.exported_tokens) == report.plan.validation.batch != report.plan.sample.batch
    # The validation batch really is left-padded: padding is part of what the decoder promises.
    from transformers import AutoConfig

    from hfexport.worker.splits import split_for

    plan = report.plan
    other = split_for(plan).inputs(folder, AutoConfig.from_pretrained(folder), plan.validation, seed=1)
    assert (other["attention_mask"][:, 0] == 0).any() and (other["attention_mask"][:, -1] == 1).all()
    # Random weights with a scaled head: the tokens vary, so parity is not a coincidence of one repeated id.
    tokens = checks["generation_other_shape"].eager_tokens
    assert len({t for row in tokens for t in row}) > 3
    _assert_round_trips(report)


def _assert_round_trips(report):
    """The report survives its JSON form whole, as every reader (card, Action, service) gets it."""
    assert Report.from_dict(report.to_dict()) == report
    assert Report.from_dict(json.loads(json.dumps(report.to_dict()))) == report
    # On disk it is the same, less the local output path (never written into the published file).
    assert Report.load(report.out_dir) == dataclasses.replace(report, out_dir=None)


def test_t5_encoder_decoder_generation(t5_export):
    folder, report = t5_export
    # The encoder, and one decoder for every step: its weights once.
    _assert_all_validated(report, ["encoder", "decode"])
    assert report.plan.task == "text2text-generation-with-past"
    assert report.plan.validation.decoder_prompt != report.plan.sample.decoder_prompt
    list(_generation_checks(report))
    manifest = json.loads((Path(report.out_dir) / "dynamo" / "export.json").read_text())
    assert sorted(manifest["components"]) == ["decode", "encoder"]
    # ONNX in the loaders' layout, judged again as they feed it.
    onnx = next(b for b in report.backends if b.backend == "onnx")
    assert onnx.layout == Layout.ENCODER_DECODER_WITH_PAST
    assert onnx.programs == {"encoder": "encoder_model.onnx", "decode": "decoder_model_merged.onnx"}
    assert any(c.name == "loaders_layout" and c.tokens_equal for c in onnx.validation.checks)

"""The slow lane (`make test-slow`, not CI's): real trained models through `hfexport export` as a
user runs it, each file held to what a user of it needs. Random weights have flat logits, so the
quality floors are proven here, on SmolLM2-135M, Whisper base and all-MiniLM-L6-v2 (built offline by
bench/real_models.py; docs/benchmarks-quality.md has every file's figures beside the peers')."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import run_cli

pytestmark = pytest.mark.slow

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))


def _export(folder: Path, out: Path, *args: str) -> dict:
    result = run_cli("export", str(folder), "--backends", "onnx", "--out", str(out), *args, timeout=3600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads((out / "hfexport-report.json").read_text())


def _variants(report: dict) -> dict[str, dict]:
    (backend,) = report["backends"]
    assert backend["status"] == "ok", backend.get("error")
    return {v["kind"]: v for v in backend["variants"]}


def test_an_llms_small_files_decode_faster_than_fp32_and_keep_its_top_token(tmp_path):
    """SmolLM2-135M: w8 published with ONNX Runtime's fast kernels (int8 compute), decoding faster than
    fp32 at ≤ 30 % of its bytes, same top ≥ 95 %; q4 published at ≤ 22 % with HQQ's zero points (as
    integer ones and a float correction, float compute), same top ≥ 95 %, decoding faster than fp32,
    after round-to-nearest missed its floors."""
    from real_models import smollm2

    variants = _variants(_export(smollm2(), tmp_path / "out", "--variants", "w8,q4"))
    w8, q4 = variants["w8"], variants["q4"]
    assert w8["status"] == "ok", w8.get("error")
    assert w8["quality"]["forced_tokens"] >= 200 and w8["settings"] == "8-bit asymmetric, int8 compute"
    assert w8["quality"]["forced_top1_agreement"] >= 0.95 and w8["size_share"] <= 0.30 and w8["speedup"] >= 1, w8
    # SmolLM2's weights come from a Q4_1 GGUF (asymmetric 4-bit blocks, float minimums): round-to-nearest's
    # integer zero points miss its grid (same top 0.73 on the bench's prose), HQQ's land on it.
    assert q4["status"] == "ok" and q4["settings"] == "4-bit HQQ, float compute", q4
    assert q4["quality"]["forced_top1_agreement"] >= 0.95 and q4["size_share"] <= 0.22 and q4["speedup"] >= 1, q4


@pytest.mark.skipif(
    shutil.which("espeak-ng") is None, reason="espeak-ng speaks the judged prose: apt-get install espeak-ng"
)
def test_whispers_8_bit_file_is_judged_on_speech_and_published(tmp_path):
    """Whisper base: judged teacher-forced on prose espeak-ng speaks (its transcript forced), w8 ≥ 99 %."""
    from real_models import whisper_base

    w8 = _variants(_export(whisper_base(), tmp_path / "out", "--variants", "w8"))["w8"]
    assert w8["status"] == "ok", w8.get("error")
    assert w8["quality"]["forced_top1_agreement"] >= 0.99 and w8["quality"]["forced_tokens"] >= 200


def test_an_encoders_int8_file_keeps_its_embeddings(tmp_path):
    """all-MiniLM-L6-v2: int8 cosine ≥ 0.99 to eager fp32, published."""
    from real_models import minilm

    int8 = _variants(_export(minilm(), tmp_path / "out", "--variants", "int8"))["int8"]
    assert int8["status"] == "ok", int8.get("error")
    assert int8["quality"]["cosine_mean"] >= 0.99

"""hfexport/report.py on its own: the contract every stage reads, round-tripped and formatted
without any export."""

from __future__ import annotations

import hashlib
import json
import subprocess

from hfexport.redact import without_local_paths
from hfexport.report import (
    ArtifactFile,
    BackendResult,
    Check,
    ExportPlan,
    Report,
    Source,
    Split,
    Status,
    Validation,
    VariantKind,
    VariantResult,
    WebRuntimes,
    format_diff,
)
from hfexport.table import format_size


def _report() -> Report:
    plan = ExportPlan(
        "feature-extraction", "BertModel", "BertModel", "bert", "single", "text", False, Split.SINGLE, ["onnx"]
    )
    checks = [Check("sample", {"last_hidden_state": 2e-6}), Check("other_shape", {"last_hidden_state": float("inf")})]
    ok = BackendResult(
        "onnx",
        Status.OK,
        "onnx",
        files=[ArtifactFile("model.onnx", 3, "a" * 64, "b" * 40)],
        validation=Validation(1e-3, checks[:1]),
        source_sha="c" * 40,
        log_tail="/tmp/x/.out.partial-1/onnx failed",
    )
    bad = BackendResult(
        "dynamo",
        Status.FAILED,
        "dynamo",
        error="boom at /home/user/.cache/hfexport/x/model.pt2",
        validation=Validation(1e-3, checks),
    )
    return Report(source=Source("hub", "o/m", "c" * 40), plan=plan, backends=[ok, bad])


def test_a_report_survives_its_own_json_whole():
    report = _report()
    again = Report.from_dict(json.loads(report.to_json()))
    assert again.to_dict() == report.to_dict()
    assert again.backends[0].files[0] == ArtifactFile("model.onnx", 3, "a" * 64, "b" * 40)
    assert again.backends[1].validation.checks[1].max_abs_diff == {"last_hidden_state": float("inf")}


def test_a_report_from_before_content_ids_still_reads():
    data = _report().to_dict()
    for f in data["backends"][0]["files"]:
        del f["sha256"], f["git_oid"]
    data["backends"][0]["a_field_from_the_future"] = 1
    old = Report.from_dict(data)
    assert old.backends[0].files == [ArtifactFile("model.onnx", 3)]


def test_artifact_file_ids_are_the_hubs_sha256_and_gits_blob_id(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x00graph bytes\n" * 1000)
    entry = ArtifactFile.of("model.onnx", path)
    assert entry.size == path.stat().st_size
    assert entry.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (
        entry.git_oid
        == subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True).stdout.strip()
    )


def test_validation_names_the_first_problem():
    assert Validation(1e-3, [Check("sample", {"x": 1e-4})]).first_problem() is None
    over = Validation(1e-3, [Check("sample", {"x": 1e-4}), Check("other_shape", {"x": 0.5})])
    assert (
        not over.passed
        and over.first_problem() == "validation 'other_shape': 'x' max abs diff 5.00e-01 > tolerance 0.001"
    )
    tokens = Validation(1e-3, [Check("generation", {}, tokens_equal=False)])
    assert "generated tokens differ" in tokens.first_problem()
    crashed = Validation(1e-3, [Check("sample", error="Got invalid dimensions")])
    assert crashed.first_problem() == "validation 'sample' could not run the export: Got invalid dimensions"


def test_report_ok_ignores_skipped_backends_and_needs_one_that_ran():
    report = _report()
    assert not report.ok and [b.backend for b in report.succeeded] == ["onnx"]
    report.backends[1].status = Status.SKIPPED
    assert report.ok
    report.backends[0].status = Status.SKIPPED
    assert not report.ok


def test_what_is_published_holds_no_local_path_nor_log():
    public = [b.public() for b in _report().backends]
    assert public[0].log_tail is None and public[1].error == "boom at …/model.pt2"
    assert without_local_paths("see /tmp/a/b/c.txt and https://x.co/a/b") == "see …/c.txt and https://x.co/a/b"


def test_sizes_and_diffs_are_formatted_one_way():
    assert [format_size(n) for n in (None, 0, 999, 1000, 2_500_000, 3.2e9)] == [
        "-",
        "-",
        "999 B",
        "1.0 KB",
        "2.5 MB",
        "3.2 GB",
    ]
    assert [format_diff(v) for v in (None, 0.0, 1.234e-6, float("nan"))] == ["-", "0.00e+00", "1.23e-06", "nan"]


def test_an_error_is_described_by_its_first_line_and_its_causes():
    from hfexport.errors import describe_error

    try:
        try:
            raise ValueError("Got invalid dimensions\nfull ORT dump")
        except ValueError as inner:
            raise RuntimeError("export failed") from inner
    except RuntimeError as e:
        assert describe_error(e) == "export failed <- Got invalid dimensions"
    assert describe_error(KeyError()) == "KeyError"


def test_a_worker_job_crosses_the_process_boundary_whole():
    from hfexport.messages import WorkerJob

    job = WorkerJob("onnx", "hfexport.backends", _report().plan, "/models/m", "/out/onnx", use_safetensors=False)
    assert WorkerJob.from_json(job.to_json()) == job


def test_a_schema_2_plan_is_read_with_the_split_its_components_meant():
    base = _report().plan.to_dict()
    del base["split"]
    cases = [
        ({"mode": "single", "components": ["model"]}, Split.SINGLE),
        ({"mode": "generation", "components": ["decode"]}, Split.DECODER),
        (
            {"mode": "generation", "is_encoder_decoder": True, "components": ["encoder", "prefill", "decode"]},
            Split.ENCODER_DECODER,
        ),
        ({"mode": "generation", "components": ["vision_encoder", "embed_tokens", "decode"]}, Split.IMAGE_TEXT_DECODER),
    ]
    for fields_, split in cases:
        plan = ExportPlan.from_dict({**base, **fields_})
        assert plan.split is split, (fields_, plan.split)
    # A split registered outside hfexport's own keeps its name.
    assert ExportPlan.from_dict({**base, "split": "toy"}).split == "toy"


def test_a_plan_and_its_variants_read_back_equal_from_their_json():
    """What every reader gets is JSON: `to_dict` is JSON's shape already (the split by name, axis
    indexes as strings), so a report read back from its JSON writes the very same JSON."""
    from hfexport.report import Axis, VariantKind, VariantResult

    report = _report()
    report.plan.dynamic_axes = {"input_ids": {0: Axis("batch", 1, 64), 1: Axis("sequence", 1, 128)}}
    report.backends[0].variants = [VariantResult(VariantKind.INT8, Status.OK, file="model_quantized.onnx")]
    data = json.loads(report.to_json())
    assert Report.from_dict(data).to_dict() == data
    assert data["plan"]["dynamic_axes"]["input_ids"]["1"] == ["sequence", 1, 128]
    assert Report.from_dict(data).plan.dynamic_axes["input_ids"][1] == Axis("sequence", 1, 128)


def _variant_of_each_component(kind: str, suffix: str, **figures):
    """A seq2seq ONNX export's variant of both its components, as the loaders name them (24.7 MB)."""
    from hfexport.report import VariantResult

    files = [f"encoder_model_{suffix}.onnx", f"decoder_model_merged_{suffix}.onnx"]
    return VariantResult(kind, Status.OK, file=files[0], files=files, size=24_700_000, **figures)


def test_the_log_at_80_columns_cuts_no_identifier_or_figure(tmp_path):
    """What CI logs and the Action's log get (80 columns): the report's table and `hfexport tasks`
    keep every identifier and figure whole (no `…`); too narrow for a table, rows become records.
    The report: an encoder-decoder's, with a variant of each component and its long quality text."""
    import os
    import sys

    from hfexport.table import rows
    from hfexport.tasks import TASK_TABLE

    report = _report()
    onnx = report.backends[0]
    onnx.components = ["encoder", "decoder_model_merged"]
    onnx.files = [ArtifactFile("encoder_model.onnx", 90_900_000), ArtifactFile("decoder_model_merged.onnx", 9_000)]
    quality = {"token_agreement": 0.667, "forced_top1_agreement": 0.994, "forced_tokens": 340}
    onnx.variants = [_variant_of_each_component("w8", "w8", speedup=0.71, quality=quality)]
    report.out_dir = str(tmp_path)
    (tmp_path / "hfexport-report.json").write_text(report.to_json())
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from hfexport.report import Report; "
            "from hfexport.entrypoints.console import print_report; print_report(Report.load(Path(sys.argv[1])))",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
        check=True,
    ).stderr
    # Nothing cut, nothing past 80 columns but the report's path: one word, printed whole on its line
    # (a terminal wraps it for the eye; a copy of it, or a click, takes it whole).
    assert f"report: {tmp_path / 'hfexport-report.json'}\n" in shown, shown
    wide = [line for line in shown.splitlines() if len(line) > 80]
    assert "…" not in shown and all(line.startswith("report: /") for line in wide), shown
    for row in rows(report):
        for figure in (row.max_abs_diff, row.size, row.components, row.backend):
            assert figure in shown, (figure, shown)
    assert "onnx/decoder_model_merged_w8.onnx" in shown and "0.71× (slower than fp32)" in shown, shown
    tasks = subprocess.run(
        [sys.executable, "-m", "hfexport", "tasks"], capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"}
    ).stdout
    assert "…" not in tasks and max(map(len, tasks.splitlines())) <= 80, tasks
    lines = {line.split()[0] for line in tasks.splitlines() if line.strip()}
    assert {t.name for t in TASK_TABLE} <= lines, sorted({t.name for t in TASK_TABLE} - lines)


def test_the_cards_tables_escape_pipes_list_every_variant_file_and_no_empty_one():
    """A seq2seq export with an int8 variant of each component: its row lists both files; a
    `|Δ log-prob|` figure is an escaped pipe, not a cell border (nor a `/`); a 0-byte
    `.onnx_data` beside a graph is not listed; the fp32 row's size is its own files', not its
    variants' too."""
    from hfexport.table import markdown_table, markdown_variant_table

    report = _report()
    onnx = report.backends[0]
    onnx.files = [
        ArtifactFile("encoder_model.onnx", 90_900_000),
        ArtifactFile("encoder_model.onnx_data", 0),
        ArtifactFile("encoder_model_quantized.onnx", 12_400_000),
        ArtifactFile("decoder_model_merged_quantized.onnx", 12_300_000),
    ]
    onnx.variants = [
        _variant_of_each_component("int8", "quantized", quality={"logprob_delta_mean": 0.02}, speedup=0.72)
    ]
    rows = "\n".join(markdown_table(report, ["backend", "size", "files"]))
    assert "| onnx | 90.9 MB |" in rows and "onnx_data" not in rows, rows
    variants = "\n".join(markdown_variant_table(report, ["backend", "variant", "file", "quality"]))
    assert "`onnx/encoder_model_quantized.onnx`, `onnx/decoder_model_merged_quantized.onnx`" in variants
    assert "mean \\|Δ log-prob\\| 0.020" in variants and "/Δ" not in variants, variants
    slower = "\n".join(markdown_variant_table(report, ["variant", "speed"]))
    assert "| int8 | 0.72× (slower than fp32) |" in slower, slower  # published, and said to be slower
    assert all(line.count(" | ") == 3 for line in variants.splitlines()[2:]), variants  # four cells a row


def test_a_published_result_names_no_local_path_in_any_of_its_texts():
    """Issue 56, row 14: an error, a web runtime's note and a variant's, as published, hold no path
    of this machine; relative paths (the files) and the figures stay."""
    home = "/home/ci/.venv/lib/python3.11/site-packages/hfexport/web/node_modules/onnxruntime-web"
    web = WebRuntimes(wasm=None, wasm_note=f"not run: onnxruntime-web is not installed at {home} (`npm ci`)")
    variant = VariantResult(VariantKind.INT8, Status.FAILED, error="cannot read /tmp/x/.partial-1/onnx/m.onnx", web=web)
    result = BackendResult(
        "onnx",
        Status.OK,
        "onnx",
        error=f"at {home}",
        files=[ArtifactFile("model.onnx", 3)],
        web=web,
        variants=[variant],
    )
    published = json.dumps(result.public().to_dict(), ensure_ascii=False)
    assert "/home/ci" not in published and "/tmp/x" not in published and "site-packages" not in published
    assert "…/onnxruntime-web" in published and '"model.onnx"' in published
    assert result.public().status == Status.OK and result.public().variants[0].kind == VariantKind.INT8

"""The model-card section and metadata merge, on their own (the Hub round trip is in test_publish)."""

from __future__ import annotations

import pytest
import yaml

from hfexport.card.section import END, START, opted_out, render_card
from hfexport.report import ArtifactFile, BackendResult, Check, ExportPlan, Report, Source, Split, Validation


def _report(sha: str = "a" * 40) -> Report:
    checks = [Check("sample", {"last_hidden_state": 1e-6})]
    ok = BackendResult(
        "onnx",
        "ok",
        "onnx",
        files=[ArtifactFile("model.onnx", 10)],
        components=["model"],
        validation=Validation(1e-3, checks),
        versions={"onnx": "1.21.0"},
        source_sha=sha,
    )
    bad = BackendResult("executorch", "failed", "executorch/xnnpack", error="validation 'other_shape': boom | x")
    plan = ExportPlan(
        "feature-extraction",
        "BertModel",
        "BertModel",
        "bert",
        "single",
        "text",
        False,
        Split.SINGLE,
        ["onnx", "executorch"],
    )
    return Report(source=Source("hub", "o/m", sha), plan=plan, backends=[ok, bad])


def test_section_replaced_not_duplicated_and_owner_text_kept():
    owner = "---\nlicense: mit\ntags:\n- mine\n---\n# Title\n\nOwner text.\n"
    first = render_card(owner, "o/m", _report("a" * 40)).text
    edited = first.replace("Owner text.", "Owner text, edited after our PR.")
    second = render_card(edited, "o/m", _report("b" * 40)).text
    assert second.count(START) == 1 and second.count(END) == 1
    assert "Owner text, edited after our PR." in second and "bbbbbbbbbbbb" in second and "aaaaaaaaaaaa" not in second
    meta = yaml.safe_load(second.split("---\n")[1])
    # transformers.js loads the ONNX folder (a text model with a pipeline for its task): its tag too.
    assert meta == {"license": "mit", "tags": ["mine", "onnx", "transformers.js", "hfexport"]}
    assert "| onnx | `bbbbbbbbbbbb` | `onnx/` | model.onnx | 10 B | - | 1.00e-06 | 0.001 |" in second


def test_a_failed_backend_or_variant_is_no_row_of_the_card():
    """The card is what merging makes the repo's: only what was published. The failed ExecuTorch
    export and the rejected q4 file are in the report (and the PR's description), not on the card."""
    from hfexport.report import VariantResult

    report = _report()
    report.backends[0].variants = [
        VariantResult("int8", "ok", file="model_quantized.onnx", size=4, quality={"cosine_mean": 0.995}),
        VariantResult("q4", "failed", error="below its quality thresholds: boom"),
    ]
    section = render_card("", "o/m", report).text
    assert "executorch" not in section.lower() and "boom" not in section and "failed" not in section
    assert "model_quantized.onnx" in section and "| q4 |" not in section


def test_readme_is_created_when_missing_and_bad_yaml_is_left_alone():
    created = render_card(None, "o/m", _report()).text
    assert created.startswith("---\ntags:\n- onnx\n- transformers.js\n- hfexport\n---\n# m\n") and START in created
    broken = "---\nlicense: [unclosed\n---\nBody\n"
    rendered = render_card(broken, "o/m", _report()).text
    assert rendered.startswith(broken) and START in rendered


def test_opt_out_flags():
    assert opted_out("---\nhfexport: false\n---\n")
    assert opted_out("---\nhfexport:\n  opt_out: true\n---\n")
    assert not opted_out("---\nlicense: mit\n---\n") and not opted_out(None) and not opted_out("---\n[bad\n---\n")


OWNER_TEXT = "# Title\n\nOwner text before.\n"
OWNER_TAIL = "\nOwner text after.\n"


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            OWNER_TEXT + START + "\nmaintainer kept our start, dropped our end\n" + OWNER_TAIL, id="stray-start"
        ),
        pytest.param(OWNER_TEXT + "quoting our end: " + END + "\n" + OWNER_TAIL, id="stray-end"),
        pytest.param(
            OWNER_TEXT + START + "\nfirst copy\n" + END + "\nbetween\n" + START + "\nsecond copy\n" + END + OWNER_TAIL,
            id="two-pairs",
        ),
        pytest.param(OWNER_TEXT + END + "\nowner words between\n" + START + OWNER_TAIL, id="end-before-start"),
    ],
)
def test_markers_that_do_not_pair_keep_the_owners_text_over_three_renders(body):
    owner = "---\nlicense: mit\n---\n" + body
    renders = [owner]
    for sha in ("a", "b", "c"):
        rendered = render_card(renders[-1], "o/m", _report(sha * 40))
        assert any("do not pair up" in w for w in rendered.warnings)
        renders.append(rendered.text)
    for text in renders[1:]:
        assert text.startswith("---\nlicense: mit\ntags:\n- onnx\n- transformers.js\n- hfexport\n---\n" + body), (
            "the owner's text, byte for byte"
        )
    # One section of ours was added and is the one replaced each time: the card does not grow.
    assert len(renders[3]) == len(renders[2]) and renders[3].replace("c" * 12, "b" * 12) == renders[2]
    assert "cccccccccccc" in renders[3] and "bbbbbbbbbbbb" not in renders[3]


def test_a_well_formed_section_moved_by_a_maintainer_is_replaced_where_it_is():
    first = render_card("# T\n\nIntro.\n", "o/m", _report("a" * 40)).text
    section = first[first.index(START) : first.index(END) + len(END)]
    moved = first.replace(section, "").rstrip() + "\n"
    moved = moved.replace("Intro.\n", "Intro.\n\n" + section + "\n\nOwner's closing words.\n")
    second = render_card(moved, "o/m", _report("b" * 40))
    assert second.warnings == () and second.text.count(START) == 1
    assert second.text.index(START) < second.text.index("Owner's closing words.") and "bbbbbbbbbbbb" in second.text


def test_a_half_precision_checkpoint_is_said_per_export_with_the_reason_where_it_is_not_kept():
    """The plan says the checkpoint is bfloat16: the card names the exports that keep it, and for
    each that does not, its dtype and the backend's reason (`Backend.precision`)."""
    from hfexport.backends import get_backend

    report = _report()
    report.plan.source_dtype = "bfloat16"
    onnx = report.backends[0]
    onnx.dtype, onnx.dtype_note = get_backend("onnx").precision("bfloat16")
    dynamo = BackendResult("dynamo", "ok", "dynamo", files=[ArtifactFile("model.pt2", 5)], dtype="bfloat16")
    report.backends.insert(0, dynamo)
    section = render_card(None, "o/m", report).text
    assert "- The checkpoint is stored in bfloat16: `dynamo/` keeps it, at its size." in section
    assert "- `onnx/` is float32: the loaders' default `model.onnx` is float32 (transformers.js, optimum;" in section
    assert "| model.pt2 | 5 B | bfloat16 |" in section and "| model.onnx | 10 B | float32 |" in section
    # A float32 checkpoint: nothing said.
    report.plan.source_dtype = "float32"
    assert "The checkpoint is stored in" not in render_card(None, "o/m", report).text


def test_the_transformers_js_block_names_the_smallest_file_each_browser_ran_and_fp32_in_node():
    """Node (`cpu`) keeps the fp32 graph; wasm and WebGPU each take the smallest published file
    hfexport ran there: an encoder's int8 (q8) on wasm, its weight-only 8-bit file by
    `model_file_name` on WebGPU (int8's quantized attention has no kernel there). A float16 file is
    never chosen for a browser, and without web verdicts no device is named."""
    from hfexport.card.snippets import device_files, js_block
    from hfexport.report import VariantResult, WebRuntimes

    report = _report()
    onnx = report.backends[0]
    onnx.web = WebRuntimes(wasm=True, webgpu=True)
    gpu_less = WebRuntimes(wasm=True, webgpu=False, webgpu_cpu=["QAttention"])
    onnx.variants = [
        VariantResult("int8", "ok", file="model_quantized.onnx", size=3, web=gpu_less),
        VariantResult("w8", "ok", file="model_w8.onnx", size=4, web=WebRuntimes(wasm=True, webgpu=True)),
        VariantResult("fp16", "ok", file="model_fp16.onnx", size=2, web=WebRuntimes(wasm=True, webgpu=True)),
    ]
    w8 = 'dtype: "fp32", model_file_name: "model_w8"'
    assert device_files(onnx) == {"cpu": 'dtype: "fp32"', "wasm": 'dtype: "q8"', "webgpu": w8}
    block = "\n".join(js_block("o/m", report, onnx, {"tokenizer.json"}) or [])
    assert f'const files = {{ cpu: {{ dtype: "fp32" }}, wasm: {{ dtype: "q8" }}, webgpu: {{ {w8} }} }};' in block
    assert 'const device = "cpu";' in block and "{ revision, device, ...files[device] }" in block
    # No browser verdicts (the checks off): the block loads the fp32 graph, naming no device.
    for file in (onnx, *onnx.variants):
        file.web = None
    assert device_files(onnx) == {}
    assert 'dtype: "fp32" });' in "\n".join(js_block("o/m", report, onnx, {"tokenizer.json"}) or [])


def test_a_derived_card_names_the_library_its_files_load_in_and_what_keeps_it_current():
    """The Hub's "Use this model" reads `library_name`: sentence-transformers where its modules were
    copied beside the ONNX folder, transformers.js where it runs that folder, none where nothing
    reads it whole; the card's first line promises no update nothing will make."""
    import dataclasses

    from hfexport.card.frontmatter import metadata
    from hfexport.card.section import derived_card, derived_library

    report, repo = _report(), "me/m-ONNX"
    files = {"config.json", "tokenizer.json", "onnx/model.onnx"}
    assert derived_library(report, repo, files) == "transformers.js"
    st = dataclasses.replace(report.plan, sentence_transformer={"pooling": "mean"})
    st_report = dataclasses.replace(report, plan=st)
    modules = files | {"modules.json", "1_Pooling/config.json"}
    assert derived_library(st_report, repo, modules) == "sentence-transformers"
    assert derived_library(dataclasses.replace(report, backends=report.backends[1:]), repo, files) is None
    card = derived_card(repo, "o/m", "https://hub", "---\nlicense: mit\n---\n", "sentence-transformers")
    assert metadata(card) == {
        "base_model": "o/m",
        "base_model_relation": "quantized",
        "license": "mit",
        "library_name": "sentence-transformers",
    }
    assert "keeps them up to date" not in card and "`hfexport push o/m --into me/m-ONNX`, run again" in card


def test_a_block_that_asks_for_trust_says_why_beside_it():
    """A plain BERT's `.pt2` block asks for `trust_remote_code=True` because the program is pickled:
    the line above it says so; an ONNX block asks for nothing."""
    import dataclasses

    from hfexport.card.snippets import exported_model_block

    report = _report()
    onnx = report.backends[0]
    pt2 = dataclasses.replace(onnx, backend="dynamo", subfolder="dynamo", trust_remote_code=True)
    lines = "\n".join(exported_model_block("o/m", report, pt2)).splitlines()
    call = next(i for i, line in enumerate(lines) if "ExportedModel.from_pretrained" in line)
    assert "trust_remote_code=True" in lines[call] and "pickled" in lines[call - 1], lines
    assert "trust_remote_code" not in "\n".join(exported_model_block("o/m", report, onnx))


def test_which_file_names_every_program_a_model_of_several_takes():
    """An image-text model's ONNX export is three programs a loader opens together (SmolVLM's vision
    encoder, embeddings and decoder): its fp32 row names all three, not the vision encoder alone (it did)."""
    from hfexport.card.where import picks

    report = _report()
    onnx = report.backends[0]
    onnx.components = ["vision_encoder", "embed_tokens", "decode"]
    onnx.programs = {"vision_encoder": "vision_encoder.onnx", "embed_tokens": "embed_tokens.onnx"}
    onnx.programs["decode"] = "decoder_model_merged.onnx"
    onnx.files = [ArtifactFile(name, 10) for name in onnx.programs.values()]
    (cpu,) = [p for p in picks(report) if p.where.startswith("CPU server")]
    names = "onnx/vision_encoder.onnx, onnx/embed_tokens.onnx, onnx/decoder_model_merged.onnx"
    assert cpu.file == names, cpu


def test_an_image_text_folder_whose_encoder_takes_each_images_grid_says_who_loads_it_and_how():
    """Qwen2.5-VL's vision encoder takes each image's grid and the geometry transformers derives from
    it, and its decoder four rows of positions: transformers.js's Qwen2-VL classes feed neither, so the
    card names what to feed and does not send its readers to transformers.js; SmolVLM's (the pixels
    alone) still does."""
    from hfexport.report import Layout

    def section(encoder_inputs: list[str]) -> str:
        report = _report()
        report.plan.task = "image-text-to-text"
        onnx = report.backends[0]
        onnx.layout = Layout.IMAGE_TEXT_DECODER_WITH_PAST
        onnx.components = ["vision_encoder", "embed_tokens", "decode"]
        onnx.programs = {"vision_encoder": "vision_encoder.onnx", "embed_tokens": "embed_tokens.onnx"}
        onnx.programs["decode"] = "decoder_model_merged.onnx"
        onnx.files = [ArtifactFile(name, 10) for name in onnx.programs.values()]
        onnx.inputs = {"vision_encoder": encoder_inputs}
        return " ".join(render_card("", "o/m", report).text.split())

    grid = section(["pixel_values", "image_grid_thw", "cu_seqlens", "position_ids", "window_index"])
    assert "its `image_grid_thw` row" in grid and "`cu_seqlens`, `position_ids`, `window_index`" in grid, grid
    assert "precompute_export_inputs" in grid and "four rows (text, then time, height and width)" in grid, grid
    assert "they do not load this folder" in grid and "(`AutoModelForImageTextToText`) loads this" not in grid
    pixels = section(["pixel_values"])
    assert "(`AutoModelForImageTextToText`) loads this folder" in pixels and "image_grid_thw" not in pixels


def test_the_card_opens_with_which_file_to_take_where_from_what_was_measured():
    """The first table of the section: per place a user runs the model, the file hfexport measured
    best there among those that ran there — ONNX Runtime's CPU the fastest (with its rounds' spread),
    each browser the smallest file that opened there — before every export's row; the terminal
    prints the same picks. A place nothing was checked in gets no row."""
    import subprocess
    import sys

    from hfexport.card.section import render_section
    from hfexport.report import VariantResult, WebRuntimes

    report = _report()
    onnx = report.backends[0]
    onnx.web = WebRuntimes(wasm=True, webgpu=True)
    onnx.files = [ArtifactFile("model.onnx", 90_000_000)]
    gpu_less = WebRuntimes(wasm=True, webgpu=False, webgpu_cpu=["QAttention"])
    int8 = VariantResult("int8", "ok", file="model_quantized.onnx", size=24_000_000, web=gpu_less)
    int8.speedup, int8.speedup_range, int8.size_share = 1.69, [1.52, 1.8], 0.27
    int8.quality = {"cosine_mean": 0.995, "cosine_min": 0.992}
    w8 = VariantResult("w8", "ok", file="model_w8.onnx", size=27_000_000, web=WebRuntimes(wasm=True, webgpu=True))
    w8.speedup, w8.speedup_range, w8.size_share = 0.86, [0.8, 0.9], 0.3
    onnx.variants = [int8, w8]
    section = render_section("o/m", report)
    assert section.index("### Which file to use") < section.index("### Every export") < section.index("| onnx |")
    table = section.split("### Which file to use")[1].split("### Every export")[0]
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines() if line.startswith("| ")}
    # The CPU's loaders named are the ones whose blocks the card has (no optimum class for embeddings).
    assert "`onnx/model_quantized.onnx`" in rows["CPU server (ONNX Runtime)"]
    assert "1.69× (1.52–1.80) fp32's speed" in rows["CPU server (ONNX Runtime)"]
    assert "`onnx/model_quantized.onnx`" in rows["Browser, wasm (transformers.js's default)"]
    assert "`onnx/model_w8.onnx`" in rows["Browser, WebGPU"]  # int8 did not run there: the next smallest did
    assert not any(key.startswith(("Phone", "GPU", "PyTorch")) for key in rows), rows  # executorch failed
    # The terminal says the same, first thing after the tables.
    report.out_dir = None
    shown = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys; from hfexport.report import Report; "
            "from hfexport.entrypoints.console import print_report; "
            "print_report(Report.from_dict(json.loads(sys.stdin.read())))",
        ],
        input=report.to_json(),
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    assert "which file where" in shown and "Browser, WebGPU: onnx/model_w8.onnx" in shown, shown


def test_an_empty_file_beside_a_graph_is_said_on_the_card_with_what_asks_for_it():
    """`onnx/model.onnx.data` is published empty (`ExportedModel` asks for it beside the graph): the
    card says so, where a user browsing the files would otherwise take it for a broken upload."""
    from hfexport.card.section import render_section

    report = _report()
    report.backends[0].files = [ArtifactFile("model.onnx", 10), ArtifactFile("model.onnx.data", 0)]
    section = render_section("o/m", report)
    note = next(line for line in section.splitlines() if "`onnx/model.onnx.data`" in line)
    assert "empty" in note and "ExportedModel" in note and "every other loader reads the graph alone" in note, note
    report.backends[0].files = [ArtifactFile("model.onnx", 10)]
    assert "model.onnx.data" not in render_section("o/m", report)

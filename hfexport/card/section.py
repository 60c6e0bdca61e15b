"""The model-card section hfexport owns, and the tags it adds to the card's metadata.

The section sits between two markers, so a rerun replaces it and nothing else: the owner's text
before and after is kept byte for byte. Our section is the one *well-formed pair* — a start marker
whose next marker is an end marker. Markers that pair with nothing (a maintainer deleted our end
line, pasted a start into their text, or put an end before a start) are the owner's text: they
are left where they are, a fresh section is appended, and the PR says so. Where several pairs
stand, the one that ends the card is ours (that is where a fresh section goes); otherwise a fresh
one is appended. So every render of a card keeps the owner's text and finds its own section again.

The metadata is edited as text (`frontmatter.add_tags`): only `tags` changes, every other byte of
the owner's YAML stays as written.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ..backends import get_backend
from ..report import Report
from ..table import markdown_table, markdown_variant_table
from . import frontmatter
from .programs import JS_PR_REVISION_NOTE, PR_REVISION_NOTE
from .snippets import js_block, load_section, loaders_read
from .where import which_file_table

START = "<!-- hfexport:start -->"
END = "<!-- hfexport:end -->"
_MARKERS = re.compile(re.escape(START) + "|" + re.escape(END))


@dataclass(frozen=True)
class RenderedCard:
    """The README to publish, and what the PR should warn about (markers or metadata left as written)."""

    text: str
    warnings: tuple[str, ...] = ()


def opted_out(text: str | None) -> bool:
    """The owner's opt-out in the card metadata: `hfexport: false` (or `no`, `off`) or
    `hfexport: {opt_out: true}`."""
    value = (frontmatter.metadata(text) or {}).get("hfexport")
    if isinstance(value, str):  # YAML 1.2 reads `hfexport: no` as a string: its owner meant no
        return value.strip().lower() in ("false", "no", "off")
    return value is False or (isinstance(value, dict) and bool(value.get("opt_out")))


def derived_card(
    repo_id: str, source_id: str, endpoint: str, source_readme: str | None, library: str | None = None
) -> str:
    """The card a derived repo starts with: metadata linking it to its base model (the Hub shows
    the relation on both pages), the source's license copied, the library its files load in
    (`derived_library`: the Hub's "Use this model"), and a line saying what it is and what keeps it
    current. Our section and tags are added to it as to any card; the owner may edit the rest."""
    meta = frontmatter.metadata(source_readme) or {}
    written = {"base_model": source_id, "base_model_relation": "quantized"}
    written |= {
        key: meta[key]
        for key in ("license", "license_name", "license_link", "pipeline_tag")
        if isinstance(meta.get(key), str)
    }
    if library is not None:
        written["library_name"] = library
    # Plain, or double-quoted with what YAML forbids escaped: the source's text cannot break out of its value.
    lines = ["---", *(f"{key}: {frontmatter.scalar(value)}" for key, value in written.items())]
    name = repo_id.split("/")[-1]
    card = "\n".join(
        [
            *lines,
            "---",
            "",
            f"# {name}",
            "",
            f"Exports of [{source_id}]({endpoint}/{source_id}) for the runtimes that deploy it, each validated "
            "against the original model at the commit named below. They are as fresh as that commit: "
            f"`hfexport push {source_id} --into {repo_id}`, run again (by hand, on a schedule, or by an hfexport "
            "service that watches the source), commits the exports of the source's newest commit here.",
            "",
        ]
    )
    if frontmatter.metadata(card) != written:  # parsed back before anything commits it
        raise ValueError(f"the derived card's metadata does not read back as written: {written!r}")
    return card


def derived_library(report: Report, repo_id: str, files: set[str]) -> str | None:
    """The library a derived repo's files load in whole, for its card's `library_name`:
    sentence-transformers where its modules were copied beside a folder it reads (`backend="onnx"`),
    else transformers.js where it runs the ONNX folder; None where neither does (a `.pte` alone)."""
    if report.plan.sentence_transformer is not None and "modules.json" in files:
        if any(loaders_read(report, b) for b in report.succeeded):
            return "sentence-transformers"
    if any(js_block(repo_id, report, b, files) is not None for b in report.succeeded):
        return "transformers.js"
    return None


def our_section(body: str) -> tuple[tuple[int, int] | None, bool]:
    """Where our section is in `body` (start of its start marker, end of its end marker), or None
    for none; and whether the body holds markers that pair with nothing (or several pairs)."""
    found = [(m.start(), m.end(), m.group(0) == START) for m in _MARKERS.finditer(body)]
    pairs = [(a[0], b[1]) for a, b in zip(found, found[1:]) if a[2] and not b[2]]
    stray = len(found) != 2 * len(pairs) or len(pairs) > 1
    if len(pairs) == 1:
        return pairs[0], stray
    if pairs and not body[pairs[-1][1] :].strip():
        return pairs[-1], stray  # several pairs: the one that ends the card is the section we appended
    return None, stray


def render_card(
    current: str | None,
    repo_id: str,
    report: Report,
    notes: list[str] | tuple[str, ...] = (),
    repo_files: set[str] | None = None,
    on_pr: bool = True,
) -> RenderedCard:
    """The README with our section replaced or appended and our tags merged in. `notes` are
    sentences the section adds under its table (e.g. where an export went instead of the owner's
    folder); `repo_files`, the repo's paths (its loading snippets feed inputs from its own preprocessor);
    `on_pr`: the exports arrive by a PR (its blocks say how to try it before the merge)."""
    tags: list[str] = []
    for b in report.succeeded:
        tags += get_backend(b.backend).tags
        if js_block(repo_id, report, b, repo_files) is not None:  # transformers.js loads this folder
            tags.append("transformers.js")
    text, warnings = frontmatter.add_tags(current, list(dict.fromkeys([*tags, "hfexport"])))
    card = frontmatter.split(text)
    head, body = text[: len(text) - len(card.body)], card.body
    section = render_section(repo_id, report, notes, repo_files, on_pr)
    where, stray = our_section(body)
    if stray:
        warnings += (
            f"The card holds hfexport markers that do not pair up (`{START}` then `{END}`): "
            "they are left as they are"
            + (
                ", and this section was appended after them."
                if where is None
                else "; the section that ends the card was updated."
            ),
        )
    if where is not None:
        body = body[: where[0]] + section + body[where[1] :]
    else:
        if not body.strip() and not stray:
            body = body + f"# {repo_id.split('/')[-1]}{card.newline}"
        ending = "" if not body or body.endswith("\n") else card.newline
        body = body + ending + card.newline + section + card.newline
    return RenderedCard(head + body, warnings)


def precision_notes(report: Report) -> list[str]:
    """What the card says of precision where the checkpoint is stored in half precision: which
    exports keep it, and why any other does not (`Backend.precision`)."""
    stored = report.plan.source_dtype
    if stored == "float32":
        return []
    kept = [f"`{b.subfolder}/`" for b in report.succeeded if b.dtype == stored]
    notes = [
        f"The checkpoint is stored in {stored}"
        + (f": {', '.join(kept)} keep{'s' if len(kept) == 1 else ''} it, at its size." if kept else ".")
    ]
    notes += [f"`{b.subfolder}/` is {b.dtype}: {b.dtype_note}." for b in report.succeeded if b.dtype_note]
    return notes


def web_notes(report: Report) -> list[str]:
    """What the "runs on" cells mean, and why a file was not checked on wasm, once."""
    checked = [w for b in report.succeeded for w in (b.web, *(v.web for v in b.variants)) if w is not None]
    if not checked:
        return []
    version = next((w.version for w in checked if w.version), None)
    notes = [
        "*runs on*: ORT CPU is ONNX Runtime for CPU, where validation ran each file; wasm is onnxruntime-web"
        + (f" {version}" if version else "")
        + "'s wasm backend, the runtime transformers.js runs in browsers, fed as transformers.js feeds it and "
        "held to the same thresholds (run under node); WebGPU is where its WebGPU provider (transformers.js's "
        "`device: 'webgpu'`) places each node, read in headless Chromium: ✗ names the operators it has no "
        "kernel for, which run on the CPU instead, with copies to and from the GPU around them."
    ]
    skipped = sorted({w.wasm_note for w in checked if w.wasm is None and w.wasm_note})
    notes += [f"wasm {why}." for why in skipped]
    skipped = sorted({w.webgpu_note for w in checked if w.webgpu is None and w.webgpu_note})
    notes += [f"WebGPU {why}." for why in skipped]
    return notes


def fused_notes(report: Report) -> list[str]:
    """What the runtime's own operators in a backend's float programs mean (a decoder LLM's graph
    fused for ONNX Runtime): where they load, and where not."""
    return [
        note.format(file=", ".join(f"{b.subfolder}/{f}" for f in b.programs.values()), ops=", ".join(b.runtime_ops))
        for b in report.backends
        if b.runtime_ops and (note := get_backend(b.backend).runtime_ops_note)
    ]


def placeholder_notes(report: Report) -> list[str]:
    """What an empty file beside a graph is for, where one is published: `transformers.exporters`'
    `ExportedModel` asks for `model.onnx.data` beside every ONNX graph (`OnnxExporter.program_files`),
    though the published graph holds its weights; every other loader reads `model.onnx` alone."""
    empty = [f"{b.subfolder}/{f.path}" for b in report.succeeded for f in b.files if not f.size]
    if not empty:
        return []
    return [
        f"`{'`, `'.join(empty)}`: empty, and so on purpose — `ExportedModel` asks for it beside the graph, whose "
        "weights are inside it; every other loader reads the graph alone."
    ]


def published_only(report: Report) -> Report:
    """The report as the card shows it: the exports that succeeded, each with the variants it
    publishes. A failed or skipped backend or variant is said in the PR's description and the report
    (where a maintainer reviews it), never as a row of the card that merging makes the repo's."""
    backends = [dataclasses.replace(b, variants=b.published_variants) for b in report.succeeded]
    return dataclasses.replace(report, backends=backends)


def render_section(
    repo_id: str,
    report: Report,
    notes: list[str] | tuple[str, ...] = (),
    repo_files: set[str] | None = None,
    on_pr: bool = True,
) -> str:
    sha = report.source.sha
    report = published_only(report)
    # Where each file runs, where a backend's files are the browsers' too (`WebRuntimes`).
    web = ["runs_on"] if any(b.web for b in report.backends) else []
    lines = [
        START,
        "## Exports",
        "",
        f"Exported and validated by hfexport from commit `{sha[:12]}`: each artifact was "
        "reloaded on its own runtime and compared with the original model, on the traced shape and on another "
        f"batch and sequence length (task `{report.plan.task}`).",
        "",
        *(
            ["### Which file to use", "", *where, "", "### Every export", ""]
            if (where := which_file_table(report))
            else []
        ),
        *markdown_table(
            report,
            ["backend", "source", "folder", "files", "size", "precision", "max_abs_diff", "tolerance"] + web,
        ),
    ]
    notes = [*notes, *precision_notes(report), *web_notes(report), *fused_notes(report), *placeholder_notes(report)]
    if notes:
        lines += ["", *(f"- {note}" for note in notes)]
    variants = markdown_variant_table(report, ["backend", "variant", "file", "size", "share", "quality", "speed"] + web)
    if variants:
        lines += [
            "",
            "### Variants",
            "",
            "Smaller or faster files beside an export, derived from it and compared with the original model in "
            "float32 on inputs of another shape than any trace or calibration; speed is against the float32 file "
            "on the same runtime"
            + "".join(f" ({b.backend}'s on {b.measured_on})" for b in report.backends if b.variants and b.measured_on)
            + ". Each met its quality thresholds; one that did not is not published.",
            "",
            *variants,
        ]
        beyond_defaults = [
            "- " + note.format(file=f"{b.subfolder}/{v.published}", ops=", ".join(v.runtime_ops))
            for b in report.backends
            if (note := get_backend(b.backend).runtime_ops_note)
            for v in b.published_variants
            if v.runtime_ops
        ]
        if beyond_defaults:
            lines += ["", *beyond_defaults]
    if any(b.validation is not None and b.validation.tokens_equal for b in report.succeeded):
        new_tokens = report.plan.validation.new_tokens
        lines += [
            "",
            f"Generation: the exported components reproduce eager `generate()` token for token ({new_tokens} new "
            "tokens, greedy).",
        ]
    versions = {}
    for b in report.succeeded:
        versions.update(b.versions)
    if versions:
        lines += ["", "Built with " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + "."]
    lines += ["", *load_section(repo_id, report, repo_files)]
    lines.append(END)
    section = "\n".join(lines)
    return section if on_pr else section.replace(PR_REVISION_NOTE, "").replace(JS_PR_REVISION_NOTE, "")

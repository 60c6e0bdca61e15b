"""The model-card section hfexport owns, and the metadata it merges.

The section sits between two markers, so a rerun replaces it and nothing else: the owner's text
before and after is kept byte for byte. In the YAML metadata only `tags` is touched (format tags
are added, none removed); every other key the owner wrote stays as it was.
"""

from __future__ import annotations

import re

import yaml

from ..backends import get_backend
from ..report import Report, markdown_table, markdown_variant_table
from .snippets import load_section

START = "<!-- hfexport:start -->"
END = "<!-- hfexport:end -->"
_FRONT_MATTER = re.compile(r"\A---\r?\n(.*?)\r?\n---\r?\n?", re.S)


def split_card(text: str) -> tuple[dict | None, str, str]:
    """`(metadata, front matter as written, body)`; metadata is None when the front matter is not
    a YAML mapping (then nobody but its owner should rewrite it)."""
    match = _FRONT_MATTER.match(text)
    if not match:
        return {}, "", text
    try:
        data = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError:
        data = None
    return (data if isinstance(data, dict) else None), match.group(0), text[match.end():]


def opted_out(text: str | None) -> bool:
    """The owner's opt-out in the card metadata: `hfexport: false` or `hfexport: {opt_out: true}`."""
    if not text:
        return False
    value = (split_card(text)[0] or {}).get("hfexport")
    return value is False or (isinstance(value, dict) and bool(value.get("opt_out")))


def render_card(current: str | None, repo_id: str, report: Report, notes: list[str] | tuple[str, ...] = (),
                repo_files: set[str] | None = None) -> str:
    """The README with our section replaced or appended and our tags merged in. `notes` are
    sentences the section adds under its table (e.g. where an export went instead of the owner's
    folder); `repo_files`, the repo's paths (its loading snippets feed inputs from its own preprocessor)."""
    metadata, front, body = split_card(current or "")
    if metadata is not None:  # unreadable front matter stays exactly as the owner wrote it
        tags = list(metadata.get("tags") or [])
        for b in report.succeeded:
            for tag in (*get_backend(b.backend).tags, "hfexport"):
                if tag not in tags:
                    tags.append(tag)
        if tags != list(metadata.get("tags") or []):
            metadata["tags"] = tags
            front = "---\n" + yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True) + "---\n"
    section = render_section(repo_id, report, notes, repo_files)
    if START in body and END in body:
        before, rest = body.split(START, 1)
        after = rest.split(END, 1)[1]
        body = before + section + after
    else:
        if not body:
            body = f"# {repo_id.split('/')[-1]}\n"
        body = body + ("" if body.endswith("\n") else "\n") + "\n" + section + "\n"
    return front + body


def render_section(repo_id: str, report: Report, notes: list[str] | tuple[str, ...] = (),
                   repo_files: set[str] | None = None) -> str:
    sha = report.source.sha
    lines = [
        START,
        "## Exports",
        "",
        f"Exported and validated by hfexport from commit `{sha[:12]}`: each artifact was "
        "reloaded on its own runtime and compared with the original model, on the traced shape and on another "
        f"batch and sequence length (task `{report.plan.task}`).",
        "",
        *markdown_table(report, ["backend", "source", "folder", "files", "size", "max_abs_diff", "tolerance", "outcome"]),
    ]
    if notes:
        lines += ["", *(f"- {note}" for note in notes)]
    variants = markdown_variant_table(report, ["backend", "variant", "file", "size", "share", "quality", "speed", "outcome"])
    if variants:
        lines += [
            "", "### Variants", "",
            "Smaller or faster files beside an export, derived from it and compared with the original model in "
            "float32 on inputs of another shape than any trace or calibration; speed is against the float32 file "
            "on the same runtime. A variant below its quality thresholds is listed but not published.",
            "", *variants,
        ]
        beyond_defaults = [
            "- " + note.format(file=f"{b.subfolder}/{v.published}", ops=", ".join(v.runtime_ops))
            for b in report.backends if (note := get_backend(b.backend).runtime_ops_note)
            for v in b.published_variants if v.runtime_ops
        ]
        if beyond_defaults:
            lines += ["", *beyond_defaults]
    if any(b.validation is not None and b.validation.tokens_equal for b in report.succeeded):
        new_tokens = report.plan.validation.new_tokens
        lines += ["", f"Generation: the exported components reproduce eager `generate()` token for token ({new_tokens} new tokens, greedy)."]
    versions = {}
    for b in report.succeeded:
        versions.update(b.versions)
    if versions:
        lines += ["", "Built with " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + "."]
    lines += ["", *load_section(repo_id, report, repo_files)]
    lines.append(END)
    return "\n".join(lines)

"""The model-card section hfexport owns, and the metadata it merges.

The section sits between two markers, so a rerun replaces it and nothing else: the owner's text
before and after is kept byte for byte. In the YAML metadata only `tags` is touched (format tags
are added, none removed); every other key the owner wrote stays as it was.
"""

from __future__ import annotations

import re

import yaml

from .backends import get_backend
from .package import Report

START = "<!-- hfexport:start -->"
END = "<!-- hfexport:end -->"
FORMAT_TAGS = {"dynamo": "torch-export", "onnx": "onnx", "executorch": "executorch", "executorch-cuda": "executorch", "openvino": "openvino"}
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


def render_card(current: str | None, repo_id: str, report: Report) -> str:
    """The README with our section replaced or appended and our tags merged in."""
    metadata, front, body = split_card(current or "")
    if metadata is not None:  # unreadable front matter stays exactly as the owner wrote it
        tags = list(metadata.get("tags") or [])
        for b in report.succeeded:
            for tag in (FORMAT_TAGS.get(b.backend, b.backend), "hfexport"):
                if tag not in tags:
                    tags.append(tag)
        if tags != list(metadata.get("tags") or []):
            metadata["tags"] = tags
            front = "---\n" + yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True) + "---\n"
    section = render_section(repo_id, report)
    if START in body and END in body:
        before, rest = body.split(START, 1)
        after = rest.split(END, 1)[1]
        body = before + section + after
    else:
        if not body:
            body = f"# {repo_id.split('/')[-1]}\n"
        body = body + ("" if body.endswith("\n") else "\n") + "\n" + section + "\n"
    return front + body


def render_section(repo_id: str, report: Report) -> str:
    sha = report.source["sha"]
    lines = [
        START,
        "## Exports",
        "",
        f"Exported and validated by hfexport from commit `{sha[:12]}`: each artifact was "
        "reloaded on its own runtime and compared with the original model, on the traced shape and on another "
        f"batch and sequence length (task `{report.plan['task']}`).",
        "",
        "| backend | folder | files | size | max abs diff | tolerance | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for b in report.backends:
        validation = b.validation or {}
        diff = validation.get("max_abs_diff")
        lines.append(
            f"| {b.backend} | `{b.subfolder}/` | {', '.join(f['path'] for f in b.files) or '-'} | "
            f"{_size(b.size_bytes)} | {f'{diff:.2e}' if isinstance(diff, float) else '-'} | "
            f"{validation.get('tolerance', '-')} | {b.status}{': ' + _one_line(b.error) if b.error else ''} |"
        )
    generation = [b for b in report.succeeded if any((c.get('tokens_equal') is True) for c in (b.validation or {}).get("checks", []))]
    if generation:
        new_tokens = report.plan["validation"]["new_tokens"]
        lines += ["", f"Generation: the exported components reproduce eager `generate()` token for token ({new_tokens} new tokens, greedy)."]
    versions = {}
    for b in report.succeeded:
        versions.update(b.versions)
    if versions:
        lines += ["", "Built with " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + "."]
    lines += ["", "### How to load", ""]
    for b in report.succeeded:
        lines += _snippet(repo_id, b.backend, b.subfolder, b.components)
    lines.append(END)
    return "\n".join(lines)


def _snippet(repo_id: str, backend: str, subfolder: str, components: list[str]) -> list[str]:
    spec = get_backend(backend)
    trust = ", trust_remote_code=True" if spec.loads_pickle else ""
    first = components[0] if components else "model"
    native = {
        "onnx": [
            "import onnxruntime as ort",
            f'session = ort.InferenceSession(hf_hub_download("{repo_id}", "{subfolder}/{first}.onnx"))',
        ],
        "dynamo": ["import torch", f'program = torch.export.load(hf_hub_download("{repo_id}", "{subfolder}/{first}.pt2"))'],
        "executorch": [
            "from executorch.runtime import Runtime",
            f'program = Runtime.get().load_program(hf_hub_download("{repo_id}", "{subfolder}/{first}.pte"))',
        ],
    }.get(spec.export_format, [])
    return [
        f"**{backend}** (`{subfolder}/`):",
        "",
        "```python",
        "from transformers.exporters import ExportedModel",
        f'model = ExportedModel.from_pretrained("{repo_id}", subfolder="{subfolder}"{trust})  # revision="refs/pr/N" to try this PR',
        *(["", "# or with the runtime alone", "from huggingface_hub import hf_hub_download", *native] if native else []),
        "```",
        "",
    ]


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n else "-"


def _one_line(text: str) -> str:
    return text.replace("|", "/").replace("\n", " ")[:200]

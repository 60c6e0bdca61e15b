"""The card's "How to load" code: the one place that renders it.

A snippet on a model card is copied and run by someone with a fresh cache and no token, so each
block here is a whole program: its imports, every file it needs downloaded (the Hub's
`hf_hub_download` fetches one file, so a program's weights must be inside the file it names —
`hfexport.layouts` sees to that), the repo's own preprocessor making real inputs, one call and
the shape of what came out. `tests/test_card_snippets.py` runs every block of a real push's card,
as printed, against the pull request and after its merge.

Each backend renders the runtime-alone part itself (`Backend.snippet`); this module adds the
`ExportedModel` block every backend gets, the inputs, and the revision line.
"""

from __future__ import annotations

from ..backends import get_backend
from ..report import BackendResult, Report

# Sentences of different lengths, so the batch is padded as real traffic is.
_TEXTS = '["hfexport validated this file against the original model.", "Short one."]'

# transformers.js picks an ONNX file by `dtype`: these are the names it reads for ours.
JS_DTYPE = {"model_quantized.onnx": "q8", "model_fp16.onnx": "fp16"}


def _header(repo_id: str) -> list[str]:
    return [f'repo, revision = "{repo_id}", "main"  # to try the pull request before it is merged: "refs/pr/<number>"']


def _inputs(report: Report, tensors: str) -> list[str] | None:
    """Lines making `inputs` with the repo's own preprocessor, or None where hfexport cannot write
    them generically (generation, audio: the card then shows loading alone)."""
    plan = report.plan
    if plan.mode != "single":
        return None
    if plan.modality == "text":
        return [
            "from transformers import AutoTokenizer",
            "tokenizer = AutoTokenizer.from_pretrained(repo, revision=revision)",
            f'inputs = tokenizer({_TEXTS}, padding=True, return_tensors="{tensors}")',
        ]
    if plan.modality == "vision":
        return [
            "from PIL import Image",
            "from transformers import AutoImageProcessor",
            "processor = AutoImageProcessor.from_pretrained(repo, revision=revision)",
            f'inputs = processor(images=[Image.new("RGB", (96, 64), "teal")], return_tensors="{tensors}")',
        ]
    return None


def _program(lines: list[str]) -> list[str]:
    """`lines` as one program: its imports first (deduplicated), then the rest in order."""
    imports = [line for line in lines if line.startswith(("import ", "from "))]
    body = [line for line in lines if not line.startswith(("import ", "from "))]
    return ["```python", *sorted(dict.fromkeys(imports), key=lambda line: line.split()[1]), "", *body, "```"]


def exported_model_block(repo_id: str, report: Report, b: BackendResult) -> list[str]:
    """Loading with `transformers.exporters.ExportedModel`, which reads every backend."""
    spec = get_backend(b.backend)
    trust = ", trust_remote_code=True" if spec.loads_pickle or report.plan.trust_remote_code else ""
    inputs = _inputs(report, "pt")
    lines = [
        "from transformers.exporters import ExportedModel",
        *_header(repo_id),
        f'model = ExportedModel.from_pretrained(repo, subfolder="{b.subfolder}", revision=revision{trust})',
    ]
    if inputs is None:
        lines.append("print(model)  # its components, each called with the inputs it was traced with")
    else:
        lines += [*inputs, "outputs = model(**inputs)", "print({name: tuple(value.shape) for name, value in outputs.items()})"]
    return _program(lines)


def runtime_block(repo_id: str, report: Report, b: BackendResult, file: str) -> list[str] | None:
    """Loading `file` of `b`'s folder with the backend's runtime alone, or None if it has no such snippet."""
    spec = get_backend(b.backend)
    if spec.snippet is None:
        return None
    component = file.rsplit(".", 1)[0].split("_", 1)[0]
    names = b.inputs.get(component) or b.inputs.get("model")
    inputs = _inputs(report, spec.snippet_tensors)
    path = f'hf_hub_download(repo, "{b.subfolder}/{file}", revision=revision)'
    lines = ["from huggingface_hub import hf_hub_download", *_header(repo_id)]
    if inputs is not None and names:
        lines += inputs
    lines += spec.snippet(path, names if inputs is not None else None)
    return _program(lines)


def load_section(repo_id: str, report: Report) -> list[str]:
    """The card's "How to load" section: per backend, ExportedModel and the runtime alone; per
    published variant, its file with the runtime alone (and the transformers.js dtype that picks it)."""
    lines = ["### How to load", ""]
    for b in report.succeeded:
        spec = get_backend(b.backend)
        first = (b.components or ["model"])[0]
        lines += [f"**{b.backend}** (`{b.subfolder}/`), with `transformers.exporters`:", "", *exported_model_block(repo_id, report, b), ""]
        alone = runtime_block(repo_id, report, b, f"{first}.{spec.suffix}")
        if alone is not None:
            lines += ["With the runtime alone:", "", *alone, ""]
        elif spec.snippet_note:
            lines += [spec.snippet_note, ""]
        published = [v for v in b.variants if v.ok and v.file]
        if published:
            lines += [f"Variants of **{b.backend}**, each one file:", ""]
            for v in published:
                js = f" — transformers.js: `dtype: '{JS_DTYPE[v.file]}'`" if v.file in JS_DTYPE else ""
                lines.append(f"- `{b.subfolder}/{v.file}` ({v.kind}){js}")
            block = runtime_block(repo_id, report, b, published[0].file)
            lines += ["", *(block or []), ""]
    return lines

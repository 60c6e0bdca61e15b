"""The parts every "How to load" block of the card is made of (`snippets.py` renders the blocks):
the repo and revision line, the prose the inputs are made of, the lines that make `inputs` with
the repo's own preprocessor, the downloads of weights kept beside a graph, and the program form
(imports first, deduplicated).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import takewhile

from ..layouts import data_files
from ..report import BackendResult, Report, Split

# Sentences of different lengths, so the batch is padded as real traffic is.
PROMPT = '"hfexport validated this file against the original model."'
TEXTS = f'[{PROMPT}, "Short one."]'


# Where the exports are a PR, the blocks say how to run them before it is merged; a derived repo's
# card drops these (`card.render_section(on_pr=False)`): its exports are on `main` already.
PR_REVISION_NOTE = '  # to try the pull request before it is merged: "refs/pr/<number>"'
JS_PR_REVISION_NOTE = ' // to try the pull request before it is merged: "refs/pr/<number>"'


def header(repo_id: str) -> list[str]:
    return [f'repo, revision = "{repo_id}", "main"{PR_REVISION_NOTE}']


def data_chunks(b: BackendResult, file: str) -> list[str]:
    """The files holding `file`'s weights beside it in `b`'s folder (a graph past 2 GB, in the names
    `layouts.data_files` gives them: `model.onnx_data`, `model.onnx_data_1` …), or none."""
    paths = {f.path for f in b.files}
    return list(takewhile(lambda name: name in paths, data_files(file, len(paths))))


def weights_beside(b: BackendResult, *files: str) -> list[str]:
    """For each of `files` whose weights sit beside it (a graph past 2 GB: `data_chunks`), the
    lines that download them first: `hf_hub_download` fetches one file, and ONNX Runtime reads the
    weights from beside the graph in the same snapshot folder."""
    return [
        f'hf_hub_download(repo, "{b.subfolder}/{chunk}", revision=revision)  # its weights, past 2 GB'
        for file in files
        for chunk in data_chunks(b, file)
    ]


# The files each kind of preprocessor loads from (any one of them).
PREPROCESSOR_FILES = {
    "text": ("tokenizer.json", "tokenizer_config.json", "vocab.txt"),
    "vision": ("preprocessor_config.json",),
    "audio": ("preprocessor_config.json",),
}
# The preprocessors a modality's inputs are made with (two towers: a tokenizer and an image processor).
_PREPROCESSORS = {"text": ("text",), "vision": ("vision",), "audio": ("audio",), "text-vision": ("text", "vision")}


def has_preprocessor(report: Report, repo_files: set[str] | None) -> bool:
    """Whether the repo holds what its inputs are made with: the modality's preprocessors, and for a
    model that writes text (generation), a tokenizer as well."""
    if repo_files is None:
        return True
    kinds = _PREPROCESSORS.get(report.plan.modality)
    if kinds is None:
        return False
    wanted = [PREPROCESSOR_FILES[kind] for kind in kinds]
    if report.plan.mode == "generation":  # it writes text: a tokenizer too
        wanted.append(PREPROCESSOR_FILES["text"])
    return all(any(name in repo_files for name in names) for names in wanted)


# Lines making `inputs` (tensors of the given kind: "pt", "np") with the repo's own preprocessor,
# by modality; the others (audio, two towers) get loading alone.
INPUT_LINES: dict[str, Callable[[str], list[str]]] = {
    "text": lambda tensors: [
        "from transformers import AutoTokenizer",
        "tokenizer = AutoTokenizer.from_pretrained(repo, revision=revision)",
        f'inputs = tokenizer({TEXTS}, padding=True, return_tensors="{tensors}")',
    ],
    "vision": lambda tensors: [
        "from PIL import Image",
        "from transformers import AutoImageProcessor",
        "processor = AutoImageProcessor.from_pretrained(repo, revision=revision)",
        f'inputs = processor(images=[Image.new("RGB", (96, 64), "teal")], return_tensors="{tensors}")',
    ],
    # Two towers: each text against each image. An attention mask asked for, as the graph takes one
    # (SigLIP's tokenizers return none unless asked).
    "text-vision": lambda tensors: [
        "from PIL import Image",
        "from transformers import AutoImageProcessor, AutoTokenizer",
        "tokenizer = AutoTokenizer.from_pretrained(repo, revision=revision)",
        "processor = AutoImageProcessor.from_pretrained(repo, revision=revision)",
        'texts = tokenizer(["a photo of teal", "a cat"], padding=True, return_attention_mask=True, '
        f'return_token_type_ids=False, return_tensors="{tensors}")',
        f'images = processor(images=[Image.new("RGB", (96, 64), "teal")], return_tensors="{tensors}")',
        "inputs = {**texts, **images}",
    ],
}


def input_lines(report: Report, tensors: str, repo_files: set[str] | None = None) -> list[str] | None:
    """Lines making `inputs` with the repo's own preprocessor, or None where hfexport cannot write
    them generically (generation, audio, a repo without a preprocessor: the card then shows loading alone)."""
    plan = report.plan
    lines = INPUT_LINES.get(plan.modality)
    if plan.split != Split.SINGLE or lines is None or not has_preprocessor(report, repo_files):
        return None
    return lines(tensors)


def program(lines: list[str]) -> list[str]:
    """`lines` as one program: its imports first (deduplicated), then the rest in order."""
    imports = [line for line in lines if line.startswith(("import ", "from "))]
    body = [line for line in lines if not line.startswith(("import ", "from "))]
    return ["```python", *sorted(dict.fromkeys(imports), key=lambda line: line.split()[1]), "", *body, "```"]

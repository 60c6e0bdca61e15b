"""The card's blocks for a decoder LLM laid out for ExecuTorch's own runner (`Layout.LLM_RUNNER`):
`TextLLMRunner` (Python and its C++ twin), optimum-executorch, and one step with the program alone.
`snippets.py` adds them to the load section; each is run as printed by the loader tests.
"""

from __future__ import annotations

from pathlib import Path

from ..backends import get_backend
from ..report import BackendResult
from .programs import PREPROCESSOR_FILES, PROMPT, header, program


def llm_runner_block(repo_id: str, b: BackendResult, file: str) -> list[str]:
    """ExecuTorch's `TextLLMRunner` (its Python bindings of the C++ runner apps use) generating from
    `file` with the repo's `tokenizer.json`, greedy; it prints the text as it comes."""
    return program(
        [
            "from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner",
            "from huggingface_hub import hf_hub_download",
            *header(repo_id),
            f'program = hf_hub_download(repo, "{b.subfolder}/{file}", revision=revision)',
            'tokenizer = hf_hub_download(repo, "tokenizer.json", revision=revision)',
            "runner = TextLLMRunner(program, tokenizer)",
            f"runner.generate({PROMPT}, GenerationConfig(max_new_tokens=8, temperature=0.0, echo=False))",
        ]
    )


def optimum_executorch_block(repo_id: str, b: BackendResult, file: str) -> list[str]:
    """optimum-executorch's `ExecuTorchModelForCausalLM` generating greedily from `file`'s folder (it
    loads the `model.pte` under the `subfolder` it is given, and reads the program's metadata)."""
    return program(
        [
            "from optimum.executorch import ExecuTorchModelForCausalLM",
            "from transformers import AutoTokenizer",
            *header(repo_id),
            f'folder = "{b.subfolder}/{Path(file).parent}"',
            "model = ExecuTorchModelForCausalLM.from_pretrained(repo, subfolder=folder, revision=revision)",
            "tokenizer = AutoTokenizer.from_pretrained(repo, revision=revision)",
            f'ids = tokenizer({PROMPT})["input_ids"]',
            "# Greedy; max_seq_len counts the prompt's tokens and the new ones.",
            "print(tokenizer.decode(model.generate(ids, max_seq_len=len(ids) + 8), skip_special_tokens=True))",
        ]
    )


def llm_runner_step_block(repo_id: str, b: BackendResult, file: str) -> list[str]:
    """The runner's program with ExecuTorch's runtime alone: the prompt at once, its cache inside."""
    return program(
        [
            "import torch",
            "from executorch.runtime import Runtime",
            "from huggingface_hub import hf_hub_download",
            "from transformers import AutoTokenizer",
            *header(repo_id),
            "tokenizer = AutoTokenizer.from_pretrained(repo, revision=revision)",
            f'program = Runtime.get().load_program(hf_hub_download(repo, "{b.subfolder}/{file}", revision=revision))',
            'forward = program.load_method("forward")',
            f'ids = torch.tensor([tokenizer({PROMPT})["input_ids"]])',
            "# The prompt at positions 0…n-1; each next token then at the position after (the cache is inside).",
            "logits = forward.execute([ids, torch.arange(ids.shape[1])])[0]",
            'print(tuple(logits.shape), "next token:", tokenizer.decode(logits[0, -1].argmax()))',
        ]
    )


def llm_runner_section(repo_id: str, b: BackendResult, repo_files: set[str] | None) -> list[str]:
    file = b.program_file(b.components[0])  # the one decoder program
    positions = f"{b.max_seq_len} positions, prompt and new tokens together" if b.max_seq_len else "a static cache"
    lines = [
        f"**{b.backend}** (`{b.subfolder}/`): `{file}` as ExecuTorch's LLM runner reads it — "
        f"`forward(input_ids, cache_position)`, its KV cache inside ({positions}), and the metadata methods "
        "the runner reads. ExecuTorch's `TextLLMRunner` (the C++ runner of its Android and iOS LLM demos and "
        "`llama_main`) and optimum-executorch load it; `ExportedModel` does not.",
        "",
    ]
    has_tokenizer = repo_files is None or "tokenizer.json" in repo_files
    runner = next((c for c in (b.validation.checks if b.validation else []) if c.name == "llm_runner"), None)
    if runner is not None and runner.note:
        lines += [f"Not run in the runner here: {runner.note}.", ""]
    elif has_tokenizer:
        lines += [
            "With ExecuTorch's LLM runner (`pip install executorch`: Python bindings of the C++ runner apps link):",
            "",
            *llm_runner_block(repo_id, b, file),
            "",
            f"An app or `llama_main` takes the same two files: `llama_main --model_path {Path(file).name} "
            f'--tokenizer_path tokenizer.json --prompt "…" --temperature 0'
            + (f" --seq_len {b.max_seq_len}`" if b.max_seq_len else "`")
            + ".",
            "",
        ]
    if any(n in (repo_files or {"tokenizer.json"}) for n in PREPROCESSOR_FILES["text"]):
        lines += [
            "With optimum-executorch (`pip install optimum-executorch`, in an environment of its own: it pins its "
            "transformers):",
            "",
            *optimum_executorch_block(repo_id, b, file),
            "",
            "With ExecuTorch's runtime alone, one step:",
            "",
            *llm_runner_step_block(repo_id, b, file),
            "",
        ]
    if b.published_variants:
        lines += [
            f"Variants of **{b.backend}**, each a folder of its own (one program a folder), read the same way "
            "(optimum-executorch: that folder as `subfolder`):",
            "",
        ]
        spec = get_backend(b.backend)
        for v in b.published_variants:
            note = spec.runtime_ops_note
            ops = note.format(file=v.file, ops=", ".join(v.runtime_ops)) if v.runtime_ops and note else ""
            lines.append(f"- `{b.subfolder}/{v.file}` ({v.kind}){': ' + ops if ops else ''}")
        lines.append("")
    return lines

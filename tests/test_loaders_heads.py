"""Single-graph task heads (classifiers, token and span heads, vision heads, two towers) as their
cards print them: transformers.js's pipeline of the task and optimum's class, from the PR, compute
eager's labels and scores (tests/card_runs.py runs them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny_models
import yaml
from card_runs import TEXTS, push_with_bot, record, run_every_block, run_loader

from hfexport.tasks import TASKS

_TEAL = ("RGB", (96, 64), "teal")  # the card's image (hfexport.card.snippets), as PIL makes it
_ZERO_SHOT_LABELS = ["teal", "cat", "dog"]  # the card's candidate labels


def _card_inputs(task: str, folder: Path) -> dict:
    """What the card's Python blocks feed a single-graph head (`hfexport.card.snippets`' input lines),
    as torch tensors: its two sentences, the teal image, or both towers' inputs."""
    import transformers
    from PIL import Image

    modality = TASKS[task].modality or ("vision" if task in _VISION_TASKS else "text")
    if modality == "vision":
        processor = transformers.AutoImageProcessor.from_pretrained(folder)
        return dict(processor(images=[Image.new(*_TEAL)], return_tensors="pt"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    if modality == "text":
        return dict(tokenizer(TEXTS[:1] + ["Short one."], padding=True, return_tensors="pt"))
    processor = transformers.AutoImageProcessor.from_pretrained(folder)
    texts = tokenizer(["a photo of teal", "a cat"], padding=True, return_token_type_ids=False, return_tensors="pt")
    return {**texts, **processor(images=[Image.new(*_TEAL)], return_tensors="pt")}


_VISION_TASKS = ("image-classification", "object-detection", "image-segmentation")


def _eager_head(task: str, folder: Path):
    """What a single-graph head computes eagerly, as the transformers.js pipeline of `task` reports
    it (on what that pipeline feeds it); and, on the card's inputs, its outputs' shapes."""
    import torch
    import transformers

    config = transformers.AutoConfig.from_pretrained(folder)
    model = getattr(transformers, TASKS[task].auto_class).from_pretrained(folder).eval()
    inputs = _card_inputs(task, folder)
    with torch.inference_mode():
        outputs = model(**inputs)
    shapes = str({name: tuple(value.shape) for name, value in outputs.items() if isinstance(value, torch.Tensor)})
    if task == "question-answering":
        return None, shapes
    if task == "zero-shot-image-classification":  # the pipeline's own prompts, padded as it pads them
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        siglip = config.model_type == "siglip"
        texts = tokenizer(
            [f"This is a photo of {label}" for label in _ZERO_SHOT_LABELS],
            padding="max_length" if siglip else True,
            truncation=True,
            return_token_type_ids=False,
            return_tensors="pt",
        )
        with torch.inference_mode():
            logits = model(**texts, pixel_values=inputs["pixel_values"]).logits_per_image[0]
        scores = logits.sigmoid() if siglip else logits.softmax(-1)
        return sorted(zip(_ZERO_SHOT_LABELS, scores.tolist()), key=lambda r: -r[1]), shapes
    if task == "image-segmentation":  # a mask per label found, at the image's size
        processor = transformers.AutoImageProcessor.from_pretrained(folder)
        (labels,) = processor.post_process_semantic_segmentation(outputs, target_sizes=[_TEAL[1][::-1]])
        found = labels.flatten().bincount()
        return [(config.id2label[i], int(n)) for i, n in enumerate(found.tolist()) if n], shapes
    if task == "object-detection":  # per query: its best class unless "no object" or below 0.9; pixel boxes
        rows = []
        width, height = _TEAL[1]
        for logit, (cx, cy, w, h) in zip(outputs.logits[0], outputs.pred_boxes[0].tolist()):
            best, score = int(logit.argmax()), float(logit.softmax(-1).max())
            if best != len(logit) - 1 and score >= 0.9:
                box = [(cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height]
                rows.append((config.id2label[best], [int(x) for x in box], score))
        return rows, shapes
    probabilities = outputs.logits.softmax(-1)
    if task == "token-classification":
        special = set(transformers.AutoTokenizer.from_pretrained(folder).all_special_ids)
        return [
            [
                (index, config.id2label[int(p.argmax())], float(p.max()))
                for index, (token, p) in enumerate(zip(ids.tolist(), row))
                if token not in special
            ]
            for ids, row in zip(inputs["input_ids"], probabilities)
        ], shapes
    if task == "image-classification":
        return sorted(
            ((config.id2label[i], float(p)) for i, p in enumerate(probabilities[0])), key=lambda r: -r[1]
        ), shapes
    return [(config.id2label[int(p.argmax())], float(p.max())) for p in probabilities], shapes


def _largest_score_gap(got: list, eager: list) -> float:
    """The labels (and token indexes) must be eager's; returns the largest score difference."""
    assert [row[:-1] for row in got] == [row[:-1] for row in eager], (got, eager)
    return max(abs(a[-1] - b[-1]) for a, b in zip(got, eager))


_HEAD_FOLDERS = {
    "ViTForImageClassification": tiny_models.vit_with_processor,
    "DetrForObjectDetection": tiny_models.detr_with_processor,
    "SegformerForSemanticSegmentation": tiny_models.segformer_with_processor,
    "CLIPModel": lambda folder: tiny_models.two_towers_with_processor(folder, "clip"),
    "SiglipModel": lambda folder: tiny_models.two_towers_with_processor(folder, "siglip"),
}


@pytest.mark.parametrize(
    ("task", "head"),
    [
        ("text-classification", "BertForSequenceClassification"),
        ("token-classification", "BertForTokenClassification"),
        ("question-answering", "BertForQuestionAnswering"),
        ("image-classification", "ViTForImageClassification"),
        ("object-detection", "DetrForObjectDetection"),
        ("image-segmentation", "SegformerForSemanticSegmentation"),
        ("zero-shot-image-classification", "CLIPModel"),
        ("zero-shot-image-classification", "SiglipModel"),
    ],
)
def test_a_single_graph_heads_card_runs_transformers_js_and_optimum_as_eager(hub, task, head, tmp_path):
    """A head with its tokenizer or image processor (both, for two towers), pushed with ONNX: its card
    carries the transformers.js pipeline of its task and optimum's ORTModel class where optimum has
    one, besides `ExportedModel` and the runtime alone, and the `transformers.js` tag. Every block runs
    as printed once merged. The pipeline reports eager's labels (per token, for token classification;
    ranked, for zero-shot) with eager's scores to 1e-5, eager's boxes to the pixel, the pixels eager
    gives each label to 1 %, or the answer transformers' own question-answering pipeline picks from
    eager's logits; optimum's model returns eager's outputs, by name and shape."""
    folder = tmp_path / "model"
    _HEAD_FOLDERS.get(head, lambda f: tiny_models.bert_head_with_tokenizer(f, head))(folder)
    owner = f"heads-{head.lower()}"
    repo = f"{owner}/tiny"
    api, outcome = push_with_bot(hub, owner, repo, folder, "onnx", "none")
    assert outcome["report"]["plan"]["task"] == task, outcome["report"]["plan"]
    # Eight cards of one shape: their blocks run once merged, as printed (the PR's revision line is
    # proven by the other cards).
    ran = run_every_block(api, repo, outcome["pr_num"], tmp_path, r"\(\d+, \d+", r"\S", on_pr=False)
    card = Path(api.hf_hub_download(repo, "README.md")).read_text()
    assert "transformers.js" in yaml.safe_load(card.split("---\n")[1])["tags"]
    (js,) = ran.js.values()
    got, (eager, shapes) = json.loads(js), _eager_head(task, folder)
    loader = f"transformers.js `{task}`"
    if task == "question-answering":
        answer = run_loader(tmp_path / "qa", "transformers-qa", repo, "main", "What was validated?", TEXTS[0])
        assert got["answer"] == answer and got["answer"] in TEXTS[0], (got, answer)
        record(outcome, loader, "eager's answer")
    elif task == "token-classification":
        gap = max(
            _largest_score_gap([(e["index"], e["entity"], e["score"]) for e in text], rows)
            for text, rows in zip(got, eager)
        )
        assert gap < 1e-5, gap
        record(outcome, loader, "eager's labels; score difference", gap)
    elif task == "object-detection":
        assert eager and [r["label"] for r in got] == [r[0] for r in eager], (got, eager)
        for row, (_, box, _) in zip(got, eager):
            assert max(abs(a - b) for a, b in zip(row["box"].values(), box)) <= 1, (row, box)
        gap = max(abs(row["score"] - score) for row, (*_, score) in zip(got, eager))
        assert gap < 1e-5, gap
        record(outcome, loader, "eager's labels and boxes; score difference", gap)
    elif task == "image-segmentation":
        assert [r["label"] for r in got] == [label for label, _ in eager], (got, eager)
        pixels = _TEAL[1][0] * _TEAL[1][1]
        share = max(abs(r["pixels"] - n) for r, (_, n) in zip(got, eager)) / pixels
        assert share <= 0.01, (got, eager)
        record(outcome, loader, "eager's labels; share of pixels labelled otherwise", share)
    else:
        gap = _largest_score_gap([(r["label"], r["score"]) for r in got], eager)
        assert gap < 1e-5, gap
        record(outcome, loader, "eager's labels; score difference", gap)
    cls = TASKS[task].optimum_class
    if cls is None:
        assert not ran.optimum and "optimum" not in card, card
        return
    (printed,) = set(ran.optimum.values())
    assert printed == shapes, (printed, shapes)
    record(outcome, f"optimum `{cls}`", "eager's outputs (shapes)")

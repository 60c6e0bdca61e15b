"""The tasks hfexport exports, one row each: the table the planner reads and the README shows.

A model's head decides its task. `config.architectures[0]` is looked up in transformers' own Auto
mappings (`AutoModelForObjectDetection` lists `DetrForObjectDetection`, …) — never guessed from
the class name, and never defaulted: a head in no row we export is refused, naming the head, the
Auto class that holds it and the tasks we do export. Exporting a detector as "feature-extraction"
would validate and publish a PR that says "ok" while its users get no boxes.

Adding a task is adding a row. `supported=False` rows are heads people publish that hfexport
refuses for now, each with the reason the refusal prints.
"""

from __future__ import annotations

from dataclasses import dataclass

from .report import Modality, Mode


@dataclass(frozen=True)
class Task:
    name: str
    # The Auto class that loads the head (its mapping lists the architectures of this task).
    auto_class: str
    mode: Mode
    # What the head takes, as the README's table says it (the planner reads the model's own
    # `main_input_name` for the inputs it builds).
    inputs: str
    # Families the tests export and validate with this head (tiny random-weight models), for the
    # README's table: a row without any says so there.
    families: tuple[str, ...] = ()
    # Why hfexport refuses this head, if it does (None: exported and validated).
    refused: str | None = None
    # The inputs the planner builds, where the head decides them (two towers); None: from the
    # model's own main input (`input_ids`, `pixel_values`, `input_values`…).
    modality: Modality | None = None
    # transformers.js's pipeline for this task (the card's JavaScript block), if it has one.
    js_pipeline: str | None = None
    # optimum-onnx's ORTModel class for this task (the card's optimum block), if it has one.
    optimum_class: str | None = None

    @property
    def supported(self) -> bool:
        return self.refused is None


# Specific heads first: a class listed by several Auto classes (CLIPModel: AutoModel and
# AutoModelForZeroShotImageClassification) takes the first row that lists it.
TASK_TABLE: tuple[Task, ...] = (
    Task("fill-mask", "AutoModelForMaskedLM", "single", "text"),
    Task(
        "text-classification",
        "AutoModelForSequenceClassification",
        "single",
        "text",
        ("BERT, its own code: dynamo, onnx",),
        js_pipeline="text-classification",
        optimum_class="ORTModelForSequenceClassification",
    ),
    Task(
        "token-classification",
        "AutoModelForTokenClassification",
        "single",
        "text",
        ("BERT: onnx",),
        js_pipeline="token-classification",
        optimum_class="ORTModelForTokenClassification",
    ),
    Task(
        "question-answering",
        "AutoModelForQuestionAnswering",
        "single",
        "text",
        ("BERT: onnx",),
        js_pipeline="question-answering",
        optimum_class="ORTModelForQuestionAnswering",
    ),
    Task(
        "image-classification",
        "AutoModelForImageClassification",
        "single",
        "vision",
        ("ViT: dynamo, onnx, executorch", "MobileNetV2: dynamo, onnx, executorch"),
        js_pipeline="image-classification",
        optimum_class="ORTModelForImageClassification",
    ),
    # optimum-onnx 0.1.0 has no ORTModel class for detection.
    Task(
        "object-detection",
        "AutoModelForObjectDetection",
        "single",
        "vision",
        ("DETR: dynamo, onnx",),
        js_pipeline="object-detection",
    ),
    Task(
        "image-segmentation",
        "AutoModelForSemanticSegmentation",
        "single",
        "vision",
        ("SegFormer: dynamo, onnx, executorch",),
        js_pipeline="image-segmentation",
        optimum_class="ORTModelForSemanticSegmentation",
    ),
    Task("depth-estimation", "AutoModelForDepthEstimation", "single", "vision", ("GLPN: dynamo, onnx",)),
    Task("audio-classification", "AutoModelForAudioClassification", "single", "audio", ("wav2vec2: dynamo, onnx",)),
    Task(
        "automatic-speech-recognition",
        "AutoModelForCTC",
        "single",
        "audio",
        ("wav2vec2: dynamo, onnx", "wav2vec2-BERT, Parakeet (spectrograms of any length): dynamo, onnx"),
    ),
    # Before the causal LMs: a model with a vision tower (Gemma 3's Gemma3ForConditionalGeneration) is
    # listed by AutoModelForCausalLM too, and planned as a text LLM it lost its images.
    Task(
        "image-text-to-text",
        "AutoModelForImageTextToText",
        "generation",
        "images + text",
        (
            "LLaVA: dynamo, onnx, executorch",
            "Gemma 3 (vision, sliding window): dynamo, onnx",
            "SmolVLM (its processor without its video part): dynamo, onnx, executorch",
            "Qwen2.5-VL (each image's grid, 3-D rotary positions): dynamo, onnx",
        ),
        modality="image-text",
    ),
    # Generation with a KV cache: one decoder (and the encoder, for encoder-decoders).
    Task(
        "text-generation-with-past",
        "AutoModelForCausalLM",
        "generation",
        "text",
        (
            "Llama: dynamo, onnx, executorch",
            "Mistral, Gemma 2, Gemma 3, EXAONE 4, StarCoder2, ModernBERT decoder (sliding window): dynamo, onnx, "
            "executorch",
            "gpt-oss (sliding window, experts): dynamo, onnx",
            "Falcon (one key/value head), DeepSeek-V3 (latent attention): dynamo, onnx, executorch",
            "LFM2, Granite 4, Qwen3-Next, Falcon-H1, Mamba 2 (conv and recurrent states): dynamo, onnx, executorch",
        ),
        js_pipeline="text-generation",
        optimum_class="ORTModelForCausalLM",
    ),
    Task(
        "text2text-generation-with-past",
        "AutoModelForSeq2SeqLM",
        "generation",
        "text",
        ("T5: dynamo, onnx, executorch", "BART, Marian: dynamo, onnx"),
        js_pipeline="text2text-generation",
        optimum_class="ORTModelForSeq2SeqLM",
    ),
    Task(
        "automatic-speech-recognition-with-past",
        "AutoModelForSpeechSeq2Seq",
        "generation",
        "audio",
        ("Whisper: dynamo, onnx, executorch", "Moonshine, SpeechT5: dynamo, onnx"),
        js_pipeline="automatic-speech-recognition",
        optimum_class="ORTModelForSpeechSeq2Seq",
    ),
    # Causal LM logits as one graph, no cache (asked for by name: `auto` picks the one with past).
    Task("text-generation", "AutoModelForCausalLM", "single", "text", ("Llama: dynamo, onnx, executorch",)),
    Task(
        "zero-shot-image-classification",
        "AutoModelForZeroShotImageClassification",
        "single",
        "text + images",
        ("CLIP, SigLIP: dynamo, onnx",),
        modality="text-vision",
        js_pipeline="zero-shot-image-classification",
        optimum_class="ORTModelForZeroShotImageClassification",
    ),
    # OWLv2, OWL-ViT: boxes for text queries, each image with the same number of them (`input_ids`
    # holds images x queries rows).
    Task(
        "zero-shot-object-detection",
        "AutoModelForZeroShotObjectDetection",
        "single",
        "text queries + images",
        ("OWLv2: dynamo, onnx",),
        modality="text-vision",
    ),
    Task(
        "instance-segmentation",
        "AutoModelForInstanceSegmentation",
        "single",
        "vision",
        ("MaskFormer: dynamo, onnx, executorch",),
    ),
    Task(
        "universal-segmentation",
        "AutoModelForUniversalSegmentation",
        "single",
        "vision",
        ("DETR (panoptic): dynamo, onnx",),
    ),
    # Before feature-extraction: SAM is also listed by AutoModel, and its base model *is* the head.
    Task(
        "mask-generation",
        "AutoModelForMaskGeneration",
        "single",
        "images + points or boxes",
        refused="a promptable mask generator (SAM) takes points or boxes with each image, and hfexport builds no "
        "such prompts to validate it on yet",
    ),
    # The base model, no head: what a head-less architecture (`BertModel`) exports.
    Task(
        "feature-extraction",
        "AutoModel",
        "single",
        "text, vision, audio",
        ("BERT, MiniLM: dynamo, onnx, executorch",),
        js_pipeline="feature-extraction",
    ),
)

TASKS: dict[str, Task] = {task.name: task for task in TASK_TABLE}


def supported_tasks() -> list[str]:
    return [task.name for task in TASK_TABLE if task.supported]


def auto_classes_of(class_name: str) -> list[str]:
    """Every `AutoModel…` class of transformers whose mapping lists `class_name`, in name order."""
    import transformers

    found = []
    for name in sorted(n for n in dir(transformers) if n.startswith("AutoModel")):
        mapping = getattr(getattr(transformers, name, None), "_model_mapping", None)
        names = getattr(mapping, "_model_mapping", None)
        if not isinstance(names, dict):
            continue
        for value in names.values():
            if class_name == value or (isinstance(value, (tuple, list)) and class_name in value):
                found.append(name)
                break
    return found


def task_of_head(class_name: str, can_generate: bool) -> Task | None:
    """The row for the head `class_name`: the first row whose Auto class lists it, preferring the
    generation row for a model that can `generate()`. None if no row's Auto class lists it."""
    holders = set(auto_classes_of(class_name))
    rows = [task for task in TASK_TABLE if task.auto_class in holders]
    if can_generate:
        rows = [task for task in rows if task.mode == "generation"] or rows
    else:
        rows = [task for task in rows if task.mode == "single"] or rows
    return rows[0] if rows else None


def tasks_markdown() -> list[str]:
    """The README's table of tasks: each row, the Auto class, the families tested, or why refused."""
    lines = ["| task | head (Auto class) | inputs | families tested: backends | status |", "|---|---|---|---|---|"]
    for task in TASK_TABLE:
        status = (
            f"refused: {task.refused}"
            if not task.supported
            else ("exported and validated" if task.families else "exported; no family tested here yet")
        )
        families = "; ".join(task.families) or "-"
        lines.append(f"| `{task.name}` | `{task.auto_class}` | {task.inputs} | {families} | {status} |")
    return lines

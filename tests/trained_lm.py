"""A small decoder LLM trained here, on text CPython ships, for judging quantized files.

Random weights have nearly flat logits: a quantized file of such a model agrees with eager on its
greedy tokens or not by chance, which proves plumbing, not quality. This model has real, peaked
distributions: a Llama of ~1 M parameters and a byte-level BPE tokenizer, trained for a few hundred
steps on the Python documentation's topics (`pydoc_data.topics`, in every CPython). Built once
and cached by its recipe (`TRAINED_LM_CACHE`, default `~/.cache/hfexport-tests`), so tests share
it; a benchmark passes a larger recipe of its own (`bench/variants.py`). `python tests/trained_lm.py`
builds the tests' model and prints its folder.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import tiny_models
import torch

# The recipe: every field is in the cache key, so changing one trains anew.
RECIPE = dict(
    vocab_size=1024,
    hidden_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=384,
    max_position_embeddings=256,
    steps=600,
    batch=16,
    length=128,
    learning_rate=3e-3,
    seed=0,
)
HELD_OUT = 0.05  # the corpus's tail: prompts no training (or calibration) step saw


def corpus() -> str:
    """The Python documentation's topics, as CPython ships them (~460 kB of English technical prose)."""
    import pydoc_data.topics

    return "\n\n".join(pydoc_data.topics.topics[key] for key in sorted(pydoc_data.topics.topics))


def held_out_prompts(count: int = 8, words: int = 12) -> list[str]:
    """Prompts from the held-out tail of the corpus: sentence starts of `words` words."""
    text = corpus()
    tail = text[int(len(text) * (1 - HELD_OUT)) :]
    lines = [" ".join(line.split()[:words]) for line in tail.splitlines() if len(line.split()) >= words]
    step = max(1, len(lines) // count)
    return lines[::step][:count]


def _cache_dir(recipe: dict) -> Path:
    key = hashlib.sha256(json.dumps({**recipe, "torch": torch.__version__}, sort_keys=True).encode()).hexdigest()[:12]
    root = Path(os.environ.get("TRAINED_LM_CACHE", Path.home() / ".cache" / "hfexport-tests"))
    return root / f"trained-llama-{key}"


def trained_llama(folder: Path | None = None, recipe: dict = RECIPE) -> Path:
    """The trained model's folder (config, safetensors, generation config, tokenizer), built once
    per `recipe` (`RECIPE`'s fields); copied to `folder` when given."""
    cached = _cache_dir(recipe)
    cached.parent.mkdir(parents=True, exist_ok=True)
    # One process trains, the others (pytest-xdist's workers, a benchmark) wait for its folder.
    with open(cached.with_name(cached.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (cached / "model.safetensors").exists():
            staging = cached.with_name(cached.name + f".tmp{os.getpid()}")
            shutil.rmtree(staging, ignore_errors=True)
            _train(staging, recipe)
            shutil.rmtree(cached, ignore_errors=True)
            staging.rename(cached)
    if folder is None:
        return cached
    shutil.copytree(cached, folder)
    return folder


def _tokenizer(text: str, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    core.train_from_iterator(text.splitlines(), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|pad|>"
    )


def _train(folder: Path, recipe: dict) -> None:
    import transformers

    torch.manual_seed(recipe["seed"])
    text = corpus()
    train_text = text[: int(len(text) * (1 - HELD_OUT))]
    tokenizer = _tokenizer(train_text, recipe["vocab_size"])
    ids = torch.tensor(tokenizer(train_text)["input_ids"])
    special = dict(bos_token_id=0, eos_token_id=0, pad_token_id=1)
    sizes = {k: recipe[k] for k in recipe if k not in ("steps", "batch", "length", "learning_rate", "seed")}
    sizes["vocab_size"] = len(tokenizer)
    config = transformers.LlamaConfig(**sizes, tie_word_embeddings=True, **special)
    model = transformers.LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe["learning_rate"], weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, recipe["learning_rate"], total_steps=recipe["steps"])
    length, started = recipe["length"], time.perf_counter()
    model.train()
    for step in range(recipe["steps"]):
        starts = torch.randint(0, len(ids) - length - 1, (recipe["batch"],))
        batch = torch.stack([ids[s : s + length] for s in starts])
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()
        if step % 100 == 0 or step == recipe["steps"] - 1:
            print(f"trained_lm: step {step} loss {loss.item():.3f} ({time.perf_counter() - started:.0f} s)", flush=True)
    model.eval()
    model.generation_config = transformers.GenerationConfig(**special)
    model.save_pretrained(folder)
    tiny_models._save_tokenizer(tokenizer, folder)  # readable by transformers 4.x too (optimum's venv)


if __name__ == "__main__":
    path = trained_llama()
    print(path)

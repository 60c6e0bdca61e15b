"""How peers measure an LLM file (llama.cpp's `perplexity --kl-divergence`, Olive, LiquidONNX), for
any decoder graph with the transformers.js / ONNX Runtime GenAI cache convention
(`past_key_values.N.key/value` in, `logits` + `present.N.*` out): hfexport's and the builder's alike.

- `teacher_forced`: each passage through the file in one forward from an empty cache; per position
  the KL divergence of the file's next-token distribution from eager fp32's (nats), and whether its
  arg-max is eager's ("same top"). Reported as mean ± standard error over every position.
- `decode_rate`: tokens per second of a greedy loop at batch 1 from a short prompt, the cache fed
  back as the runtime's users feed it (ORT GenAI's `Generator`, transformers.js' `generate`).
  Several files are timed in interleaved rounds (`interleaved`): on a shared machine only the
  ratios within one run hold.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np


def session(path: Path, threads: int | None = None):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or os.cpu_count() or 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def program_bytes(path: Path) -> int:
    """The graph and its external data (`model.onnx.data`, `model.onnx_data`), if any."""
    return sum(
        p.stat().st_size for p in path.parent.iterdir() if p.name == path.name or p.name.startswith(path.name + ".")
    ) + sum(p.stat().st_size for p in path.parent.glob(path.stem + ".onnx_data"))


@dataclass
class Feeder:
    """What a decoder graph takes, as its users' runtime feeds it."""

    sess: object
    kv_heads: int
    head_dim: int

    def empty_cache(self, batch: int = 1) -> dict:
        feed = {}
        for spec in self.sess.get_inputs():
            if spec.name.startswith("past_key_values"):
                dtype = np.float16 if "float16" in spec.type else np.float32
                feed[spec.name] = np.zeros((batch, self.kv_heads, 0, self.head_dim), dtype)
        return feed

    def step(self, ids: np.ndarray, past: dict, past_len: int) -> tuple[np.ndarray, dict]:
        """Logits for `ids` (batch 1) after `past_len` cached positions, and the cache to feed back."""
        length = ids.shape[1]
        given = {
            "input_ids": ids.astype(np.int64),
            "attention_mask": np.ones((1, past_len + length), np.int64),
            "position_ids": np.arange(past_len, past_len + length, dtype=np.int64)[None],
            **past,
        }
        names = [o.name for o in self.sess.get_outputs()]
        wanted = {i.name for i in self.sess.get_inputs()}
        if "attention_mask" in wanted:  # ORT GenAI's graphs take an int32 mask
            mask_type = next(i.type for i in self.sess.get_inputs() if i.name == "attention_mask")
            if "int32" in mask_type:
                given["attention_mask"] = given["attention_mask"].astype(np.int32)
        outputs = dict(zip(names, self.sess.run(names, {k: v for k, v in given.items() if k in wanted})))
        cache = {
            name.replace("present", "past_key_values"): value
            for name, value in outputs.items()
            if name.startswith("present")
        }
        return outputs["logits"].astype(np.float32), cache


def feeder(path: Path, config: dict, threads: int | None = None) -> Feeder:
    heads = config["num_attention_heads"]
    return Feeder(
        session(path, threads),
        config.get("num_key_value_heads", heads),
        config.get("head_dim") or config["hidden_size"] // heads,
    )


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@dataclass
class Fidelity:
    kld_mean: float
    kld_se: float
    same_top: float
    same_top_se: float
    positions: int

    def as_dict(self) -> dict:
        return {
            "kld_mean": round(self.kld_mean, 6),
            "kld_se": round(self.kld_se, 6),
            "same_top": round(self.same_top, 5),
            "same_top_se": round(self.same_top_se, 5),
            "positions": self.positions,
        }


def teacher_forced(file: Feeder, passages: list[np.ndarray], eager: list[np.ndarray]) -> Fidelity:
    """`file` against eager fp32's log-probabilities (`eager[i]`: [positions, vocab]) on each passage."""
    klds, same = [], []
    for ids, want in zip(passages, eager):
        logits, _ = file.step(ids, file.empty_cache(), 0)
        got = log_softmax(logits[0])
        klds.append((np.exp(want) * (want - got)).sum(-1))
        same.append(want.argmax(-1) == got.argmax(-1))
    kld, top = np.concatenate(klds), np.concatenate(same).astype(np.float64)
    n = len(kld)
    se = math.sqrt(n)
    return Fidelity(float(kld.mean()), float(kld.std(ddof=1) / se), float(top.mean()), float(top.std(ddof=1) / se), n)


def greedy(file: Feeder, prompt: np.ndarray, tokens: int) -> tuple[list[int], float]:
    """`tokens` greedy tokens after `prompt` through `file`; and the seconds the decode steps took
    (the prefill left out: decode tok/s is what a chat user waits on)."""
    logits, past = file.step(prompt, file.empty_cache(), 0)
    out = [int(logits[0, -1].argmax())]
    started = time.perf_counter()
    for i in range(tokens - 1):
        logits, past = file.step(np.array([[out[-1]]]), past, prompt.shape[1] + i)
        out.append(int(logits[0, -1].argmax()))
    return out, time.perf_counter() - started


def interleaved(files: dict[str, Feeder], prompt: np.ndarray, tokens: int, rounds: int) -> dict[str, float]:
    """Decode tokens per second of each file, the median of `rounds` interleaved rounds."""
    seconds: dict[str, list[float]] = {name: [] for name in files}
    for name, file in files.items():  # warm-up: first runs allocate
        greedy(file, prompt, 4)
    for _ in range(rounds):
        for name, file in files.items():
            seconds[name].append(greedy(file, prompt, tokens)[1])
    return {name: (tokens - 1) / float(np.median(s)) for name, s in seconds.items()}

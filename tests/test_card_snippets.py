"""The card's "How to load" code runs as printed, and the ecosystem's own loaders read the files.

A real push of MiniLM (dynamo, onnx, executorch, and the int8 ONNX variant) and of a tiny decoder
LLM with its tokenizer to the local Hub; then every block of the card it wrote — each one a whole
program, Python or JavaScript (transformers.js from npm) — runs in a process of its own, with a
fresh cache and no token: against the pull request (the one line the card says to change) and,
after the owner merges, exactly as printed. transformers.js must match eager embeddings and
generate eager's text; sentence-transformers and optimum, in a venv of their own (tests/loaders),
read the same PRs and must match eager too.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import tiny_models
from conftest import run_cli
from loader_table import TABLE
from hfexport.hub.card import END, START
from hfexport.tasks import TASKS

REPO = "snippets-owner/minilm"
JS = Path(__file__).parent / "js"
LOADERS = Path(__file__).parent / "loaders"
TEXTS = [
    "hfexport validated this file against the original model.",
    "Short one.",
    "A third sentence, somewhat longer than the others.",
]


@pytest.fixture(scope="module")
def pushed(hub):
    from huggingface_hub import HfApi

    owner, bot = hub.add_user("snippets-owner"), hub.add_user("snippets-bot")
    api = HfApi(endpoint=hub.url, token=owner)
    api.create_repo(REPO)
    api.upload_folder(repo_id=REPO, folder_path=tiny_models.minilm_folder())
    result = run_cli(
        "push",
        REPO,
        "--backends",
        "dynamo,onnx,executorch",
        "--variants",
        "onnx:int8",
        "--json",
        env={"HF_TOKEN": bot},
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout)
    assert outcome["action"] == "opened", outcome
    # The real all-MiniLM-L6-v2, every backend validated; the readable table on stderr, one row each,
    # and none of the libraries' known-harmless noise.
    report = outcome["report"]
    assert report["plan"]["architecture"] == "BertModel" and len(report["source"]["sha"]) == 40
    assert [(b["backend"], b["status"]) for b in report["backends"]] == [
        ("dynamo", "ok"),
        ("onnx", "ok"),
        ("executorch", "ok"),
    ]
    assert all(name in result.stderr for name in ("dynamo", "onnx", "executorch", "max abs diff"))
    assert "Failed to load" not in result.stderr and "register_constant()" not in result.stderr
    # int8 of the encoder's fused graph: its attention quantized whole (ORT's QAttention), the one
    # most outlier-prone projection kept in float, within 30 % of the fp32 bytes.
    (int8,) = report["backends"][1]["variants"]
    assert int8["status"] == "ok" and "QAttention" in int8["runtime_ops"] and len(int8["kept_in_float"]) == 1, int8
    assert int8["size_share"] <= 0.30 and int8["quality"]["cosine_mean"] >= 0.99, int8
    return api, outcome


def _record(outcome: dict, loader: str, result: str, difference: float | None = None) -> None:
    """A row of the README's loader table (tests/loader_table.py) for the model `outcome` pushed."""
    plan = outcome["report"]["plan"]
    TABLE.record(plan["architecture"], plan["task"], loader, result, difference)


def _blocks(card: str, language: str = "python") -> list[str]:
    section = card.split(START, 1)[1].split(END, 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def _python_for(code: str) -> str:
    """The interpreter a block runs in: optimum's blocks in the loaders' venvs (optimum-onnx pins a
    transformers below ours, optimum-executorch a release candidate of ours), every other in this one."""
    if "from optimum." not in code:
        return sys.executable
    venv = ".venv-executorch" if "from optimum.executorch" in code else ".venv"
    python = LOADERS / venv / "bin" / "python"
    if not python.exists():
        pytest.fail(f"the ecosystem's Python loaders live in tests/loaders/{venv}: run `make test`, which builds it")
    return str(python)


def _run_python(code: str, home: Path) -> subprocess.CompletedProcess:
    """`code` as a user runs it: its own process, a fresh HF_HOME, no token, this Hub."""
    home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HFEXPORT_"))}
    env.update(HF_ENDPOINT=os.environ["HF_ENDPOINT"], HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1")
    return subprocess.run(
        [_python_for(code), "-c", code], capture_output=True, text=True, timeout=600, env=env, cwd=home.parent
    )


def _run_js(code: str, home: Path) -> subprocess.CompletedProcess:
    """A card's JavaScript block as a user runs it with transformers.js from npm, pointed at this Hub
    (the one thing a prelude sets: transformers.js reads its Hub's address from `env`, not the
    environment) with an empty cache of its own."""
    if not (JS / "node_modules").exists() or shutil.which("node") is None:
        pytest.fail("the card's JavaScript blocks need node and transformers.js: run `make test` (npm ci in tests/js)")
    home.mkdir(parents=True)
    (home / "node_modules").symlink_to(JS / "node_modules")
    prelude = (
        'import { env } from "@huggingface/transformers";\n'
        f"env.remoteHost = {json.dumps(os.environ['HF_ENDPOINT'].rstrip('/') + '/')};\n"
        f"env.allowLocalModels = false;\nenv.cacheDir = {json.dumps(str(home / 'cache'))};\n"
    )
    (home / "card.mjs").write_text(prelude + code)
    return subprocess.run(["node", str(home / "card.mjs")], capture_output=True, text=True, timeout=600, cwd=home)


def _node(script: str, cache: Path, *args: str):
    """`tests/js/<script>` (transformers.js as its users run it) with a fresh cache of its own:
    what it printed on its last line, read as JSON."""
    run = subprocess.run(
        ["node", str(JS / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TRANSFORMERS_JS_CACHE": str(cache)},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _eager(texts: list[str]):
    import torch
    from transformers import AutoModel, AutoTokenizer

    folder = tiny_models.minilm_folder()
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.inference_mode():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    return torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)


@pytest.mark.skipif(
    shutil.which("node") is None or not (JS / "node_modules").exists(),
    reason="transformers.js is installed by `make test` (npm ci in tests/js)",
)
def test_transformers_js_loads_the_pr_from_the_hub_and_matches_eager(pushed, hub, tmp_path):
    """transformers.js fetches `onnx/model.onnx` alone (fp32) or `onnx/model_quantized.onnx` (q8) from
    the PR's revision, as from any Hub repo: fp32 embeddings match eager to cosine >= 0.9999, q8's to 0.98."""
    import torch

    _, outcome = pushed
    revision = f"refs/pr/{outcome['pr_num']}"
    eager = _eager(TEXTS)
    for dtype, floor in (("fp32", 0.9999), ("q8", 0.98)):
        got = torch.tensor(_node("embed.mjs", tmp_path / dtype, hub.url, REPO, revision, dtype, json.dumps(TEXTS)))
        cosine = torch.nn.functional.cosine_similarity(got, eager, dim=-1)
        print(f"transformers.js {dtype}: cosine to eager {[round(float(c), 6) for c in cosine]}")
        assert got.shape == eager.shape and float(cosine.min()) >= floor, (dtype, cosine)
        _record(
            pushed[1],
            f"transformers.js `feature-extraction` (`dtype: '{dtype}'`)",
            "1 − cosine to eager",
            1 - float(cosine.min()),
        )


@dataclasses.dataclass
class _Ran:
    """What `_run_every_block` ran: the card's Python blocks, and what the JavaScript and the
    optimum blocks printed, by (PR or merged, index)."""

    blocks: list[str]
    js: dict
    optimum: dict
    python: dict  # every Python block's stdout, by (PR or merged, index)


def _run_every_block(
    api, repo: str, num: int, tmp_path: Path, printed: str, js_printed: str, on_pr: bool = True
) -> _Ran:
    """Every Python and JavaScript block of the PR's card, run against the PR (with the revision the
    card says to set), then, once merged, exactly as printed. Each must exit 0 and print `printed`
    (`js_printed` for JavaScript; regexes; optimum's blocks print generated text, returned).
    `on_pr=False`: merged only — where the other cards' runs already prove the revision line."""
    card = Path(api.hf_hub_download(repo, "README.md", revision=f"refs/pr/{num}")).read_text()
    blocks, js_blocks = _blocks(card), _blocks(card, "js")
    assert all('"main"  # to try the pull request before it is merged: "refs/pr/<number>"' in b for b in blocks)
    assert all('"main"]; // to try the pull request before it is merged: "refs/pr/<number>"' in b for b in js_blocks)
    js_output: dict = {}
    optimum_output: dict = {}
    python_output: dict = {}

    def run_all(label: str, revision: str) -> None:
        for index, block in enumerate(blocks):
            ran = _run_python(
                block.replace('"main"  #', f'"{revision}"  #', 1), tmp_path / f"{label}-{index}" / "hf-home"
            )
            assert ran.returncode == 0, f"{label} block {index}:\n{block}\n{ran.stderr[-3000:]}"
            python_output[(label, index)] = ran.stdout
            if "from optimum." in block:
                optimum_output[(label, index)] = ran.stdout.strip()
            else:
                assert re.search(printed, ran.stdout), (block, ran.stdout)
        for index, block in enumerate(js_blocks):
            ran = _run_js(block.replace('"main"]; //', f'"{revision}"]; //', 1), tmp_path / f"{label}-js-{index}")
            assert ran.returncode == 0, f"{label} JS block {index}:\n{block}\n{ran.stderr[-3000:]}"
            assert re.search(js_printed, ran.stdout), (block, ran.stdout)
            js_output[(label, index)] = ran.stdout.strip()

    if on_pr:
        run_all("pr", f"refs/pr/{num}")
    api.merge_pull_request(repo, num)
    run_all("merged", "main")
    return _Ran(blocks, js_output, optimum_output, python_output)


def test_every_card_snippet_runs_after_the_merge_as_printed(pushed, tmp_path):
    """Every block of the card — ExportedModel and the runtime alone for each backend, the variant —
    runs in a fresh cache with no token and prints the shapes of a real call on the two sentences
    it tokenizes, merged, exactly as printed (the other cards' blocks also run from their PRs)."""
    api, outcome = pushed
    ran = _run_every_block(api, REPO, outcome["pr_num"], tmp_path, r"\(2, \d+", r"\[ 2, \d+, 384 \]", on_pr=False)
    blocks, js_output = ran.blocks, ran.js
    files = {"onnx/model.onnx", "onnx/model_quantized.onnx", "executorch/xnnpack/model.pte"}
    assert all(any(f'"{f}"' in b for b in blocks) for f in files), blocks
    assert sum("ExportedModel.from_pretrained" in b for b in blocks) == 3
    assert len(js_output) == 1  # transformers.js's feature-extraction pipeline, merged
    card = Path(api.hf_hub_download(REPO, "README.md")).read_text()
    assert "`onnx/model_quantized.onnx` runs ONNX Runtime's own operators (BiasGelu, QAttention, " in card


LLM_REPO = "snippets-owner/tiny-llm"


def _push_with_bot(hub, owner: str, repo: str, folder: Path, backends: str, variants: str, *extra: str) -> tuple:
    """`folder` uploaded by `owner` to `repo`, then `hfexport push` by a bot of its own (`extra`: more
    of its options). Returns the owner's API and the push's JSON outcome."""
    from huggingface_hub import HfApi

    token, bot = hub.add_user(owner), hub.add_user(f"{owner}-bot")
    api = HfApi(endpoint=hub.url, token=token)
    api.create_repo(repo)
    api.upload_folder(repo_id=repo, folder_path=folder)
    result = run_cli(
        "push",
        repo,
        "--backends",
        backends,
        "--variants",
        variants,
        "--json",
        *extra,
        env={"HF_TOKEN": bot},
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return api, json.loads(result.stdout)


@pytest.fixture(scope="module")
def pushed_llm(hub, tmp_path_factory):
    """A decoder LLM with its tokenizer, pushed with every CPU backend and the fp16 ONNX variant.
    Returns the API, the outcome and the model's folder."""
    folder = tiny_models.llama_with_tokenizer(tmp_path_factory.mktemp("model-llama-tokenizer"))
    api, outcome = _push_with_bot(hub, "snippets-owner", LLM_REPO, folder, "dynamo,onnx,executorch", "onnx:fp16")
    return api, outcome, folder


def _eager_continuation(folder: Path, text: str, new_tokens: int = 8) -> list[int]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder)
    prompt = tokenizer([text], return_tensors="pt")
    return model.generate(**prompt, max_new_tokens=new_tokens, do_sample=False)[
        0, prompt["input_ids"].shape[1] :
    ].tolist()


def _eager_text(folder: Path, text: str) -> str:
    """What a decoder LLM's greedy `generate()` writes after `text`, the prompt's tokens included,
    decoded as optimum's card block decodes it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    return tokenizer.decode(tokenizer(text)["input_ids"] + _eager_continuation(folder, text), skip_special_tokens=True)


def test_a_generative_models_card_snippets_run_a_real_prompt(pushed_llm, tmp_path):
    """A decoder LLM's card: the ExportedModel blocks (`.pt2`, `.pte`) run the one decode program on
    a tokenized prompt and print the logits' shape and the next token; its ONNX folder, laid out as
    a decoder with past, runs one step in ONNX Runtime alone (the fp32 graph and the fp16 variant)
    and generates in transformers.js's pipeline the text eager `generate()` writes, with the fp32
    graph and with `dtype: 'fp16'`. PR first, then merged."""
    from transformers import AutoTokenizer

    api, outcome, folder = pushed_llm
    repo = LLM_REPO
    onnx = next(b for b in outcome["report"]["backends"] if b["backend"] == "onnx")
    assert onnx["layout"] == "decoder-with-past" and onnx["programs"] == {"decode": "model.onnx"}
    assert any(c["name"] == "loaders_layout" and c["tokens_equal"] for c in onnx["validation"]["checks"])
    ran = _run_every_block(
        api, repo, outcome["pr_num"], tmp_path, r"\(1, \d+, 128\) next token: |'input_ids'|forward", r"\S"
    )
    blocks, js_output = ran.blocks, ran.js
    # ExportedModel for the .pt2; the ONNX folder is optimum's and transformers.js's layout, the
    # ExecuTorch one its LLM runner's (a word-level tokenizer, which that runner cannot read: said).
    assert sum('model.runners["decode"]' in b for b in blocks) == 1
    assert any('"onnx/model.onnx"' in b for b in blocks) and any(
        "executorch/xnnpack/fp32/model.pte" in b for b in blocks
    )
    card = Path(api.hf_hub_download(repo, "README.md")).read_text()
    assert "Not run in the runner here: ExecuTorch's LLM runner cannot read the repo's tokenizer.json" in card
    # transformers.js's text-generation pipeline, greedy: the text eager generate() writes.
    text = "hfexport validated this file against the original model."
    continuation = AutoTokenizer.from_pretrained(folder).decode(
        _eager_continuation(folder, text), skip_special_tokens=True
    )
    eager = f"{text} {continuation}"  # the pipeline keeps the prompt as given
    assert set(js_output.values()) == {eager}, (js_output, eager)
    _record(outcome, "transformers.js `text-generation`", "eager's text")
    # optimum's ORTModelForCausalLM, as the card prints it: the prompt and eager's continuation;
    # optimum-executorch's ExecuTorchModelForCausalLM (a venv of its own) eager's continuation.
    by_loader = {"ORTModelForCausalLM": set(), "ExecuTorchModelForCausalLM": set()}
    for (_, index), printed in ran.optimum.items():
        by_loader[next(c for c in by_loader if c in blocks[index])].add(printed)
    assert by_loader["ORTModelForCausalLM"] == {_eager_text(folder, text)}, ran.optimum
    assert by_loader["ExecuTorchModelForCausalLM"] == {continuation}, (ran.optimum, continuation)
    assert len(ran.optimum) == 4, ran.optimum  # each on the PR and merged
    _record(outcome, "optimum `ORTModelForCausalLM`", "eager's text")
    # The card lists the fp16 variant with the dtype that picks it; so picked, transformers.js
    # loads `model_fp16.onnx` (a float16 cache) and writes the same text.
    (js,) = _blocks(card, "js")
    assert "`onnx/model_fp16.onnx` (fp16) — transformers.js: `dtype: 'fp16'`" in card
    ran = _run_js(js.replace('dtype: "fp32"', 'dtype: "fp16"'), tmp_path / "js-fp16")
    assert ran.returncode == 0 and ran.stdout.strip() == eager, (ran.stdout, ran.stderr[-2000:])
    _record(outcome, "transformers.js `text-generation` (`dtype: 'fp16'`)", "eager's text")


def _run_loader(home: Path, *args: str, check: bool = True):
    """`tests/loaders/load.py` in the loaders' own venv: a fresh cache, no token, this Hub. Returns
    what it printed, read as JSON (`check=False`: the finished process, whatever its exit)."""
    python = LOADERS / ".venv" / "bin" / "python"
    if not python.exists():
        pytest.fail("the ecosystem's Python loaders live in tests/loaders/.venv: run `make test`, which builds it")
    home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HFEXPORT_"))}
    env.update(HF_ENDPOINT=os.environ["HF_ENDPOINT"], HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1")
    ran = subprocess.run(
        [str(python), str(LOADERS / "load.py"), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=home.parent,
    )
    if not check:
        return ran
    assert ran.returncode == 0, ran.stderr[-3000:]
    return json.loads(ran.stdout.strip().splitlines()[-1])


def test_the_ecosystems_python_loaders_read_the_prs(pushed, pushed_llm, tmp_path):
    """sentence-transformers' ONNX backend reads MiniLM's PR — `onnx/model.onnx` by default, the int8
    variant by its file name — and matches eager (cosine >= 0.9999 fp32, >= 0.98 int8); optimum's
    ORTModelForCausalLM finds the decoder LLM's `onnx/model.onnx` by itself and generates, greedy,
    the tokens eager `generate()` does. Each in a venv of its own (their pins are not ours)."""
    import torch
    from transformers import AutoTokenizer

    _, outcome = pushed
    eager = _eager(TEXTS)
    for file, floor in (("model.onnx", 0.9999), ("model_quantized.onnx", 0.98)):
        got = torch.tensor(
            _run_loader(
                tmp_path / f"st-{file}",
                "sentence-transformers",
                REPO,
                f"refs/pr/{outcome['pr_num']}",
                file,
                json.dumps(TEXTS),
            )
        )
        cosine = torch.nn.functional.cosine_similarity(got, eager, dim=-1)
        print(f"sentence-transformers onnx/{file}: cosine to eager {[round(float(c), 6) for c in cosine]}")
        assert got.shape == eager.shape and float(cosine.min()) >= floor, (file, cosine)
        _record(outcome, f"sentence-transformers (`onnx/{file}`)", "1 − cosine to eager", 1 - float(cosine.min()))

    _, llm, folder = pushed_llm
    text = "hfexport validated this file against the original model."
    ids = AutoTokenizer.from_pretrained(folder)(text)["input_ids"]
    got = _run_loader(
        tmp_path / "optimum", "optimum-causal-lm", LLM_REPO, f"refs/pr/{llm['pr_num']}", json.dumps(ids), "8"
    )
    assert got == _eager_continuation(folder, text), got
    _record(llm, "optimum `ORTModelForCausalLM` (token ids in)", "eager's token ids")


S2S_REPO = "s2s-owner/tiny-t5"


@pytest.fixture(scope="module")
def pushed_t5(hub, tmp_path_factory):
    """An encoder-decoder (T5) with its tokenizer, pushed with dynamo and onnx and ONNX int8.
    Returns the API, the outcome and the model's folder."""
    folder = tiny_models.t5_with_tokenizer(tmp_path_factory.mktemp("model-t5-tokenizer"))
    api, outcome = _push_with_bot(hub, "s2s-owner", S2S_REPO, folder, "dynamo,onnx", "onnx:int8")
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
    ran = _run_every_block(
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
    _record(outcome, "transformers.js `text2text-generation`", "eager's text")
    _record(outcome, "optimum `ORTModelForSeq2SeqLM`", "eager's text")
    prompt = AutoTokenizer.from_pretrained(folder)(text)["input_ids"]
    got = _run_loader(tmp_path / "optimum-s2s", "optimum-seq2seq-lm", S2S_REPO, "main", json.dumps(prompt), "8")
    assert got == ids, (got, ids)
    # The int8 variant of each program, listed with the dtype that picks it; so picked,
    # transformers.js fetches both `_quantized` graphs and generates with them.
    card = Path(api.hf_hub_download(S2S_REPO, "README.md")).read_text()
    assert "transformers.js" in yaml.safe_load(card.split("---\n")[1])["tags"]  # it loads the folder
    assert (
        "`onnx/encoder_model_quantized.onnx`, `onnx/decoder_model_merged_quantized.onnx` (int8) — "
        "transformers.js: `dtype: 'q8'`" in card
    )
    (js,) = _blocks(card, "js")
    ran = _run_js(js.replace('dtype: "fp32"', 'dtype: "q8"'), tmp_path / "js-q8")
    assert ran.returncode == 0 and ran.stdout.strip(), (ran.stdout, ran.stderr[-2000:])
    fetched = {p.name for p in (tmp_path / "js-q8" / "cache").rglob("*.onnx")}
    assert fetched == {"encoder_model_quantized.onnx", "decoder_model_merged_quantized.onnx"}, fetched
    _record(outcome, "transformers.js `text2text-generation` (`dtype: 'q8'`)", "loads both int8 graphs, generates")


@pytest.mark.parametrize(("family", "task"), [("bart", "summarization"), ("marian", "translation")])
def test_transformers_js_summarizes_and_translates_as_eager_generate(hub, family, task, tmp_path):
    """BART (its summarizers' generation config: forced BOS/EOS, no repeated trigrams, a minimum
    length) and Marian (its translators': the pad id banned, forced EOS), each with a tokenizer,
    pushed with ONNX: transformers.js's `summarization` / `translation` pipeline, greedy, reads the
    `encoder_model.onnx` + `decoder_model_merged.onnx` of the PR and, merged, of main, each in a fresh
    cache, and writes the text eager `generate()` writes under the same generation config; with
    `dtype: 'q8'` it reads their int8 twins and generates, and BART's 4-bit weight-only twins with
    `dtype: 'q4'` (plumbing only: random weights, so q4's floors are lifted to publish it)."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    folder = getattr(tiny_models, f"{family}_with_tokenizer")(tmp_path / "model")
    repo = f"s2s-{family}/tiny"
    q4 = family == "bart"
    floors = [f"--min-quality=q4.{f}" for f in ("token_agreement=0", "forced_top1_agreement=0", "logprob_delta_mean=9")]
    api, outcome = _push_with_bot(
        hub, f"s2s-{family}", repo, folder, "onnx", "onnx:int8" + (",onnx:q4" if q4 else ""), *(floors if q4 else ())
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
        got = _node("generate.mjs", cache, hub.url, repo, revision, task, "fp32", text, "8")
        assert got == eager, (revision, got, eager)
    _record(outcome, f"transformers.js `{task}`", "eager's text")
    assert _node("generate.mjs", tmp_path / "js-cache-q8", hub.url, repo, "main", task, "q8", text, "8")
    fetched = {p.name for p in (tmp_path / "js-cache-q8").rglob("*.onnx")}
    assert fetched == {"encoder_model_quantized.onnx", "decoder_model_merged_quantized.onnx"}, fetched
    _record(outcome, f"transformers.js `{task}` (`dtype: 'q8'`)", "loads both int8 graphs, generates")
    if q4:
        assert _node("generate.mjs", tmp_path / "js-cache-q4", hub.url, repo, "main", task, "q4", text, "8")
        fetched = {p.name for p in (tmp_path / "js-cache-q4").rglob("*.onnx")}
        assert fetched == {"encoder_model_q4.onnx", "decoder_model_merged_q4.onnx"}, fetched
        _record(outcome, f"transformers.js `{task}` (`dtype: 'q4'`)", "loads both 4-bit graphs, generates")


@pytest.mark.parametrize("family", ["mistral", "gemma2"])
def test_a_sliding_window_llm_is_published_as_a_decoder_with_past_and_generates_as_eager(hub, family, tmp_path):
    """Mistral (every layer sliding) and Gemma 2 (sliding and full in turn), window 4, pushed with
    ONNX and its int8 variant: the folder is `model.onnx` with keys and values only (the window is
    the graph's mask; a sliding layer's fill level, which the graph only handed back, is gone).
    Every block of the card runs on the PR and merged; transformers.js's text-generation pipeline
    writes eager `generate()`'s text with the fp32 graph, and loads the int8 one with `dtype: 'q8'`.
    optimum's ORTModelForCausalLM generates eager's ids wherever the card says it loads the folder
    (and the card names it nowhere it does not)."""
    from transformers import AutoTokenizer

    folder = getattr(tiny_models, f"{family}_with_tokenizer")(tmp_path / "model")
    repo = f"sliding-{family}/tiny"
    api, outcome = _push_with_bot(hub, f"sliding-{family}", repo, folder, "onnx", "onnx:int8")
    (onnx,) = outcome["report"]["backends"]
    assert onnx["layout"] == "decoder-with-past" and onnx["programs"] == {"decode": "model.onnx"}, onnx
    assert any(c["name"] == "loaders_layout" and c["tokens_equal"] for c in onnx["validation"]["checks"])
    ran = _run_every_block(api, repo, outcome["pr_num"], tmp_path, r"\(1, \d+, 128\)|'input_ids'", r"\S")
    js_output = ran.js
    text = "hfexport validated this file against the original model."
    ids = _eager_continuation(folder, text)
    assert len(set(ids)) >= 3 and len(AutoTokenizer.from_pretrained(folder)(text)["input_ids"]) > 4, ids
    eager = f"{text} {AutoTokenizer.from_pretrained(folder).decode(ids, skip_special_tokens=True)}"
    assert js_output and set(js_output.values()) == {eager}, (js_output, eager)
    _record(outcome, "transformers.js `text-generation`", "eager's text")
    card = Path(api.hf_hub_download(repo, "README.md")).read_text()
    (js,) = _blocks(card, "js")
    q8 = _run_js(js.replace('dtype: "fp32"', 'dtype: "q8"'), tmp_path / "js-q8")
    assert q8.returncode == 0 and q8.stdout.strip(), (q8.stdout, q8.stderr[-2000:])
    assert {p.name for p in (tmp_path / "js-q8" / "cache").rglob("*.onnx")} == {"model_quantized.onnx"}
    _record(outcome, "transformers.js `text-generation` (`dtype: 'q8'`)", "loads the int8 graph, generates")
    prompt = json.dumps(AutoTokenizer.from_pretrained(folder)(text)["input_ids"])
    named = "`ORTModelForCausalLM.from_pretrained(repo)` load this folder" in card
    assert named == bool(ran.optimum)  # its block is on the card where the card names it
    if named:
        assert set(ran.optimum.values()) == {_eager_text(folder, text)}, ran.optimum
        assert _run_loader(tmp_path / "optimum", "optimum-causal-lm", repo, "main", prompt, "8") == ids
        _record(outcome, "optimum `ORTModelForCausalLM`", "eager's text")
    else:
        failed = _run_loader(tmp_path / "optimum", "optimum-causal-lm", repo, "main", prompt, "8", check=False)
        assert failed.returncode != 0, "optimum loads this folder: the card should name it"
        why = re.findall(r"Got invalid dimensions for input: \S+", failed.stderr) or failed.stderr.splitlines()[-1:]
        _record(outcome, "optimum `ORTModelForCausalLM`", f"fails (not on the card): {why[0]}")


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
    api, outcome = _push_with_bot(hub, "asr-owner", repo, folder, "onnx", "onnx:int8")
    (onnx,) = outcome["report"]["backends"]
    assert onnx["layout"] == "encoder-decoder-with-past", onnx["layout"]
    assert any(c["name"] == "loaders_layout" and c["tokens_equal"] for c in onnx["validation"]["checks"])
    ran = _run_every_block(api, repo, outcome["pr_num"], tmp_path, r"\S", r"\S")
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
    _record(outcome, "transformers.js `automatic-speech-recognition`", "eager's text")
    assert len(ran.optimum) == 2 and set(ran.optimum.values()) == {eager()}, ran.optimum
    _record(outcome, "optimum `ORTModelForSpeechSeq2Seq`", "eager's text")
    card = Path(api.hf_hub_download(repo, "README.md")).read_text()
    assert "ORTModelForSpeechSeq2Seq" in card and "transformers.js" in yaml.safe_load(card.split("---\n")[1])["tags"]
    (js,) = _blocks(card, "js")
    q8 = _run_js(js.replace('dtype: "fp32"', 'dtype: "q8"'), tmp_path / "js-q8")
    assert q8.returncode == 0 and q8.stdout.strip(), (q8.stdout, q8.stderr[-2000:])
    fetched = {p.name for p in (tmp_path / "js-q8" / "cache").rglob("*.onnx")}
    assert fetched == {"encoder_model_quantized.onnx", "decoder_model_merged_quantized.onnx"}, fetched
    _record(
        outcome, "transformers.js `automatic-speech-recognition` (`dtype: 'q8'`)", "loads both int8 graphs, transcribes"
    )


_TEAL = ("RGB", (96, 64), "teal")  # the card's image (hfexport.hub.snippets), as PIL makes it
_ZERO_SHOT_LABELS = ["teal", "cat", "dog"]  # the card's candidate labels


def _card_inputs(task: str, folder: Path) -> dict:
    """What the card's Python blocks feed a single-graph head (`hfexport.hub.snippets`' input lines),
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
    api, outcome = _push_with_bot(hub, owner, repo, folder, "onnx", "none")
    assert outcome["report"]["plan"]["task"] == task, outcome["report"]["plan"]
    # Eight cards of one shape: their blocks run once merged, as printed (the PR's revision line is
    # proven by the other cards).
    ran = _run_every_block(api, repo, outcome["pr_num"], tmp_path, r"\(\d+, \d+", r"\S", on_pr=False)
    card = Path(api.hf_hub_download(repo, "README.md")).read_text()
    assert "transformers.js" in yaml.safe_load(card.split("---\n")[1])["tags"]
    (js,) = ran.js.values()
    got, (eager, shapes) = json.loads(js), _eager_head(task, folder)
    loader = f"transformers.js `{task}`"
    if task == "question-answering":
        answer = _run_loader(tmp_path / "qa", "transformers-qa", repo, "main", "What was validated?", TEXTS[0])
        assert got["answer"] == answer and got["answer"] in TEXTS[0], (got, answer)
        _record(outcome, loader, "eager's answer")
    elif task == "token-classification":
        gap = max(
            _largest_score_gap([(e["index"], e["entity"], e["score"]) for e in text], rows)
            for text, rows in zip(got, eager)
        )
        assert gap < 1e-5, gap
        _record(outcome, loader, "eager's labels; score difference", gap)
    elif task == "object-detection":
        assert eager and [r["label"] for r in got] == [r[0] for r in eager], (got, eager)
        for row, (_, box, _) in zip(got, eager):
            assert max(abs(a - b) for a, b in zip(row["box"].values(), box)) <= 1, (row, box)
        gap = max(abs(row["score"] - score) for row, (*_, score) in zip(got, eager))
        assert gap < 1e-5, gap
        _record(outcome, loader, "eager's labels and boxes; score difference", gap)
    elif task == "image-segmentation":
        assert [r["label"] for r in got] == [label for label, _ in eager], (got, eager)
        pixels = _TEAL[1][0] * _TEAL[1][1]
        share = max(abs(r["pixels"] - n) for r, (_, n) in zip(got, eager)) / pixels
        assert share <= 0.01, (got, eager)
        _record(outcome, loader, "eager's labels; share of pixels labelled otherwise", share)
    else:
        gap = _largest_score_gap([(r["label"], r["score"]) for r in got], eager)
        assert gap < 1e-5, gap
        _record(outcome, loader, "eager's labels; score difference", gap)
    cls = TASKS[task].optimum_class
    if cls is None:
        assert not ran.optimum and "optimum" not in card, card
        return
    (printed,) = set(ran.optimum.values())
    assert printed == shapes, (printed, shapes)
    _record(outcome, f"optimum `{cls}`", "eager's outputs (shapes)")


def test_an_image_text_model_is_published_as_transformers_js_reads_it_and_its_class_generates_as_eager(hub, tmp_path):
    """LLaVA with its processor, pushed with ONNX and int8: `vision_encoder.onnx` (→ `image_features`),
    `embed_tokens.onnx` (→ `inputs_embeds`) and `decoder_model_merged.onnx` over embeddings, and each
    one's `_quantized` twin. transformers.js's image-text-to-text class (its 4.3.2 has no pipeline for
    the task), fed the Python processor's ids and pixels for an image and a sentence, generates
    eager `generate()`'s tokens from the PR, with the fp32 graphs and with `dtype: 'q8'`, and again from
    main once merged, each in a fresh cache."""
    import torch
    from PIL import Image
    from transformers import AutoProcessor, LlavaForConditionalGeneration

    folder = tiny_models.llava(tmp_path / "model")
    repo = "vlm-owner/tiny-llava"
    api, outcome = _push_with_bot(hub, "vlm-owner", repo, folder, "onnx", "onnx:int8")
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
    revisions = [f"refs/pr/{outcome['pr_num']}"] * 2 + ["main"] * 2
    for index, (revision, dtype) in enumerate(zip(revisions, ("fp32", "q8", "fp32", "q8"))):
        if index == 2:
            card = Path(api.hf_hub_download(repo, "README.md", revision=revisions[0])).read_text()
            assert "`AutoModelForImageTextToText`" in card and "onnx/decoder_model_merged_quantized.onnx" in card, card
            api.merge_pull_request(repo, outcome["pr_num"])
        got = _node("image_text.mjs", tmp_path / f"js-{index}", hub.url, repo, revision, dtype, json.dumps(feed), "8")
        assert got == [eager], (revision, dtype, got, eager)
        fetched = {p.name for p in (tmp_path / f"js-{index}").rglob("*.onnx")}
        suffix = "_quantized" if dtype == "q8" else ""
        assert fetched == {f"{s}{suffix}.onnx" for s in ("vision_encoder", "embed_tokens", "decoder_model_merged")}
        _record(outcome, f"transformers.js `AutoModelForImageTextToText` (`dtype: '{dtype}'`)", "eager's tokens")


def _runner_wrote(stdout: str) -> str:
    """The text ExecuTorch's LLM runner printed, without the stats line it ends with."""
    return stdout.split("\nPyTorchObserver", 1)[0].rstrip("\n")


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_a_decoder_llms_executorch_program_writes_eager_text_in_executorchs_own_llm_runner(hub, family, tmp_path):
    """A Llama and a Qwen2 over a byte-level BPE tokenizer, pushed with ExecuTorch (the Llama with
    8da4w too): the folder holds `fp32/model.pte` as ExecuTorch's LLM runner reads it (no exporter
    manifest), the 8da4w program in a folder of its own, smaller, needing the runtime's quantized
    kernels. From the PR in a fresh cache, the card's runner block — `TextLLMRunner` with the repo's
    `tokenizer.json`, greedy — writes eager `generate()`'s text, and its optimum-executorch block
    (`ExecuTorchModelForCausalLM`, in a venv of its own) eager's tokens; the Llama's every block runs
    again once merged, and the 8da4w program runs in both loaders. (Its figures on random weights say
    nothing of quality, so its floor is lifted: this test is about the loaders taking it.)"""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tiny_models.decoder_with_byte_level_tokenizer(tmp_path / "model", family)
    owner = f"runner-{family}"
    repo = f"{owner}/tiny"
    variants = ("8da4w,int8", "--min-quality", "8da4w.token_agreement=0") if family == "llama" else ("none",)
    api, outcome = _push_with_bot(hub, owner, repo, folder, "executorch", *variants)
    (b,) = outcome["report"]["backends"]
    pr = f"refs/pr/{outcome['pr_num']}"
    assert b["layout"] == "executorch-llm-runner" and b["programs"] == {"decode": "fp32/model.pte"}, b
    checks = {c["name"]: c for c in b["validation"]["checks"]}
    assert checks["llm_runner"]["tokens_equal"] is True and checks["generation_other_shape"]["tokens_equal"] is True

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder).eval()
    text = "hfexport validated this file against the original model."
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        new = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False)
    eager = tokenizer.decode(new[0, ids.shape[1] :], skip_special_tokens=True)
    assert len(set(new[0, ids.shape[1] :].tolist())) >= 3, new  # varied tokens, not one repeated id

    card = Path(api.hf_hub_download(repo, "README.md", revision=pr)).read_text()
    (runner,) = [block for block in _blocks(card) if "TextLLMRunner" in block]
    assert f"--seq_len {b['max_seq_len']}" in card
    on_pr = runner.replace('"main"  #', f'"{pr}"  #', 1)
    loader = "ExecuTorch `TextLLMRunner` (`fp32/model.pte`, `tokenizer.json`)"
    ran = _run_python(on_pr, tmp_path / "runner" / "hf-home")  # from the PR, in a fresh cache
    assert ran.returncode == 0 and _runner_wrote(ran.stdout) == eager, (ran.stdout, eager, ran.stderr[-2000:])
    (optimum,) = [block for block in _blocks(card) if "ExecuTorchModelForCausalLM" in block]
    optimum_on_pr = optimum.replace('"main"  #', f'"{pr}"  #', 1)
    ran = _run_python(optimum_on_pr, tmp_path / "optimum-executorch" / "hf-home")
    assert ran.returncode == 0 and ran.stdout.strip() == eager, (ran.stdout, eager, ran.stderr[-2000:])
    _record(outcome, "optimum-executorch `ExecuTorchModelForCausalLM` (`fp32/`)", "eager's text")
    if family != "llama":
        _record(outcome, loader, "eager's text")
        return

    # 8da4w: int4 grouped weights and int8 dynamic activations on the linears (torchao, lowered by
    # XNNPACK), an int8 embedding table looked up by the runtime's quantized kernel, which a program
    # registers by importing it (the card says so) or cannot run. ExecuTorch's int8 (PT2E) has no
    # generation support: reported skipped, not silently dropped.
    variant, int8 = b["variants"]
    assert int8["kind"] == "int8" and int8["status"] == "skipped" and "generation" in int8["error"], int8
    assert variant["status"] == "ok" and variant["file"] == "8da4w/model.pte", variant
    assert set(variant["quality"]) == {"token_agreement", "forced_top1_agreement", "logprob_delta_mean"}
    assert variant["runtime_ops"] == ["quantized_decomposed::embedding_byte"], variant
    sizes = {f["path"]: f["size"] for f in b["files"]}
    assert set(sizes) == {"fp32/model.pte", "8da4w/model.pte", "config.json", "generation_config.json"}
    assert sizes["8da4w/model.pte"] == variant["size"] < sizes["fp32/model.pte"]
    assert "executorch/xnnpack/8da4w/model.pte" in card and "executorch.kernels.quantized" in card
    quantized = on_pr.replace("executorch/xnnpack/fp32/model.pte", "executorch/xnnpack/8da4w/model.pte")
    for registers, runs in (("", False), ("import executorch.kernels.quantized\n", True)):
        ran = _run_python(registers + quantized, tmp_path / f"8da4w-{runs}" / "hf-home")
        assert (ran.returncode == 0 and "PyTorchObserver" in ran.stdout) == runs, ran.stderr[-3000:]
    _record(outcome, "ExecuTorch `TextLLMRunner` (`8da4w/model.pte`)", "generates")
    # optimum-executorch registers the quantized kernels itself: the variant's folder as `subfolder`.
    ran = _run_python(optimum_on_pr.replace("/fp32", "/8da4w", 1), tmp_path / "optimum-8da4w" / "hf-home")
    assert ran.returncode == 0 and ran.stdout.endswith("\n"), ran.stderr[-3000:]
    _record(outcome, "optimum-executorch `ExecuTorchModelForCausalLM` (`8da4w/`)", "generates")

    # Every block once merged, as printed (the runner's already ran from the PR, above).
    ran = _run_every_block(api, repo, outcome["pr_num"], tmp_path, r"next token: |PyTorchObserver", r"\S", on_pr=False)
    written = {_runner_wrote(out) for (_, index), out in ran.python.items() if "TextLLMRunner" in ran.blocks[index]}
    assert written == {eager}, (written, eager)
    assert set(ran.optimum.values()) == {eager}, (ran.optimum, eager)
    _record(outcome, loader, "eager's text")


def test_a_trained_llms_default_push_publishes_weight_only_files_its_loaders_run(hub, tmp_path):
    """A trained decoder LLM (`trained_lm.py`: real, peaked distributions), pushed with the default
    variants and q4f16: the PR carries the weight-only files — `model_w8.onnx` (8-bit blocks, its
    tied embedding table and head stored once), `model_q4.onnx`, `model_q4f16.onnx` — each judged on
    teacher-forced top-1 as eager too, and none of dynamic int8 (not a default for generation: on
    this model it misses its thresholds). transformers.js's `text-generation` pipeline loads the q4
    and q4f16 files by `dtype` and generates; optimum's `ORTModelForCausalLM` loads the w8 file by
    the `file_name` the card gives and writes eager's text."""
    import trained_lm

    folder = trained_lm.trained_llama(tmp_path / "model")
    repo = "trained-owner/tiny-trained"
    api, outcome = _push_with_bot(hub, "trained-owner", repo, folder, "onnx", "default,q4f16")
    (b,) = outcome["report"]["backends"]
    variants = {v["kind"]: v for v in b["variants"]}
    assert list(variants) == ["w8", "q4", "q4f16"], variants
    for kind, v in variants.items():
        assert v["status"] == "ok" and v["file"] == f"model_{kind}.onnx", v
        assert v["runtime_ops"] == ["GatherBlockQuantized", "MatMulNBits"], v  # the tied table: one lookup
        assert {"token_agreement", "forced_top1_agreement", "logprob_delta_mean"} <= set(v["quality"])
    w8, q4 = variants["w8"], variants["q4"]
    assert w8["quality"]["forced_top1_agreement"] >= 0.98 and w8["quality"]["logprob_delta_mean"] <= 0.05, w8
    # Issue 25's goals, met on this 1 M-parameter model once the exporter's per-node debug records
    # (0.48 MB of its 4.3 MB graph) are left out of every published file: measured 29.3 % and 18.7 %.
    assert w8["size_share"] <= 0.30 and q4["size_share"] <= 0.20, (q4, w8)
    assert q4["quality"]["forced_top1_agreement"] >= 0.85, q4
    pr = f"refs/pr/{outcome['pr_num']}"
    files = set(api.list_repo_files(repo, revision=pr))
    assert {f"onnx/model_{k}.onnx" for k in variants} <= files and "onnx/model_quantized.onnx" not in files

    card = Path(api.hf_hub_download(repo, "README.md", revision=pr)).read_text()
    text = "hfexport validated this file against the original model."
    (js,) = _blocks(card, "js")
    for dtype in ("q4", "q4f16"):
        assert f"`onnx/model_{dtype}.onnx` ({dtype}) — transformers.js: `dtype: '{dtype}'`" in card
        on_pr = js.replace('"main"]; //', f'"{pr}"]; //', 1).replace('dtype: "fp32"', f'dtype: "{dtype}"')
        ran = _run_js(on_pr, tmp_path / f"js-{dtype}")
        written = ran.stdout.strip()
        assert ran.returncode == 0 and written.startswith(text) and len(written) > len(text), ran.stderr[-2000:]
        _record(outcome, f"transformers.js `text-generation` (`dtype: '{dtype}'`)", "generates")
    call = 'ORTModelForCausalLM.from_pretrained(repo, file_name="model_w8.onnx")'
    assert f"`onnx/model_w8.onnx` (w8) — optimum: `{call}`" in card
    assert "`onnx/model_w8.onnx` runs ONNX Runtime's own operators (GatherBlockQuantized, MatMulNBits)" in card
    (optimum,) = [block for block in _blocks(card) if "ORTModelForCausalLM" in block]
    w8_block = optimum.replace('"main"  #', f'"{pr}"  #', 1).replace(
        "from_pretrained(repo, revision=revision)",
        'from_pretrained(repo, file_name="model_w8.onnx", revision=revision)',
    )
    ran = _run_python(w8_block, tmp_path / "optimum-w8" / "hf-home")
    assert ran.returncode == 0 and ran.stdout.strip() == _eager_text(folder, text), (ran.stdout, ran.stderr[-2000:])
    _record(outcome, 'optimum `ORTModelForCausalLM` (`file_name="model_w8.onnx"`)', "eager's text")


def test_a_graph_past_2_gb_is_published_as_onnx_data_that_its_loaders_read(hub, tmp_path):
    """A Llama of 587 M random parameters (2.35 GB in fp32, past protobuf's 2 GiB), uploaded in
    three safetensors shards and pushed to ONNX: the worker's peak stays within 2.5x its fp32
    weights (its eager model is gone before ONNX Runtime loads the graph); the PR carries the graph
    as optimum and transformers.js name one past 2 GB — `model.onnx` (the graph alone) and
    `model.onnx_data` (the weights) — and, merged, every block of the card runs as printed: ONNX
    Runtime alone (the data downloaded beside the graph), optimum's `ORTModelForCausalLM` and
    transformers.js's pipeline (told `use_external_data_format`) each writing eager's text."""
    from transformers import AutoTokenizer

    folder = tiny_models.large_llama_with_tokenizer(tmp_path / "model")
    assert len(list(folder.glob("model-*-of-00003.safetensors"))) == 3
    weights = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    repo = "large-owner/llama-past-2gb"
    api, outcome = _push_with_bot(hub, "large-owner", repo, folder, "onnx", "none")
    (b,) = outcome["report"]["backends"]
    assert b["status"] == "ok" and b["layout"] == "decoder-with-past", b["error"]
    sizes = {f["path"]: f["size"] for f in b["files"]}
    assert sizes["model.onnx_data"] > 2**31 and sizes["model.onnx"] < 2**20, sizes
    # Issue 26's goal: measured 3.12 GB at peak here (1.33x), 7.7 GB (5.3x) on a 362 M model before.
    assert b["peak_rss_mb"] * 2**20 <= 2.5 * weights, (b["peak_rss_mb"], b["stage_peaks_mb"], weights)
    pr_files = set(api.list_repo_files(repo, revision=f"refs/pr/{outcome['pr_num']}"))
    assert {"onnx/model.onnx", "onnx/model.onnx_data"} <= pr_files, pr_files

    ran = _run_every_block(api, repo, outcome["pr_num"], tmp_path, r"next token: ", r"\S", on_pr=False)
    assert any('"onnx/model.onnx_data"' in block for block in ran.blocks), ran.blocks
    text = "hfexport validated this file against the original model."
    tokenizer, new = AutoTokenizer.from_pretrained(folder), _eager_continuation(folder, text)
    continuation = tokenizer.decode(new, skip_special_tokens=True)
    assert set(ran.js.values()) == {f"{text} {continuation}"}, ran.js
    eager_text = tokenizer.decode(tokenizer(text)["input_ids"] + new, skip_special_tokens=True)  # as `_eager_text`
    assert set(ran.optimum.values()) == {eager_text}, ran.optimum
    _record(outcome, "transformers.js `text-generation` (past 2 GB: `model.onnx_data`)", "eager's text")
    _record(outcome, "optimum `ORTModelForCausalLM` (past 2 GB: `model.onnx_data`)", "eager's text")

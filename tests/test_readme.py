"""README.md: its quickstart runs as printed (against the local Hub), and a fresh clone's set-up is
its two commands."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import tiny_models

README = Path(__file__).parent.parent / "README.md"


def _block(heading: str) -> list[str]:
    """The command lines of the first bash block under `heading`."""
    section = README.read_text().split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block is not None, f"no bash block under {heading!r}"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_quickstart_runs_as_printed_and_opens_the_pr(hub, tmp_path):
    """Every quickstart line after the install, as printed, in a fresh folder, against the local Hub
    holding `org/my-model`: the export, loading it, the dry run, then the PR."""
    from huggingface_hub import HfApi

    token = hub.add_user("org")
    api = HfApi(endpoint=hub.url, token=token)
    api.create_repo("org/my-model")
    model = tiny_models.bert_head_with_tokenizer(tmp_path / "model", "BertForSequenceClassification")
    api.upload_folder(repo_id="org/my-model", folder_path=model)
    lines = _block("Quickstart")
    assert lines[0].startswith("pip install ") and len(lines) >= 4, lines  # the install: this environment
    work = tmp_path / "fresh"
    work.mkdir()
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # `python`, `hfexport`: the installed ones
    env = {**os.environ, "PATH": path, "HF_TOKEN": token, "HF_HOME": str(tmp_path / "hf-home")}
    for line in lines[1:]:
        ran = subprocess.run(["bash", "-e", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=900)
        assert ran.returncode == 0, f"{line}\n{ran.stdout[-2000:]}\n{ran.stderr[-3000:]}"
    assert (work / "hfexport-out" / "my-model" / "onnx").is_dir()
    (pr,) = [d for d in api.get_repo_discussions("org/my-model") if d.is_pull_request]
    assert pr.title.startswith("Add torch.export (.pt2) and ONNX exports"), pr.title


def test_a_fresh_clone_is_set_up_by_exactly_two_commands_and_the_readme_stays_short():
    """After the quickstart: the demo and the tests, nothing else; reference lives in docs/."""
    commands = [line.split("#", 1)[0].strip() for line in _block("Set up this repository")]
    assert commands == ["make demo", "make test"], commands
    assert "make test" in (README.parent / ".ci" / "run").read_text()
    assert len(README.read_bytes()) < 12_000
    for link in re.findall(r"\]\((docs/[^)#]+)\)", README.read_text()):
        assert (README.parent / link).exists(), link

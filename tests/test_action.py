"""The GitHub Action and the container: the entrypoint run as a process under a simulated GitHub
Actions environment against the local Hub, and the Dockerfile / workflows linted."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
# Console scripts of this environment (hfexport, hadolint, actionlint), whether or not it is activated.
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = BIN / name
    assert path.exists(), f"{name} is missing from {BIN}: pip install -e '.[test]'"
    return str(path)


def _run_action(
    tmp_path: Path, inputs: dict[str, str], extra_env: dict | None = None
) -> tuple[subprocess.CompletedProcess, dict, str]:
    """`hfexport github-action` (what the image runs for action.yml) with GitHub's environment."""
    output, summary, workspace = tmp_path / "output", tmp_path / "summary.md", tmp_path / "workspace"
    workspace.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "GITHUB_ACTIONS": "true",
        "GITHUB_OUTPUT": str(output),
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_WORKSPACE": str(workspace),
        **{f"INPUT_{k.upper()}": v for k, v in inputs.items()},
        **(extra_env or {}),
    }
    env.pop("HF_TOKEN", None)
    process = subprocess.run(
        [sys.executable, "-m", "hfexport", "github-action"], capture_output=True, text=True, env=env, timeout=1800
    )
    written = output.read_text() if output.exists() else ""
    outputs = {
        name: value for name, _, value in re.findall(r"^([\w-]+)<<(__HFEXPORT_\w+__)\n(.*?)\n\2$", written, re.M | re.S)
    }
    return process, outputs, summary.read_text() if summary.exists() else ""


@pytest.fixture(scope="module")
def action_repo(hub, tmp_path_factory):
    import tiny_models
    from huggingface_hub import HfApi

    owner, bot = hub.add_user("alice-action"), hub.add_user("action-bot")
    folder = tiny_models.bert(tmp_path_factory.mktemp("action") / "bert")
    api = HfApi(endpoint=hub.url, token=owner)
    api.create_repo("alice-action/tiny")
    api.upload_folder(repo_id="alice-action/tiny", folder_path=folder)
    return "alice-action/tiny", bot


def test_action_outputs_summary_and_masking(action_repo, tmp_path):
    repo, token = action_repo
    process, outputs, summary = _run_action(tmp_path, {"repo-id": repo, "hf-token": token, "backends": "dynamo,onnx"})
    assert process.returncode == 0, process.stderr[-3000:]
    lines = process.stdout.splitlines()
    assert lines[0] == f"::add-mask::{token}"  # masked before anything else is printed
    assert token not in "\n".join(lines[1:]) and token not in process.stderr
    assert outputs["status"] == "opened" and outputs["pr-url"].endswith("/discussions/1")
    report = json.loads(Path(outputs["report-path"]).read_text())
    assert Path(outputs["report-path"]).parent == tmp_path / "workspace" and report["ok"] is True
    assert f"### hfexport: {repo}" in summary and "| onnx | ok |" in summary and outputs["pr-url"] in summary
    # Rerun: same sha and plan, nothing to do, and the Action says so.
    again, outputs, _ = _run_action(tmp_path, {"repo-id": repo, "hf-token": token, "backends": "dynamo,onnx"})
    assert again.returncode == 0 and outputs["status"] == "unchanged"


def test_action_annotates_failed_backends(action_repo, tmp_path):
    repo, token = action_repo
    # Another plan than the PR holds (executorch-cuda is skipped without a GPU), so there is work to do.
    inputs = {"repo-id": repo, "hf-token": token, "backends": "dynamo,onnx,executorch-cuda", "dry-run": "true"}
    process, outputs, _ = _run_action(tmp_path, inputs, {"HFEXPORT_FAULT": "onnx:crash"})
    assert process.returncode == 1, process.stderr[-2000:]
    assert re.search(r"^::error title=hfexport onnx::crashed: .*SIGKILL", process.stdout, re.M), process.stdout
    assert outputs["status"] == "dry-run"
    tolerant, _, _ = _run_action(
        tmp_path, {**inputs, "fail-on-validation-error": "false"}, {"HFEXPORT_FAULT": "onnx:crash"}
    )
    assert tolerant.returncode == 0


def test_action_reports_bad_input_as_an_error(tmp_path):
    process, outputs, _ = _run_action(tmp_path, {"repo-id": "", "hf-token": "x"})
    assert process.returncode == 2 and "::error title=hfexport::input 'repo-id' is required" in process.stdout
    assert outputs["status"] == "error"


@pytest.mark.parametrize(
    ("inputs", "said"),
    [
        ({"variants": "int4"}, "Unknown variant 'int4'"),
        ({"min-quality": "int8.cosine=1"}, "Cannot read the quality threshold"),
    ],
)
def test_action_refuses_bad_variant_inputs_before_touching_the_hub(tmp_path, inputs, said):
    process, outputs, _ = _run_action(
        tmp_path,
        {"repo-id": "nobody-here/none", "hf-token": "hf_x", **inputs},
        extra_env={"HF_ENDPOINT": "http://127.0.0.1:9"},
    )  # no Hub there
    assert process.returncode == 2, process.stderr[-2000:]
    assert said in process.stderr and "fix:" in process.stderr and outputs["status"] == "error"


@pytest.mark.parametrize("repo_id", ["--help", "/etc", "../../x"])
def test_action_reads_a_hostile_repo_input_as_a_repo_id_and_refuses_it(tmp_path, repo_id):
    process, outputs, _ = _run_action(tmp_path, {"repo-id": repo_id, "hf-token": "hf_x"})
    assert process.returncode == 2, process.stderr[-2000:]
    assert "is not a Hub repo id" in process.stdout and outputs["status"] == "error"
    assert repo_id not in process.stdout + process.stderr  # named, never echoed


INJECTED = "::set-output name=pr-url::https://attacker.example/x"


@pytest.mark.parametrize(
    "inputs",
    [
        pytest.param({"repo-id": f"alice/model\n{INJECTED}"}, id="repo-id-newline"),
        pytest.param({"repo-id": f"alice/model\r{INJECTED}"}, id="repo-id-carriage-return"),
        pytest.param({"repo-id": f"alice/{INJECTED}"}, id="repo-id-colons"),
        pytest.param({"repo-id": "alice/model", "backends": f"dynamo\n{INJECTED}"}, id="backends-newline"),
        pytest.param({"repo-id": "alice/model", "revision": f"main\n{INJECTED}"}, id="revision-newline"),
        pytest.param({"repo-id": "alice/model", "hf-token": f"hf_x\n{INJECTED}"}, id="token-newline"),
    ],
)
def test_an_input_that_would_inject_a_workflow_command_is_refused_before_anything_is_printed(tmp_path, inputs):
    process, outputs, summary = _run_action(
        tmp_path, {"hf-token": "hf_x", **inputs}, extra_env={"HF_ENDPOINT": "http://127.0.0.1:9"}
    )
    assert process.returncode == 2, process.stdout + process.stderr[-2000:]
    commands = [line for line in process.stdout.splitlines() if line.startswith("::")]
    assert len(commands) == 1 and commands[0].startswith("::error title=hfexport::input '"), process.stdout
    assert (
        "set-output" not in process.stdout + process.stderr
        and "attacker" not in process.stdout + process.stderr + summary
    )
    assert outputs == {"status": "error"}


def test_the_report_path_holds_the_report_of_the_repo_and_commit_published(hub, tmp_path, action_repo):
    """Two repos with the same weights: the second run's exports come from the cache the first
    filled, and its `report-path` names the second repo and its commit, not the first."""
    import tiny_models
    from huggingface_hub import HfApi

    _, token = action_repo
    owner = HfApi(endpoint=hub.url, token=hub.add_user("alice-twins"))
    folder = tiny_models.bert(tmp_path / "twin", seed=61)
    shas = {}
    for repo in ("alice-twins/first", "alice-twins/second"):
        owner.create_repo(repo)
        owner.upload_folder(repo_id=repo, folder_path=folder)
        shas[repo] = owner.model_info(repo).sha
        (tmp_path / repo).mkdir(parents=True)
        process, outputs, _ = _run_action(tmp_path / repo, {"repo-id": repo, "hf-token": token, "backends": "dynamo"})
        assert process.returncode == 0 and outputs["status"] == "opened", process.stderr[-2000:]
        report = json.loads(Path(outputs["report-path"]).read_text())
        assert (report["source"]["ref"], report["source"]["sha"]) == (repo, shas[repo]), report["source"]
    assert "reusing the cached exports" in process.stderr  # the second came from the first's cache


def _processed_commands(log: str) -> list[str]:
    """The workflow commands GitHub's runner would act on in `log` (stdout and stderr as one
    stream): lines starting with `::`, except between `::stop-commands::TOKEN` and `::TOKEN::`."""
    commands, resume = [], None
    for line in log.splitlines():
        if resume is not None:
            if line == f"::{resume}::":
                resume = None
            continue
        if line.startswith("::stop-commands::"):
            resume = line.removeprefix("::stop-commands::")
        elif line.startswith("::"):
            commands.append(line)
    return commands


@pytest.mark.parametrize("name", ["backends", "variants"])
def test_no_input_text_starts_a_workflow_command_line_however_messages_wrap(tmp_path, name):
    """An input whose text, quoted in an error wrapped at the log's 80 columns, would start a line
    with `::warning::`: no command the runner acts on holds it."""
    process = subprocess.run(
        [sys.executable, "-m", "hfexport", "github-action"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "GITHUB_ACTIONS": "true",
            "COLUMNS": "80",
            "HF_ENDPOINT": "http://127.0.0.1:9",
            "INPUT_REPO-ID": "alice/model",
            "INPUT_HF-TOKEN": "hf_x",
            f"INPUT_{name.upper()}": "a" * 50 + " ::warning::injected",
        },
    )
    assert process.returncode == 2, process.stdout[-2000:]
    assert re.search(r"^::warning::injected", process.stdout, re.M)  # the wrap does happen
    commands = _processed_commands(process.stdout)
    # Only the entrypoint's own commands: an input's text may be quoted inside their (escaped) data.
    assert commands and all(c.startswith(("::add-mask::", "::group::", "::endgroup::", "::error ")) for c in commands)


def test_action_inputs_are_all_used():
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    source = (ROOT / "action" / "entrypoint.py").read_text()
    for name in action["inputs"]:
        assert f'"{name}"' in source, f"input {name} is declared but never read"
    assert set(action["outputs"]) == {"pr-url", "repo-url", "status", "report-path"}
    for name in action["outputs"]:
        assert f'_set_output("{name}"' in source
    assert action["runs"]["using"] == "docker" and action["runs"]["args"] == ["github-action"]


def test_container_entrypoint_as_a_plain_process():
    """The image's ENTRYPOINT is `hfexport`; run it as the container would (no args: CMD --help)."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'ENTRYPOINT ["hfexport"]' in dockerfile and 'CMD ["--help"]' in dockerfile
    result = subprocess.run([_tool("hfexport"), "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "push" in result.stdout and "serve" in result.stdout


def test_dockerfile_pins_come_from_pyproject_and_model_code_runs_as_the_worker_user():
    dockerfile = (ROOT / "Dockerfile").read_text()
    installs = [line for line in dockerfile.splitlines() if "pip install" in line]
    assert installs and all("/opt/hfexport" in line and "==" not in line for line in installs)
    assert re.search(r"^FROM .* AS cpu$", dockerfile, re.M) and re.search(r"^FROM .* AS cuda$", dockerfile, re.M)
    # The default target (the last stage) is the CPU image.
    stages = re.split(r"^FROM ", dockerfile, flags=re.M)[1:]
    assert stages[-1].startswith("base AS cpu")
    # hfexport runs as root, as GitHub requires of Docker actions; the repo's code runs as a user
    # that exists in the image, reading models from a cache outside root's private home.
    assert not re.search(r"^USER ", dockerfile, re.M)
    worker = re.search(r"HFEXPORT_WORKER_USER=(\S+)", dockerfile).group(1)
    assert re.search(rf"useradd .*\b{re.escape(worker)}\b", dockerfile)
    hf_home = re.search(r"HF_HOME=(\S+)", dockerfile).group(1)
    assert not hf_home.startswith("/root") and re.search(rf"install -d -m 0755 .*{re.escape(hf_home)}\b", dockerfile)


def test_hadolint_passes():
    result = subprocess.run([_tool("hadolint"), str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_passes():
    workflows = sorted(
        str(p) for p in [*(ROOT / ".github" / "workflows").glob("*.yml"), *(ROOT / "docs" / "workflows").glob("*.yml")]
    )
    assert len(workflows) >= 2
    result = subprocess.run(
        [_tool("actionlint"), "-config-file", str(ROOT / ".github" / "actionlint.yaml"), *workflows],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    example = yaml.safe_load((ROOT / "docs" / "workflows" / "hfexport.yml").read_text())
    triggers = example[True]  # YAML 1.1 reads the key `on` as True
    assert {"schedule", "workflow_dispatch", "repository_dispatch"} <= set(triggers)
    assert "--gpus all" in example["jobs"]["gpu"]["container"]["options"]
    # Both jobs fill the one PR at the same time (publishing merges concurrent runners).
    assert "needs" not in example["jobs"]["gpu"]


@pytest.mark.parametrize("dry_run", ["true", "false"])
def test_the_example_gpu_job_exports_only_the_gpu_backend_and_honours_dry_run(tmp_path, dry_run):
    """The GPU job's script, run by bash with a stand-in `hfexport` that records its arguments."""
    example = yaml.safe_load((ROOT / "docs" / "workflows" / "hfexport.yml").read_text())
    step = example["jobs"]["gpu"]["steps"][0]
    fake = tmp_path / "bin" / "hfexport"
    fake.parent.mkdir()
    fake.write_text('#!/usr/bin/env bash\necho "$*" >> "$CALLS"\necho "{}"\n')
    fake.chmod(0o755)
    env = {
        "PATH": f"{fake.parent}:{os.environ['PATH']}",
        "CALLS": str(tmp_path / "calls"),
        "REPO_ID": "org/model",
        "HF_TOKEN": "x",
        "DRY_RUN": dry_run,
    }
    assert "${{ inputs.dry-run" in step["env"]["DRY_RUN"]
    result = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    push = [c for c in calls if c.startswith("push ")]
    assert len(push) == 1 and "--backends executorch-cuda " in push[0] + " "
    assert ("--dry-run" in push[0]) == (dry_run == "true")


def test_a_failed_push_annotates_its_cause_and_the_fix_in_the_actions_own_terms(hub, tmp_path, action_repo):
    """A repo with pickled weights only, and no `allow-pickle`: the `::error::` annotation and the
    job summary carry the cause and the fix, naming this Action's input (not a CLI flag); with the
    input set, the export runs."""
    import tiny_models
    import torch
    from huggingface_hub import HfApi
    from transformers import BertForSequenceClassification

    _, token = action_repo
    owner = HfApi(endpoint=hub.url, token=hub.add_user("alice-pickles"))
    folder = tiny_models.bert(tmp_path / "bert", seed=101)
    (tmp_path / "pickled").mkdir()
    (tmp_path / "pickled" / "config.json").write_text((folder / "config.json").read_text())
    model = BertForSequenceClassification.from_pretrained(folder)
    torch.save(model.state_dict(), tmp_path / "pickled" / "pytorch_model.bin")  # transformers 5 saves safetensors only
    owner.create_repo("alice-pickles/tiny")
    owner.upload_folder(repo_id="alice-pickles/tiny", folder_path=tmp_path / "pickled")
    inputs = {"repo-id": "alice-pickles/tiny", "hf-token": token, "backends": "dynamo", "dry-run": "true"}
    process, outputs, summary = _run_action(tmp_path, inputs)
    assert process.returncode == 2 and outputs["status"] == "error", process.stderr[-3000:]
    (annotation,) = [line for line in process.stdout.splitlines() if line.startswith("::error")]
    assert "pickled weights only" in annotation and "the `allow-pickle` input" in annotation, annotation
    assert "--allow-pickle" not in annotation and "see the log" not in annotation
    assert "**Fix:**" in summary and "allow-pickle" in summary, summary
    allowed, outputs, _ = _run_action(tmp_path, {**inputs, "allow-pickle": "true"})
    assert allowed.returncode == 0 and outputs["status"] == "dry-run", allowed.stderr[-2000:]


def test_the_action_pulls_the_released_image_and_the_example_fails_until_it_names_a_model(tmp_path):
    """action.yml pulls the image the release workflow pushes for this version (no multi-GB build
    on every run); the example workflow names no one's model: unedited, each job stops with an
    error saying what to edit (actionlint checks the release workflow with the others)."""
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["image"] == f"docker://ghcr.io/hfexport/hfexport:{version}"
    release = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    pushed = release["jobs"]["image"]["steps"][-1]["with"]
    assert pushed["push"] is True and pushed["tags"].startswith("ghcr.io/hfexport/hfexport:${{ env.VERSION }}")
    example = yaml.safe_load((ROOT / "docs" / "workflows" / "hfexport.yml").read_text())
    assert "YOUR-ORG/YOUR-MODEL" in example["env"]["REPO_ID"] and "MiniLM" not in str(example)
    guard = example["jobs"]["cpu"]["steps"][0]
    assert guard["if"] == "env.REPO_ID == 'YOUR-ORG/YOUR-MODEL'"
    stopped = subprocess.run(["bash", "-e", "-c", guard["run"]], capture_output=True, text=True)
    assert stopped.returncode == 1 and "::error title=hfexport::Edit REPO_ID" in stopped.stdout
    gpu = example["jobs"]["gpu"]["steps"][0]["run"]
    stopped = subprocess.run(
        ["bash", "-e", "-c", gpu], capture_output=True, text=True, env={**os.environ, "REPO_ID": "YOUR-ORG/YOUR-MODEL"}
    )
    assert stopped.returncode == 1 and "Edit REPO_ID" in stopped.stdout

"""Least privilege and test hooks: a repo's code runs only where no secret is, and a test switch
is needed for the fault hook to do anything."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import run_cli
import tiny_models

SECRETS = {
    "HF_TOKEN": None,  # the bot's real token, filled in below
    "HFEXPORT_WEBHOOK_SECRET": "webhook-secret-for-the-hardening-test",
    "INPUT_HF-TOKEN": "hf_action_input_copy_of_the_token",
    "ACTIONS_RUNTIME_TOKEN": "github-actions-runtime-token-value",
    "GITHUB_TOKEN": "ghs_github_token_value",
}


def test_trusted_remote_code_runs_only_in_processes_that_hold_no_secret(hub, workspace):
    """A model whose classes live in its repo (auto_map) and whose modules record their process's
    environment on import: pushed with --trust-remote-code, it plans (task from the mapped class),
    exports and validates — and no process that ran its code held a token or the webhook secret."""
    from huggingface_hub import HfApi

    owner, bot = hub.add_user("rc-owner"), hub.add_user("rc-bot")
    records = workspace / "remote-code-records"
    folder = tiny_models.remote_code_bert(workspace / "remote-code-bert", records)
    api = HfApi(endpoint=hub.url, token=owner)
    api.create_repo("rc-owner/dumpbert")
    api.upload_folder(repo_id="rc-owner/dumpbert", folder_path=folder)

    secrets = {**SECRETS, "HF_TOKEN": bot}
    push = subprocess.Popen(
        [sys.executable, "-m", "hfexport", "push", "rc-owner/dumpbert", "--backends", "dynamo,onnx",
         "--trust-remote-code", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **secrets},
    )
    stdout, stderr = push.communicate(timeout=900)
    assert push.returncode == 0, stderr[-3000:]
    result = json.loads(stdout)
    assert result["action"] == "opened" and result["report"]["ok"] is True
    assert result["report"]["plan"]["task"] == "text-classification"
    assert result["report"]["plan"]["auto_class"] == "AutoModelForSequenceClassification"

    recorded = {path.name: json.loads(path.read_text()) for path in records.glob("*.json")}
    pids = {name.split("-", 1)[0] for name in recorded}
    # The planning process and each backend's worker imported the code; the publishing parent never did.
    assert len(pids) >= 3 and str(push.pid) not in pids, sorted(recorded)
    for name, env in recorded.items():
        for variable, value in secrets.items():
            assert value not in json.dumps(env), (name, variable)
        assert env.get("HF_HUB_OFFLINE") == "1", name
    # The card tells users the files need trust too.
    card = api.hf_hub_download("rc-owner/dumpbert", "README.md", revision=f"refs/pr/{result['pr_num']}")
    assert 'subfolder="onnx", trust_remote_code=True' in open(card).read()


def test_the_fault_hook_needs_the_test_switch(tmp_path, tiny_bert_folder):
    out = tmp_path / "out"
    off = run_cli(
        "export", str(tiny_bert_folder), "--backends", "dynamo", "--out", str(out), "--json",
        env={"HFEXPORT_TESTING": "", "HFEXPORT_FAULT": "dynamo:crash"}, timeout=600,
    )
    assert off.returncode == 0, off.stderr[-2000:]
    report = json.loads(off.stdout)
    assert report["backends"][0]["status"] == "ok" and report["backends"][0]["fault"] is None

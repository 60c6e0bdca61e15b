"""Publishing on repos shaped like real ones, with the real client over HTTP against the local Hub:
the owner's own exports in our folders, other people on our PR, and several runners filling one PR."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hfexport import push
from hfexport.hub.publish import request_key

from conftest import run_cli
import tiny_models

# What sentence-transformers' export helpers leave on a repo (all-MiniLM-L6-v2 holds these, real size aside).
OWNER_FILES = {
    "onnx/model.onnx": b"owner's optimum graph " * 400,
    "onnx/model_O4.onnx": b"owner's fp16 optimized graph " * 300,
    "onnx/model_qint8_avx512.onnx": b"owner's int8 graph " * 200,
    "onnx/model_quint8_avx2.onnx": b"owner's uint8 graph " * 200,
    "openvino/openvino_model.xml": b"<?xml version='1.0'?><net name='owner'/>\n",
    "openvino/openvino_model.bin": b"\x00\x01owner ir weights" * 500,
}


@pytest.fixture(scope="module")
def accounts(hub):
    return {"owner": hub.add_user("real-owner"), "bot": hub.add_user("real-bot"), "mallory": hub.add_user("real-mallory")}


def _api(hub, token):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=token)


def _seed(hub, token, repo_id: str, folder: Path, extra: dict[str, bytes] | None = None) -> str:
    from huggingface_hub import CommitOperationAdd

    api = _api(hub, token)
    api.create_repo(repo_id, exist_ok=True)
    api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message="model")
    if extra:
        api.create_commit(repo_id, [CommitOperationAdd(p, c) for p, c in extra.items()], commit_message="the owner's exports")
    return api.model_info(repo_id).sha


def _our_prs(api, repo_id, status=None):
    return list(api.get_repo_discussions(repo_id, author="real-bot", discussion_type="pull_request", discussion_status=status))


def _download(api, repo_id, path, revision) -> bytes:
    return Path(api.hf_hub_download(repo_id, path, revision=revision)).read_bytes()


def _history(api, repo_id, num) -> tuple[int, int]:
    """(commits on the PR's ref, comments on the PR)."""
    commits = len(api.list_repo_commits(repo_id, revision=f"refs/pr/{num}"))
    comments = sum(1 for e in api.get_discussion_details(repo_id, num).events if e.type == "comment")
    return commits, comments


def test_the_owners_exports_in_our_folders_stay_byte_identical(hub, accounts, workspace):
    from transformers import BertModel
    from transformers.exporters import ExportedModel

    repo = "real-owner/minilm-like"
    folder = tiny_models.bert(workspace / "real-owner-bert", seed=21)
    _seed(hub, accounts["owner"], repo, folder, OWNER_FILES)
    api = _api(hub, accounts["owner"])

    opened = push(repo, backends="dynamo,onnx", token=accounts["bot"])
    assert opened.action == "opened", opened
    revision = f"refs/pr/{opened.pr_num}"
    for path, content in OWNER_FILES.items():
        assert _download(api, repo, path, revision) == content, path
    files = set(api.list_repo_files(repo, revision=revision))
    # Our ONNX export would have overwritten onnx/model.onnx: it went beside, whole; dynamo/ was free.
    assert {"hfexport/onnx/model.onnx", "hfexport/onnx/export.json", "dynamo/model.pt2"} <= files
    assert not any(p.startswith("onnx/") and p not in OWNER_FILES for p in files), sorted(files)
    card = _download(api, repo, "README.md", revision).decode()
    assert "`hfexport/onnx/`" in card and "The repo's own files in `onnx/` are kept as they are" in card
    assert 'subfolder="hfexport/onnx"' in card
    description = api.get_discussion_details(repo, opened.pr_num).events[0].content
    assert "`hfexport/onnx/`" in description
    # Each loader finds its files: ours where the card says.
    inputs = {"input_ids": torch.randint(5, 128, (2, 7)), "attention_mask": torch.ones(2, 7, dtype=torch.long)}
    exported = ExportedModel.from_pretrained(repo, subfolder="hfexport/onnx", revision=revision, token=accounts["bot"])
    with torch.inference_mode():
        expected = BertModel.from_pretrained(folder).eval()(**inputs).last_hidden_state
    assert torch.allclose(exported(**inputs).last_hidden_state, expected, atol=1e-3)

    # The model changes: the update replaces our files only.
    changed = tiny_models.bert(workspace / "real-owner-bert-v2", seed=22)
    api.upload_file(path_or_fileobj=str(changed / "model.safetensors"), path_in_repo="model.safetensors", repo_id=repo)
    updated = push(repo, backends="dynamo,onnx", token=accounts["bot"])
    assert updated.action == "updated" and updated.pr_num == opened.pr_num
    for path, content in OWNER_FILES.items():
        assert _download(api, repo, path, revision) == content, path
    local = Path(updated.report.out_dir) / "onnx" / "model.onnx"
    assert _download(api, repo, "hfexport/onnx/model.onnx", revision) == local.read_bytes()


def test_markers_from_other_accounts_and_malformed_ones_are_ignored(hub, accounts, workspace):
    repo = "real-owner/steered"
    _seed(hub, accounts["owner"], repo, tiny_models.bert(workspace / "real-steered", seed=23))
    opened = push(repo, backends="dynamo", token=accounts["bot"])
    assert opened.action == "opened"
    owner = _api(hub, accounts["owner"])
    owner.upload_file(path_or_fileobj=b"# moved on\n", path_in_repo="README.md", repo_id=repo)
    new_sha = owner.model_info(repo).sha
    forged = {"v": 2, "nonce": "f" * 16, "backends": {"dynamo": {"sha": new_sha, "request": request_key("dynamo", {"task": "auto", "variants": [], "min_quality": {}})}}}
    mallory = _api(hub, accounts["mallory"])
    for text in (
        "Looks done to me <!-- hfexport " + json.dumps(forged) + " -->",
        "<!-- hfexport {not json at all -->",
        "<!-- hfexport [1, 2, 3] -->",
        '<!-- hfexport {"v": 2, "nonce": "x", "backends": 5} -->',
        '<!-- hfexport {"v": 99} -->',
    ):
        mallory.comment_discussion(repo, opened.pr_num, text)

    result = run_cli("push", repo, "--backends", "dynamo", "--json", env={"HF_TOKEN": accounts["bot"]}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout)
    assert out["action"] == "updated" and out["pr_num"] == opened.pr_num
    published = json.loads(_download(owner, repo, "hfexport-report.json", f"refs/pr/{opened.pr_num}"))
    assert published["source"]["sha"] == new_sha
    assert "ignored a marker by real-mallory" in result.stderr


def test_subsets_of_backends_fill_one_pr_and_unchanged_reruns_write_nothing(hub, accounts, workspace):
    repo = "real-owner/subsets"
    _seed(hub, accounts["owner"], repo, tiny_models.bert(workspace / "real-subsets", seed=24))
    api = _api(hub, accounts["owner"])
    first = push(repo, backends="dynamo", token=accounts["bot"])
    assert first.action == "opened"
    revision = f"refs/pr/{first.pr_num}"
    program = {e.path: e for e in api.list_repo_tree(repo, revision=revision, recursive=True)}["dynamo/model.pt2"]

    # Another runner adds onnx: dynamo's files stay as they are, and the card lists both.
    second = push(repo, backends="onnx", token=accounts["bot"])
    assert second.action == "updated" and second.pr_num == first.pr_num
    entries = {e.path: e for e in api.list_repo_tree(repo, revision=revision, recursive=True)}
    assert "onnx/model.onnx" in entries and entries["dynamo/model.pt2"].blob_id == program.blob_id
    card = _download(api, repo, "README.md", revision).decode()
    assert "| dynamo | `" in card and "| onnx | `" in card

    # Same sha: any subset again is 0 commits and 0 comments.
    before = _history(api, repo, first.pr_num)
    for backends in ("dynamo,onnx", "onnx", "dynamo", "dynamo,onnx"):
        again = push(repo, backends=backends, token=accounts["bot"])
        assert again.action == "unchanged", (backends, again.action)
    assert _history(api, repo, first.pr_num) == before
    assert len(_our_prs(api, repo)) == 1

    # The model changes and only dynamo is rebuilt: onnx, built from the old commit, leaves the PR.
    owner_readme = b"# subsets\n\nnew text\n"
    api.upload_file(path_or_fileobj=owner_readme, path_in_repo="README.md", repo_id=repo)
    moved = push(repo, backends="dynamo", token=accounts["bot"])
    assert moved.action == "updated"
    files = set(api.list_repo_files(repo, revision=revision))
    assert "dynamo/model.pt2" in files and not any(p.startswith("onnx/") for p in files)
    published = json.loads(_download(api, repo, "hfexport-report.json", revision))
    assert [(b["backend"], b["source_sha"]) for b in published["backends"]] == [("dynamo", moved.report.source.sha)]


def test_two_runners_started_together_end_in_one_pr(hub, accounts, workspace):
    """The CPU job and the GPU job (here two CPU backend groups) of one workflow, started at the
    same moment, ten times: each time one open PR holds both groups' files and a card listing both."""
    folder = tiny_models.bert(workspace / "real-race", seed=25)
    env = {**os.environ, "HF_TOKEN": accounts["bot"], "COLUMNS": "200"}
    # Warm the export cache once, so the ten trials race on publishing, not on exporting.
    _seed(hub, accounts["owner"], "real-owner/race-warmup", folder)
    assert push("real-owner/race-warmup", backends="dynamo", token=accounts["bot"]).action == "opened"
    assert push("real-owner/race-warmup", backends="onnx", token=accounts["bot"]).action == "updated"
    api = _api(hub, accounts["owner"])
    raced = 0  # runs that lost a race (a 412, or a PR opened in the same instant) and merged
    for trial in range(10):
        repo = f"real-owner/race-{trial}"
        _seed(hub, accounts["owner"], repo, folder)
        runners = [
            subprocess.Popen([sys.executable, "-m", "hfexport", "push", repo, "--backends", group, "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for group in ("dynamo", "onnx")
        ]
        outputs = [r.communicate(timeout=600) for r in runners]
        for runner, (stdout, stderr) in zip(runners, outputs):
            assert runner.returncode == 0, (trial, stderr[-3000:])
            raced += "reading the pull request again" in stderr
        opened = _our_prs(api, repo, status="open")
        assert len(opened) == 1, (trial, [(p.num, p.status) for p in _our_prs(api, repo)])
        revision = f"refs/pr/{opened[0].num}"
        files = set(api.list_repo_files(repo, revision=revision))
        assert {"dynamo/model.pt2", "onnx/model.onnx"} <= files, (trial, sorted(files))
        card = _download(api, repo, "README.md", revision).decode()
        assert "| dynamo | `" in card and "| onnx | `" in card, trial
        for other in _our_prs(api, repo):
            if other.num != opened[0].num:  # a duplicate opened in the same instant stepped aside
                details = api.get_discussion_details(repo, other.num)
                assert details.status == "closed" and "Superseded" in details.events[-1].content
    print(f"runs that lost a race and merged into the other's PR: {raced} of 20")

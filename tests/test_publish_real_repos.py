"""Publishing on repos shaped like real ones, with the real client over HTTP against the local Hub:
the owner's own exports in our folders, other people on our PR, and several runners filling one PR."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tiny_models
import torch
from conftest import run_cli

from hfexport import push
from hfexport.hub.decide import mark_key
from hfexport.messages import ExportRequest

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
    return {
        "owner": hub.add_user("real-owner"),
        "bot": hub.add_user("real-bot"),
        "mallory": hub.add_user("real-mallory"),
    }


def _api(hub, token):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=token)


def _seed(hub, token, repo_id: str, folder: Path, extra: dict[str, bytes] | None = None) -> str:
    from huggingface_hub import CommitOperationAdd

    api = _api(hub, token)
    api.create_repo(repo_id, exist_ok=True)
    api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message="model")
    if extra:
        api.create_commit(
            repo_id, [CommitOperationAdd(p, c) for p, c in extra.items()], commit_message="the owner's exports"
        )
    return api.model_info(repo_id).sha


def _our_prs(api, repo_id, status=None):
    return list(
        api.get_repo_discussions(repo_id, author="real-bot", discussion_type="pull_request", discussion_status=status)
    )


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
    forged = {
        "v": 2,
        "nonce": "f" * 16,
        "backends": {
            "dynamo": {
                "sha": new_sha,
                "request": mark_key("dynamo", ExportRequest()),
            }
        },
    }
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
    same moment, twice: each time one open PR holds both groups' files and a card listing both."""
    folder = tiny_models.bert(workspace / "real-race", seed=25)
    env = {**os.environ, "HF_TOKEN": accounts["bot"], "COLUMNS": "200"}
    # Warm the export cache once, so the trials race on publishing, not on exporting.
    _seed(hub, accounts["owner"], "real-owner/race-warmup", folder)
    assert push("real-owner/race-warmup", backends="dynamo", token=accounts["bot"]).action == "opened"
    assert push("real-owner/race-warmup", backends="onnx", token=accounts["bot"]).action == "updated"
    api = _api(hub, accounts["owner"])
    raced = 0  # runs that lost a race (a 412, or a PR opened in the same instant) and merged
    for trial in range(2):
        repo = f"real-owner/race-{trial}"
        _seed(hub, accounts["owner"], repo, folder)
        runners = [
            subprocess.Popen(
                [sys.executable, "-m", "hfexport", "push", repo, "--backends", group, "--json"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
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
    print(f"runs that lost a race and merged into the other's PR: {raced} of 4")


# ── repos that change while we work ─────────────────────────────────────────


OWNER_LINE = "A line the owner added while the export ran."
OWNER_GRAPH = b"the owner's own optimum graph, committed during our export " * 50


def _commit(api, repo_id: str, files: dict[str, bytes], revision: str | None = None) -> str:
    from huggingface_hub import CommitOperationAdd

    info = api.create_commit(
        repo_id, [CommitOperationAdd(p, c) for p, c in files.items()], commit_message="owner's work", revision=revision
    )
    return info.oid


def test_an_owners_commit_during_the_export_is_kept_by_the_pr_and_after_the_merge(hub, accounts, workspace):
    repo = "real-owner/alive"
    # Weights no other test exported, so the export really runs while the owner commits.
    _seed(hub, accounts["owner"], repo, tiny_models.bert(workspace / "real-alive", seed=31))
    owner = _api(hub, accounts["owner"])
    owner.upload_file(path_or_fileobj=b"# Alive\n\nThe owner's card.\n", path_in_repo="README.md", repo_id=repo)
    read = owner.model_info(repo).sha
    moved: list[str] = []

    def owner_commits_while_we_export(backend, message):
        if not moved:
            card = b"# Alive\n\nThe owner's card.\n" + OWNER_LINE.encode() + b"\n"
            moved.append(_commit(owner, repo, {"README.md": card, "onnx/model.onnx": OWNER_GRAPH}))

    logged: list[str] = []
    result = push(
        repo, backends="onnx", token=accounts["bot"], progress=owner_commits_while_we_export, log=logged.append
    )
    assert moved and result.action == "opened", (result, logged)
    assert any("deciding again" in line and "onnx/model.onnx" in line for line in logged), logged
    revision = f"refs/pr/{result.pr_num}"
    # The PR branches from the owner's commit, keeps their line and their graph byte for byte; ours went beside.
    assert owner.list_repo_commits(repo, revision=revision)[1].commit_id == moved[0] != read
    card = _download(owner, repo, "README.md", revision).decode()
    assert OWNER_LINE in card and "`hfexport/onnx/`" in card
    assert _download(owner, repo, "onnx/model.onnx", revision) == OWNER_GRAPH
    local = Path(result.report.out_dir) / "onnx" / "model.onnx"
    assert _download(owner, repo, "hfexport/onnx/model.onnx", revision) == local.read_bytes()
    assert owner.get_discussion_details(repo, result.pr_num).conflicting_files == []
    owner.merge_pull_request(repo, result.pr_num)
    main = owner.model_info(repo).sha
    assert OWNER_LINE in _download(owner, repo, "README.md", main).decode()
    assert _download(owner, repo, "onnx/model.onnx", main) == OWNER_GRAPH
    assert _download(owner, repo, "hfexport/onnx/model.onnx", main) == local.read_bytes()


def test_a_commit_on_other_paths_during_publishing_keeps_the_pr_on_the_commit_read(hub, accounts, tiny_bert_folder):
    """The owner adds a file we never write just before we open the PR: nothing is decided again,
    the PR branches from what we read, and the merge keeps their file and ours."""
    repo = "real-owner/alive-elsewhere"
    read = _seed(hub, accounts["owner"], repo, tiny_bert_folder)
    owner = _api(hub, accounts["owner"])
    moved: list[str] = []

    def log(line: str) -> None:  # said between reading the Hub and writing to it
        if "reusing the cached exports" in line and not moved:
            moved.append(_commit(owner, repo, {"notes/owner.md": b"the owner's notes\n"}))

    push(repo, backends="dynamo", token=accounts["bot"], dry_run=True)  # warms the export cache
    result = push(repo, backends="dynamo", token=accounts["bot"], log=log)
    assert moved and result.action == "opened"
    revision = f"refs/pr/{result.pr_num}"
    assert owner.list_repo_commits(repo, revision=revision)[1].commit_id == read
    owner.merge_pull_request(repo, result.pr_num)
    files = set(owner.list_repo_files(repo))
    assert {"notes/owner.md", "dynamo/model.pt2", "hfexport-report.json"} <= files


def test_a_maintainers_commit_on_our_pr_survives_the_next_update(hub, accounts, tiny_bert_folder):
    repo = "real-owner/maintained"
    _seed(hub, accounts["owner"], repo, tiny_bert_folder)
    owner = _api(hub, accounts["owner"])
    opened = push(repo, backends="dynamo", token=accounts["bot"])
    assert opened.action == "opened"
    revision = f"refs/pr/{opened.pr_num}"
    card = _download(owner, repo, "README.md", revision).decode()
    edited = card.replace("\n\n", "\n\nA maintainer's note on the PR, outside the exports section.\n\n", 1)
    assert edited != card and edited.index("maintainer's note") < edited.index("<!-- hfexport:start -->")
    _commit(owner, repo, {"README.md": edited.encode(), "docs/maintainer.md": b"kept\n"}, revision=revision)
    # main moves on (a file we never write): our next push updates the PR to the new commit.
    new_sha = _commit(owner, repo, {"LICENSE": b"MIT\n"})
    updated = push(repo, backends="dynamo", token=accounts["bot"])
    assert updated.action == "updated" and updated.pr_num == opened.pr_num
    card = _download(owner, repo, "README.md", revision).decode()
    assert "A maintainer's note on the PR, outside the exports section." in card and new_sha[:12] in card
    assert card.count("<!-- hfexport:start -->") == 1
    assert _download(owner, repo, "docs/maintainer.md", revision) == b"kept\n"


def test_after_a_merge_a_maintainers_file_at_our_path_is_left_intact(hub, accounts, tiny_bert_folder):
    repo = "real-owner/tuned"
    _seed(hub, accounts["owner"], repo, tiny_bert_folder)
    owner = _api(hub, accounts["owner"])
    opened = push(repo, backends="dynamo", token=accounts["bot"])
    owner.merge_pull_request(repo, opened.pr_num)
    tuned = b"a maintainer's tuned program, same path as ours " * 40
    _commit(owner, repo, {"dynamo/model.pt2": tuned})  # main moved: the next push has work to do
    result = push(repo, backends="dynamo", token=accounts["bot"])
    assert result.action == "opened" and result.pr_num != opened.pr_num, result
    revision = f"refs/pr/{result.pr_num}"
    assert _download(owner, repo, "dynamo/model.pt2", revision) == tuned
    files = set(owner.list_repo_files(repo, revision=revision))
    # Ours went beside theirs; our old export.json stays with their program (it may need it).
    assert {"hfexport/dynamo/model.pt2", "hfexport/dynamo/export.json", "dynamo/export.json"} <= files
    card = _download(owner, repo, "README.md", revision).decode()
    assert "`hfexport/dynamo/`" in card
    owner.merge_pull_request(repo, result.pr_num)
    assert _download(owner, repo, "dynamo/model.pt2", owner.model_info(repo).sha) == tuned


MARKER_CARDS = {
    "stray-start": "# M\n\nIntro.\n<!-- hfexport:start -->\nOwner text under a start they kept.\n",
    "stray-end": "# M\n\nQuoting it: <!-- hfexport:end -->\nMore owner text.\n",
    "two-pairs": "# M\n<!-- hfexport:start -->\nA\n<!-- hfexport:end -->\nOwner text.\n"
    "<!-- hfexport:start -->\nB\n<!-- hfexport:end -->\nTail.\n",
    "end-before-start": "# M\n<!-- hfexport:end -->\nOwner words between.\n<!-- hfexport:start -->\nTail.\n",
}


@pytest.mark.parametrize("case", list(MARKER_CARDS))
def test_a_card_with_markers_that_do_not_pair_publishes_and_keeps_the_owners_text(
    hub, accounts, tiny_bert_folder, case
):
    repo = f"real-owner/markers-{case}"
    _seed(hub, accounts["owner"], repo, tiny_bert_folder)
    owner = _api(hub, accounts["owner"])
    owner.upload_file(path_or_fileobj=MARKER_CARDS[case].encode(), path_in_repo="README.md", repo_id=repo)
    result = run_cli("push", repo, "--backends", "dynamo", "--json", env={"HF_TOKEN": accounts["bot"]}, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout)
    assert out["action"] == "opened" and "do not pair up" in result.stderr
    revision = f"refs/pr/{out['pr_num']}"
    card = _download(owner, repo, "README.md", revision).decode()
    assert card.split("---\n", 2)[2].startswith(MARKER_CARDS[case])
    assert "do not pair up" in owner.get_discussion_details(repo, out["pr_num"]).events[0].content

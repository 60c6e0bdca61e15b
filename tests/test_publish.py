"""`hfexport push` against the local Hub, with the real `huggingface_hub` client over HTTP.

The in-process client has Xet on (its default path, served inline by the emulator); the LFS path
(`HF_HUB_DISABLE_XET=1`, basic and multipart) runs as a CLI process against a second Hub.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import tiny_models
import torch
from conftest import run_cli

from hfexport import push
from hfexport.card.section import END, START
from hfexport.errors import HubUnavailableError
from hfexport_devhub import DevHub

OWNER_README = """---
license: apache-2.0
base_model: google-bert/bert-base-uncased
custom_owner_key:
  nested: [1, 2, 3]
tags:
- owner-tag
---

# Tiny BERT

The owner's own words, kept byte for byte.
Trailing line without newline"""


@pytest.fixture(scope="module")
def accounts(hub):
    return {"alice": hub.add_user("alice"), "bot": hub.add_user("hfexport-bot"), "mallory": hub.add_user("mallory")}


def _api(hub, token):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=token)


def seed(
    hub,
    token,
    repo_id: str,
    folder: Path,
    readme: str | None = OWNER_README,
    private: bool = False,
    extra: dict | None = None,
):
    api = _api(hub, token)
    api.create_repo(repo_id, private=private, exist_ok=True)
    api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message="model")
    for path, content in ({"README.md": readme} if readme is not None else {}).items() | (extra or {}).items():
        api.upload_file(path_or_fileobj=content.encode(), path_in_repo=path, repo_id=repo_id)
    return api.model_info(repo_id).sha


def _our_prs(api, repo_id, status=None):
    return [
        d
        for d in api.get_repo_discussions(
            repo_id, author="hfexport-bot", discussion_type="pull_request", discussion_status=status
        )
    ]


def _assert_read_once(requests: list[tuple[str, str]], repo_id: str, card_cached: bool = False) -> None:
    """One push asked the Hub who we are, listed the discussions and read the card once each (the
    client's cache answers for a card already read at that sha)."""

    def count(method: str, path: str) -> int:
        return sum(1 for m, p in requests if m == method and p == path)

    assert count("GET", "/api/whoami-v2") == 1, requests
    assert count("GET", f"/api/models/{repo_id}/discussions") == 1, requests
    # The card of each revision read (the base's, our PR head's) at most once.
    readme = [(m, p) for m, p in requests if p.endswith("/README.md") and "/resolve/" in p]
    for revision in {p for _, p in readme}:
        heads = sum(1 for m, p in readme if p == revision and m == "HEAD")
        gets = sum(1 for m, p in readme if p == revision and m == "GET")
        assert heads <= 1 and gets <= 1, readme
    assert sum(1 for m, _ in readme if m == "HEAD") <= (1 if card_cached else 2), readme


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ── the lifecycle of one PR ──────────────────────────────────────────────────


class TestLifecycle:
    repo = "alice/tiny-bert"

    @pytest.fixture(scope="class")
    def first(self, hub, accounts, workspace):
        folder = tiny_models.bert(workspace / "publish-bert")
        sha = seed(hub, accounts["alice"], self.repo, folder)
        result = push(self.repo, backends="dynamo,onnx", token=accounts["bot"])
        report = result.report
        return folder, sha, result, report

    def test_first_push_opens_one_pr_whose_files_load_back(self, hub, accounts, first):
        from transformers import BertModel
        from transformers.exporters import ExportedModel

        folder, sha, result, report = first
        assert result.action == "opened" and report.ok
        api = _api(hub, accounts["bot"])
        assert [p.num for p in _our_prs(api, self.repo)] == [result.pr_num]
        revision = f"refs/pr/{result.pr_num}"
        files = set(api.list_repo_files(self.repo, revision=revision))
        assert {"onnx/model.onnx", "onnx/export.json", "dynamo/model.pt2", "hfexport-report.json", "README.md"} <= files
        # main is untouched: the PR holds the exports.
        assert api.model_info(self.repo).sha == sha
        # One commit on top of main holds artifacts and card together.
        commits = api.list_repo_commits(self.repo, revision=revision)
        assert commits[1].commit_id == sha
        model = BertModel.from_pretrained(folder).eval()
        ids = torch.randint(5, 128, (3, 11))
        with torch.inference_mode():
            expected = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
        for subfolder, trust in (("onnx", False), ("dynamo", True)):
            exported = ExportedModel.from_pretrained(
                self.repo, subfolder=subfolder, revision=revision, trust_remote_code=trust, token=accounts["bot"]
            )
            got = exported(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
            assert torch.allclose(got, expected, atol=1e-3), subfolder
        published = json.loads(
            Path(api.hf_hub_download(self.repo, "hfexport-report.json", revision=revision)).read_text()
        )
        assert published["source"]["sha"] == sha

    def test_card_section_metadata_and_owner_text(self, hub, accounts, first):
        result = first[2]
        api = _api(hub, accounts["bot"])
        card = Path(api.hf_hub_download(self.repo, "README.md", revision=f"refs/pr/{result.pr_num}")).read_text()
        self._assert_card(card)

    def _assert_card(self, card: str):
        import yaml

        assert card.count(START) == 1 and card.count(END) == 1
        metadata = yaml.safe_load(card.split("---\n")[1])
        assert metadata["license"] == "apache-2.0"
        assert metadata["base_model"] == "google-bert/bert-base-uncased"
        assert metadata["custom_owner_key"] == {"nested": [1, 2, 3]}
        assert metadata["tags"][0] == "owner-tag" and {"onnx", "torch-export", "hfexport"} <= set(metadata["tags"])
        owner_body = OWNER_README.split("---\n", 2)[2]
        body = card.split("---\n", 2)[2]
        assert body.startswith(owner_body), "the owner's text must be kept byte for byte"
        section = card[card.index(START) :]
        assert (
            "| onnx | `" in section
            and "| `onnx/` |" in section
            and 'subfolder="onnx"' in section
            and "ort.InferenceSession" in section
        )

    def test_rerun_on_same_sha_is_a_noop(self, hub, accounts, first):
        result = first[2]
        api = _api(hub, accounts["bot"])
        head = api.list_repo_refs(self.repo, include_pull_requests=True).pull_requests[0].target_commit
        uploaded = hub.app.stats["bytes_uploaded"]
        seen = len(hub.app.requests)
        again = push(self.repo, backends="dynamo,onnx", token=accounts["bot"])
        assert again.action == "unchanged" and again.pr_num == result.pr_num and again.report is None
        _assert_read_once(hub.app.requests[seen:], self.repo, card_cached=True)
        assert hub.app.stats["bytes_uploaded"] == uploaded
        assert api.list_repo_refs(self.repo, include_pull_requests=True).pull_requests[0].target_commit == head
        assert len(list(api.get_repo_discussions(self.repo))) == 1

    def test_new_model_commit_updates_the_same_pr_and_comments(self, hub, accounts, first, workspace):
        from transformers import BertConfig, BertModel

        result = first[2]
        owner = _api(hub, accounts["alice"])
        torch.manual_seed(1)
        changed = workspace / "publish-bert-v2"
        BertModel(BertConfig.from_pretrained(first[0])).save_pretrained(changed)
        owner.upload_file(
            path_or_fileobj=str(changed / "model.safetensors"), path_in_repo="model.safetensors", repo_id=self.repo
        )
        new_sha = owner.model_info(self.repo).sha
        seen = len(hub.app.requests)
        updated = push(self.repo, backends="dynamo,onnx", token=accounts["bot"])
        report = updated.report
        # Decided on one read of the Hub, then written: nothing asked twice.
        _assert_read_once(hub.app.requests[seen:], self.repo)
        assert updated.action == "updated" and updated.pr_num == result.pr_num and report.source.sha == new_sha
        api = _api(hub, accounts["bot"])
        assert [p.num for p in _our_prs(api, self.repo)] == [result.pr_num]
        details = api.get_discussion_details(self.repo, result.pr_num)
        comments = [e for e in details.events if e.type == "comment"]
        assert "Updated" in comments[-1].content and new_sha[:12] in comments[-1].content
        commits = [e for e in details.events if e.type == "commit"]
        assert len(commits) == 2  # opened, then updated
        remote = Path(api.hf_hub_download(self.repo, "onnx/model.onnx", revision=f"refs/pr/{result.pr_num}"))
        assert _file_sha256(remote) == _file_sha256(Path(report.out_dir) / "onnx" / "model.onnx")
        card = Path(api.hf_hub_download(self.repo, "README.md", revision=f"refs/pr/{result.pr_num}")).read_text()
        self._assert_card(card)  # two pushes, still exactly one section
        assert new_sha[:12] in card

    def test_readme_only_commit_reuses_exports_and_uploads_only_what_changed(self, hub, accounts, first):
        result = first[2]
        owner = _api(hub, accounts["alice"])
        edited = OWNER_README.replace("# Tiny BERT", "# Tiny BERT, retitled on main")
        owner.upload_file(path_or_fileobj=edited.encode(), path_in_repo="README.md", repo_id=self.repo)
        uploaded = hub.app.stats["bytes_uploaded"]
        updated = push(self.repo, backends="dynamo,onnx", token=accounts["bot"])
        assert updated.action == "updated"
        # Only the card and the report changed: no artifact went up again.
        assert hub.app.stats["bytes_uploaded"] - uploaded < 50_000
        card = Path(
            _api(hub, accounts["bot"]).hf_hub_download(self.repo, "README.md", revision=f"refs/pr/{result.pr_num}")
        ).read_text()
        # The PR's card is its own head's with our section replaced; main's edit is not copied in
        # (that would be a second, competing change): the Hub's merge brings both together.
        assert card.count(START) == 1 and "retitled on main" not in card
        assert owner.get_discussion_details(self.repo, result.pr_num).conflicting_files == []

    def test_token_never_appears_anywhere(self, hub, accounts, first):
        token = accounts["bot"]
        result = run_cli(
            "push", self.repo, "--backends", "dynamo,onnx", "--token", token, "--json", env={"HF_TOKEN": token}
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert json.loads(result.stdout)["action"] == "unchanged"
        dry = run_cli("push", self.repo, "--backends", "dynamo", "--dry-run", "--json", env={"HF_TOKEN": token})
        assert dry.returncode == 0, dry.stderr[-2000:]
        for text in (result.stdout, result.stderr, dry.stdout, dry.stderr):
            assert token not in text
        # Nor in what was published (PR texts, files) or cached.
        api = _api(hub, token)
        for d in api.get_repo_discussions(self.repo):
            for event in api.get_discussion_details(self.repo, d.num).events:
                assert token not in (getattr(event, "content", "") or "")
        for path in Path(os.environ["HFEXPORT_CACHE"]).rglob("*.json"):
            assert token not in path.read_text()
        assert token.encode() not in b"".join(p.read_bytes() for p in (hub.root / "blobs").iterdir())

    def test_a_request_exported_before_is_published_without_planning_or_importing_torch(self, hub, accounts, first):
        """Another README-only commit, pushed by `hfexport push` with the same backends: the export
        is found by the request (the content and what was asked), so the push neither plans (which
        imports torch and the model's classes) nor starts a worker process, and updates the PR."""
        owner = _api(hub, accounts["alice"])
        edited = OWNER_README.replace("# Tiny BERT", "# Tiny BERT, retitled again")
        owner.upload_file(path_or_fileobj=edited.encode(), path_in_repo="README.md", repo_id=self.repo)
        result = run_cli(
            "push",
            self.repo,
            "--backends",
            "onnx,dynamo",
            "--json",
            env={"HF_TOKEN": accounts["bot"], "PYTHONPROFILEIMPORTTIME": "1"},
        )
        assert result.returncode == 0, result.stderr[-2000:]
        assert json.loads(result.stdout)["action"] == "updated"
        assert "reusing the cached exports" in result.stderr
        imported = {
            line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")
        }
        assert "huggingface_hub" in imported and not {"torch", "transformers", "hfexport.worker"} & imported


# ── closed PRs, opt-out, dry run ─────────────────────────────────────────────


def test_closed_pr_is_respected_and_force_reopens(hub, accounts, tiny_bert_folder):
    repo = "alice/closed-one"
    seed(hub, accounts["alice"], repo, tiny_bert_folder)
    opened = push(repo, backends="dynamo", token=accounts["bot"])
    owner = _api(hub, accounts["alice"])
    owner.change_discussion_status(repo, opened.pr_num, "closed", comment="not now")
    owner.upload_file(path_or_fileobj=b"# changed\n", path_in_repo="README.md", repo_id=repo)  # the model moves on
    again = push(repo, backends="dynamo", token=accounts["bot"])
    report = again.report
    assert again.action == "closed-respected" and report is None
    assert owner.get_discussion_details(repo, opened.pr_num).status == "closed"
    assert len(list(owner.get_repo_discussions(repo))) == 1
    forced = push(repo, backends="dynamo", token=accounts["bot"], force=True)
    assert forced.action == "updated" and forced.pr_num == opened.pr_num
    assert owner.get_discussion_details(repo, opened.pr_num).status in ("open", "draft")
    assert len(list(owner.get_repo_discussions(repo))) == 1


def test_a_push_of_an_older_commit_never_moves_the_pr_back(hub, accounts, tiny_bert_folder):
    """Our PR holds exports of the head; a push of the commit before it (a retry, a late webhook, a
    slow runner) writes nothing and says why; the PR still holds the head's. A push of the head
    again is unchanged."""
    repo = "alice/never-back"
    older = seed(hub, accounts["alice"], repo, tiny_bert_folder)
    owner = _api(hub, accounts["alice"])
    owner.upload_file(path_or_fileobj=b"# newer\n", path_in_repo="README.md", repo_id=repo)
    head = owner.model_info(repo).sha
    opened = push(repo, backends="dynamo", token=accounts["bot"])
    assert opened.action == "opened" and opened.report.source.sha == head
    pr_head = owner.model_info(repo, revision=f"refs/pr/{opened.pr_num}").sha
    late = push(repo, revision=older, backends="dynamo", token=accounts["bot"])
    assert late.action == "newer-held" and late.pr_num == opened.pr_num and late.report is None
    assert owner.model_info(repo, revision=f"refs/pr/{opened.pr_num}").sha == pr_head
    assert push(repo, backends="dynamo", token=accounts["bot"]).action == "unchanged"


def _new_weights(owner, repo: str, folder: Path) -> str:
    """The owner commits other weights (a retrained model); the new head."""
    owner.upload_file(path_or_fileobj=str(folder / "model.safetensors"), path_in_repo="model.safetensors", repo_id=repo)
    return owner.model_info(repo).sha


def _published_sha(owner, repo: str, num: int) -> str:
    """The commit whose exports our PR holds, by the report published on it."""
    path = owner.hf_hub_download(repo, "hfexport-report.json", revision=f"refs/pr/{num}")
    return json.loads(Path(path).read_text())["source"]["sha"]


def test_a_force_push_back_to_an_older_commit_takes_the_pr_back_with_it(hub, accounts, tiny_bert_folder, workspace):
    """The owner pushed new weights (B), our PR followed, then they withdrew them: main is
    force-pushed back to A. B is no longer on the branch, so it is not "newer": the PR follows main
    back to A's exports."""
    repo, owner = "alice/rolled-back", _api(hub, accounts["alice"])
    a = seed(hub, accounts["alice"], repo, tiny_bert_folder)
    opened = push(repo, backends="dynamo", token=accounts["bot"])
    b = _new_weights(owner, repo, tiny_models.bert(workspace / "rolled-back-b", seed=41))
    moved = push(repo, backends="dynamo", token=accounts["bot"])
    assert moved.action == "updated" and _published_sha(owner, repo, opened.pr_num) == b
    hub.force_push(repo, a)
    back = push(repo, backends="dynamo", token=accounts["bot"])
    assert back.action == "updated" and back.pr_num == opened.pr_num, back
    assert _published_sha(owner, repo, opened.pr_num) == a
    assert push(repo, backends="dynamo", token=accounts["bot"]).action == "unchanged"


def test_a_pr_merged_while_the_next_commit_exports_gets_a_new_pr(hub, accounts, tiny_bert_folder, workspace):
    """A maintainer merges our PR (A's exports) while B's are being made: B's files never land on
    the merged PR's ref; they go to a new PR, and main keeps what was merged."""
    repo, owner = "alice/merged-meanwhile", _api(hub, accounts["alice"])
    seed(hub, accounts["alice"], repo, tiny_bert_folder)
    first = push(repo, backends="dynamo", token=accounts["bot"])
    merged_head = owner.model_info(repo, revision=f"refs/pr/{first.pr_num}").sha
    b = _new_weights(owner, repo, tiny_models.bert(workspace / "merged-meanwhile-b", seed=43))
    merged: list[str] = []

    def maintainer_merges(backend: str, message: str) -> None:
        if not merged:
            merged.append(owner.merge_pull_request(repo, first.pr_num) or "merged")

    second = push(repo, backends="dynamo", token=accounts["bot"], progress=maintainer_merges)
    assert merged and second.action == "opened" and second.pr_num != first.pr_num, second
    assert owner.get_discussion_details(repo, first.pr_num).status == "merged"
    assert owner.model_info(repo, revision=f"refs/pr/{first.pr_num}").sha == merged_head  # nothing of B's there
    # The new PR holds exports of main now: B's weights, with A's exports merged in beside them.
    assert _published_sha(owner, repo, second.pr_num) == owner.model_info(repo).sha != b
    ours, merged_in = (
        owner.get_paths_info(repo, ["dynamo/model.pt2"], revision=r)[0].blob_id
        for r in (f"refs/pr/{second.pr_num}", "main")
    )
    assert ours != merged_in


def test_a_pr_closed_while_the_next_commit_exports_is_left_alone(hub, accounts, tiny_bert_folder, workspace):
    """A maintainer closes our PR while the next commit exports: no commit, no comment lands on it."""
    repo, owner = "alice/closed-meanwhile", _api(hub, accounts["alice"])
    seed(hub, accounts["alice"], repo, tiny_bert_folder)
    first = push(repo, backends="dynamo", token=accounts["bot"])
    before = owner.get_discussion_details(repo, first.pr_num)
    head = owner.model_info(repo, revision=f"refs/pr/{first.pr_num}").sha
    _new_weights(owner, repo, tiny_models.bert(workspace / "closed-meanwhile-b", seed=47))
    closed: list[bool] = []

    def maintainer_closes(backend: str, message: str) -> None:
        if not closed:
            closed.append(True)
            owner.change_discussion_status(repo, first.pr_num, "closed", comment="not this one")

    second = push(repo, backends="dynamo", token=accounts["bot"], progress=maintainer_closes)
    assert closed and second.action == "closed-respected", second
    after = owner.get_discussion_details(repo, first.pr_num)
    assert after.status == "closed" and owner.model_info(repo, revision=f"refs/pr/{first.pr_num}").sha == head
    ours = [e for e in after.events if e.type == "comment" and e.author == "hfexport-bot"]
    assert len(ours) == len([e for e in before.events if e.type == "comment" and e.author == "hfexport-bot"])


def test_a_backend_skipped_for_memory_is_exported_by_the_next_run_that_fits(hub, accounts, workspace, monkeypatch):
    """The preflight skips ExecuTorch (the machine's limit is under its estimate); the PR opens with
    dynamo. A skip is no export: the rerun with --force-memory exports ExecuTorch into the same PR,
    and a repo with the same weights is not handed the skip from the export cache either."""
    from hfexport.pipeline.preflight import estimate, weights_of
    from hfexport.report import Source

    folder = tiny_models.bert(workspace / "skipped-for-memory", seed=53)
    weights = weights_of(Source(kind="local", ref=str(folder), sha="0" * 40))
    dynamo, executorch = estimate(weights, ["dynamo", "executorch"])
    monkeypatch.setenv("HFEXPORT_MEMORY_LIMIT_MB", str((dynamo.memory_bytes + executorch.memory_bytes) // 2_000_000))
    repo, twin, owner = "alice/skipped-for-memory", "alice/skipped-for-memory-twin", _api(hub, accounts["alice"])
    seed(hub, accounts["alice"], repo, folder)
    seed(hub, accounts["alice"], twin, folder)
    first = push(repo, backends="dynamo,executorch", token=accounts["bot"])
    statuses = {b.backend: b.status for b in first.report.backends}
    assert first.action == "opened" and statuses == {"dynamo": "ok", "executorch": "skipped"}, statuses
    again = push(repo, backends="dynamo,executorch", token=accounts["bot"], force_memory=True)
    assert again.action == "updated" and again.pr_num == first.pr_num, again
    files = owner.list_repo_files(repo, revision=f"refs/pr/{first.pr_num}")
    assert any(f.startswith("executorch/") and f.endswith(".pte") for f in files), files
    monkeypatch.setenv("HFEXPORT_MEMORY_LIMIT_MB", "1000000")
    other = push(twin, backends="dynamo,executorch", token=accounts["bot"])
    assert {b.backend: b.status for b in other.report.backends} == {"dynamo": "ok", "executorch": "ok"}


def test_a_crashed_backend_is_retried_by_the_next_run_and_force_always_exports(hub, accounts, workspace, monkeypatch):
    """ONNX's process is SIGKILLed (as the OOM killer does) on the first run: the PR opens with
    dynamo and says onnx crashed. The rerun of the same commit retries onnx (not `unchanged`), and
    --force exports again instead of reusing the cache."""
    folder = tiny_models.bert(workspace / "crashed-once", seed=59)
    repo, owner = "alice/crashed-once", _api(hub, accounts["alice"])
    seed(hub, accounts["alice"], repo, folder)
    monkeypatch.setenv("HFEXPORT_TESTING", "1")
    monkeypatch.setenv("HFEXPORT_FAULT", "onnx:crash")
    first = push(repo, backends="dynamo,onnx", token=accounts["bot"])
    assert {b.backend: b.status for b in first.report.backends} == {"dynamo": "ok", "onnx": "crashed"}
    monkeypatch.delenv("HFEXPORT_FAULT")
    again = push(repo, backends="dynamo,onnx", token=accounts["bot"])
    assert again.action == "updated" and again.report is not None, again
    assert "onnx/model.onnx" in owner.list_repo_files(repo, revision=f"refs/pr/{first.pr_num}")
    said: list[str] = []
    forced = push(repo, backends="dynamo,onnx", token=accounts["bot"], force=True, log=said.append)
    assert forced.report is not None and not any("reusing the cached exports" in line for line in said), said


def test_the_owners_crlf_card_keeps_every_byte_outside_our_section(hub, accounts, tiny_bert_folder):
    """A card written on Windows (CRLF line ends): every byte the owner wrote comes back as it was;
    our section and the tags are the only change."""
    readme = b"---\r\nlicense: mit\r\n---\r\n# Caf\xc3\xa9\r\n\r\nThe owner's card, written on Windows.\r\n"
    repo, owner = "alice/card-crlf", _api(hub, accounts["alice"])
    seed(hub, accounts["alice"], repo, tiny_bert_folder, readme=None)
    owner.upload_file(path_or_fileobj=readme, path_in_repo="README.md", repo_id=repo)
    opened = push(repo, backends="dynamo", token=accounts["bot"])
    card = Path(owner.hf_hub_download(repo, "README.md", revision=f"refs/pr/{opened.pr_num}")).read_bytes()
    assert card.startswith(b"---\r\nlicense: mit\r\n") and b"hfexport" in card.split(b"---")[1], card[:200]
    assert b"---\r\n# Caf\xc3\xa9\r\n\r\nThe owner's card, written on Windows.\r\n" in card, card
    start, end = card.index(START.encode()), card.index(END.encode()) + len(END)
    owners = card[:start] + card[end:]
    assert b"\n" not in owners.replace(b"\r\n", b""), owners  # no line of theirs lost its CR


def test_a_card_that_is_not_utf8_is_left_as_it_is_with_a_note(hub, accounts, tiny_bert_folder):
    """A Latin-1 card (pushed with git: the client refuses one): the Hub takes UTF-8 cards only, so
    the PR leaves it byte for byte and says why in its description; the exports are published."""
    readme = b"---\nlicense: mit\n---\n# Caf\xe9 cr\xe8me\n\nA card saved as Latin-1.\n"
    repo, owner = "alice/card-latin-1", _api(hub, accounts["alice"])
    seed(hub, accounts["alice"], repo, tiny_bert_folder, readme=None)
    hub.git_push(repo, {"README.md": readme}, "alice")
    opened = push(repo, backends="dynamo", token=accounts["bot"])
    assert opened.action == "opened", opened
    revision = f"refs/pr/{opened.pr_num}"
    assert Path(owner.hf_hub_download(repo, "README.md", revision=revision)).read_bytes() == readme
    assert "dynamo/model.pt2" in owner.list_repo_files(repo, revision=revision)
    assert "is not UTF-8 text" in owner.get_discussion_details(repo, opened.pr_num).events[0].content


def test_merged_pr_does_not_start_a_loop(hub, accounts, tiny_bert_folder):
    """Merging our PR moves main; the next push finds main already holding the exports and opens nothing."""
    repo = "alice/merged"
    seed(hub, accounts["alice"], repo, tiny_bert_folder)
    opened = push(repo, backends="dynamo", token=accounts["bot"])
    owner = _api(hub, accounts["alice"])
    owner.merge_pull_request(repo, opened.pr_num)
    assert "dynamo/model.pt2" in owner.list_repo_files(repo)
    again = push(repo, backends="dynamo", token=accounts["bot"])
    assert again.action == "up-to-date"
    assert len(list(owner.get_repo_discussions(repo))) == 1


@pytest.mark.parametrize("how", ["card", "file"])
def test_opt_out_is_respected(hub, accounts, tiny_bert_folder, how):
    repo = f"alice/opted-out-{how}"
    if how == "card":
        seed(
            hub,
            accounts["alice"],
            repo,
            tiny_bert_folder,
            readme="---\nhfexport: false\nlicense: mit\n---\n# no thanks\n",
        )
    else:
        seed(hub, accounts["alice"], repo, tiny_bert_folder, extra={".hfexport.yaml": "opt_out: true\n"})
    result = push(repo, backends="dynamo", token=accounts["bot"])
    report = result.report
    assert result.action == "opted-out" and report is None
    assert list(_api(hub, accounts["alice"]).get_repo_discussions(repo)) == []


def test_dry_run_writes_nothing(hub, accounts, tiny_bert_folder):
    repo = "alice/dry"
    sha = seed(hub, accounts["alice"], repo, tiny_bert_folder)
    result = push(repo, backends="dynamo", token=accounts["bot"], dry_run=True)
    report = result.report
    assert result.action == "dry-run" and report.ok
    assert "dynamo/model.pt2" in result.files and "README.md" in result.files
    assert START in result.card and "<!-- hfexport {" in result.description
    api = _api(hub, accounts["alice"])
    assert list(api.get_repo_discussions(repo)) == [] and api.model_info(repo).sha == sha
    assert api.list_repo_refs(repo, include_pull_requests=True).pull_requests == []


# ── refusals and failures ────────────────────────────────────────────────────


@pytest.mark.parametrize("who", ["wrong-user", "no-token", "bad-token"])
def test_private_repo_without_access_is_refused_clearly(hub, accounts, tiny_bert_folder, who):
    repo = "alice/private-model"
    seed(hub, accounts["alice"], repo, tiny_bert_folder, private=True)
    before = json.dumps(hub.store.load("model", repo), sort_keys=True)
    env = {
        "wrong-user": {"HF_TOKEN": accounts["mallory"]},
        "no-token": {},
        "bad-token": {"HF_TOKEN": "hf_not_a_real_token"},
    }[who]
    result = run_cli("push", repo, "--backends", "dynamo", env=env, timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "error:" in result.stderr and "fix:" in result.stderr and "token" in result.stderr.lower()
    assert "Traceback" not in result.stderr
    assert json.dumps(hub.store.load("model", repo), sort_keys=True) == before  # nothing written


def test_every_backend_failing_opens_a_discussion_not_a_pr(hub, accounts, workspace, monkeypatch):
    repo = "alice/all-fail"
    # Weights no other test exported: a cached export would (rightly) make the faults moot.
    seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "publish-all-fail", seed=13))
    api = _api(hub, accounts["alice"])
    # Killed, both (as the OOM killer does): the machine's doing, not the model's — nothing is posted.
    monkeypatch.setenv("HFEXPORT_FAULT", "dynamo:crash,onnx:crash")
    killed = push(repo, backends="dynamo,onnx", token=accounts["bot"])
    assert killed.action == "nothing-ran" and list(api.get_repo_discussions(repo)) == [], killed
    # Failing, both (the exporter cannot handle the model): the owner hears of it, once.
    monkeypatch.setenv("HFEXPORT_FAULT", "dynamo:fail,onnx:fail")
    result = push(repo, backends="dynamo,onnx", token=accounts["bot"])
    report = result.report
    assert result.action == "discussion" and not report.ok
    discussions = list(api.get_repo_discussions(repo))
    assert len(discussions) == 1 and not discussions[0].is_pull_request
    text = api.get_discussion_details(repo, discussions[0].num).events[0].content
    assert "dynamo" in text and "failed" in text and "injected by the HFEXPORT_FAULT test hook" in text
    # What is published holds no local path of ours.
    assert report.out_dir not in text and "/tmp/" not in text
    # Again: the same discussion is updated, still no PR.
    again = push(repo, backends="dynamo,onnx", token=accounts["bot"])
    assert again.action == "discussion" and again.pr_num == discussions[0].num
    assert len(list(api.get_repo_discussions(repo))) == 1
    assert len([e for e in api.get_discussion_details(repo, discussions[0].num).events if e.type == "comment"]) == 2


# ── reliability under injected faults ───────────────────────────────────────


def test_twenty_pushes_under_faults_each_end_with_exactly_one_pr(hub, accounts, tiny_bert_folder):
    repos = [f"alice/flaky-{i:02d}" for i in range(20)]
    for repo in repos:
        seed(hub, accounts["alice"], repo, tiny_bert_folder)
    hub.settings.faults.configure(rate=0.2, retry_after_s=0.1, seed=1234)
    hub.settings.faults.injected.clear()
    try:
        results = [push(repo, backends="dynamo", token=accounts["bot"]) for repo in repos]
    finally:
        hub.settings.faults.configure(rate=0.0)
    injected = dict(hub.settings.faults.injected)
    assert sum(injected.values()) >= 40 and {"429", "drop", "drop-after"} <= set(injected), injected
    api = _api(hub, accounts["alice"])
    for repo, result in zip(repos, results):
        assert result.action == "opened", (repo, result)
        prs = list(api.get_repo_discussions(repo))
        assert len(prs) == 1 and prs[0].is_pull_request, (repo, prs)
        files = set(api.list_repo_files(repo, revision=f"refs/pr/{prs[0].num}"))
        assert {"dynamo/model.pt2", "dynamo/export.json", "README.md", "hfexport-report.json"} <= files, repo
        card = Path(api.hf_hub_download(repo, "README.md", revision=f"refs/pr/{prs[0].num}")).read_text()
        assert card.count(START) == 1


def test_clear_error_once_retries_run_out(hub, accounts, tiny_bert_folder, monkeypatch):
    repo = "alice/down"
    seed(hub, accounts["alice"], repo, tiny_bert_folder)
    monkeypatch.setenv("HFEXPORT_HUB_RETRIES", "3")
    hub.settings.faults.configure(rate=1.0, kinds=("503",), seed=1)
    try:
        with pytest.raises(HubUnavailableError) as raised:
            push(repo, backends="dynamo", token=accounts["bot"])
    finally:
        hub.settings.faults.configure(rate=0.0, kinds=("500", "503", "429", "drop", "drop-after"))
    assert "kept failing" in raised.value.cause and "3 attempts" in raised.value.cause
    assert list(_api(hub, accounts["alice"]).get_repo_discussions(repo)) == []


# ── the LFS client path (HF_HUB_DISABLE_XET=1), with a >10 MB artifact ───────


def test_lfs_path_with_a_large_artifact(workspace, tmp_path):
    from huggingface_hub import HfApi
    from transformers import BertConfig, BertModel

    folder = workspace / "publish-big-bert"
    torch.manual_seed(0)
    # A 30k vocabulary makes the embeddings (and so model.pt2) about 12 MB: LFS, multipart.
    BertModel(
        BertConfig(vocab_size=30000, hidden_size=96, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    ).save_pretrained(folder)
    with DevHub(tmp_path / "lfs-hub") as lfs_hub:
        alice, bot = lfs_hub.add_user("alice"), lfs_hub.add_user("hfexport-bot")
        owner = HfApi(endpoint=lfs_hub.url, token=alice)
        owner.create_repo("alice/big")
        lfs_hub.settings.lfs = False  # seeded by this process's Xet-enabled client: inline
        owner.upload_folder(repo_id="alice/big", folder_path=folder)
        lfs_hub.settings.lfs = True  # the push below runs with HF_HUB_DISABLE_XET=1: basic + multipart LFS
        env = {
            "HF_ENDPOINT": lfs_hub.url,
            "HF_HUB_DISABLE_XET": "1",
            "HF_TOKEN": bot,
            "HFEXPORT_CACHE": str(tmp_path / "cache"),
        }
        result = run_cli("push", "alice/big", "--backends", "dynamo", "--json", env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        out = json.loads(result.stdout)
        assert out["action"] == "opened"
        revision = f"refs/pr/{out['pr_num']}"
        entries = {e.path: e for e in owner.list_repo_tree("alice/big", revision=revision, recursive=True)}
        program = entries["dynamo/model.pt2"]
        assert program.size > 10_000_000 and program.lfs is not None
        local = Path(out["report"]["out_dir"]) / "dynamo" / "model.pt2"
        assert program.lfs.sha256 == _file_sha256(local)
        assert lfs_hub.app.stats["multipart_uploads"] >= 1
        downloaded = Path(owner.hf_hub_download("alice/big", "dynamo/model.pt2", revision=revision))
        assert _file_sha256(downloaded) == _file_sha256(local)


def test_a_dry_run_prints_the_prs_title_description_and_card_on_stdout(hub, accounts, tiny_bert_folder):
    """`push --dry-run > pr.md`: the title, the description and the card as the PR would leave them
    go to stdout (progress and the table stay on stderr); nothing is written to the Hub."""
    repo = "alice/dry-run-text"
    seed(hub, accounts["alice"], repo, tiny_bert_folder)
    dry = run_cli("push", repo, "--backends", "dynamo", "--dry-run", env={"HF_TOKEN": accounts["bot"]})
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert dry.stdout.startswith("# Add torch.export (.pt2) exports, verified (hfexport)\n"), dry.stdout[:300]
    assert "This PR adds exports of this model at commit" in dry.stdout and START in dry.stdout
    assert "The owner's own words, kept byte for byte." in dry.stdout  # the card, the owner's text in it
    assert START not in dry.stderr and _our_prs(_api(hub, accounts["alice"]), repo) == []


def test_the_prs_title_names_its_formats_and_its_description_follows_each_update(
    hub, accounts, tiny_bert_folder, workspace
):
    """The title says what the PR adds; after an update (new weights, one more format) both the
    title and the description say what it holds now — the new commit, not the first."""
    repo, owner = "alice/titled", _api(hub, accounts["alice"])
    first = seed(hub, accounts["alice"], repo, tiny_bert_folder)
    opened = push(repo, backends="dynamo", token=accounts["bot"])
    details = owner.get_discussion_details(repo, opened.pr_num)
    assert details.title == "Add torch.export (.pt2) exports, verified (hfexport)"
    second = _new_weights(owner, repo, tiny_models.bert(workspace / "titled-b", seed=97))
    updated = push(repo, backends="dynamo,onnx", token=accounts["bot"])
    assert updated.action == "updated", updated
    details = owner.get_discussion_details(repo, opened.pr_num)
    assert details.title == "Add torch.export (.pt2) and ONNX exports, verified (hfexport)"
    description = next(e for e in details.events if e.type == "comment").content
    assert f"at commit `{second[:12]}`" in description and first[:12] not in description

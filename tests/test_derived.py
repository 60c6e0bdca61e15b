"""`hfexport push SOURCE --into REPO`: the exports committed to the `main` of a repo of one's own,
against the local Hub with the real `huggingface_hub` client over HTTP — created, left alone when
nothing changed, updated by one commit when the source does, its owner's card edits kept, and
read by transformers.js and optimum from `main` as eager computes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiny_models
import yaml
from card_runs import card_blocks, run_js, run_loader
from conftest import run_cli
from test_loaders_heads import _eager_head, _largest_score_gap

from hfexport import push
from hfexport.card.section import END, START
from hfexport.report import REPORT_FILE

SOURCE_CARD = """---
license: mit
pipeline_tag: feature-extraction
---

# A tiny BERT

Its owner's words.
"""


def _api(hub, token):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=token)


def _commits(api, repo_id: str) -> list[str]:
    return [c.commit_id for c in api.list_repo_commits(repo_id)]


def _metadata(card: str) -> dict:
    return yaml.safe_load(card.split("---\n")[1])


class TestLifecycle:
    source = "derived-alice/tiny-bert"
    into = "derived-carol/tiny-bert-ONNX"

    @pytest.fixture(scope="class")
    def users(self, hub):
        return {"alice": hub.add_user("derived-alice"), "carol": hub.add_user("derived-carol")}

    @pytest.fixture(scope="class")
    def first(self, hub, users, workspace):
        folder = tiny_models.bert_head_with_tokenizer(workspace / "derived-bert", "BertModel")
        alice = _api(hub, users["alice"])
        alice.create_repo(self.source)
        alice.upload_folder(repo_id=self.source, folder_path=folder)
        alice.upload_file(path_or_fileobj=SOURCE_CARD.encode(), path_in_repo="README.md", repo_id=self.source)
        sha = alice.model_info(self.source).sha
        result = push(self.source, into=self.into, backends="onnx", variants="none", token=users["carol"])
        return folder, sha, result

    def test_the_first_push_creates_the_repo_with_the_exports_the_loaders_files_and_a_card_of_its_own(
        self, hub, users, first
    ):
        folder, sha, result = first
        assert result.action == "created" and result.report.ok, result
        assert result.repo_url == f"{hub.url}/{self.into}" and result.pr_url is None
        carol = _api(hub, users["carol"])
        files = set(carol.list_repo_files(self.into))
        assert {"onnx/model.onnx", REPORT_FILE, "README.md", "config.json", "tokenizer.json"} <= files, files
        # The loaders' files are the source's, byte for byte; the weights are not copied.
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
            assert Path(carol.hf_hub_download(self.into, name)).read_bytes() == (folder / name).read_bytes(), name
        assert "model.safetensors" not in files
        card = Path(carol.hf_hub_download(self.into, "README.md")).read_text()
        meta = _metadata(card)
        assert meta["base_model"] == self.source and meta["base_model_relation"] == "quantized", meta
        assert meta["license"] == "mit" and meta["pipeline_tag"] == "feature-extraction", meta
        assert "onnx" in meta["tags"] and "hfexport" in meta["tags"], meta
        # The library its files load in whole (the Hub's "Use this model"): transformers.js here.
        assert meta["library_name"] == "transformers.js", meta
        # What keeps it current, truthfully: the rerun that does, not a promise nothing keeps.
        assert "keeps them up to date" not in card, card
        assert f"`hfexport push {self.source} --into {self.into}`, run again" in card, card
        assert f"[{self.source}]({hub.url}/{self.source}) at commit `{sha[:12]}`" in card and START in card
        # Its blocks load from main: no pull request to try first.
        assert "refs/pr/" not in card and f'"{self.into}", "main"' in card
        # Nothing was asked of the source: no PR, no discussion, no commit.
        alice = _api(hub, users["alice"])
        assert list(alice.get_repo_discussions(self.source)) == [] and alice.model_info(self.source).sha == sha
        report = json.loads(Path(carol.hf_hub_download(self.into, REPORT_FILE)).read_text())
        assert {f["path"] for f in report["copied"]} >= {"config.json", "tokenizer.json"}, report

    def test_a_rerun_on_the_same_source_commit_writes_nothing(self, hub, users, first):
        carol = _api(hub, users["carol"])
        before = _commits(carol, self.into)
        again = push(self.source, into=self.into, backends="onnx", variants="none", token=users["carol"])
        assert again.action == "up-to-date" and again.commit is None, again
        assert _commits(carol, self.into) == before

    def test_a_new_source_commit_is_one_commit_keeping_the_owners_card_edits_and_files(
        self, hub, users, first, workspace
    ):
        folder, _, _ = first
        carol, alice = _api(hub, users["carol"]), _api(hub, users["alice"])
        # The derived repo's owner writes around our section, and replaces a copied file with her own.
        card = Path(carol.hf_hub_download(self.into, "README.md")).read_text()
        edited = card.replace(START, "Carol's note, above the exports.\n\n" + START) + "\nCarol's footer.\n"
        carol.upload_file(path_or_fileobj=edited.encode(), path_in_repo="README.md", repo_id=self.into)
        hers = b'{"carol": "her own tokenizer settings"}\n'
        carol.upload_file(path_or_fileobj=hers, path_in_repo="tokenizer_config.json", repo_id=self.into)
        # The source's owner retrains: new weights.
        retrained = tiny_models.bert(workspace / "derived-bert-retrained", seed=7)
        alice.upload_file(
            path_or_fileobj=str(retrained / "model.safetensors"), path_in_repo="model.safetensors", repo_id=self.source
        )
        new_sha = alice.model_info(self.source).sha
        before = _commits(carol, self.into)
        updated = push(self.source, into=self.into, backends="onnx", variants="none", token=users["carol"])
        assert updated.action == "updated" and updated.commit is not None, updated
        after = _commits(carol, self.into)
        assert len(after) == len(before) + 1 and after[0] == updated.commit
        card = Path(carol.hf_hub_download(self.into, "README.md")).read_text()
        assert "Carol's note, above the exports.\n\n" + START in card and card.endswith("\nCarol's footer.\n")
        assert f"at commit `{new_sha[:12]}`" in card and card.count(START) == 1 and card.count(END) == 1
        assert Path(carol.hf_hub_download(self.into, "tokenizer_config.json")).read_bytes() == hers
        assert "tokenizer_config.json" in updated.description, updated.description  # said, not silently kept
        report = json.loads(Path(carol.hf_hub_download(self.into, REPORT_FILE)).read_text())
        assert report["source"]["sha"] == new_sha and report["backends"][0]["source_sha"] == new_sha


def test_a_derived_repo_is_read_by_transformers_js_and_optimum_from_main_as_eager(hub, tmp_path):
    """A text classifier with its tokenizer, pushed `--into` a repo of the bot's own as a user runs
    it (a process, `--json`): the derived card's transformers.js block, run as printed from `main`,
    reports eager's labels and scores; optimum's `ORTModelForSequenceClassification` from `main`
    computes eager's logits. (Every block of a card runs as printed in test_card_snippets.py; a
    derived card's differ only by naming the derived repo, and no PR revision.)"""
    task = "text-classification"
    folder = tiny_models.bert_head_with_tokenizer(tmp_path / "model", "BertForSequenceClassification")
    owner, bot = hub.add_user("derived-owner"), hub.add_user("derived-bot")
    api = _api(hub, owner)
    api.create_repo("derived-owner/classifier")
    api.upload_folder(repo_id="derived-owner/classifier", folder_path=folder)
    into = "derived-bot/classifier-ONNX"
    pushed = run_cli(
        "push",
        "derived-owner/classifier",
        "--into",
        into,
        "--backends",
        "onnx",
        "--variants",
        "none",
        "--json",
        env={"HF_TOKEN": bot},
    )
    assert pushed.returncode == 0, pushed.stderr[-3000:]
    outcome = json.loads(pushed.stdout)
    assert outcome["action"] == "created" and outcome["repo_url"].endswith(into), outcome
    assert f"created: {outcome['repo_url']}" in pushed.stderr
    card = Path(_api(hub, bot).hf_hub_download(into, "README.md")).read_text()
    blocks, js_blocks = card_blocks(card), card_blocks(card, "js")
    assert blocks and len(js_blocks) == 1 and all(into in b and "refs/pr" not in b for b in blocks + js_blocks)
    assert any("ORTModelForSequenceClassification.from_pretrained(repo" in b for b in blocks), blocks
    got, (eager, _) = run_js(js_blocks[0], tmp_path / "js"), _eager_head(task, folder)
    assert got.returncode == 0, got.stderr[-3000:]
    gap = _largest_score_gap([(r["label"], r["score"]) for r in json.loads(got.stdout.strip())], eager)
    assert gap < 1e-5, gap
    # optimum's own class, from the derived repo's main, computes eager's logits.
    texts = ["hfexport validated this file against the original model.", "Short one."]
    logits = run_loader(tmp_path / "optimum", "optimum-sequence-classification", into, "main", json.dumps(texts))
    eager_logits = _eager_logits(folder, texts)
    assert max(abs(a - b) for row, ref in zip(logits, eager_logits) for a, b in zip(row, ref)) < 1e-4


def _eager_logits(folder: Path, texts: list[str]) -> list:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.inference_mode():
        return model(**AutoTokenizer.from_pretrained(folder)(texts, padding=True, return_tensors="pt")).logits.tolist()


@pytest.mark.parametrize(
    ("into", "said"),
    [
        ("not a repo", "is not a repo id"),
        ("lonely-name", "names no namespace"),
        ("derived-src/model", "names the source repo"),
    ],
)
def test_a_bad_into_is_refused_before_anything_is_read_or_written(hub, into, said):
    token = hub.add_user("derived-bad")
    pushed = run_cli("push", "derived-src/model", "--into", into, "--json", env={"HF_TOKEN": token})
    assert pushed.returncode == 2, (pushed.stdout, pushed.stderr)
    answer = json.loads(pushed.stdout)
    assert said in answer["error"] and answer["fix"], answer
    assert token not in pushed.stdout + pushed.stderr


def test_a_dry_run_into_needs_no_token_prints_the_commit_and_card_and_creates_nothing(hub, tmp_path):
    owner = hub.add_user("derived-dry")
    api = _api(hub, owner)
    api.create_repo("derived-dry/model")
    api.upload_folder(repo_id="derived-dry/model", folder_path=tiny_models.bert(tmp_path / "model"))
    # No --backends: a repo named "-ONNX" gets the ONNX export alone (no pickled .pt2, no .pte).
    args = ("push", "derived-dry/model", "--into", "someone/model-ONNX", "--variants", "none")
    dry = run_cli(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr[-3000:]
    would = dry.stderr.split("Would commit:")[1]
    assert "onnx/model.onnx" in would and "dynamo/" not in would and "executorch/" not in would, would
    assert dry.stdout.startswith("# Commit to someone/model-ONNX") and "base_model: derived-dry/model" in dry.stdout
    assert "(the card, as the commit would leave it)" in dry.stdout and "refs/pr/" not in dry.stdout
    assert not api.repo_exists("someone/model-ONNX")


def test_into_a_namespace_the_token_cannot_write_is_refused_before_the_export_with_that_fix(hub, tmp_path):
    """`push --into` someone else's namespace: refused before anything is downloaded or exported, and
    the fix is about the repo asked for (who may write there), not about opening pull requests."""
    owner, other = hub.add_user("derived-src2"), hub.add_user("derived-nobody")
    api = _api(hub, owner)
    api.create_repo("derived-src2/model")
    api.upload_folder(repo_id="derived-src2/model", folder_path=tiny_models.bert(tmp_path / "model"))
    pushed = run_cli(
        "push",
        "derived-src2/model",
        "--into",
        "derived-src2/model-ONNX",
        "--backends",
        "onnx",
        "--json",
        env={"HF_TOKEN": other},
    )
    assert pushed.returncode == 2, (pushed.stdout, pushed.stderr[-2000:])
    answer = json.loads(pushed.stdout)
    assert "cannot create derived-src2/model-ONNX" in answer["error"], answer
    assert "push --into needs a token that may create and write to derived-src2/model-ONNX" in answer["fix"], answer
    assert "pull request" not in answer["fix"] and other not in pushed.stdout + pushed.stderr, answer
    assert "exporting" not in pushed.stderr and not api.repo_exists("derived-src2/model-ONNX")

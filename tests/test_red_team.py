"""The red team: what a hostile repo, requester or race does to each door hfexport opens (issue 56).

Every door joins this module with its attacks — `push`, `push --into`, `serve` and whatever comes
next (a trigger, a destination, a page). Each scenario runs the real processes against the local
Hub and asserts what the attacker wanted did not happen: nothing written outside the job's own
folders, nothing it planted published, no token anywhere it could read it back.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
import tiny_models

import hfexport
from hfexport.pipeline.cache import cached
from hfexport.report import Source

OWNER = "redteam-mallory"


@pytest.fixture(scope="module")
def team(hub, tmp_path_factory):
    """Mallory's account (the hostile repos'), a bot that pushes, a victim's account, and an HF home
    with a saved login (another account's token) and an export cache of its own."""
    root = tmp_path_factory.mktemp("red-team")
    home, cache = root / "hf-home", root / "cache"
    home.mkdir()
    saved = hub.add_user("redteam-saved-login")
    (home / "token").write_text(saved)
    return {
        "mallory": hub.add_user(OWNER),
        "bot": hub.add_user("redteam-bot"),
        "victim": hub.add_user("redteam-victim"),
        "saved": saved,
        "home": home,
        "cache": cache,
        "root": root,
    }


def _api(hub, token):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=token)


def _push(team, *arguments: str, records: Path | None = None) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HF_TOKEN": team["bot"],
        "HF_HOME": str(team["home"]),
        "HFEXPORT_CACHE": str(team["cache"]),
        "HFEXPORT_TEST_WRITABLE": str(records or ""),
    }
    return subprocess.run(
        [sys.executable, "-m", "hfexport", "push", *arguments, "--json"],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )


def _published(api, repo: str, revision: str) -> dict[str, bytes]:
    files = {}
    for name in api.list_repo_files(repo, revision=revision):
        files[name] = Path(api.hf_hub_download(repo, name, revision=revision)).read_bytes()
    return files


def _attempts(records: Path) -> dict[str, str]:
    """What the hostile code's every import tried, and whether one of them did it ("done")."""
    attempts: dict[str, str] = {}
    for record in records.glob("attack-*.json"):
        for name, outcome in json.loads(record.read_text()).items():
            attempts[name] = outcome if attempts.get(name) != "done" else "done"
    return attempts


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


@pytest.fixture(scope="module")
def victim(hub, team, workspace):
    """Another user's repo, pushed first: its download sits in the shared HF cache and its export
    in the shared export cache — what the hostile repo's code reaches for."""
    repo = "redteam-victim/bert"
    api = _api(hub, team["victim"])
    api.create_repo(repo)
    api.upload_folder(repo_id=repo, folder_path=tiny_models.bert(workspace / "redteam-victim", seed=3))
    done = _push(team, repo, "--backends", "onnx")
    assert done.returncode == 0, done.stderr[-3000:]
    exports = sorted((team["cache"] / "exports").glob("*/onnx/*.onnx"))
    snapshots = sorted((team["home"] / "hub").glob("models--redteam-victim--bert/snapshots/*/config.json"))
    assert exports and snapshots
    return {"repo": repo, "exports": exports, "snapshot": snapshots[0]}


def _targets(team, victim) -> dict[str, Path]:
    """Where the hostile code writes, each a place a later process with a token reads or runs."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    targets = {
        "a .pth in site-packages (the next Python runs it)": purelib / "hfexport_redteam.pth",
        "a dotfile in the real home": Path(os.path.expanduser("~")) / ".hfexport-redteam-profile",
        "the checkout": Path(hfexport.__file__).resolve().parents[1] / ".hfexport-redteam",
        "another repo's download": victim["snapshot"],
        "the shared /tmp": Path(tempfile.gettempdir()) / "hfexport-redteam-planted",
        **{f"another repo's cached export {i}": path for i, path in enumerate(victim["exports"])},
    }
    if not (purelib / "sitecustomize.py").exists():
        targets["sitecustomize (the next Python runs it)"] = purelib / "sitecustomize.py"
    for seal in sorted((team["cache"] / "seals").glob("*.json")):
        targets[f"the cache's seal {seal.name}"] = seal
    return targets


def test_a_repos_code_writes_nowhere_it_is_read_and_publishes_nothing_it_planted(
    hub, team, victim, workspace, monkeypatch
):
    """Rows 1-3: under --trust-remote-code the repo's code (planner and workers) tries a .pth and
    sitecustomize in site-packages, a dotfile, the checkout, another repo's download and cached
    export (and the cache's seals), and links to `/proc/self/environ` and the saved login in its own
    snapshot, where `package` copies support files from. Through `push` and `push --into`: every
    write is refused, every place is as it was, the victim's export is still reused as sealed, and
    nothing either push published holds a token or a file the code planted."""
    records = team["root"] / "records-writes"
    targets = _targets(team, victim)
    before = {name: _digest(path) for name, path in targets.items()}
    snapshots = str(team["home"] / "hub" / f"models--{OWNER}--writer" / "snapshots" / "*")
    links = {"special_tokens_map.json": "/proc/self/environ", "added_tokens.json": str(team["home"] / "token")}
    plan = {"write": {name: str(path) for name, path in targets.items()}, "links": {snapshots: links}}
    folder = tiny_models.hostile_writer_bert(workspace / "redteam-writer", records, plan)
    repo = f"{OWNER}/writer"
    mallory = _api(hub, team["mallory"])
    mallory.create_repo(repo)
    mallory.upload_folder(repo_id=repo, folder_path=folder)
    try:
        pushed = _push(team, repo, "--backends", "dynamo,onnx", "--trust-remote-code", records=records)
        assert pushed.returncode == 0, pushed.stderr[-3000:]
        into = ("--into", "redteam-bot/writer-ONNX")
        derived = _push(team, repo, "--backends", "onnx", "--trust-remote-code", *into, records=records)
        assert derived.returncode == 0, derived.stderr[-3000:]
        after = {name: _digest(path) for name, path in targets.items()}
    finally:
        for name, path in targets.items():  # on a sandbox that let them through: leave no planted file behind
            if before[name] is None:
                path.unlink(missing_ok=True)

    attempts = _attempts(records)
    assert len(attempts) >= len(targets), sorted(attempts)  # the attack ran, in the planner and the workers
    # Written only where nobody else looks: the sandbox's private /tmp (gone with it).
    written = [name for name, outcome in attempts.items() if outcome == "done" and "/tmp" not in name]
    assert not written, attempts
    assert after == before, [name for name in targets if after[name] != before[name]]

    bot = _api(hub, team["bot"])
    pr = json.loads(pushed.stdout)["pr_num"]
    published = {
        **{f"pr:{k}": v for k, v in _published(bot, repo, f"refs/pr/{pr}").items()},
        **{f"into:{k}": v for k, v in _published(bot, "redteam-bot/writer-ONNX", "main").items()},
    }
    for secret in (team["bot"], team["saved"]):
        leaked = [name for name, content in published.items() if secret.encode() in content]
        assert not leaked, leaked
    assert not [name for name in published if name.rsplit("/", 1)[-1] in links], sorted(published)

    # The victim's export was neither rewritten nor unsealed: a push of the same weights reuses it.
    monkeypatch.setenv("HFEXPORT_CACHE", str(team["cache"]))
    source = Source("hub", victim["repo"], "b" * 40)
    assert all(cached(path.parents[1], source) is not None for path in victim["exports"])


def test_a_link_left_in_a_workers_output_never_crosses_back(hub, team, workspace):
    """Row 1, the output side: the code links `/proc/self/environ` and the saved login into the
    folder its worker writes the export to. The backend fails naming the link; nothing of it is
    published, and no token is in anything the push wrote."""
    records = team["root"] / "records-out"
    outputs = [str(Path(tempfile.gettempdir()) / "hfexport-workers-*" / "job-*" / "out")]
    outputs.append(str(team["cache"] / "exports" / ".*.partial-*" / "*"))  # where workers wrote before
    links = {"planted.onnx": "/proc/self/environ", "planted_login.json": str(team["home"] / "token")}
    plan = {"write": {}, "links": {pattern: links for pattern in outputs}}
    folder = tiny_models.hostile_writer_bert(workspace / "redteam-linker", records, plan)
    repo = f"{OWNER}/linker"
    mallory = _api(hub, team["mallory"])
    mallory.create_repo(repo)
    mallory.upload_folder(repo_id=repo, folder_path=folder)

    pushed = _push(
        team, repo, "--backends", "onnx", "--trust-remote-code", "--into", "redteam-bot/linker-ONNX", records=records
    )
    attempts = _attempts(records)
    planted = [name for name, outcome in attempts.items() if outcome == "done"]
    assert planted, attempts  # its own output folder is writable: the links were made there
    said = " ".join(pushed.stderr.split())
    assert pushed.returncode == 1, pushed.stderr[-3000:]
    assert "which is a symbolic link: only the regular files it wrote cross back from its sandbox" in said, said
    for secret in (team["bot"], team["saved"]):
        assert secret not in pushed.stdout + pushed.stderr
    bot = _api(hub, team["bot"])
    assert not bot.repo_exists("redteam-bot/linker-ONNX")  # every backend failed: nothing is published
    kept = [p for p in team["cache"].rglob("*") if p.name in links]
    assert not kept, kept

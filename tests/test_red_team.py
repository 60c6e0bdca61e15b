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


def _push(team, *arguments: str, records: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        **(env or {}),
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


# ── push --into: a derived repo (rows 5, 6, 9, 11) ──────────────────────────


def _head(api, repo: str) -> str:
    return api.list_repo_commits(repo)[0].commit_id


def test_a_derived_repo_follows_one_source_its_newest_commit_and_its_privacy(hub, team, workspace):
    """Row 11: of two source commits, the newer one's exports stay (the older push, as a race's
    loser re-reads it, says newer-held and writes nothing). Row 5: once the source turns private
    and moves on, the public derived repo is refused the private commit's exports, as is a public
    repo of the owner's own. Row 9: another model pushed into it is refused, naming its source."""
    alice_token = hub.add_user("redteam-alice")
    alice = _api(hub, alice_token)
    source, into = "redteam-alice/bert", "redteam-alice/bert-ONNX"
    alice.create_repo(source)
    alice.upload_folder(repo_id=source, folder_path=tiny_models.bert(workspace / "redteam-alice-bert", seed=11))
    older = _head(alice, source)
    alice.upload_file(path_or_fileobj=b"# newer\n", path_in_repo="NOTES.md", repo_id=source)
    newer = _head(alice, source)

    def push(*arguments: str) -> subprocess.CompletedProcess:
        return _push({**team, "bot": alice_token}, *arguments, "--backends", "dynamo")

    made = push(source, "--revision", newer, "--into", into)
    assert made.returncode == 0 and json.loads(made.stdout)["action"] == "created", made.stderr[-2000:]
    held = _head(alice, into)
    back = push(source, "--revision", older, "--into", into)
    assert back.returncode == 0 and json.loads(back.stdout)["action"] == "newer-held", back.stderr[-2000:]
    assert _head(alice, into) == held

    alice.update_repo_settings(source, private=True)
    alice.upload_file(path_or_fileobj=b"# private now\n", path_in_repo="NOTES.md", repo_id=source)
    refused = push(source, "--into", into)
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert f"{source} is private and {into} is public" in said and "Make" in said, said
    alice.create_repo("redteam-alice/public-ONNX")
    also = push(source, "--into", "redteam-alice/public-ONNX")
    assert also.returncode == 2 and "is private and redteam-alice/public-ONNX is public" in " ".join(
        also.stderr.split()
    )
    assert _head(alice, into) == held and not alice.model_info(into).private

    mallory = _api(hub, team["mallory"])
    mallory.create_repo(f"{OWNER}/bert")
    mallory.upload_folder(repo_id=f"{OWNER}/bert", folder_path=tiny_models.bert(workspace / "redteam-evil", seed=12))
    foreign = push(f"{OWNER}/bert", "--into", into)
    said = " ".join(foreign.stderr.split())
    assert foreign.returncode == 2 and f"{into} holds the exports of {source}, not {OWNER}/bert" in said, said
    assert _head(alice, into) == held


LICENSE_NAME = "it\x92s ours\x7f, \x85 all of it"  # a cp1252 apostrophe mis-decoded, DEL, NEL


def test_a_gated_sources_derived_repo_is_created_private_and_never_opened(hub, team, workspace):
    """Row 6: the exports of a gated model go to a derived repo created private; made public and
    ungated by its owner, it is refused the next commit's exports. Row 13: the source's license
    name holds C1 controls and DEL, and the derived card's metadata reads back as the source's.
    Row 14: the browser's runtime is missing here, and nothing published names this machine's
    folders."""
    import yaml

    owner_token = hub.add_user("redteam-gatekeeper")
    owner = _api(hub, owner_token)
    source, into = "redteam-gatekeeper/bert", "redteam-bot/gated-bert-ONNX"
    owner.create_repo(source)
    folder = tiny_models.bert(workspace / "redteam-gated", seed=13)
    (folder / "README.md").write_text(f"---\nlicense: other\nlicense_name: {json.dumps(LICENSE_NAME)}\n---\n# Gated\n")
    owner.upload_folder(repo_id=source, folder_path=folder)
    owner.update_repo_settings(source, gated="manual")
    hub.grant_access(source, "redteam-bot")

    missing = team["root"] / "no-such-place" / "onnxruntime-web"
    web = {"HFEXPORT_WEB_CHECKS": "1", "HFEXPORT_ONNXRUNTIME_WEB": str(missing)}
    made = _push(team, source, "--backends", "onnx", "--into", into, env=web)
    assert made.returncode == 0 and json.loads(made.stdout)["action"] == "created", made.stderr[-2000:]
    bot = _api(hub, team["bot"])
    assert bot.model_info(into).private is True
    published = _published(bot, into, "main")
    card = published["README.md"].decode()
    assert yaml.safe_load(card.split("---\n")[1])["license_name"] == LICENSE_NAME
    report = published["hfexport-report.json"].decode()
    assert "not installed" in report  # the web check said why it did not run...
    local = [name for name, content in published.items() if str(team["root"]).encode() in content]
    assert not local, local  # ...and no file names where
    bot.update_repo_settings(into, private=False)
    owner.upload_file(path_or_fileobj=b"# moved on\n", path_in_repo="NOTES.md", repo_id=source)
    held = _head(bot, into)
    refused = _push(team, source, "--backends", "onnx", "--into", into, env=web)
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 2 and f"{source} is gated (access manual)" in said, said
    assert _head(bot, into) == held

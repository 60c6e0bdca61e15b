"""Least privilege and test hooks: a repo's code runs only where no secret is, and a test switch
is needed for the fault hook to do anything."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import pytest
import tiny_models
from conftest import run_cli

SECRETS = {
    "HF_TOKEN": None,  # the bot's real token, filled in below
    "HFEXPORT_WEBHOOK_SECRET": "webhook-secret-for-the-hardening-test",
    "INPUT_HF-TOKEN": "hf_action_input_copy_of_the_token",
    "ACTIONS_RUNTIME_TOKEN": "github-actions-runtime-token-value",
    "GITHUB_TOKEN": "ghs_github_token_value",
}


def test_trusted_remote_code_runs_only_in_processes_that_hold_no_secret(hub, workspace):
    """A model whose classes live in its repo (auto_map) and whose modules, on import, hunt for a
    credential every way a same-user process could: each process's /proc/PID/environ (push's holds
    HF_TOKEN), the saved logins under HF_HOME, the same after unmounting /proc, and the Hub over the
    network. Pushed with --trust-remote-code, it plans (task from the mapped class), exports and
    validates — and none of that code found a token or a secret (`assert_no_credential_reached`)."""
    from huggingface_hub import HfApi

    owner, bot = hub.add_user("rc-owner"), hub.add_user("rc-bot")
    home = workspace / "rc-hf-home"  # a saved login (`hf auth login`), of another account than HF_TOKEN's
    home.mkdir()
    (home / "token").write_text(owner)
    (home / "stored_tokens").write_text(f"[owner]\nhf_token = {owner}\n")
    records = workspace / "remote-code-records"
    folder = tiny_models.remote_code_bert(workspace / "remote-code-bert", records, **hunting(home, hub))
    api = HfApi(endpoint=hub.url, token=owner)
    api.create_repo("rc-owner/dumpbert")
    api.upload_folder(repo_id="rc-owner/dumpbert", folder_path=folder)

    secrets = {**SECRETS, "HF_TOKEN": bot, "SAVED_LOGIN": owner}
    push = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hfexport",
            "push",
            "rc-owner/dumpbert",
            "--backends",
            "dynamo,onnx",
            "--trust-remote-code",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **SECRETS, "HF_TOKEN": bot, "HF_HOME": str(home), "HFEXPORT_TEST_WRITABLE": str(records)},
    )
    stdout, stderr = push.communicate(timeout=900)
    assert push.returncode == 0, stderr[-3000:]
    result = json.loads(stdout)
    assert result["action"] == "opened" and result["report"]["ok"] is True
    assert result["report"]["plan"]["task"] == "text-classification"
    assert result["report"]["plan"]["auto_class"] == "AutoModelForSequenceClassification"
    # The planning process and each backend's worker imported the code; the publishing parent never did.
    assert_no_credential_reached(records, secrets, processes=3)
    # The card tells users the files need trust too.
    card = api.hf_hub_download("rc-owner/dumpbert", "README.md", revision=f"refs/pr/{result['pr_num']}")
    assert 'subfolder="onnx", revision=revision, trust_remote_code=True' in open(card).read()


def hunting(home: Path, hub) -> dict:
    """What `tiny_models.remote_code_bert`'s code hunts: the Hub client's saved logins in `home`
    (HF_HOME) and in the default place, and the local Hub's port. The model's own config.json is
    hunted too, as a control: readable, it proves the hunt ran."""
    host, port = hub.url.split("//")[1].split(":")
    paths = (home / "token", home / "stored_tokens", Path.home() / ".cache/huggingface/token")
    return {"hunt": (*map(str, paths), CONTROL), "knock": (host, int(port))}


CONTROL = "/etc/hostname"  # any file every user may read: the hunt must reach it


def assert_no_credential_reached(records: Path, secrets: dict[str, str], processes: int) -> None:
    """Every process that imported the repo's code (at least `processes`: the planner and each
    backend's worker) recorded its hunt, and none of them reached a secret's value, unmounted
    anything or reached the network."""
    hunts = [path for path in records.glob("*.json") if not path.name.startswith("attack-")]
    recorded = {path.name: json.loads(path.read_text()) for path in hunts}
    assert len({name.split("-", 1)[0] for name in recorded}) >= processes, sorted(recorded)
    for name, record in recorded.items():
        reached = record.pop("__reached__")
        assert CONTROL in reached, (name, sorted(reached))  # the hunt ran, and could read a file
        for variable, value in secrets.items():
            assert value not in json.dumps(record), (name, "its environment", variable)
            found = [where for where, text in reached.items() if value in text]
            assert not found, (name, variable, found)
        assert not [where for where in reached if where.startswith(("umount", "network"))], (name, sorted(reached))
        assert record.get("HF_HUB_OFFLINE") == "1", name


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not _has_user("nobody"), reason="switching users needs root and a 'nobody' user"
)


@needs_root
def test_as_root_the_repos_code_runs_as_the_worker_user_and_its_files_come_back(tmp_path):
    """The container's arrangement: hfexport runs as root (as GitHub requires of Docker actions)
    with HFEXPORT_WORKER_USER set. Every process that imports the repo's code — the planner and
    each backend's worker — runs as that user; the validated files it wrote belong to root once it
    exits (a later worker under the same user cannot alter them)."""
    open_dir = Path(tempfile.mkdtemp(prefix="hfexport-open-"))  # pytest's tmp_path is private (0700)
    try:
        open_dir.chmod(0o755)
        python = _python_others_can_run(open_dir)
        if python is None:
            pytest.skip("no Python interpreter outside a private home for the worker user to run")
        records = open_dir / "records"
        records.mkdir()
        records.chmod(0o777)
        folder = tiny_models.remote_code_bert(open_dir / "model", records)
        for file in folder.iterdir():
            file.chmod(0o644)  # as the Hub client leaves downloads (safetensors writes its own 0600)

        def export(model: Path, out: Path) -> subprocess.CompletedProcess:
            return subprocess.run(
                [
                    str(python),
                    "-m",
                    "hfexport",
                    "export",
                    str(model),
                    "--backends",
                    "onnx",
                    "--trust-remote-code",
                    "--out",
                    str(out),
                    "--json",
                ],
                capture_output=True,
                text=True,
                timeout=600,
                env={**os.environ, "HFEXPORT_WORKER_USER": "nobody", "HFEXPORT_TEST_WRITABLE": str(records)},
            )

        result = export(folder, open_dir / "out")
        assert result.returncode == 0, result.stderr[-3000:]
        assert json.loads(result.stdout)["ok"] is True
        # Who wrote each record, as the machine sees it (inside its sandbox, the code sees uid 0).
        uids = {path.name: path.stat().st_uid for path in records.glob("*.json")}
        assert len({name.split("-", 1)[0] for name in uids}) >= 2, sorted(uids)  # the planner and the worker
        assert set(uids.values()) == {pwd.getpwnam("nobody").pw_uid}, uids
        owners = {path.stat().st_uid for path in (open_dir / "out").rglob("*")}
        assert owners == {0}, owners

        # A model the worker user cannot read — in a private folder, or one file private — is refused
        # before any export, naming the file and the fix.
        private = tmp_path / "private-model"
        shutil.copytree(folder, private)
        (folder / "model.safetensors").chmod(0o600)
        for model, culprit in ((private, _first_private_folder(private)), (folder, str(folder / "model.safetensors"))):
            refused = export(model, open_dir / "out-private")
            assert refused.returncode == 2, refused.stderr[-2000:]
            said = " ".join(refused.stderr.split())
            assert "The worker user 'nobody' (HFEXPORT_WORKER_USER) cannot read the model's files" in said
            assert f"{culprit} is not open to it" in said and "HF_HOME" in said and "Traceback" not in said
            assert not (open_dir / "out-private").exists()
    finally:
        shutil.rmtree(open_dir, ignore_errors=True)


def _first_private_folder(path: Path) -> str:
    return next(str(p) for p in reversed(path.parents) if not p.stat().st_mode & 0o001)


def _python_others_can_run(root: Path) -> Path | None:
    """An interpreter the worker user can run that sees this environment's packages. This test's
    own Python may live under a private home (pyenv in /root); the container's is in /usr/local."""
    system = Path("/usr/bin/python3.11")
    if sys.version_info[:2] != (3, 11) or not system.exists():
        return None
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(system)
    (venv / "pyvenv.cfg").write_text(f"home = {system.parent}\ninclude-system-site-packages = false\n")
    site_packages = venv / "lib" / "python3.11" / "site-packages"
    site_packages.mkdir(parents=True)
    ours = sysconfig.get_paths()["purelib"]
    (site_packages / "hfexport-env.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    return venv / "bin" / "python"


def test_a_worker_user_that_cannot_be_switched_to_is_a_clear_error(tmp_path, tiny_bert_folder):
    """HFEXPORT_WORKER_USER naming no user is bad input (exit 2), before anything runs."""
    result = run_cli(
        "export",
        str(tiny_bert_folder),
        "--backends",
        "onnx",
        "--out",
        str(tmp_path / "out"),
        env={"HFEXPORT_WORKER_USER": "no-such-user-hfexport"},
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "HFEXPORT_WORKER_USER='no-such-user-hfexport' names no user" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_repos_code_is_refused_where_the_machine_gives_no_sandbox(workspace, tmp_path):
    """A container whose seccomp profile refuses new namespaces (Docker's default), as an `unshare`
    that fails the way it does there: --trust-remote-code is bad input (exit 2) that names why and
    the fix — and none of the repo's code ran."""
    records = tmp_path / "records"
    folder = tiny_models.remote_code_bert(tmp_path / "model", records)
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "unshare").write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    (tools / "unshare").chmod(0o755)
    path = f"{tools}:{os.environ['PATH']}"
    result = run_cli("export", str(folder), "--trust-remote-code", "--out", str(tmp_path / "out"), env={"PATH": path})
    assert result.returncode == 2, result.stderr[-2000:]
    said = " ".join(result.stderr.split())
    assert "needs a sandbox, and this machine gives none: `unshare` was refused (unshare: unshare failed" in said
    assert "HFEXPORT_WORKER_USER" in said and "Traceback" not in said
    assert not list(records.glob("*.json")) and not (tmp_path / "out").exists()


def test_a_planning_error_in_the_isolated_process_keeps_its_type_and_fix(workspace, tmp_path):
    """The repo's code is planned in a child process; its refusal comes back as the same typed
    error, with its cause and fix, and exit code 2."""
    folder = tiny_models.remote_code_bert(workspace / "remote-code-bad-map", workspace / "remote-code-bad-map-records")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": config["auto_map"]["AutoConfig"]}  # maps no model class
    (folder / "config.json").write_text(json.dumps(config))
    result = run_cli("export", str(folder), "--trust-remote-code", "--out", str(tmp_path / "out"), timeout=300)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "auto_map maps no AutoModel class" in result.stderr and "fix:" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


def test_the_fault_hook_needs_the_test_switch(tmp_path, tiny_bert_folder):
    out = tmp_path / "out"
    off = run_cli(
        "export",
        str(tiny_bert_folder),
        "--backends",
        "dynamo",
        "--out",
        str(out),
        "--json",
        env={"HFEXPORT_TESTING": "", "HFEXPORT_FAULT": "dynamo:crash"},
        timeout=600,
    )
    assert off.returncode == 0, off.stderr[-2000:]
    report = json.loads(off.stdout)
    assert report["backends"][0]["status"] == "ok" and report["backends"][0]["fault"] is None


def test_an_unexpected_exception_is_an_internal_error_not_bad_input(tmp_path, tiny_bert_folder):
    env = {"HFEXPORT_FAULT": "run:raise"}
    quiet = run_cli("export", str(tiny_bert_folder), "--out", str(tmp_path / "out"), env=env, timeout=300)
    assert quiet.returncode == 4, quiet.stderr[-2000:]
    assert "internal error: RuntimeError" in quiet.stderr and "this is a bug" in quiet.stderr
    assert "Traceback" not in quiet.stderr and not (tmp_path / "out").exists()
    verbose = run_cli(
        "--verbose", "export", str(tiny_bert_folder), "--out", str(tmp_path / "out"), env=env, timeout=300
    )
    assert verbose.returncode == 4 and "Traceback" in verbose.stderr


def _hub_repo(hub, name: str, folder, extra: dict[str, bytes] | None = None) -> tuple[str, str]:
    from huggingface_hub import CommitOperationAdd, HfApi

    owner = hub.add_user(name.split("/")[0])
    api = HfApi(endpoint=hub.url, token=owner)
    api.create_repo(name)
    api.upload_folder(repo_id=name, folder_path=folder)
    if extra:
        api.create_commit(name, [CommitOperationAdd(p, c) for p, c in extra.items()], commit_message="extra")
    return name, owner


def test_downloads_are_capped_per_file_and_in_total(hub, tmp_path, tiny_bert_folder):
    repo, _ = _hub_repo(hub, "caps-owner/model", tiny_bert_folder, {"big.json": b"{}" + b" " * 2_000_000})
    cases = [
        ({"HFEXPORT_MAX_SUPPORT_FILE_MB": "1"}, ["big.json", "1 MB cap", "HFEXPORT_MAX_SUPPORT_FILE_MB"]),
        ({"HFEXPORT_MAX_DOWNLOAD_MB": "0.5"}, ["over the 0.5 MB cap", "HFEXPORT_MAX_DOWNLOAD_MB"]),
    ]
    for env, words in cases:
        out = tmp_path / "out"
        result = run_cli("export", repo, "--backends", "dynamo", "--out", str(out), env=env, timeout=300)
        assert result.returncode == 2, result.stderr[-2000:]
        for word in words:
            assert word in result.stderr, (word, result.stderr[-2000:])
        assert "nothing was downloaded" in result.stderr and "Traceback" not in result.stderr and not out.exists()


def test_a_hostile_file_name_in_a_repo_is_refused_clearly(hub, tmp_path, tiny_bert_folder):
    """Names the Hub's own checks would refuse, planted in the emulator's store behind them."""
    repo, _ = _hub_repo(hub, "hostile-owner/model", tiny_bert_folder)
    for hostile in ("../escape.json", "sub/../../etc.json", "new\nline.json", "/abs.json"):
        with hub.store.transaction():
            data = hub.store.load("model", repo)
            head = data["refs"]["refs/heads/main"]
            files = data["commits"][head]["files"]
            files[hostile] = hub.store.file_entry(b"{}", lfs=False)
            hub.store.save(data)
        result = run_cli("export", repo, "--backends", "dynamo", "--out", str(tmp_path / "out"), timeout=300)
        assert result.returncode == 2, (hostile, result.stderr[-2000:])
        assert "not safe to write to disk" in result.stderr and "Traceback" not in result.stderr
        with hub.store.transaction():
            data = hub.store.load("model", repo)
            del data["commits"][data["refs"]["refs/heads/main"]]["files"][hostile]
            hub.store.save(data)

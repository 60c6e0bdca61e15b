"""A Hub webhook to a pull request, end to end (service/events.py and the whole service): one job per
commit, whatever arrives, and a repo's code that reaches no credential."""

from __future__ import annotations

import json
import os
import sysconfig
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import tiny_models
from service_runs import SECRET, Service, free_port, hub_api, pull_requests, seeded, webhook_payload  # noqa: F401


def test_commit_fires_webhook_then_service_opens_pr(hub, accounts, tmp_path, workspace):
    repo = "alice-svc/e2e"
    seeded(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-e2e"))
    service = Service(tmp_path / "q.sqlite", [repo], accounts["bot"]).start()
    hub.add_webhook(service.url + "/webhook", SECRET)
    try:
        owner = hub_api(hub, accounts["alice"])
        owner.upload_file(path_or_fileobj=b"# E2E\n", path_in_repo="README.md", repo_id=repo)
        sha = owner.model_info(repo).sha
        deadline = time.monotonic() + 30
        while not service.get("/jobs")["jobs"] and time.monotonic() < deadline:
            time.sleep(0.2)
        jobs = service.get("/jobs")["jobs"]
        assert len(jobs) == 1 and jobs[0]["head_sha"] == sha and jobs[0]["repo_id"] == repo
        job = service.wait_done(jobs[0]["id"])
        assert job["status"] == "done" and job["result"]["action"] == "opened", job
        prs = pull_requests(hub, accounts["alice"], repo)
        assert len(prs) == 1 and job["result"]["pr_url"].endswith(f"/discussions/{prs[0].num}")
        # The PR itself fired discussion and refs/pr/N events: none of them queued work.
        time.sleep(2)
        assert len(service.get("/jobs")["jobs"]) == 1
    finally:
        hub.webhooks.hooks.clear()
        service.stop()


def test_a_repos_code_run_by_the_service_reaches_no_credential(hub, accounts, tmp_path, workspace):
    """`serve --trust-remote-code`: the repo's code runs in the sandbox of each job's push, and its
    hunt (/proc of every process — the service holds the webhook secret and the token —, saved
    logins, the network) reaches none of them; what it tries to write where the service's next
    job would run it (a .pth, a dotfile, the checkout: issue 56, rows 1-3) is refused."""
    from test_hardening import SECRETS, assert_no_credential_reached, hunting
    from test_red_team import _attempts

    repo, home, records = "alice-svc/remote-code", tmp_path / "hf-home", tmp_path / "records"
    home.mkdir()
    (home / "token").write_text(accounts["alice"])  # the operator's own saved login
    targets = {
        "pth": Path(sysconfig.get_paths()["purelib"]) / "hfexport_service_redteam.pth",
        "dotfile": Path(os.path.expanduser("~")) / ".hfexport-service-redteam",
        "checkout": Path(__file__).resolve().parents[1] / ".hfexport-service-redteam",
    }
    plan = {"write": {name: str(path) for name, path in targets.items()}, "links": {}}
    folder = tiny_models.hostile_writer_bert(workspace / "svc-remote-code", records, plan, **hunting(home, hub))
    sha = seeded(hub, accounts["alice"], repo, folder)
    extra = {name: value for name, value in SECRETS.items() if name not in ("HF_TOKEN", "HFEXPORT_WEBHOOK_SECRET")}
    env = {**extra, "HF_HOME": str(home), "HFEXPORT_TEST_WRITABLE": str(records)}
    service = Service(tmp_path / "q.sqlite", [repo], accounts["bot"], "onnx", ("--trust-remote-code",), env=env)
    service.start()
    try:
        status, body = service.post(webhook_payload(repo, sha))
        assert status == 202, body
        job = service.wait_done(body["job"])
        assert job["status"] == "done" and job["result"]["action"] == "opened", job
    finally:
        service.stop()
    secrets = {**extra, "HF_TOKEN": accounts["bot"], "SAVED_LOGIN": accounts["alice"], "WEBHOOK": SECRET}
    assert_no_credential_reached(records, secrets, processes=2)
    written = [path for path in targets.values() if path.exists()]
    for path in written:  # where a sandbox let them through: leave no planted file behind
        path.unlink()
    attempts = _attempts(records)
    assert len(attempts) == len(targets) and "done" not in attempts.values() and not written, attempts


def test_fifty_concurrent_identical_events_make_one_job_and_one_pr(hub, accounts, tmp_path, workspace):
    repo = "alice-svc/burst"
    sha = seeded(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-burst", seed=50))
    service = Service(tmp_path / "q.sqlite", [repo], accounts["bot"]).start()
    try:
        with ThreadPoolExecutor(max_workers=50) as pool:
            replies = list(pool.map(lambda _: service.post(webhook_payload(repo, sha)), range(50)))
        assert all(status in (200, 202) for status, _ in replies), replies
        assert sum(body["queued"] for _, body in replies) == 1
        assert len({body["job"] for _, body in replies}) == 1
        job = service.wait_done(replies[0][1]["job"])
        assert job["status"] == "done" and job["attempts"] == 1 and job["result"]["action"] == "opened"
        assert len(service.get("/jobs")["jobs"]) == 1
        assert len(pull_requests(hub, accounts["alice"], repo)) == 1
        # A replay, later, is harmless too.
        status, body = service.post(webhook_payload(repo, sha))
        assert status == 200 and body["queued"] is False
    finally:
        service.stop()


def test_push_from_webhook_env(hub, accounts, workspace):
    """The Hub-native path: a webhook starts a Job, which runs `push --from-webhook-env`."""
    from conftest import run_cli

    repo = "alice-svc/native"
    sha = seeded(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-native"))
    env = {"HF_TOKEN": accounts["bot"], "WEBHOOK_PAYLOAD": json.dumps(webhook_payload(repo, sha))}
    result = run_cli("push", "--from-webhook-env", "--backends", "dynamo", "--json", env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout)
    assert out["action"] == "opened" and out["report"]["source"]["sha"] == sha
    ignored = run_cli(
        "push",
        "--from-webhook-env",
        env={**env, "WEBHOOK_PAYLOAD": json.dumps(webhook_payload(repo, sha, ref="refs/pr/1"))},
    )
    assert ignored.returncode == 0 and "ignored" in ignored.stderr
    junk = run_cli("push", "--from-webhook-env", env={**env, "WEBHOOK_PAYLOAD": "{junk"})
    assert junk.returncode == 2 and "WEBHOOK_PAYLOAD" in junk.stderr

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
from urllib.parse import parse_qs, urlsplit

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
        pushed = _push(team, repo, "--backends", "onnx", "--trust-remote-code", records=records)
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


# ── serve --request-page: tokens, sign-in, quotas (rows 4, 7, 8, 10, 15, 16) ─


class _Recording:
    """An executor that records the token each job ran with, and publishes nothing."""

    def __init__(self) -> None:
        self.ran: dict[int, str | None] = {}

    def run(self, job):
        self.ran[job.id] = job.hub_token
        return {"action": "opened", "exit_code": 0}


def _settle(queue, timeout: float = 30) -> None:
    import time

    deadline = time.monotonic() + timeout
    while (queue.counts().get("queued") or queue.counts().get("running")) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_token_runs_only_the_request_that_brought_it_and_none_after_a_restart(tmp_path):
    """Row 7: a request for the commit a watched repo's job waits on is a job of its own (never
    merged), and the watched job runs with the service's token, not the requester's. Row 4: a
    request whose token a restart lost fails for good with "ask again", and never runs — not with
    the service's own token either."""
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.tokens import TOKEN_LOST, RequestTokens
    from hfexport.entrypoints.service.workers import QueueWorkers
    from hfexport.messages import JobPlan

    queue = JobQueue(tmp_path / "q.sqlite")
    watched, _ = queue.enqueue("org/model", "a" * 40, JobPlan(("onnx",)))
    asked, _ = queue.enqueue("org/model", "a" * 40, JobPlan(("onnx",), requester="alice"))
    lost, _ = queue.enqueue("org/other", "b" * 40, JobPlan(("onnx",), requester="bob"))
    assert len({watched, asked, lost}) == 3
    tokens = RequestTokens()
    executor = _Recording()
    config = ServiceConfig(secret="s" * 32, watch={"*"}, plan=JobPlan(("onnx",)), workers=1)
    workers = QueueWorkers(config, queue, executor, idle_s=0.05)
    workers.tokens = tokens
    tokens.put(asked, "hf_alice_token")  # bob's was given to a process that has since restarted
    workers.start()
    try:
        _settle(queue)
    finally:
        workers.stop()
    assert executor.ran == {watched: None, asked: "hf_alice_token"}
    failed = queue.get(lost)
    assert failed.status == "failed" and failed.error == TOKEN_LOST


def _form_service(hub, tmp_path, *extra: str, env: dict | None = None):
    from service_runs import Service

    service = Service(
        tmp_path / "q.sqlite",
        ["redteam-watched/model"],
        hub.add_user(f"redteam-service-{tmp_path.name[-12:]}"),
        backends="onnx",
        extra=("--request-page", "--warm", "0", *extra),
        env=env,
    )
    return service.start()


def _ask(service, client, **fields) -> tuple[int, str, str | None]:
    """Submit the request form; its status, text and (on success) the request page's path."""
    form = {"backends": "onnx", "destination": "repo" if fields.get("into") else "pr", **fields}
    answer = client.post(f"{service.url}/request", data=form, allow_redirects=False, timeout=60)
    return answer.status_code, answer.text, answer.headers.get("location")


def test_a_requests_page_outlives_a_restart_and_says_to_ask_again(hub, tmp_path, workspace):
    """Row 4, over HTTP: a request waiting when the service restarts is not run with the service's
    token; its page still answers (200, not 404) and says to ask again."""
    import requests

    user = hub.add_user("redteam-asker")
    api = _api(hub, user)
    api.create_repo("redteam-asker/bert")
    api.upload_folder(repo_id="redteam-asker/bert", folder_path=tiny_models.bert(workspace / "redteam-asker", seed=21))
    service = _form_service(hub, tmp_path, "--workers", "0")
    try:
        with requests.Session() as client:
            status, text, page = _ask(service, client, repo="redteam-asker/bert", token=user)
            assert status == 303 and page, text
    finally:
        service.stop()
    service.extra = ("--request-page", "--warm", "0", "--workers", "1")
    service.start()
    try:
        (job,) = [j for j in service.get("/jobs")["jobs"] if "by=redteam-asker" in j["plan"]]
        done = service.wait_done(job["id"], timeout=120)
        shown = requests.get(f"{service.url}{page}", timeout=60)
    finally:
        service.stop()
    assert done["status"] == "failed" and "ask again" in done["error"], done
    assert shown.status_code == 200 and "ask again" in shown.text, shown.text
    assert not list(api.get_repo_discussions("redteam-asker/bert"))  # nothing ran, as no one


def test_a_sign_in_finishes_only_in_the_browser_that_started_it(hub, tmp_path):
    """Row 8: Alice's half-done sign-in — approved at the Hub, its callback URL (code and state)
    taken — opened in another browser signs no one in; the Hub's code is also bound to Alice's
    PKCE verifier. Row 15: the sign-ins under way are bounded (unit: `Sessions`)."""
    import requests

    from hfexport.entrypoints.service.signin import MAX_PENDING, Sessions

    alice = hub.add_user("redteam-signin-alice")
    app_env = {"OAUTH_SCOPES": "openid profile", "OPENID_PROVIDER_URL": hub.url}
    service = _form_service(hub, tmp_path, "--workers", "0", env=app_env)
    service.stop()
    app = hub.add_oauth_app([f"{service.url}/request/callback"])
    service.env = {**app_env, "OAUTH_CLIENT_ID": app.client_id, "OAUTH_CLIENT_SECRET": app.client_secret}
    service.start()
    try:
        with requests.Session() as alices, requests.Session() as mallorys:
            login = alices.get(f"{service.url}/request/login", allow_redirects=False, timeout=60)
            assert login.status_code == 302 and "code_challenge=" in login.headers["location"], login.headers
            query = parse_qs(urlsplit(login.headers["location"]).query)
            approved = requests.post(
                f"{hub.url}/oauth/authorize",
                data={**{k: v[0] for k, v in query.items()}, "token": alice},
                allow_redirects=False,
                timeout=60,
            )
            callback = approved.headers["location"]
            stolen = mallorys.get(callback, allow_redirects=False, timeout=60)
            assert stolen.status_code == 400 and "not started in this browser" in stolen.text, stolen.text
            assert "hfexport_session" not in mallorys.cookies
            form = mallorys.get(f"{service.url}/request", timeout=60)
            assert "Signed in as" not in form.text
    finally:
        service.stop()

    sessions = Sessions()
    first = sessions.start()
    for _ in range(MAX_PENDING + 500):
        sessions.start()
    assert sessions.pending == MAX_PENDING
    assert sessions.take(first.state, first.nonce) is None  # the oldest went first


def test_one_client_or_requester_cannot_take_the_queue_from_the_watched_repos(hub, tmp_path, workspace):
    """Row 10: one requester may have 3 jobs waiting; requests take at most half the queue, and a
    watched repo's webhook is still queued then; bad tokens from one address stop costing the Hub
    a `whoami` once it has sent 10 forms in a minute. Row 16: under `--executor hf-jobs` the form
    says, before anyone asks, that the Job runs on their account and bill."""
    import requests
    from service_runs import webhook_payload

    users = {name: hub.add_user(f"redteam-quota-{name}") for name in ("ann", "ben")}
    for name, token in users.items():
        api = _api(hub, token)
        for i in range(4):
            api.create_repo(f"redteam-quota-{name}/m{i}")
            api.upload_file(path_or_fileobj=b"{}", path_in_repo="config.json", repo_id=f"redteam-quota-{name}/m{i}")
    service = _form_service(hub, tmp_path, "--workers", "0", "--max-queued", "8", "--executor", "hf-jobs")
    try:
        with requests.Session() as client:
            assert 'id="billed"' in client.get(f"{service.url}/request", timeout=60).text
            answers = [_ask(service, client, repo=f"redteam-quota-ann/m{i}", token=users["ann"]) for i in range(4)]
            assert [a[0] for a in answers] == [303, 303, 303, 429], answers[-1][1]
            assert "redteam-quota-ann has 3 exports waiting or running" in answers[-1][1]
            assert _ask(service, client, repo="redteam-quota-ben/m0", token=users["ben"])[0] == 303
            full = _ask(service, client, repo="redteam-quota-ben/m1", token=users["ben"])
            assert full[0] == 429 and "share of the queue is full" in full[1], full[1]
            status, body = service.post(webhook_payload("redteam-watched/model", "c" * 40))
            assert status == 202, body

            before = sum(1 for _, path in hub.app.requests if path.startswith("/api/whoami"))
            flood = [_ask(service, client, repo="redteam-quota-ann/m0", token=f"hf_bad_{i}")[0] for i in range(12)]
            whoami = sum(1 for _, path in hub.app.requests if path.startswith("/api/whoami")) - before
    finally:
        service.stop()
    refused = flood.count(400)
    assert refused == 10 - len(answers) - 2 and flood.count(429) == 12 - refused, flood
    assert whoami == refused  # the 429s asked the Hub nothing


# ── a race with the owner (row 12) ───────────────────────────────────────────


def test_a_pr_merged_while_the_next_commit_exports_ends_with_that_commits_exports(hub, team, workspace):
    """Row 12: our PR (commit A's exports) is merged while commit B, new weights, is exported. The
    push must not say up-to-date over main's A exports beside B's weights: B's exports end on an
    open PR (or main)."""
    from hfexport import push

    owner_token = hub.add_user("redteam-merger")
    owner = _api(hub, owner_token)
    repo = "redteam-merger/bert"
    owner.create_repo(repo)
    owner.upload_folder(repo_id=repo, folder_path=tiny_models.bert(workspace / "redteam-merge-a", seed=31))
    first = push(repo, backends="onnx", token=team["bot"])
    assert first.action == "opened"
    owner.upload_folder(repo_id=repo, folder_path=tiny_models.bert(workspace / "redteam-merge-b", seed=32))
    b = _head(owner, repo)

    merged = []

    def merge_once(backend: str, message: str) -> None:  # the owner merges while B exports
        if not merged:
            owner.merge_pull_request(repo, first.pr_num)
            merged.append(message)

    second = push(repo, backends="onnx", token=team["bot"], progress=merge_once)
    assert merged and second.action in ("opened", "updated"), second.action
    where = f"refs/pr/{second.pr_num}" if second.pr_num else "main"
    report = json.loads(Path(owner.hf_hub_download(repo, "hfexport-report.json", revision=where)).read_text())
    built = {b_["backend"]: b_["source_sha"] for b_ in report["backends"]}
    ancestors = {c.commit_id for c in owner.list_repo_commits(repo, revision=where)}
    assert b in ancestors and built["onnx"] in ancestors and built["onnx"] != first.report.source.sha, built

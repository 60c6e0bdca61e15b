"""`hfexport serve` (the webhook receiver) and the HF Jobs executor, end to end on the local Hub."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import tiny_models

from hfexport.entrypoints.service.executors import HfJobsExecutor
from hfexport.entrypoints.service.outcome import Superseded
from hfexport.entrypoints.service.queue import Job, JobStatus
from hfexport.messages import JobPlan

SECRET = "s3cret-webhook-value"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """`hfexport serve` as a real process, restartable on the same queue."""

    def __init__(
        self,
        db: Path,
        watch: list[str],
        token: str,
        backends: str = "dynamo",
        extra: tuple[str, ...] = (),
        max_fds: int | None = None,
        env: dict[str, str] | None = None,
    ):
        self.db, self.watch, self.token, self.backends, self.extra = db, watch, token, backends, extra
        self.env = env or {}
        self.max_fds = max_fds  # the process's descriptor limit (RLIMIT_NOFILE), as a server's default
        self.port = _free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Service:
        args = [
            sys.executable,
            "-m",
            "hfexport",
            "serve",
            "--port",
            str(self.port),
            "--db",
            str(self.db),
            "--backends",
            self.backends,
        ]
        for repo in self.watch:
            args += ["--watch", repo]
        # The reconcile pass queues watched heads on start: tests of the webhook path turn it off.
        args += list(self.extra) if "--reconcile-every" in self.extra else [*self.extra, "--reconcile-every", "0"]
        env = {**os.environ, "HF_TOKEN": self.token, "HFEXPORT_WEBHOOK_SECRET": SECRET, **self.env}
        self.log = open(self.db.with_suffix(".log"), "ab")

        def limit() -> None:
            if self.max_fds is not None:
                import resource

                resource.setrlimit(resource.RLIMIT_NOFILE, (self.max_fds, self.max_fds))

        self.process = subprocess.Popen(args, env=env, stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=limit)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.get("/healthz")
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("the service did not start: " + self.db.with_suffix(".log").read_text()[-2000:])

    def kill9(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)

    def get(self, path: str, secret: str | None = SECRET) -> dict:
        """GET as the operator: /jobs needs the webhook secret (or the read token)."""
        request = urllib.request.Request(self.url + path, headers={"X-Webhook-Secret": secret} if secret else {})
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.loads(r.read())

    def post(self, payload: bytes | dict, secret: str | None = SECRET) -> tuple[int, dict]:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        if secret is not None:
            headers["X-Webhook-Secret"] = secret
        request = urllib.request.Request(self.url + "/webhook", data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def wait_done(self, job_id: int, timeout: float = 600) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.get(f"/jobs/{job_id}")
            if job["status"] in ("done", "failed", "superseded"):
                return job
            time.sleep(0.5)
        raise AssertionError(f"job {job_id} did not finish: {job}")


@pytest.fixture(scope="module")
def accounts(hub):
    return {"alice": hub.add_user("alice-svc"), "bot": hub.add_user("svc-bot")}


def _api(hub, token):
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=token)


def _seed(hub, token, repo: str, folder: Path) -> str:
    api = _api(hub, token)
    api.create_repo(repo, exist_ok=True)
    api.upload_folder(repo_id=repo, folder_path=folder)
    return api.model_info(repo).sha


def _payload(repo: str, sha: str, ref: str = "refs/heads/main", scope: str = "repo.content") -> dict:
    return {
        "event": {"action": "update", "scope": scope},
        "repo": {"type": "model", "name": repo, "id": repo, "private": False, "headSha": sha, "owner": {"id": "x"}},
        "updatedRefs": [{"ref": ref, "oldSha": "0" * 40, "newSha": sha}],
        "webhook": {"id": "abc", "version": 3},
    }


def _prs(hub, token, repo):
    return [d for d in _api(hub, token).get_repo_discussions(repo) if d.is_pull_request]


def test_refuses_forged_missing_secret_and_junk(tmp_path, accounts):
    service = Service(tmp_path / "q.sqlite", ["alice-svc/any"], accounts["bot"]).start()
    try:
        good = _payload("alice-svc/any", "a" * 40)
        assert service.post(good, secret=None)[0] == 401
        assert service.post(good, secret="guess")[0] == 403
        assert service.post(good, secret=SECRET[:-1])[0] == 403
        assert service.post(b"{not json")[0] == 400
        assert service.post({"event": "nope"})[0] == 400
        assert service.post(b"[" + b"1," * 600_000 + b"1]")[0] == 413
        # Valid but not ours to act on: our own PR ref, a discussion event, an unwatched repo.
        for payload in (
            _payload("alice-svc/any", "b" * 40, ref="refs/pr/3"),
            _payload("alice-svc/any", "c" * 40, scope="discussion"),
            _payload("someone/else", "d" * 40),
        ):
            status, body = service.post(payload)
            assert status == 200 and "ignored" in body, body
        assert service.get("/jobs")["jobs"] == []
        assert service.get("/healthz")["ok"] is True
    finally:
        service.stop()


def test_the_service_says_where_it_listens_and_logs_one_json_object_a_line(accounts, tmp_path):
    """Its first line names the URL, the webhook path and /healthz; after a job that talked to the
    Hub (its HTTP client logs requests at INFO), every line of its log is still one JSON object."""
    service = Service(tmp_path / "q.sqlite", ["*"], accounts["bot"], extra=("--warm", "0")).start()
    try:
        status, body = service.post(_payload("alice-svc/no-such-model", "e" * 40))
        assert status == 202
        assert service.wait_done(body["job"], timeout=120)["status"] == "failed"
    finally:
        service.stop()
    lines = [line for line in tmp_path.joinpath("q.log").read_text().splitlines() if line.strip()]
    events = [json.loads(line) for line in lines if line.startswith("{")]
    assert [line for line in lines if not line.startswith("{")] == [], lines
    assert events[0]["msg"] == "listening" and events[0]["webhook"] == f"{service.url}/webhook", events[0]


def test_commit_fires_webhook_then_service_opens_pr(hub, accounts, tmp_path, workspace):
    repo = "alice-svc/e2e"
    _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-e2e"))
    service = Service(tmp_path / "q.sqlite", [repo], accounts["bot"]).start()
    hub.add_webhook(service.url + "/webhook", SECRET)
    try:
        owner = _api(hub, accounts["alice"])
        owner.upload_file(path_or_fileobj=b"# E2E\n", path_in_repo="README.md", repo_id=repo)
        sha = owner.model_info(repo).sha
        deadline = time.monotonic() + 30
        while not service.get("/jobs")["jobs"] and time.monotonic() < deadline:
            time.sleep(0.2)
        jobs = service.get("/jobs")["jobs"]
        assert len(jobs) == 1 and jobs[0]["head_sha"] == sha and jobs[0]["repo_id"] == repo
        job = service.wait_done(jobs[0]["id"])
        assert job["status"] == "done" and job["result"]["action"] == "opened", job
        prs = _prs(hub, accounts["alice"], repo)
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
    sha = _seed(hub, accounts["alice"], repo, folder)
    extra = {name: value for name, value in SECRETS.items() if name not in ("HF_TOKEN", "HFEXPORT_WEBHOOK_SECRET")}
    env = {**extra, "HF_HOME": str(home), "HFEXPORT_TEST_WRITABLE": str(records)}
    service = Service(tmp_path / "q.sqlite", [repo], accounts["bot"], "onnx", ("--trust-remote-code",), env=env)
    service.start()
    try:
        status, body = service.post(_payload(repo, sha))
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
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-burst", seed=50))
    service = Service(tmp_path / "q.sqlite", [repo], accounts["bot"]).start()
    try:
        with ThreadPoolExecutor(max_workers=50) as pool:
            replies = list(pool.map(lambda _: service.post(_payload(repo, sha)), range(50)))
        assert all(status in (200, 202) for status, _ in replies), replies
        assert sum(body["queued"] for _, body in replies) == 1
        assert len({body["job"] for _, body in replies}) == 1
        job = service.wait_done(replies[0][1]["job"])
        assert job["status"] == "done" and job["attempts"] == 1 and job["result"]["action"] == "opened"
        assert len(service.get("/jobs")["jobs"]) == 1
        assert len(_prs(hub, accounts["alice"], repo)) == 1
        # A replay, later, is harmless too.
        status, body = service.post(_payload(repo, sha))
        assert status == 200 and body["queued"] is False
    finally:
        service.stop()


def test_kill9_mid_job_then_restart_completes_with_one_pr(hub, accounts, tmp_path, workspace):
    repo = "alice-svc/crashy"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-crashy", seed=9))
    db = tmp_path / "q.sqlite"
    service = Service(db, [repo], accounts["bot"], backends="dynamo,onnx").start()
    status, body = service.post(_payload(repo, sha))
    assert status == 202
    deadline = time.monotonic() + 60
    while service.get(f"/jobs/{body['job']}")["status"] != "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(4)  # the export is under way
    service.kill9()
    assert _prs(hub, accounts["alice"], repo) == []  # killed before it could publish
    restarted = Service(db, [repo], accounts["bot"], backends="dynamo,onnx")
    restarted.port = service.port
    restarted.start()
    try:
        job = restarted.wait_done(body["job"])
        assert job["status"] == "done" and job["attempts"] == 2, job
        assert len(_prs(hub, accounts["alice"], repo)) == 1
    finally:
        restarted.stop()


def test_a_second_service_on_the_same_queue_leaves_a_live_lease_alone(hub, accounts, tmp_path, workspace):
    """A rolling restart: a second `serve` starts on the --db while the first still runs a job (its
    export hangs) and renews its lease. The second does not run it: one attempt, the first's lease."""
    repo = "alice-svc/rolling"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-rolling", seed=13))
    db, hang = tmp_path / "q.sqlite", {"HFEXPORT_TESTING": "1", "HFEXPORT_FAULT": "dynamo:hang"}
    first = Service(db, [repo], accounts["bot"], extra=("--warm", "0"), env=hang).start()
    second = None
    try:
        status, body = first.post(_payload(repo, sha))
        assert status == 202
        deadline = time.monotonic() + 60
        while first.get(f"/jobs/{body['job']}")["status"] != "running" and time.monotonic() < deadline:
            time.sleep(0.2)
        second = Service(db, [repo], accounts["bot"], extra=("--warm", "0"), env=hang).start()
        time.sleep(3)  # its workers have claimed what they could
        job = second.get(f"/jobs/{body['job']}")
        assert job["status"] == "running" and job["attempts"] == 1, job
        log = db.with_suffix(".log").read_text()
        assert '"msg": "recovered"' not in log and log.count('"msg": "running"') == 1, log[-2000:]
    finally:
        for service in (first, second):
            if service is not None:
                service.stop()


def test_two_workers_share_the_machines_memory_and_never_run_two_jobs_that_fit_only_alone(
    hub, accounts, tmp_path, workspace
):
    """`serve --workers 2` on a machine (HFEXPORT_MEMORY_LIMIT_MB) where each of two repos' exports
    fits alone but not both: the second waits for the first's memory (its attempt not counted),
    then runs; both PRs open with every backend exported, none skipped."""
    from hfexport.pipeline.preflight import needs, weights_of
    from hfexport.report import Source

    repos = [f"alice-svc/budget-{i}" for i in range(2)]
    shas = [
        _seed(hub, accounts["alice"], r, tiny_models.bert(workspace / f"svc-{r[-8:]}", seed=70 + i))
        for i, r in enumerate(repos)
    ]
    weights = weights_of(Source(kind="hub", ref=repos[0], sha=shas[0]), accounts["alice"])
    alone = needs(weights, ["dynamo"])[0]
    env = {"HFEXPORT_MEMORY_LIMIT_MB": str(alone * 3 // 2 // 1_000_000)}
    service = Service(tmp_path / "q.sqlite", repos, accounts["bot"], extra=("--workers", "2", "--warm", "0"), env=env)
    service.start()
    try:
        ids = [service.post(_payload(repo, sha))[1]["job"] for repo, sha in zip(repos, shas)]
        jobs = [service.wait_done(job_id) for job_id in ids]
    finally:
        service.stop()
    assert all(j["status"] == "done" and j["result"]["action"] == "opened" and j["attempts"] == 1 for j in jobs), jobs
    events = [json.loads(line) for line in tmp_path.joinpath("q.log").read_text().splitlines() if line.startswith("{")]
    order = [(e["msg"], e["job"]) for e in events if e.get("msg") in ("running", "done", "waiting for memory")]
    first_done = next(i for i, (msg, _) in enumerate(order) if msg == "done")
    other = next(job for job in ids if job != order[first_done][1])
    last_start = max(i for i, event in enumerate(order) if event == ("running", other))
    assert ("waiting for memory", other) in order and last_start > first_done, order  # never side by side
    for repo in repos:
        report = _api(hub, accounts["alice"]).hf_hub_download(repo, "hfexport-report.json", revision="refs/pr/1")
        assert {b["status"] for b in json.loads(Path(report).read_text())["backends"]} == {"ok"}


def test_a_backend_killed_under_the_service_is_retried_and_never_posted(hub, accounts, tmp_path, workspace):
    """ONNX's process is SIGKILLed every time (as the OOM killer does): dynamo's PR opens without a
    word of the kill, the job is retried (not `done`), and after its attempts it fails naming it —
    on the service, not on the owner's repo."""
    repo = "alice-svc/killed"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-killed", seed=77))
    env = {"HFEXPORT_TESTING": "1", "HFEXPORT_FAULT": "onnx:crash"}
    extra = ("--max-attempts", "2", "--backoff", "0", "--warm", "0")
    service = Service(tmp_path / "q.sqlite", [repo], accounts["bot"], "dynamo,onnx", extra, env=env).start()
    try:
        job = service.wait_done(service.post(_payload(repo, sha))[1]["job"])
    finally:
        service.stop()
    assert job["status"] == "failed" and job["attempts"] == 2 and "onnx crashed" in job["error"], job
    api = _api(hub, accounts["alice"])
    (pr,) = _prs(hub, accounts["alice"], repo)
    said = " ".join(e.content for e in api.get_discussion_details(repo, pr.num).events if e.type == "comment")
    assert "SIGKILL" not in said and "crashed" not in said, said
    assert "onnx" not in api.list_repo_files(repo, revision=f"refs/pr/{pr.num}")


def test_a_push_killed_at_the_job_timeout_leaves_no_folder_behind(hub, accounts, tmp_path, workspace, monkeypatch):
    """The local executor's push hangs in its export and is killed at the job timeout: its
    temporary folder (the workers' folders) and its half-written export in the cache are gone once
    the job has failed, and nothing else of it is left running."""
    from hfexport.entrypoints.service.executors import JobFailed, LocalExecutor

    repo = "alice-svc/hangs"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-hangs", seed=79))
    tmp, cache = tmp_path / "tmp", tmp_path / "cache"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))  # where the executor makes each push's own
    monkeypatch.setattr(tempfile, "tempdir", None)
    env = {"HF_TOKEN": accounts["bot"], "HFEXPORT_CACHE": str(cache), "HFEXPORT_FAULT": "dynamo:hang"}
    monkeypatch.setenv("HFEXPORT_CACHE", str(cache))
    executor = LocalExecutor(timeout_s=20, env=env)
    job = Job(9, repo, sha, JobPlan(("dynamo",)), JobStatus.RUNNING, 1, None, None, 0, 0)
    with pytest.raises(JobFailed, match="job timeout"):
        executor.run(job)
    executor.close()
    assert list(tmp.iterdir()) == []
    assert list((cache / "exports").glob(".*.partial-*")) == []
    leftover = subprocess.run(["pgrep", "-f", f"hfexport.*{repo}"], capture_output=True, text=True).stdout
    assert leftover == "", leftover


def test_the_service_keeps_the_hf_cache_within_its_bound(hub, accounts, tmp_path, workspace):
    """`HFEXPORT_HF_CACHE_MAX_GB`: once a job has ended, the Hub downloads past the bound go (here
    a bound of zero: none stays)."""
    repo, home = "alice-svc/bounded", tmp_path / "hf-home"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-bounded", seed=83))
    env = {"HF_HOME": str(home), "HFEXPORT_HF_CACHE_MAX_GB": "0", "HFEXPORT_CACHE": str(tmp_path / "cache")}
    service = Service(tmp_path / "q.sqlite", [repo], accounts["bot"], extra=("--warm", "0"), env=env).start()
    try:
        job = service.wait_done(service.post(_payload(repo, sha))[1]["job"])
    finally:
        service.stop()
    assert job["status"] == "done", job
    assert not list(home.rglob("*.safetensors")), list(home.rglob("*"))


def test_hf_jobs_executor_runs_on_the_hubs_jobs_endpoints(hub, accounts, tmp_path, workspace):
    repo = "alice-svc/jobs"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-jobs"))
    executor = HfJobsExecutor(image="hfexport:test", token=accounts["bot"], poll_s=0.5)
    job = Job(
        id=1,
        repo_id=repo,
        head_sha=sha,
        plan=JobPlan(("dynamo",)),
        status=JobStatus.RUNNING,
        attempts=1,
        result=None,
        error=None,
        created_at=0,
        updated_at=0,
    )
    result = executor.run(job)
    assert result["stage"] == "COMPLETED" and set(result["jobs"]) == {"cpu"}
    launched = hub.app.jobs.jobs[result["jobs"]["cpu"]["hf_job"]]
    spec = launched.spec
    # Sized by the model: a tiny BERT fits the cheapest CPU flavor the Hub lists.
    assert spec["dockerImage"] == "hfexport:test" and spec["flavor"] == "cpu-basic"
    assert "M parameters (f32)" in result["jobs"]["cpu"]["sized_for"], result
    assert spec["timeoutSeconds"] == result["jobs"]["cpu"]["timeout_s"] == 4 * 3600  # explicit, and said
    assert accounts["bot"] not in json.dumps(spec["command"]) and accounts["bot"] not in json.dumps(
        spec.get("environment")
    )
    assert spec["secrets"] == {"HF_TOKEN": accounts["bot"]}  # the secret reaches the job's process only
    info = _api(hub, accounts["bot"]).inspect_job(job_id=launched.id)
    assert accounts["bot"] not in json.dumps(info.command) and list(info.secrets) == ["HF_TOKEN"]
    assert not any(accounts["bot"] in line for line in launched.logs)
    assert len(_prs(hub, accounts["alice"], repo)) == 1


def test_hf_jobs_flavor_is_the_cheapest_that_fits_the_models_estimate(hub, accounts, tmp_path):
    """The CPU flavor follows the commit's size, read from its safetensors header (no weight is
    downloaded): a 7 B-parameter bf16 checkpoint (its fp32 ONNX graph 28 GB, more than the 32 GB
    flavor holds with the export's copies) needs the flavor with the most memory; a 60 B one more
    than any has, so the largest is taken and the record says so."""
    from huggingface_hub import HfApi
    from test_preflight import _header_only_checkpoint, seed_header_only

    from hfexport.entrypoints.service.executors import sized_flavor

    api = HfApi(endpoint=hub.url, token=accounts["alice"])
    for billions in (7, 60):
        repo = f"alice-svc/header-only-{billions}b"
        seed_header_only(hub, api, repo, tmp_path / repo, billions * 10**9)
        job = Job(3, repo, api.model_info(repo).sha, JobPlan(("onnx",)), JobStatus.RUNNING, 1, None, None, 0, 0)
        flavor, why = sized_flavor(api, job, ["onnx"], accounts["alice"])
        assert flavor == "cpu-xl" and f"{billions}.00 B parameters (bf16)" in why, (flavor, why)
        assert ("more than any CPU flavor has" in why) == (billions == 60), why

    # The same 50 B-parameter header in a file of its own size (86 bytes): counted as what the
    # file can hold, not what its header claims — the cheapest flavor.
    repo = "alice-svc/header-claims-50b"
    api.create_repo(repo)
    api.upload_folder(repo_id=repo, folder_path=_header_only_checkpoint(tmp_path / repo, 50 * 10**9))
    job = Job(4, repo, api.model_info(repo).sha, JobPlan(("onnx",)), JobStatus.RUNNING, 1, None, None, 0, 0)
    flavor, why = sized_flavor(api, job, ["onnx"], accounts["alice"])
    cheapest = min((h for h in api.list_jobs_hardware() if h.accelerator is None), key=lambda h: h.unit_cost_micro_usd)
    assert flavor == cheapest.name and why.startswith("0.0 M parameters"), (flavor, why)


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_a_warm_push_waits_with_its_imports_done_and_runs_the_next_job(hub, accounts, workspace):
    """`serve --warm 1` (the default): a push process is started before its job, imports torch and
    transformers and starts its first backend worker (which holds no token), then runs the job it
    is handed as `hfexport push` would. Once that job ends the next one waits; closing the executor
    ends it without running anything."""
    from hfexport.entrypoints.service.executors import LocalExecutor

    repo = "alice-svc/warm"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-warm", seed=6))
    executor = LocalExecutor(env={"HF_TOKEN": accounts["bot"]}, warm=1)
    try:
        (waiting,) = executor._pushes._ready
        deadline = time.monotonic() + 120
        workers: list[int] = []
        while not workers and time.monotonic() < deadline:  # its first backend worker, started before any job
            time.sleep(0.2)
            workers = [
                c for c in _children(waiting.pid) if b"hfexport.worker" in Path(f"/proc/{c}/cmdline").read_bytes()
            ]
        (worker,) = workers
        environ = Path(f"/proc/{worker}/environ").read_bytes().decode(errors="replace")
        assert accounts["bot"] not in environ and "HF_HUB_OFFLINE=1" in environ.split("\0")
        job = Job(5, repo, sha, JobPlan(("dynamo",)), JobStatus.RUNNING, 1, None, None, 0, 0)
        result = executor.run(job)
        assert result["warm"] is True and result["exit_code"] == 0 and result["action"] == "opened", result
        assert waiting.returncode == 0 and len(_prs(hub, accounts["alice"], repo)) == 1
        (following,) = executor._pushes._ready
        assert following is not waiting and following.poll() is None
    finally:
        executor.close()
    assert following.wait(timeout=30) == 0 and len(_prs(hub, accounts["alice"], repo)) == 1


def test_an_hf_job_past_its_timeout_is_ended_by_the_hub_and_the_failure_names_it(hub, accounts, workspace):
    """The executor gives each Job its timeout (`serve --job-timeout`); the Hub ends one that runs
    past it, and the job's error says which Job, flavor and timeout — not retried (it would run as
    long again). Nothing is published."""
    from hfexport.entrypoints.service.executors import JobFailed

    repo = "alice-svc/jobs-timeout"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-jobs-timeout", seed=5))
    job = Job(4, repo, sha, JobPlan(("dynamo",)), JobStatus.RUNNING, 1, None, None, 0, 0)
    executor = HfJobsExecutor(image="hfexport:test", token=accounts["bot"], poll_s=0.5, timeout_s=2)
    before = set(hub.app.jobs.jobs)
    with pytest.raises(JobFailed, match=r"\(cpu, cpu-basic, timeout 2 s\) ended ERROR: timed out after 2 s") as e:
        executor.run(job)
    (launched,) = [hub.app.jobs.jobs[i] for i in set(hub.app.jobs.jobs) - before]
    # Killed by the Hub (reaped by its log reader: poll() may not see it at once under load).
    assert launched.spec["timeoutSeconds"] == 2 and launched.process.wait(timeout=30) is not None
    assert not e.value.retryable and _prs(hub, accounts["alice"], repo) == []


def test_hf_jobs_split_a_request_by_hardware_and_run_the_groups_in_parallel(hub, accounts, workspace):
    """dynamo on a CPU flavor and executorch-cuda on a GPU flavor, as two Jobs started together. The
    local Hub runs Jobs here, on no GPU: the GPU group finds nothing it can run and its Job fails,
    which the executor reports; the CPU group's PR is there."""
    from hfexport.entrypoints.service.executors import JobFailed, hardware_groups

    repo = "alice-svc/jobs-split"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-jobs-split", seed=3))
    job = Job(
        id=2,
        repo_id=repo,
        head_sha=sha,
        plan=JobPlan(("dynamo", "executorch-cuda")),
        status=JobStatus.RUNNING,
        attempts=1,
        result=None,
        error=None,
        created_at=0,
        updated_at=0,
    )
    assert hardware_groups(job) == {"cpu": ["dynamo"], "gpu": ["executorch-cuda"]}
    before = set(hub.app.jobs.jobs)
    with pytest.raises(JobFailed, match=r"\(gpu, a10g-small, timeout"):
        HfJobsExecutor(image="hfexport:test", token=accounts["bot"], poll_s=0.5).run(job)
    launched = [hub.app.jobs.jobs[i] for i in set(hub.app.jobs.jobs) - before]
    flavors = {j.spec["flavor"]: j.spec["command"] for j in launched}
    assert set(flavors) == {"cpu-basic", "a10g-small"}
    assert flavors["a10g-small"][flavors["a10g-small"].index("--backends") + 1] == "executorch-cuda"
    assert flavors["cpu-basic"][flavors["cpu-basic"].index("--backends") + 1] == "dynamo"
    # Started together: the GPU Job was launched before the CPU one finished.
    cpu = next(j for j in launched if j.spec["flavor"] == "cpu-basic")
    gpu = next(j for j in launched if j.spec["flavor"] == "a10g-small")
    assert gpu.created_at <= cpu.finished_at
    deadline = time.monotonic() + 300
    while cpu.finished_at is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert cpu.stage == "COMPLETED" and len(_prs(hub, accounts["alice"], repo)) == 1


def test_push_from_webhook_env(hub, accounts, workspace):
    """The Hub-native path: a webhook starts a Job, which runs `push --from-webhook-env`."""
    from conftest import run_cli

    repo = "alice-svc/native"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-native"))
    env = {"HF_TOKEN": accounts["bot"], "WEBHOOK_PAYLOAD": json.dumps(_payload(repo, sha))}
    result = run_cli("push", "--from-webhook-env", "--backends", "dynamo", "--json", env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    out = json.loads(result.stdout)
    assert out["action"] == "opened" and out["report"]["source"]["sha"] == sha
    ignored = run_cli(
        "push", "--from-webhook-env", env={**env, "WEBHOOK_PAYLOAD": json.dumps(_payload(repo, sha, ref="refs/pr/1"))}
    )
    assert ignored.returncode == 0 and "ignored" in ignored.stderr
    junk = run_cli("push", "--from-webhook-env", env={**env, "WEBHOOK_PAYLOAD": "{junk"})
    assert junk.returncode == 2 and "WEBHOOK_PAYLOAD" in junk.stderr


# ── the queue: leases, attempts, bad input ───────────────────────────────────


def test_a_job_running_past_its_lease_is_not_started_twice(tmp_path):
    """Two workers, a 1 s lease, a job that takes 3.5 s: the heartbeat keeps the lease, so the
    second worker never claims it (without the heartbeat it would, after 1 s)."""
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.workers import QueueWorkers

    calls = []

    class SlowExecutor:
        def run(self, job):
            calls.append(job.id)
            time.sleep(3.5)
            return {"action": "opened"}

    queue = JobQueue(tmp_path / "q.sqlite", lease_s=1, max_attempts=4)
    job_id, _ = queue.enqueue("alice-svc/slow", "a" * 40, JobPlan(("dynamo",)))
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=JobPlan(("dynamo",)), workers=2)
    workers = QueueWorkers(config, queue, SlowExecutor(), idle_s=0.05).start()
    try:
        deadline = time.monotonic() + 30
        while queue.get(job_id).status != "done" and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        workers.stop()
    job = queue.get(job_id)
    assert job.status == "done" and job.attempts == 1 and calls == [job_id]


def test_only_the_lease_holder_can_finish_or_fail_a_job(tmp_path):
    from hfexport.entrypoints.service.queue import JobQueue

    queue = JobQueue(tmp_path / "q.sqlite", lease_s=0.2, max_attempts=3)
    job_id, _ = queue.enqueue("alice-svc/lease", "b" * 40, JobPlan(("dynamo",)))
    _, first = queue.claim()
    time.sleep(0.3)  # the first holder stalls past its lease; another worker takes the job
    job, second = queue.claim()
    assert job.id == job_id and job.attempts == 2 and second != first
    assert queue.finish(job_id, first, {"action": "opened"}) is False
    assert queue.fail(job_id, first, "late", None) is False and queue.renew(job_id, first) is False
    assert queue.get(job_id).status == "running"
    assert queue.finish(job_id, second, {"action": "opened"}) is True and queue.get(job_id).status == "done"


def test_a_kill9_loop_stops_at_max_attempts(hub, accounts, tmp_path, workspace):
    repo = "alice-svc/kill-loop"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-kill-loop", seed=60))
    db = tmp_path / "q.sqlite"
    port = None
    job_id = None
    for round_ in range(4):
        service = Service(db, [repo], accounts["bot"], extra=("--max-attempts", "2"))
        if port is not None:
            service.port = port
        service.start()
        port = service.port
        if job_id is None:
            status, body = service.post(_payload(repo, sha))
            assert status == 202
            job_id = body["job"]
        deadline = time.monotonic() + 30
        while service.get(f"/jobs/{job_id}")["status"] in ("queued",) and time.monotonic() < deadline:
            time.sleep(0.2)
        job = service.get(f"/jobs/{job_id}")
        service.kill9()
        if job["status"] == "failed":
            break
        assert job["status"] == "running" and job["attempts"] == round_ + 1, job
    assert job["status"] == "failed" and job["attempts"] == 2, job
    assert "gave up after 2 attempts" in job["error"]
    assert _prs(hub, accounts["alice"], repo) == []


def test_a_bad_input_job_is_attempted_once(hub, accounts, tmp_path):
    service = Service(tmp_path / "q.sqlite", ["*"], accounts["bot"]).start()
    try:
        status, body = service.post(_payload("alice-svc/no-such-model", "c" * 40))
        assert status == 202
        job = service.wait_done(body["job"], timeout=120)
        assert job["status"] == "failed" and job["attempts"] == 1, job
        assert "exited with 2" in job["error"]
    finally:
        service.stop()


def test_an_older_commits_job_never_runs_once_the_branch_moved_on(hub, accounts, tmp_path):
    """Ten repos, each with two commits; their jobs queued older first or newer first, as retries,
    late or re-sent webhooks and two workers order them. Every job of an older commit ends
    `superseded` (naming the head's job) without running; each repo's head runs exactly once: 0 of
    10 PRs could be pointed back at an older commit. A re-sent webhook for the older commit later
    queues nothing."""
    import random

    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.workers import QueueWorkers, branch_head

    ran: list[tuple[str, str]] = []

    class RecordingExecutor:
        def run(self, job):
            ran.append((job.repo_id, job.head_sha))
            return {"action": "opened"}

    owner, plan = _api(hub, accounts["alice"]), JobPlan(("dynamo",))
    queue = JobQueue(tmp_path / "q.sqlite", max_attempts=4)
    heads, older = {}, {}
    order = random.Random(0)
    for trial in range(10):
        repo = f"alice-svc/newest-{trial}"
        owner.create_repo(repo)
        owner.upload_file(path_or_fileobj=b"one", path_in_repo="a.txt", repo_id=repo)
        older[repo] = owner.model_info(repo).sha
        owner.upload_file(path_or_fileobj=b"two", path_in_repo="a.txt", repo_id=repo)
        heads[repo] = owner.model_info(repo).sha
        shas = [older[repo], heads[repo]]
        order.shuffle(shas)
        for sha in shas:
            queue.enqueue(repo, sha, plan)
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=plan, workers=2)
    workers = QueueWorkers(config, queue, RecordingExecutor(), idle_s=0.05, head=branch_head(None, "main")).start()
    try:
        deadline = time.monotonic() + 60
        while (queue.counts().get("queued") or queue.counts().get("running")) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        workers.stop()
    assert sorted(ran) == sorted(heads.items()), ran
    jobs = {(j.repo_id, j.head_sha): j for j in queue.list(limit=100)}
    for repo, sha in older.items():
        job, newest = jobs[(repo, sha)], jobs[(repo, heads[repo])]
        # Superseded when the head's webhook arrived (attempts 0), or when it started (1).
        assert job.status == "superseded" and job.attempts <= 1 and job.result == Superseded(heads[repo], newest.id), (
            job
        )
        assert newest.status == "done"
        assert queue.enqueue(repo, sha, plan) == (job.id, False)  # a re-sent webhook: nothing new


def test_a_commit_the_branch_is_force_pushed_back_to_runs_again(hub, accounts, tmp_path):
    """main goes A → B → (force-push) A: A's job ran before B's, and its webhook now is no
    duplicate: it runs again (and push takes the PR back to A). Another replay of it is one."""
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.workers import QueueWorkers, branch_head

    ran: list[str] = []

    class RecordingExecutor:
        def run(self, job):
            ran.append(job.head_sha)
            return {"action": "updated"}

    repo, owner, plan = "alice-svc/rolled-back", _api(hub, accounts["alice"]), JobPlan(("dynamo",))
    owner.create_repo(repo)
    owner.upload_file(path_or_fileobj=b"one", path_in_repo="a.txt", repo_id=repo)
    a = owner.model_info(repo).sha
    owner.upload_file(path_or_fileobj=b"two", path_in_repo="a.txt", repo_id=repo)
    b = owner.model_info(repo).sha
    queue = JobQueue(tmp_path / "q.sqlite", max_attempts=4)
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=plan, workers=1)
    workers = QueueWorkers(config, queue, RecordingExecutor(), idle_s=0.05, head=branch_head(None, "main")).start()

    def settle() -> None:
        deadline = time.monotonic() + 30
        while (queue.counts().get("queued") or queue.counts().get("running")) and time.monotonic() < deadline:
            time.sleep(0.05)

    try:
        hub.force_push(repo, a)
        assert queue.enqueue(repo, a, plan)[1]
        settle()
        hub.force_push(repo, b)
        assert queue.enqueue(repo, b, plan)[1]
        settle()
        hub.force_push(repo, a)  # the owner withdraws B
        assert queue.enqueue(repo, a, plan)[1], "the webhook of the commit main came back to was dropped"
        settle()
        assert not queue.enqueue(repo, a, plan)[1]  # a replay of it, once it ran again
    finally:
        workers.stop()
    assert ran == [a, b, a], ran


def test_a_worker_outlives_a_locked_queue_and_healthz_says_what_is_wrong(tmp_path):
    """Another process holds the queue's database locked past the busy timeout (here 0.3 s, 30 s
    in service): the workers' claims fail, the threads live on, `/healthz` answers 503 naming the
    unwritable queue meanwhile; once the lock goes the job runs and `/healthz` is 200. A worker
    thread that has stopped makes `/healthz` 503 naming it."""
    import sqlite3
    import threading

    from starlette.testclient import TestClient

    from hfexport.entrypoints.service.app import create_app
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.workers import QueueWorkers

    class Done:
        def run(self, job):
            return {"action": "opened"}

    queue = JobQueue(tmp_path / "q.sqlite", busy_timeout_s=0.3)
    job_id, _ = queue.enqueue("alice-svc/locked", "c" * 40, JobPlan(("dynamo",)))
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=JobPlan(("dynamo",)), workers=2)
    locker = sqlite3.connect(tmp_path / "q.sqlite", isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    workers = QueueWorkers(config, queue, Done(), idle_s=0.05).start()
    client = TestClient(create_app(config, queue, workers))
    try:
        time.sleep(1.5)  # several failed claims, each waiting out the busy timeout
        answer = client.get("/healthz")
        assert answer.status_code == 503 and "the queue cannot be written" in answer.json()["problems"][0]
        assert workers.dead() == []
        locker.execute("ROLLBACK")
        deadline = time.monotonic() + 30
        while queue.get(job_id).status != "done" and time.monotonic() < deadline:
            time.sleep(0.1)
        assert queue.get(job_id).status == "done"
        assert client.get("/healthz").status_code == 200
        # A thread that stopped (an error no guard caught): named, 503.
        stopped = threading.Thread(target=lambda: None, name="worker-9")
        stopped.start()
        stopped.join()
        workers._threads.append(stopped)
        answer = client.get("/healthz")
        assert answer.status_code == 503 and answer.json()["problems"] == ["worker-9 has stopped"]
    finally:
        locker.close()
        workers.stop()


def test_a_commit_that_failed_for_a_transient_cause_is_queued_again_by_its_next_webhook(tmp_path):
    """The Hub down through every attempt: the job fails for good, marked transient; the webhook
    sent again for that commit queues it again with its attempts anew, and it runs. A job that
    failed for a cause no retry fixes (bad input) stays failed: its webhook queues nothing."""
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.executors import JobFailed
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.workers import QueueWorkers

    hub_down = {"alice-svc/outage": True}

    class Executor:
        def run(self, job):
            if job.repo_id == "alice-svc/bad-input":
                raise JobFailed("push exited with 2: no such model", retryable=False)
            if hub_down[job.repo_id]:
                raise JobFailed("push exited with 3: the Hub is unreachable", retryable=True)
            return {"action": "opened"}

    plan = JobPlan(("dynamo",))
    queue = JobQueue(tmp_path / "q.sqlite", max_attempts=2)
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=plan, max_attempts=2, backoff_s=0.01)
    outage, _ = queue.enqueue("alice-svc/outage", "d" * 40, plan)
    bad, _ = queue.enqueue("alice-svc/bad-input", "e" * 40, plan)
    workers = QueueWorkers(config, queue, Executor(), idle_s=0.02).start()
    try:

        def settle() -> None:
            deadline = time.monotonic() + 30
            while (queue.counts().get("queued") or queue.counts().get("running")) and time.monotonic() < deadline:
                time.sleep(0.05)

        settle()
        assert queue.get(outage).status == "failed" and queue.get(outage).attempts == 2
        assert queue.get(bad).status == "failed" and queue.get(bad).attempts == 1
        hub_down["alice-svc/outage"] = False  # the Hub is back; the owner presses "replay"
        assert queue.enqueue("alice-svc/outage", "d" * 40, plan) == (outage, True)
        assert queue.enqueue("alice-svc/bad-input", "e" * 40, plan) == (bad, False)
        settle()
    finally:
        workers.stop()
    job = queue.get(outage)
    assert job.status == "done" and job.attempts == 1, job
    assert queue.get(bad).status == "failed"


def test_a_burst_of_49_commits_to_one_repo_delays_another_repos_job_by_one_job_at_most(tmp_path):
    """49 webhooks for 49 commits of one repo, then one for another repo, to the real app: every one
    is queued (202), the busy repo's waiting jobs collapse to its newest commit, and the other repo's
    job runs second. Claims go round-robin: with jobs of three plans waiting for one repo, a job of
    another repo queued after them runs second too."""
    from starlette.testclient import TestClient

    from hfexport.entrypoints.service.app import create_app
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.workers import QueueWorkers

    ran: list[tuple[str, str, str]] = []

    class Recording:
        def run(self, job):
            ran.append((job.repo_id, job.head_sha, str(job.plan)))
            return {"action": "opened"}

    plan = JobPlan(("dynamo",))
    queue = JobQueue(tmp_path / "q.sqlite")
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=plan)
    client = TestClient(create_app(config, queue))
    busy = [f"{i:040x}" for i in range(1, 50)]
    for sha in busy:
        answer = client.post("/webhook", json=_payload("alice-svc/busy", sha), headers={"X-Webhook-Secret": SECRET})
        assert answer.status_code == 202, answer.text
    answer = client.post("/webhook", json=_payload("bob-svc/quiet", "f" * 40), headers={"X-Webhook-Secret": SECRET})
    assert answer.status_code == 202
    assert queue.counts() == {"superseded": 48, "queued": 2}
    heads = {"alice-svc/busy": busy[-1], "bob-svc/quiet": "f" * 40}

    def drain() -> None:
        workers = QueueWorkers(config, queue, Recording(), idle_s=0.02, head=heads.get).start()
        try:
            deadline = time.monotonic() + 30
            while queue.counts().get("queued") and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            workers.stop()

    drain()
    assert ran == [("alice-svc/busy", busy[-1], str(plan)), ("bob-svc/quiet", "f" * 40, str(plan))]
    # Round-robin: three plans of the busy repo wait, then the quiet repo's job: one of the busy
    # repo's (served longest ago), the quiet one's, then the rest.
    ran.clear()
    for backends in (("onnx",), ("executorch",), ("dynamo", "onnx")):
        queue.enqueue("alice-svc/busy", busy[-1], JobPlan(backends))
    queue.enqueue("bob-svc/quiet", "f" * 40, JobPlan(("onnx",)))
    drain()
    assert [repo for repo, _, _ in ran] == ["alice-svc/busy", "bob-svc/quiet", "alice-svc/busy", "alice-svc/busy"]


def test_a_five_minute_hub_outage_loses_no_commit(tmp_path):
    """Twenty repos push during a five-minute Hub outage (a simulated clock): every attempt in it
    fails transiently and is retried on the schedule (30 s, 2 min, 8 min…); after it every commit's
    job is done, none failed, no attempt ran early. The old schedule (5 s doubling, four attempts)
    would have given up on all twenty after 35 s."""
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.executors import JobFailed
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.workers import QueueWorkers

    now = [1_000_000.0]
    outage_ends = now[0] + 300
    attempts: list[tuple[str, float]] = []

    class HubDown:
        def run(self, job):
            attempts.append((job.repo_id, now[0]))
            if now[0] < outage_ends:
                raise JobFailed("push exited with 3: the Hub answered 503", retryable=True)
            return {"action": "opened"}

    plan = JobPlan(("dynamo",))
    queue = JobQueue(tmp_path / "q.sqlite", clock=lambda: now[0])
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=plan)
    workers = QueueWorkers(config, queue, HubDown(), idle_s=0.001)
    jobs = []
    for i in range(20):
        now[0] += 7  # a push every 7 s, from the outage's start
        jobs.append(queue.enqueue(f"alice-svc/outage-{i}", f"{i + 1:040x}", plan)[0])
        workers._once()
    while queue.counts().get("queued"):
        now[0] = max(now[0], queue.next_run_at())  # the clock jumps to the next retry
        workers._once()
    assert {queue.get(j).status for j in jobs} == {"done"}, queue.counts()
    by_repo: dict[str, list[float]] = {}
    for repo, at in attempts:
        by_repo.setdefault(repo, []).append(at)
    for times in by_repo.values():
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert all(gap >= config.retry_delay(n + 1) for n, gap in enumerate(gaps)), gaps
    assert max(len(t) for t in by_repo.values()) <= 4  # 30 s + 2 min + 8 min covers five minutes
    old = ServiceConfig(secret=SECRET, watch={"*"}, plan=plan, max_attempts=4, backoff_s=5, max_backoff_s=20)
    assert sum(old.retry_delay(n) for n in range(1, 4)) < 60  # how the old schedule lost them


def test_one_namespace_cannot_fill_the_queue_for_the_others(tmp_path):
    """A namespace at its cap of waiting jobs gets 503 with Retry-After for a new repo's commit;
    another namespace's webhook is still queued."""
    from starlette.testclient import TestClient

    from hfexport.entrypoints.service.app import create_app
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.queue import JobQueue

    plan = JobPlan(("dynamo",))
    queue = JobQueue(tmp_path / "q.sqlite", max_queued_per_namespace=3)
    client = TestClient(create_app(ServiceConfig(secret=SECRET, watch={"*"}, plan=plan), queue))
    codes = [
        client.post("/webhook", json=_payload(f"big-org/repo-{i}", "a" * 40), headers={"X-Webhook-Secret": SECRET})
        for i in range(4)
    ]
    assert [c.status_code for c in codes] == [202, 202, 202, 503]
    assert codes[-1].headers["retry-after"] == "60" and "big-org/repo-3" in codes[-1].json()["error"]
    other = client.post("/webhook", json=_payload("small-org/repo", "b" * 40), headers={"X-Webhook-Secret": SECRET})
    assert other.status_code == 202


def test_1100_connections_trickling_their_headers_leave_healthz_answering(tmp_path, accounts):
    """1,100 connections that send half a request's head and then nothing (no secret needed), to a
    service limited to 1,024 descriptors as a server process is by default: `/healthz` still answers
    at once (the oldest half-sent connections are shed past the cap), a real webhook is still
    refused or taken as it should be, and every half-sent connection is closed once the head deadline
    passes."""
    service = Service(
        tmp_path / "q.sqlite",
        ["*"],
        accounts["bot"],
        extra=("--header-timeout", "3", "--max-connections", "800"),
        max_fds=1024,
    ).start()
    slow: list[socket.socket] = []
    try:
        for _ in range(1100):
            connection = socket.create_connection(("127.0.0.1", service.port), timeout=10)
            connection.sendall(b"POST /webhook HTTP/1.1\r\nHost: hfexport\r\nX-Slow: ")
            slow.append(connection)
        started = time.monotonic()
        assert service.get("/healthz", secret=None)["ok"] is True
        assert time.monotonic() - started < 5
        assert service.post({"event": {}}, secret="wrong-secret-value")[0] == 403
        time.sleep(4)  # past the head deadline
        closed = 0
        for connection in slow:
            connection.settimeout(5)
            try:
                closed += connection.recv(1) == b""
            except ConnectionResetError:
                closed += 1
        assert closed == len(slow)
        assert service.get("/healthz", secret=None)["ok"] is True
    finally:
        for connection in slow:
            connection.close()
        service.stop()


def test_reconcile_queues_what_webhooks_missed_across_a_namespace_a_watch_file_and_the_top_models(
    hub, accounts, tmp_path
):
    """No webhook is sent. Watched: `acme-recon/*`, a watch file naming one repo, and the most
    downloaded model tagged `rare-tag` (`--watch-top 1`). On start the service queues each of their
    heads (and nothing of the unwatched, less downloaded one); a commit made while it runs, and a
    repo created in the namespace, are queued by the next pass (every 2 s). A webhook of the top
    model is acted on; of the other, ignored."""
    apis = {ns: _api(hub, hub.add_user(ns)) for ns in ("acme-recon", "solo-recon", "tops-recon")}
    heads = {}

    def commit(repo: str, text: bytes, tags: str = "[demo]") -> None:
        api = apis[repo.split("/")[0]]
        api.create_repo(repo, exist_ok=True)
        api.upload_file(path_or_fileobj=b'{"model_type": "bert"}', path_in_repo="config.json", repo_id=repo)
        api.upload_file(
            path_or_fileobj=b"---\ntags: " + tags.encode() + b"\n---\n" + text, path_in_repo="README.md", repo_id=repo
        )
        heads[repo] = api.model_info(repo).sha

    for i in range(3):
        commit(f"acme-recon/r{i}", b"one")
    commit("solo-recon/one", b"one")
    commit("tops-recon/popular", b"one", "[rare-tag]")
    commit("tops-recon/obscure", b"one", "[rare-tag]")
    for _ in range(3):
        apis["tops-recon"].hf_hub_download("tops-recon/popular", "config.json", force_download=True)
    watch_file = tmp_path / "watch.txt"
    watch_file.write_text("# our one-off\nsolo-recon/one  # and a comment\n")
    service = Service(
        tmp_path / "q.sqlite",
        ["acme-recon/*"],
        accounts["bot"],
        extra=(
            "--watch-file",
            str(watch_file),
            "--watch-top",
            "1",
            "--watch-filter",
            "rare-tag",
            "--reconcile-every",
            "2",
        ),
    ).start()

    def queued() -> set[tuple[str, str]]:
        return {(j["repo_id"], j["head_sha"]) for j in service.get("/jobs")["jobs"]}

    def wait_for(expected: set[tuple[str, str]]) -> None:
        deadline = time.monotonic() + 30
        while not expected <= queued() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert expected <= queued(), (expected - queued(), queued())

    try:
        watched = {r: s for r, s in heads.items() if r != "tops-recon/obscure"}
        wait_for(set(watched.items()))
        assert not any(repo == "tops-recon/obscure" for repo, _ in queued())
        commit("acme-recon/r0", b"two")  # no webhook for it, nor for the new repo
        commit("acme-recon/new", b"one")
        wait_for({("acme-recon/r0", heads["acme-recon/r0"]), ("acme-recon/new", heads["acme-recon/new"])})
        commit("tops-recon/popular", b"two")
        status, answer = service.post(_payload("tops-recon/popular", heads["tops-recon/popular"]))
        assert status in (200, 202) and "job" in answer, answer  # the reconcile pass may have queued it first
        status, answer = service.post(_payload("tops-recon/obscure", heads["tops-recon/obscure"]))
        assert status == 200 and "not watched" in answer["ignored"]
    finally:
        service.stop()


def test_a_reconcile_pass_keeps_to_the_namespace_cap_and_the_next_pass_queues_the_rest(hub, tmp_path):
    """A watched namespace of three repos and a cap of two waiting jobs per namespace: the first pass
    queues two heads and leaves the third for later (as its webhook would get 503); once a job is
    done, the next pass queues it."""
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.watch import Reconciler, Watch

    api = _api(hub, hub.add_user("capped-recon"))
    for i in range(3):
        api.create_repo(f"capped-recon/r{i}")
        api.upload_file(path_or_fileobj=b"{}", path_in_repo="config.json", repo_id=f"capped-recon/r{i}")
    plan = JobPlan(("dynamo",))
    queue = JobQueue(tmp_path / "q.sqlite", max_queued_per_namespace=2)
    reconciler = Reconciler(
        Watch(frozenset({"capped-recon/*"})),
        lambda repo_id, sha: queue.enqueue(repo_id, sha, plan, is_head=True)[1],
        api,
        full=queue.full,
    )

    assert reconciler.run_once() == {"visited": 3, "queued": 2, "deferred": 1, "unreadable": 0}
    assert len(queue.list()) == 2
    claimed = queue.claim()
    assert claimed is not None
    job, token = claimed
    assert queue.finish(job.id, token, {"action": "opened"})
    assert reconciler.run_once() == {"visited": 3, "queued": 1, "deferred": 0, "unreadable": 0}
    assert {j.repo_id for j in queue.list()} == {f"capped-recon/r{i}" for i in range(3)}


def test_pr_writes_are_paced_for_the_fleet_and_a_429_pauses_every_worker(tmp_path):
    """A token bucket of 60 writes an hour, bursts of 2, on a simulated clock: five repos' jobs start
    two at once, then one a minute, none early, and a job put back to wait for its token has not
    spent an attempt. A push that ended on the Hub's 429 pauses the writes of every worker on the
    queue until its retry is due."""
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.executors import JobFailed
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.workers import QueueWorkers

    now = [5_000_000.0]
    started: list[tuple[str, float]] = []
    limited = {"alice-svc/limited"}

    class Recording:
        def run(self, job):
            started.append((job.repo_id, now[0]))
            if job.repo_id in limited:
                limited.clear()
                raise JobFailed(
                    "push exited with 3: 429 Too Many Requests: you have reached your 'api' rate limit", True
                )
            return {"action": "opened"}

    plan = JobPlan(("dynamo",))
    queue = JobQueue(tmp_path / "q.sqlite", clock=lambda: now[0])
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=plan, writes_per_hour=60, writes_burst=2)
    workers = QueueWorkers(config, queue, Recording(), idle_s=0.001)

    def drain() -> None:
        while queue.counts().get("queued"):
            workers._once()
            now[0] = max(now[0], queue.next_run_at() or now[0])

    for i in range(5):
        queue.enqueue(f"alice-svc/paced-{i}", f"{i + 1:040x}", plan)
    t0 = now[0]
    drain()
    offsets = [round(at - t0) for _, at in started]
    assert offsets == [0, 0, 60, 120, 180], offsets
    assert all(j.attempts == 1 and j.status == "done" for j in queue.list())
    # A 429: the bucket is paused for the failed job's retry delay (30 s); nothing starts before.
    started.clear()
    now[0] += 3600  # the bucket is full again
    queue.enqueue("alice-svc/limited", "a" * 40, plan)
    workers._once()
    queue.enqueue("alice-svc/other", "b" * 40, plan)
    t1 = now[0]
    drain()
    assert started[0] == ("alice-svc/limited", t1)
    assert sorted(repo for repo, _ in started[1:]) == ["alice-svc/limited", "alice-svc/other"]
    assert all(at - t1 >= config.retry_delay(1) for _, at in started[1:]), started
    assert {j.status for j in queue.list()} == {"done"}


def test_a_clock_stepping_back_an_hour_never_makes_a_pr_write_wait_an_hour(tmp_path):
    """The machine's clock steps back 1 h (NTP, a restored VM) after the bucket emptied, and after a
    429's pause: the next write waits its token's minute and the pause's 30 s, not an hour more."""
    from hfexport.entrypoints.service.queue import JobQueue

    now = [5_000_000.0]
    queue = JobQueue(tmp_path / "q.sqlite", clock=lambda: now[0])
    assert queue.take_write(60, 2) == 0 and queue.take_write(60, 2) == 0  # the burst, spent
    now[0] -= 3600
    assert 0 < queue.take_write(60, 2) <= 60
    now[0] += 60
    assert queue.take_write(60, 2) == 0  # a minute later by the new clock: its token is there
    queue.pause_writes(30)
    now[0] -= 3600
    assert 0 < queue.take_write(60, 2) <= 30
    now[0] += 60
    assert queue.take_write(60, 2) == 0


def test_finished_jobs_are_pruned_after_the_retention_and_healthz_reads_only_the_waiting_ones(tmp_path, accounts):
    """A queue holding 100,000 jobs finished a year ago and 10 finished today: `serve --keep-days 30`
    deletes the old ones and keeps today's; `/healthz` (unauthenticated) counts only the jobs
    waiting, through the status index — its cost follows the queue, not the history."""
    import sqlite3

    from hfexport.entrypoints.service.queue import JobQueue

    db = tmp_path / "q.sqlite"
    queue, year_ago = JobQueue(db), time.time() - 365 * 86400
    with sqlite3.connect(db) as connection:
        connection.executemany(
            "INSERT INTO jobs (dedup_key, repo_id, head_sha, plan_key, status, created_at, updated_at) "
            "VALUES (?, ?, ?, 'dynamo|auto', ?, ?, ?)",
            [
                (
                    f"old/{i}",
                    f"old/r{i % 100}",
                    f"{i:040x}",
                    ("done", "failed", "superseded")[i % 3],
                    year_ago,
                    year_ago,
                )
                for i in range(100_000)
            ]
            + [(f"new/{i}", "new/r", f"{i:040x}", "done", time.time(), time.time()) for i in range(10)],
        )
    plan = " ".join(
        row[-1]
        for row in queue._connect().execute(
            "EXPLAIN QUERY PLAN SELECT status, COUNT(*) FROM jobs WHERE status IN ('queued', 'running') GROUP BY status"
        )
    )
    assert plan.startswith("SEARCH jobs USING COVERING INDEX") and "SCAN" not in plan, plan
    service = Service(db, ["new/r"], accounts["bot"], extra=("--keep-days", "30", "--warm", "0")).start()
    try:
        deadline = time.monotonic() + 60
        while queue.counts().get("done", 0) + queue.counts().get("failed", 0) > 10 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert queue.counts() == {"done": 10}, queue.counts()
        assert service.get("/healthz", secret=None) == {"ok": True, "jobs": {}}
    finally:
        service.stop()


def _states_queue(path: Path) -> dict[str, str]:
    """A queue holding repos in four states (one a failure whose error carries markup); returns
    each repo's expected state."""
    from hfexport.entrypoints.service.queue import JobQueue

    queue, plan = JobQueue(path), JobPlan(("dynamo",))
    queue.enqueue("org/done-one", "a" * 40, plan)
    job, token = queue.claim()
    queue.finish(job.id, token, {"action": "opened", "pr_url": "http://127.0.0.1/org/done-one/discussions/3"})
    queue.enqueue("org/done-two", "d" * 40, plan)
    job, token = queue.claim()
    queue.finish(job.id, token, {"action": "updated", "pr_url": "http://127.0.0.1/org/done-two/discussions/1"})
    queue.enqueue("org/failing", "b" * 40, plan)
    job, token = queue.claim()
    queue.fail(job.id, token, "push exited with 2: <script>alert(1)</script>", None)
    queue.enqueue("org/waiting", "c" * 40, plan)
    return {"org/done-one": "done", "org/done-two": "done", "org/failing": "failed", "org/waiting": "queued"}


def test_the_status_page_lists_each_repo_behind_the_read_token(tmp_path):
    """`GET /`: 401 asking for Basic authentication without the read token; with it (as the
    password), a row per repo with its newest commit, state, our PR and its failure, escaped."""
    import base64

    from starlette.testclient import TestClient

    from hfexport.entrypoints.service.app import create_app
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.queue import JobQueue

    expected = _states_queue(tmp_path / "q.sqlite")
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=JobPlan(("dynamo",)), read_token="read-token-0123456789")
    client = TestClient(create_app(config, JobQueue(tmp_path / "q.sqlite")))
    refused = client.get("/")
    assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Basic")
    wrong = base64.b64encode(b"op:not-the-token").decode()
    assert client.get("/", headers={"Authorization": f"Basic {wrong}"}).status_code == 401
    basic = base64.b64encode(b"op:read-token-0123456789").decode()
    page = client.get("/", headers={"Authorization": f"Basic {basic}"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    text = page.text
    assert text.count("<tr>") == 1 + len(expected)  # the header and a row per repo
    for repo, state in expected.items():
        row = text[text.index(f"<td>{repo}</td>") :].split("</tr>")[0]
        assert f">{state}</td>" in row, row
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text and "<script>" not in text
    assert '<a href="http://127.0.0.1/org/done-one/discussions/3">#3</a> opened' in text
    assert "Jobs: 2 done, 1 failed, 1 queued." in text
    assert '<meta http-equiv="refresh" content="15">' in text  # it keeps itself current, without a script
    # A running job is its repo's state, not one of its jobs waiting.
    queue = JobQueue(tmp_path / "q.sqlite")
    queue.enqueue("org/running-one", "e" * 40, JobPlan(("dynamo",)))
    while (claimed := queue.claim()) is not None and claimed[0].repo_id != "org/running-one":
        pass  # org/waiting's job is claimed first (older): both run now
    text = client.get("/", headers={"Authorization": f"Basic {basic}"}).text
    row = text[text.index("<td>org/running-one</td>") :].split("</tr>")[0]
    assert re.search(r">running, \d+ s</td><td>0</td>", row), row  # how long it has run; none waiting


# Debian's headless shell (`make test` installs it) or its whole browser.
CHROMIUM = shutil.which("chromium-headless-shell") or shutil.which("chromium")


@pytest.mark.skipif(
    CHROMIUM is None, reason="needs Chromium: `apt-get install chromium-headless-shell` (make test does)"
)
def test_the_status_page_renders_a_row_per_repo_in_a_real_browser(tmp_path, accounts):
    """The real service, and Chromium headless taking a screenshot of `GET /` (the read token as the
    password of the URL): the rows are counted in the picture by their state cells' colours — two
    done, one failed, one queued."""
    from PIL import Image

    from hfexport.entrypoints.service.queue import JobStatus
    from hfexport.entrypoints.service.status_page import STATE_COLOURS

    expected = _states_queue(tmp_path / "q.sqlite")
    token = "read-token-0123456789"
    service = Service(
        tmp_path / "q.sqlite", ["*"], accounts["bot"], extra=("--workers", "0", "--read-token", token)
    ).start()
    shot = tmp_path / "status.png"
    try:
        browser = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                # Only 127.0.0.1: none of the browser's own calls home (updates, safe browsing, metrics).
                "--disable-background-networking",
                "--no-first-run",
                "--window-size=1200,700",
                f"--screenshot={shot}",
                f"http://operator:{token}@127.0.0.1:{service.port}/",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert browser.returncode == 0 and shot.exists(), browser.stderr[-2000:]
    finally:
        service.stop()
    image = Image.open(shot).convert("RGB")
    pixels = image.load()

    def bands(colour: str) -> int:
        """How many separate horizontal bands of the page hold this colour (a row's state cell each)."""
        rgb = tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))
        lines = [y for y in range(image.height) if sum(pixels[x, y] == rgb for x in range(image.width)) > 40]
        return sum(1 for i, y in enumerate(lines) if i == 0 or y != lines[i - 1] + 1)

    counted = {str(state): bands(colour) for state, colour in STATE_COLOURS.items()}
    wanted = {str(state): list(expected.values()).count(str(state)) for state in JobStatus}
    assert counted == wanted, (counted, wanted)


def test_a_watched_namespace_with_a_destination_publishes_each_repo_into_its_derived_repo(
    hub, accounts, tmp_path, workspace
):
    """`--watch 'alice-svc/* -> svc-bot/{name}-ONNX'`: a commit on a repo of the namespace is
    exported into the service account's derived repo (created), not a PR on the source; the job's
    result and the status page link that repo."""
    repo = "alice-svc/derived-e2e"
    sha = _seed(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-derived"))
    watch = "alice-svc/* -> svc-bot/{name}-ONNX"
    token = "read-token-0123456789"
    service = Service(tmp_path / "q.sqlite", [watch], accounts["bot"], extra=("--read-token", token)).start()
    try:
        status, body = service.post(_payload(repo, sha))
        assert status == 202, body
        job = service.wait_done(body["job"])
        assert job["status"] == "done" and job["result"]["action"] == "created", job
        assert job["plan"].endswith("|into=svc-bot/derived-e2e-ONNX"), job
        assert job["result"]["repo_url"].endswith("/svc-bot/derived-e2e-ONNX"), job
        api = _api(hub, accounts["bot"])
        assert "dynamo/model.pt2" in api.list_repo_files("svc-bot/derived-e2e-ONNX")
        assert _prs(hub, accounts["alice"], repo) == []
        request = urllib.request.Request(service.url + "/", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as r:
            page = r.read().decode()
        assert f'href="{job["result"]["repo_url"]}">svc-bot/derived-e2e-ONNX</a>' in page, page
    finally:
        service.stop()


def test_a_watch_destination_is_the_most_specific_patterns_and_a_bad_one_is_refused():
    from hfexport.entrypoints.service.watch import Watch
    from hfexport.messages import JobPlan

    watch = Watch.parse(["org/* -> me/{name}-ONNX", "org/special -> me/special-web", "other/model", "*"])
    assert watch.patterns == frozenset({"org/*", "org/special", "other/model", "*"})
    assert watch.destination("org/bert") == "me/bert-ONNX"
    assert watch.destination("org/special") == "me/special-web"
    assert watch.destination("other/model") is None and watch.destination("else/model") is None
    for bad in ("org/* -> {name}", "org/* -> me/{name.__class__}", "org/* -> me/a b"):
        with pytest.raises(ValueError, match="is not a repo id template"):
            Watch.parse([bad])
    plan = JobPlan(("onnx", "dynamo"), "auto", True, "me/bert-ONNX")
    assert str(plan) == "onnx,dynamo|auto|trust-remote-code|into=me/bert-ONNX" and JobPlan.parse(str(plan)) == plan
    assert JobPlan.parse("onnx|auto") == JobPlan(("onnx",)) and str(JobPlan(("onnx",))) == "onnx|auto"

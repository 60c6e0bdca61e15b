"""Where a job runs (service/executors.py): a push process here — killed, restarted, sharing memory,
kept warm — or HF Jobs on the Hub's endpoints."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import tiny_models
from service_runs import (  # noqa: F401
    SECRET,
    Service,
    free_port,
    hub_api,
    pull_requests,
    running_job,
    seeded,
    webhook_payload,
)

from hfexport.entrypoints.service.executors import HfJobsExecutor
from hfexport.entrypoints.service.queue import Job, JobStatus
from hfexport.messages import JobPlan


def test_kill9_mid_job_then_restart_completes_with_one_pr(hub, accounts, tmp_path, workspace):
    repo = "alice-svc/crashy"
    sha = seeded(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-crashy", seed=9))
    db = tmp_path / "q.sqlite"
    service = Service(db, [repo], accounts["bot"], backends="dynamo,onnx").start()
    status, body = service.post(webhook_payload(repo, sha))
    assert status == 202
    deadline = time.monotonic() + 60
    while service.get(f"/jobs/{body['job']}")["status"] != "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(4)  # the export is under way
    service.kill9()
    assert pull_requests(hub, accounts["alice"], repo) == []  # killed before it could publish
    restarted = Service(db, [repo], accounts["bot"], backends="dynamo,onnx")
    restarted.port = service.port
    restarted.start()
    try:
        job = restarted.wait_done(body["job"])
        assert job["status"] == "done" and job["attempts"] == 2, job
        assert len(pull_requests(hub, accounts["alice"], repo)) == 1
    finally:
        restarted.stop()


def test_a_second_service_on_the_same_queue_leaves_a_live_lease_alone(hub, accounts, tmp_path, workspace):
    """A rolling restart: a second `serve` starts on the --db while the first still runs a job (its
    export hangs) and renews its lease. The second does not run it: one attempt, the first's lease."""
    repo = "alice-svc/rolling"
    sha = seeded(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-rolling", seed=13))
    db, hang = tmp_path / "q.sqlite", {"HFEXPORT_TESTING": "1", "HFEXPORT_FAULT": "dynamo:hang"}
    first = Service(db, [repo], accounts["bot"], extra=("--warm", "0"), env=hang).start()
    second = None
    try:
        status, body = first.post(webhook_payload(repo, sha))
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
        seeded(hub, accounts["alice"], r, tiny_models.bert(workspace / f"svc-{r[-8:]}", seed=70 + i))
        for i, r in enumerate(repos)
    ]
    weights = weights_of(Source(kind="hub", ref=repos[0], sha=shas[0]), accounts["alice"])
    alone = needs(weights, ["dynamo"])[0]
    env = {"HFEXPORT_MEMORY_LIMIT_MB": str(alone * 3 // 2 // 1_000_000)}
    service = Service(tmp_path / "q.sqlite", repos, accounts["bot"], extra=("--workers", "2", "--warm", "0"), env=env)
    service.start()
    try:
        ids = [service.post(webhook_payload(repo, sha))[1]["job"] for repo, sha in zip(repos, shas)]
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
        report = hub_api(hub, accounts["alice"]).hf_hub_download(repo, "hfexport-report.json", revision="refs/pr/1")
        assert {b["status"] for b in json.loads(Path(report).read_text())["backends"]} == {"ok"}


def test_a_backend_killed_under_the_service_is_retried_and_never_posted(hub, accounts, tmp_path, workspace):
    """ONNX's process is SIGKILLed every time (as the OOM killer does): dynamo's PR opens without a
    word of the kill, the job is retried (not `done`), and after its attempts it fails naming it —
    on the service, not on the owner's repo."""
    repo = "alice-svc/killed"
    sha = seeded(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-killed", seed=77))
    env = {"HFEXPORT_TESTING": "1", "HFEXPORT_FAULT": "onnx:crash"}
    extra = ("--max-attempts", "2", "--backoff", "0", "--warm", "0")
    service = Service(tmp_path / "q.sqlite", [repo], accounts["bot"], "dynamo,onnx", extra, env=env).start()
    try:
        job = service.wait_done(service.post(webhook_payload(repo, sha))[1]["job"])
    finally:
        service.stop()
    assert job["status"] == "failed" and job["attempts"] == 2 and "onnx crashed" in job["error"], job
    api = hub_api(hub, accounts["alice"])
    (pr,) = pull_requests(hub, accounts["alice"], repo)
    said = " ".join(e.content for e in api.get_discussion_details(repo, pr.num).events if e.type == "comment")
    assert "SIGKILL" not in said and "crashed" not in said, said
    assert "onnx" not in api.list_repo_files(repo, revision=f"refs/pr/{pr.num}")


def test_a_push_killed_at_the_job_timeout_leaves_no_folder_behind(hub, accounts, tmp_path, workspace, monkeypatch):
    """The local executor's push hangs in its export and is killed at the job timeout: its
    temporary folder (the workers' folders) and its half-written export in the cache are gone once
    the job has failed, and nothing else of it is left running."""
    from hfexport.entrypoints.service.executors import JobFailed, LocalExecutor

    repo = "alice-svc/hangs"
    sha = seeded(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-hangs", seed=79))
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
    sha = seeded(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-bounded", seed=83))
    env = {"HF_HOME": str(home), "HFEXPORT_HF_CACHE_MAX_GB": "0", "HFEXPORT_CACHE": str(tmp_path / "cache")}
    service = Service(tmp_path / "q.sqlite", [repo], accounts["bot"], extra=("--warm", "0"), env=env).start()
    try:
        job = service.wait_done(service.post(webhook_payload(repo, sha))[1]["job"])
    finally:
        service.stop()
    assert job["status"] == "done", job
    assert not list(home.rglob("*.safetensors")), list(home.rglob("*"))


def test_hf_jobs_executor_runs_on_the_hubs_jobs_endpoints(hub, accounts, tmp_path, workspace):
    repo = "alice-svc/jobs"
    sha = seeded(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-jobs"))
    executor = HfJobsExecutor(image="hfexport:test", token=accounts["bot"], poll_s=0.5)
    job = running_job(1, repo, sha, JobPlan(("dynamo",)))
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
    info = hub_api(hub, accounts["bot"]).inspect_job(job_id=launched.id)
    assert accounts["bot"] not in json.dumps(info.command) and list(info.secrets) == ["HF_TOKEN"]
    assert not any(accounts["bot"] in line for line in launched.logs)
    assert len(pull_requests(hub, accounts["alice"], repo)) == 1


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
    sha = seeded(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-warm", seed=6))
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
        assert waiting.returncode == 0 and len(pull_requests(hub, accounts["alice"], repo)) == 1
        (following,) = executor._pushes._ready
        assert following is not waiting and following.poll() is None
    finally:
        executor.close()
    assert following.wait(timeout=30) == 0 and len(pull_requests(hub, accounts["alice"], repo)) == 1


def test_an_hf_job_past_its_timeout_is_ended_by_the_hub_and_the_failure_names_it(hub, accounts, workspace):
    """The executor gives each Job its timeout (`serve --job-timeout`); the Hub ends one that runs
    past it, and the job's error says which Job, flavor and timeout — not retried (it would run as
    long again). Nothing is published."""
    from hfexport.entrypoints.service.executors import JobFailed

    repo = "alice-svc/jobs-timeout"
    sha = seeded(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-jobs-timeout", seed=5))
    job = Job(4, repo, sha, JobPlan(("dynamo",)), JobStatus.RUNNING, 1, None, None, 0, 0)
    executor = HfJobsExecutor(image="hfexport:test", token=accounts["bot"], poll_s=0.5, timeout_s=2)
    before = set(hub.app.jobs.jobs)
    with pytest.raises(JobFailed, match=r"\(cpu, cpu-basic, timeout 2 s\) ended ERROR: timed out after 2 s") as e:
        executor.run(job)
    (launched,) = [hub.app.jobs.jobs[i] for i in set(hub.app.jobs.jobs) - before]
    # Killed by the Hub (reaped by its log reader: poll() may not see it at once under load).
    assert launched.spec["timeoutSeconds"] == 2 and launched.process.wait(timeout=30) is not None
    assert not e.value.retryable and pull_requests(hub, accounts["alice"], repo) == []


def test_hf_jobs_split_a_request_by_hardware_and_run_the_groups_in_parallel(hub, accounts, workspace):
    """dynamo on a CPU flavor and executorch-cuda on a GPU flavor, as two Jobs started together. The
    local Hub runs Jobs here, on no GPU: the GPU group finds nothing it can run and its Job fails,
    which the executor reports; the CPU group's PR is there."""
    from hfexport.entrypoints.service.executors import JobFailed, hardware_groups

    repo = "alice-svc/jobs-split"
    sha = seeded(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-jobs-split", seed=3))
    job = running_job(2, repo, sha, JobPlan(("dynamo", "executorch-cuda")))
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
    assert cpu.stage == "COMPLETED" and len(pull_requests(hub, accounts["alice"], repo)) == 1

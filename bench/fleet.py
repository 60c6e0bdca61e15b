"""The webhook service as a fleet operator runs it, and its fixed cost per job.

**Fleet** (`fleet`): `hfexport serve` as a real process against the local Hub, watching REPOS
repos across ten namespaces (`ns/*`, listed from the Hub), through a simulated day: COMMITS
commits (README edits, a few new weights) at random times, busy repos committing far more than
others, some in bursts; the Hub failing a share of requests (429 with Retry-After, 500/503,
connections dropped before or after it acted); the service killed with -9 and restarted KILLS
times. At the end: duplicate PRs (a repo with more than one of ours), PRs at a stale commit (the
report they publish names another commit than main's head), jobs failed or stuck, and jobs/hour.
The repos' weights are one tiny BERT (the export cache's hits: a README commit costs a push
without an export) except the commits that change them.

**Warm vs cold** (`warm`): each job of `hfexport serve --executor local` is a fresh push
process. Cold, it imports torch, transformers and the exporters once the job is claimed, and its
first backend worker does as well; warm (`serve --warm 1`, the default), both were done while
the service waited (`hfexport/entrypoints/warm_push.py`). Measured here through the service's own executor against
the local Hub: the same number of jobs each way, each a repo of its own with weights no export
cache has seen (tiny BERTs of different seeds, `dynamo`), an idle gap between jobs as between
webhooks, one job at a time; the median wall time per job, claim to PR, and the saving.

    .venv/bin/python bench/fleet.py [--repos 1000 --commits 2000 --day 3600 --kills 2] [--jobs 5 --gap 30]

Writes its sections of docs/benchmarks.md (between its markers) and prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
START, END = "<!-- bench/fleet.py: start -->", "<!-- bench/fleet.py: end -->"
FLEET_START, FLEET_END = "<!-- bench/fleet.py fleet: start -->", "<!-- bench/fleet.py fleet: end -->"


def _local_hub():
    """A work folder and the local Hub in this process, every client here and in the processes it
    starts pointed at it (before huggingface_hub is imported), the tests' tiny models importable."""
    work = Path(tempfile.mkdtemp(prefix="hfexport-bench-fleet-"))
    os.environ.update(HF_HUB_DISABLE_TELEMETRY="1", HF_HOME=str(work / "hf-home"), HFEXPORT_CACHE=str(work / "cache"))
    sys.path.insert(0, str(ROOT / "tests"))
    from hfexport_devhub import DevHub

    hub = DevHub(work / "hub").start()
    hub.settings.lfs = False  # this process's client has Xet on: everything inline
    os.environ["HF_ENDPOINT"] = hub.url
    return work, hub


def warm_vs_cold(jobs: int, gap_s: float) -> dict:
    work, hub = _local_hub()
    import tiny_models
    from huggingface_hub import HfApi

    from hfexport.entrypoints.service.executors import LocalExecutor
    from hfexport.entrypoints.service.queue import Job, JobStatus
    from hfexport.messages import JobPlan

    owner, bot = hub.add_user("owner"), hub.add_user("bot")
    api = HfApi(endpoint=hub.url, token=owner)
    figures: dict = {"jobs": jobs, "gap_s": gap_s, "backends": "dynamo"}
    for warm in (0, 1):
        executor = LocalExecutor(env={"HF_TOKEN": bot}, warm=warm)
        walls = []
        try:
            for i in range(jobs):
                repo = f"owner/fleet-{warm}-{i}"
                api.create_repo(repo)
                api.upload_folder(repo_id=repo, folder_path=tiny_models.bert(work / repo, seed=100 * warm + i))
                time.sleep(gap_s)  # the service idles between webhooks
                job = Job(
                    i, repo, api.model_info(repo).sha, JobPlan(("dynamo",)), JobStatus.RUNNING, 1, None, None, 0, 0
                )
                started = time.perf_counter()
                result = executor.run(job)
                walls.append(time.perf_counter() - started)
                assert result["action"] == "opened" and result["warm"] == bool(warm), result
        finally:
            executor.close()
        figures["warm" if warm else "cold"] = {"median_s": statistics.median(walls), "walls_s": walls}
    hub.stop()
    cold, warm_ = figures["cold"]["median_s"], figures["warm"]["median_s"]
    figures["saved_s"], figures["warm_over_cold"] = cold - warm_, warm_ / cold
    return figures


SECRET = "fleet-bench-secret"


def _patient(call, what: str, attempts: int = 10):
    """The bench's own Hub calls (the owners' commits) through the injected faults: retried, as an
    owner's client would be. A commit whose answer was dropped after it landed is made again (one
    more commit: harmless, as an impatient owner's)."""
    for attempt in range(attempts):
        try:
            return call()
        except Exception as e:  # noqa: BLE001 (any fault the Hub injects: HTTP errors, dropped connections)
            if attempt == attempts - 1:
                raise RuntimeError(f"{what}: {e}") from e
            time.sleep(min(0.5 * 2**attempt, 10))
    raise AssertionError("unreachable")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Service:
    """`hfexport serve` as an operator runs it: a process, killed with -9 and started again on its queue."""

    def __init__(self, work: Path, args: list[str], env: dict[str, str]):
        self.port, self.work, self.args, self.env = _free_port(), work, args, env
        self.process: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        log = open(self.work / "serve.log", "ab")  # noqa: SIM115 (the child writes it until it ends)
        command = [sys.executable, "-m", "hfexport", "serve", "--port", str(self.port), *self.args]
        self.process = subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=5).close()
                return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError("the service did not start: see " + str(self.work / "serve.log"))

    def kill9(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=60)


def fleet(
    repos: int, commits: int, day_s: float, kills: int, workers: int, fault_rate: float, warm: int = 0, seed: int = 0
) -> dict:
    """The fleet run (see the module's docstring); returns its figures."""
    work, hub = _local_hub()
    import tiny_models
    from huggingface_hub import HfApi

    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.report import REPORT_FILE

    rng = random.Random(seed)
    namespaces = [f"ns{i}" for i in range(10)]
    owners = {ns: HfApi(endpoint=hub.url, token=hub.add_user(ns)) for ns in namespaces}
    bot = hub.add_user("fleet-bot")
    names = [f"{namespaces[i % 10]}/model-{i:04d}" for i in range(repos)]
    weights = tiny_models.bert(work / "weights-0", seed=0)
    started = time.perf_counter()
    for repo in names:
        api = owners[repo.split("/")[0]]
        api.create_repo(repo)
        api.upload_folder(repo_id=repo, folder_path=weights)
    seeded_s = time.perf_counter() - started

    env = {**os.environ, "HF_TOKEN": bot, "HFEXPORT_WEBHOOK_SECRET": SECRET}
    # Cold pushes by default: a job whose request was exported before (a README edit) needs no
    # torch, and a warm push would have imported it, and started a worker process, for nothing.
    args = ["--db", str(work / "queue.sqlite"), "--backends", "onnx", "--workers", str(workers), "--warm", str(warm)]
    args += [a for ns in namespaces for a in ("--watch", f"{ns}/*")]
    # Retries in seconds to minutes (the default's minutes to an hour would outlast the run), no PR
    # pacing below what this machine does (it measures jobs/hour), a reconcile pass a quarter-day.
    args += ["--backoff", "5", "--max-backoff", "120", "--prs-per-hour", "100000"]
    args += ["--reconcile-every", str(max(60.0, day_s / 4)), "--max-queued-per-namespace", str(repos)]
    service = _Service(work, args, env)
    service.start()
    hub.add_webhook(service.url + "/webhook", SECRET)
    hub.settings.faults.configure(rate=fault_rate, retry_after_s=2.0, seed=seed)

    # The day: commit times, busy repos (a Zipf-like share), a tenth of commits in bursts of three.
    popularity = [1 / (rank + 1) for rank in range(repos)]
    schedule = sorted(rng.uniform(0, day_s) for _ in range(commits))
    kill_at = [day_s * (k + 1) / (kills + 1) for k in range(kills)]
    events: list[tuple[float, str, str]] = []
    for at in schedule:
        repo = rng.choices(names, popularity)[0]
        kind = "weights" if rng.random() < 0.02 else "readme"
        for burst in range(3 if rng.random() < 0.1 else 1):
            events.append((at + burst * 0.5, repo, kind))
    events += [(at, "", "kill") for at in kill_at]
    events.sort()
    day_start, made, restarts = time.perf_counter(), 0, []
    for at, repo, kind in events:
        time.sleep(max(0.0, at - (time.perf_counter() - day_start)))
        if kind == "kill":
            service.kill9()
            down = time.perf_counter()
            time.sleep(5)  # the webhooks of these seconds are lost: the reconcile pass on start finds them
            service.start()
            restarts.append(time.perf_counter() - down)
            continue
        api = owners[repo.split("/")[0]]
        made += 1
        if kind == "weights":
            folder = tiny_models.bert(work / f"weights-{made}", seed=made)
            _patient(lambda: api.upload_folder(repo_id=repo, folder_path=folder), f"new weights for {repo}")
        else:
            card = f"# {repo}\n\nEdited by its owner, commit {made}.\n".encode()
            _patient(lambda: api.upload_file(path_or_fileobj=card, path_in_repo="README.md", repo_id=repo), repo)
    day_wall = time.perf_counter() - day_start

    # Drain: every repo's PR at its head, or the queue idle for long enough to say it never will be.
    hub.settings.faults.configure(rate=0.0)
    checker = HfApi(endpoint=hub.url, token=bot)

    def behind() -> list[str]:
        late = []
        for repo in names:
            head = checker.model_info(repo).sha
            ours = [d for d in checker.get_repo_discussions(repo, author="fleet-bot") if d.is_pull_request]
            if not ours:
                late.append(repo)
                continue
            try:
                path = checker.hf_hub_download(repo, REPORT_FILE, revision=f"refs/pr/{ours[0].num}")
            except Exception:  # noqa: BLE001 (a PR without our report yet)
                late.append(repo)
                continue
            if json.loads(Path(path).read_text())["source"]["sha"] != head:
                late.append(repo)
        return late

    drain_start = time.perf_counter()
    late = behind()
    while late and time.perf_counter() - drain_start < max(1800.0, day_s):
        time.sleep(10)
        late = behind()
    drained_s = time.perf_counter() - drain_start
    service.stop()
    total_wall = day_wall + drained_s

    prs = {
        repo: [d for d in checker.get_repo_discussions(repo, author="fleet-bot") if d.is_pull_request] for repo in names
    }
    queue = JobQueue(work / "queue.sqlite")
    jobs = queue.list(limit=1_000_000)
    by_status: dict[str, int] = {}
    for job in jobs:
        by_status[str(job.status)] = by_status.get(str(job.status), 0) + 1
    # Capacity, where the rate over the day follows the owners' commits: the busiest ten minutes
    # (the reconcile pass's first queue of every repo's head is the fleet's largest backlog).
    done_at = sorted(j.updated_at for j in jobs if str(j.status) == "done")
    busiest = max((bisect.bisect(done_at, at + 600) - i for i, at in enumerate(done_at)), default=0)
    failed = [j for j in jobs if str(j.status) == "failed"]
    stuck = [j for j in jobs if str(j.status) in ("queued", "running")]
    figures = {
        "repos": repos,
        "commits": made,
        "day_s": day_s,
        "kills": len(restarts),
        "workers": workers,
        "warm": warm,
        "fault_rate": fault_rate,
        "faults_injected": dict(hub.settings.faults.injected),
        "seeded_s": seeded_s,
        "day_wall_s": day_wall,
        "drain_s": drained_s,
        "jobs": len(jobs),
        "by_status": by_status,
        "jobs_done_per_hour": by_status.get("done", 0) / total_wall * 3600,
        "busiest_10_min_jobs_per_hour": busiest * 6,
        "duplicate_prs": sum(len(found) > 1 for found in prs.values()),
        "repos_without_pr": sum(not found for found in prs.values()),
        "stale_prs": len(late),
        "failed_or_stuck_share": (len(failed) + len(stuck)) / max(1, len(jobs)),
        "failures": sorted({(j.error or "")[:160] for j in failed}),
    }
    hub.stop()
    return figures


def fleet_section(f: dict) -> str:
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(f["by_status"].items()))
    faults = ", ".join(f"{n}× {k}" for k, n in sorted(f["faults_injected"].items())) or "none"
    return "\n".join(
        [
            FLEET_START,
            "## Webhook service: a fleet through a simulated day",
            "",
            f"`bench/fleet.py`: `hfexport serve` (`--workers {f['workers']}`, `--warm {f.get('warm', 1)}`, "
            "`--backends onnx`) watching",
            f"{f['repos']} repos in ten namespaces (`ns*/*`); {f['commits']} owners' commits over {f['day_s']:g} s",
            "(README-like edits and 2 % new weights; busy repos far busier, a tenth in bursts of three); the",
            f"Hub failing {f['fault_rate']:.0%} of requests ({faults});",
            f"the service killed with -9 and restarted {f['kills']} times. Run on this machine (2 cores), one run.",
            *(
                []
                if f["repos"] >= 1000
                else [
                    f"At {f['jobs_done_per_hour']:.0f} jobs an hour here, 1,000 repos' first jobs alone would take",
                    f"{1000 / max(1.0, f['jobs_done_per_hour']):.1f} h: the 1,000-repo day",
                    "(`--repos 1000 --commits 2000 --day 3600`) is a run of its own.",
                ]
            ),
            "",
            "| figure | value |",
            "|---|---|",
            f"| jobs ({statuses}) | {f['jobs']} |",
            f"| jobs done per hour, over the day (as the commits came) | {f['jobs_done_per_hour']:.0f} |",
            f"| jobs done per hour, the busiest ten minutes | {f.get('busiest_10_min_jobs_per_hour', 0):.0f} |",
            f"| duplicate PRs (a repo with two of ours) | {f['duplicate_prs']} |",
            f"| PRs at a stale commit at the end | {f['stale_prs']} |",
            f"| repos without a PR at the end | {f['repos_without_pr']} |",
            f"| jobs failed or stuck | {f['failed_or_stuck_share']:.1%} |",
            f"| the day, then draining to every PR at its head (s) | {f['day_wall_s']:.0f} + {f['drain_s']:.0f} |",
            "",
            *(f"- failed: {reason}" for reason in f["failures"]),
            FLEET_END,
        ]
    )


def section(figures: dict) -> str:
    cold, warm = figures["cold"], figures["warm"]
    return "\n".join(
        [
            START,
            "## Webhook service: a job's fixed cost, cold push vs warm push",
            "",
            f"`bench/fleet.py`: {figures['jobs']} jobs each way through the service's local executor, one at a",
            f"time, {figures['gap_s']:g} s idle between them; each a repo of its own (a tiny BERT no export cache has",
            f"seen, `{figures['backends']}`), claim to PR. Cold: the push process and its backend worker start",
            "with the job; warm (`serve --warm 1`, the default): both imported torch and transformers while",
            "the service waited.",
            "",
            "| push | median s per job | each job (s) |",
            "|---|---|---|",
            f"| cold | {cold['median_s']:.1f} | {', '.join(f'{w:.1f}' for w in cold['walls_s'])} |",
            f"| warm | {warm['median_s']:.1f} | {', '.join(f'{w:.1f}' for w in warm['walls_s'])} |",
            "",
            f"Warm: {figures['saved_s']:.1f} s less per job, {figures['warm_over_cold']:.2f}x the cold job's time.",
            END,
        ]
    )


def write(block: str, start: str, end: str, path: Path = ROOT / "docs" / "benchmarks.md") -> None:
    text = path.read_text()
    if start in text:
        head, rest = text.split(start, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=["fleet", "warm", "both"], nargs="?", default="both")
    parser.add_argument("--jobs", type=int, default=5, help="warm: jobs each way")
    parser.add_argument("--gap", type=float, default=30, help="warm: idle seconds before each job")
    parser.add_argument("--repos", type=int, default=1000, help="fleet: repos watched")
    parser.add_argument("--commits", type=int, default=2000, help="fleet: owners' commits over the day")
    parser.add_argument("--day", type=float, default=3600, help="fleet: the simulated day's length, seconds")
    parser.add_argument("--kills", type=int, default=2, help="fleet: kill -9 and restarts of the service")
    parser.add_argument("--workers", type=int, default=2, help="fleet: the service's --workers")
    parser.add_argument("--fleet-warm", type=int, default=0, help="fleet: the service's --warm (0: cold pushes)")
    parser.add_argument("--faults", type=float, default=0.03, help="fleet: share of Hub requests that fail")
    args = parser.parse_args()
    if args.part in ("fleet", "both"):
        figures = fleet(args.repos, args.commits, args.day, args.kills, args.workers, args.faults, args.fleet_warm)
        write(fleet_section(figures), FLEET_START, FLEET_END)
        print(json.dumps(figures))
    if args.part in ("warm", "both"):
        figures = warm_vs_cold(args.jobs, args.gap)
        write(section(figures), START, END)
        print(json.dumps(figures))


if __name__ == "__main__":
    main()

"""The HTTP app of `hfexport serve` (service/app.py): who may post and read, what it logs, the status
page, and a server that stays up under hostile connections."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
from service_runs import SECRET, Service, free_port, hub_api, pull_requests, seeded, webhook_payload  # noqa: F401

from hfexport.entrypoints.service.queue import JobStatus
from hfexport.messages import JobPlan


def test_refuses_forged_missing_secret_and_junk(tmp_path, accounts):
    service = Service(tmp_path / "q.sqlite", ["alice-svc/any"], accounts["bot"]).start()
    try:
        good = webhook_payload("alice-svc/any", "a" * 40)
        assert service.post(good, secret=None)[0] == 401
        assert service.post(good, secret="guess")[0] == 403
        assert service.post(good, secret=SECRET[:-1])[0] == 403
        assert service.post(b"{not json")[0] == 400
        assert service.post({"event": "nope"})[0] == 400
        assert service.post(b"[" + b"1," * 600_000 + b"1]")[0] == 413
        # Valid but not ours to act on: our own PR ref, a discussion event, an unwatched repo.
        for payload in (
            webhook_payload("alice-svc/any", "b" * 40, ref="refs/pr/3"),
            webhook_payload("alice-svc/any", "c" * 40, scope="discussion"),
            webhook_payload("someone/else", "d" * 40),
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
        status, body = service.post(webhook_payload("alice-svc/no-such-model", "e" * 40))
        assert status == 202
        assert service.wait_done(body["job"], timeout=120)["status"] == "failed"
    finally:
        service.stop()
    lines = [line for line in tmp_path.joinpath("q.log").read_text().splitlines() if line.strip()]
    events = [json.loads(line) for line in lines if line.startswith("{")]
    assert [line for line in lines if not line.startswith("{")] == [], lines
    assert events[0]["msg"] == "listening" and events[0]["webhook"] == f"{service.url}/webhook", events[0]


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


def test_an_operator_retries_a_failed_job_from_the_status_page_and_no_other_sites_form_can(tmp_path):
    """A failed repo's row has a retry button: its form carries a value only the service makes, so
    the operator's browser (which resends Basic credentials to any site's form) retries it from this
    page alone; the retried job is queued again with its attempts afresh; retrying it twice is refused."""
    import base64

    from starlette.testclient import TestClient

    from hfexport.entrypoints.service.app import create_app
    from hfexport.entrypoints.service.config import ServiceConfig
    from hfexport.entrypoints.service.queue import JobQueue

    _states_queue(tmp_path / "q.sqlite")
    config = ServiceConfig(secret=SECRET, watch={"*"}, plan=JobPlan(("dynamo",)), read_token="read-token-0123456789")
    queue = JobQueue(tmp_path / "q.sqlite")
    # A request's failed job gets no button: its requester's token is gone, only they can ask again.
    queue.enqueue("org/asked", "f" * 40, JobPlan(("dynamo",), requester="someone"))
    job, token = queue.claim()
    while job.repo_id != "org/asked":
        job, token = queue.claim()
    queue.fail(job.id, token, "push exited with 2", None)
    client = TestClient(create_app(config, queue))
    basic = {"Authorization": "Basic " + base64.b64encode(b"op:read-token-0123456789").decode()}
    text = client.get("/", headers=basic).text
    failed = next(j for j in queue.list() if j.repo_id == "org/failing")
    form = re.search(rf'<form method="post" action="/jobs/{failed.id}/retry">.*?value="([0-9a-f]+)"', text)
    assert form is not None and text.count("<form") == 1, text  # the failed row's alone
    assert f'aria-label="retry job {failed.id} of org/failing"' in text
    # Another site's form: the operator's credentials, not the page's value.
    forged = client.post(f"/jobs/{failed.id}/retry", data={"check": "0" * 32}, headers=basic, follow_redirects=False)
    assert forged.status_code == 403 and queue.get(failed.id).status == "failed"
    assert client.post(f"/jobs/{failed.id}/retry", data={"check": form.group(1)}).status_code == 401
    retried = client.post(
        f"/jobs/{failed.id}/retry", data={"check": form.group(1)}, headers=basic, follow_redirects=False
    )
    assert retried.status_code == 303 and retried.headers["location"] == "/"
    job = queue.get(failed.id)
    assert job.status == "queued" and job.attempts == 0, job
    again = client.post(f"/jobs/{failed.id}/retry", headers={"Authorization": "Bearer read-token-0123456789"})
    assert again.status_code == 409 and "not a failed job" in again.json()["error"]


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

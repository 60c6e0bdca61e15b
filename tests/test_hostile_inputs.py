"""`hfexport serve` under hostile input: each request gets its status code and error text, and the
service keeps answering /healthz after every one."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest
from service_runs import SECRET, Service, running_job, webhook_payload

GOOD_SHA = "a" * 40


def _raw(service: Service, request: bytes, timeout: float = 30) -> tuple[int, bytes]:
    """Send raw bytes; the status code and body of the answer (read up to its Content-Length)."""
    with socket.create_connection(("127.0.0.1", service.port), timeout=timeout) as conn:
        conn.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer and (chunk := conn.recv(65536)):
            answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
        )
        while len(body) < length and (chunk := conn.recv(65536)):
            body += chunk
    return int(head.split()[1]), body


def _get(service: Service, path: str, headers: dict[str, str]) -> tuple[int, dict]:
    lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    status, body = _raw(service, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{lines}\r\n".encode())
    try:
        return status, json.loads(body or b"{}")
    except ValueError:
        return status, {"text": body.decode(errors="replace")}


def _nested(depth: int) -> bytes:
    return b'{"event": ' + b"[" * depth + b"]" * depth + b"}"


def _repo(name: str) -> dict:
    return webhook_payload(name, GOOD_SHA)


HOSTILE_WEBHOOKS = [
    # (what, headers, body, status, text in the answer)
    ("no secret", {}, webhook_payload("org/model", GOOD_SHA), 401, "missing X-Webhook-Secret"),
    (
        "wrong secret",
        {"X-Webhook-Secret": "x" * 20},
        webhook_payload("org/model", GOOD_SHA),
        403,
        "wrong X-Webhook-Secret",
    ),
    ("empty secret", {"X-Webhook-Secret": ""}, webhook_payload("org/model", GOOD_SHA), 403, "wrong X-Webhook-Secret"),
    ("not JSON", None, b"{junk", 400, "invalid payload"),
    ("a JSON array", None, b"[1, 2]", 400, "not a JSON object"),
    ("nested 5000 deep", None, _nested(5000), 400, "nested deeper than 32 levels"),
    ("nested 40 deep", None, _nested(40), 400, "nested deeper than 32 levels"),
    ("repo named like a flag", None, _repo("--help"), 400, "is not a Hub repo id"),
    ("repo named like a path", None, _repo("/etc"), 400, "is not a Hub repo id"),
    ("repo climbing out", None, _repo("a/../../etc"), 400, "is not a Hub repo id"),
    ("repo with a double dash", None, _repo("org--x/model"), 400, "is not a Hub repo id"),
    ("repo with a newline", None, _repo("org/mo\ndel"), 400, "is not a Hub repo id"),
    (
        "40 characters that are not hex",
        None,
        webhook_payload("org/model", "--trust-remote-code-" + "x" * 20),
        400,
        "40-hex",
    ),
    ("short sha", None, webhook_payload("org/model", "abc123"), 400, "40-hex"),
    ("no sha at all", None, {**_repo("org/model"), "updatedRefs": [], "repo": {"name": "org/model"}}, 400, "40-hex"),
    ("over 1 MiB", None, b'{"pad": "' + b"x" * (1 << 20) + b'"}', 413, "payload over"),
]


@pytest.fixture(scope="module")
def service(tmp_path_factory, hub):
    token = hub.add_user("hostile-bot")
    # No workers: what is queued stays queued (nothing here is meant to run).
    started = Service(
        tmp_path_factory.mktemp("hostile") / "q.sqlite", ["*"], token, extra=("--workers", "0", "--max-queued", "3")
    ).start()
    yield started
    started.stop()


@pytest.mark.parametrize("what, headers, body, status, text", HOSTILE_WEBHOOKS, ids=[h[0] for h in HOSTILE_WEBHOOKS])
def test_a_hostile_webhook_is_refused_with_its_reason(service, what, headers, body, status, text):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    head = {"X-Webhook-Secret": SECRET} if headers is None else headers
    lines = "".join(f"{k}: {v}\r\n" for k, v in {**head, "Content-Type": "application/json"}.items())
    request = (
        f"POST /webhook HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {len(data)}\r\n{lines}\r\n".encode()
    )
    got, answer = _raw(service, request + data)
    assert got == status, (what, got, answer[:300])
    assert text in answer.decode(errors="replace"), (what, answer[:300])
    assert service.get("/healthz")["ok"] is True
    assert service.get("/jobs")["jobs"] == []  # nothing hostile was queued


def test_a_body_shorter_than_its_content_length_times_out(service):
    started = time.monotonic()
    status, body = _raw(
        service,
        b"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
        + f"X-Webhook-Secret: {SECRET}\r\n\r\n".encode()
        + b'{"event":',
        timeout=60,
    )
    assert status == 408 and b"did not arrive within" in body
    assert time.monotonic() - started < 30
    assert service.get("/healthz")["ok"] is True


@pytest.mark.parametrize(
    "path, headers, status, text",
    [
        ("/jobs", {}, 401, "missing X-Webhook-Secret"),
        ("/jobs", {"X-Webhook-Secret": "y" * 20}, 403, "wrong X-Webhook-Secret"),
        ("/jobs/1", {}, 401, "missing X-Webhook-Secret"),
        ("/jobs/99999999999999999999999", {"X-Webhook-Secret": SECRET}, 404, "no such job"),
        ("/jobs/0", {"X-Webhook-Secret": SECRET}, 404, "no such job"),
        ("/jobs/-1", {"X-Webhook-Secret": SECRET}, 404, "Not Found"),
    ],
)
def test_reading_jobs_needs_the_secret_and_bad_ids_are_404(service, path, headers, status, text):
    got, body = _get(service, path, headers)
    assert got == status and text in json.dumps(body), (path, got, body)
    assert service.get("/healthz")["ok"] is True


def test_a_full_queue_answers_503_with_retry_after(service):
    statuses = []
    for i in range(5):
        statuses.append(service.post(webhook_payload(f"org/model-{i}", GOOD_SHA))[0])
    assert statuses.count(202) <= 3 and 503 in statuses, statuses
    data = json.dumps(webhook_payload("org/model-x", GOOD_SHA)).encode()
    status, _ = _raw(
        service,
        b"POST /webhook HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        + f"Content-Length: {len(data)}\r\nX-Webhook-Secret: {SECRET}\r\n\r\n".encode()
        + data,
    )
    assert status == 503
    with socket.create_connection(("127.0.0.1", service.port), timeout=10) as conn:
        conn.sendall(
            b"POST /webhook HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            + f"Content-Length: {len(data)}\r\nX-Webhook-Secret: {SECRET}\r\n\r\n".encode()
            + data
        )
        head = b""
        while b"\r\n\r\n" not in head and (chunk := conn.recv(65536)):
            head += chunk
        assert b"retry-after: 60" in head.lower()
    # What /jobs shows of a job holds no local path.
    assert all("/tmp/" not in json.dumps(j) for j in service.get("/jobs")["jobs"])


@pytest.mark.parametrize("secret", ["", "short", "fifteen-chars!!"])
def test_the_service_refuses_to_start_with_a_weak_secret(tmp_path, secret):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hfexport",
            "serve",
            "--watch",
            "org/model",
            "--secret",
            secret,
            "--db",
            str(tmp_path / "q.sqlite"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "at least 16 characters" in result.stderr and "Traceback" not in result.stderr


def test_child_commands_read_the_repo_id_after_the_end_of_options():
    from hfexport.entrypoints.service.executors import push_arguments
    from hfexport.messages import JobPlan

    job = running_job(1, "org/model", GOOD_SHA, JobPlan(("dynamo",)))
    arguments = push_arguments(job)
    assert arguments[-2:] == ["--", "org/model"] and arguments[0] == "push"

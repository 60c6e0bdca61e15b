"""Intake of `hfexport serve` on loopback: events/s accepted and latency percentiles, dedup on.

The service runs with no workers, so only the webhook path is measured (secret check, parsing,
the durable SQLite insert with deduplication). Prints one JSON line.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

EVENTS, CLIENTS, DUPLICATE_SHARE = 2000, 8, 0.5
SECRET = "bench-secret-of-16-chars-or-more"


def main() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work = Path(tempfile.mkdtemp(prefix="hfexport-bench-serve-"))
    service = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hfexport",
            "serve",
            "--watch",
            "*",
            "--workers",
            "0",
            "--port",
            str(port),
            "--db",
            str(work / "q.sqlite"),
        ],
        env={**os.environ, "HFEXPORT_WEBHOOK_SECRET": SECRET},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                http.client.HTTPConnection("127.0.0.1", port, timeout=2).request("GET", "/healthz")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        unique = int(EVENTS * (1 - DUPLICATE_SHARE))
        bodies = [
            json.dumps(
                {
                    "event": {"action": "update", "scope": "repo.content"},
                    "repo": {"type": "model", "name": f"org/model-{i % unique}", "headSha": f"{i % unique:040x}"},
                    "updatedRefs": [{"ref": "refs/heads/main", "newSha": f"{i % unique:040x}"}],
                }
            ).encode()
            for i in range(EVENTS)
        ]
        latencies: list[float] = []
        lock = threading.Lock()

        def client(worker: int) -> None:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            mine = []
            for body in bodies[worker::CLIENTS]:
                start = time.perf_counter()
                conn.request("POST", "/webhook", body, {"X-Webhook-Secret": SECRET, "Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                assert response.status in (200, 202), response.status
                mine.append(time.perf_counter() - start)
            with lock:
                latencies.extend(mine)

        start = time.perf_counter()
        threads = [threading.Thread(target=client, args=(w,)) for w in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/healthz")
        jobs = sum(json.loads(conn.getresponse().read())["jobs"].values())
        latencies.sort()
        print(
            json.dumps(
                {
                    "events": EVENTS,
                    "clients": CLIENTS,
                    "duplicates_share": DUPLICATE_SHARE,
                    "events_per_s": EVENTS / wall,
                    "p50_ms": 1000 * statistics.median(latencies),
                    "p99_ms": 1000 * latencies[int(0.99 * len(latencies)) - 1],
                    "jobs": jobs,
                }
            )
        )
    finally:
        service.terminate()
        service.wait()


if __name__ == "__main__":
    main()

"""`hfexport-devhub serve` (or `python -m hfexport_devhub serve`): the local Hub until interrupted.

Point a client at it with HF_ENDPOINT=http://127.0.0.1:PORT.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import DevHub


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="hfexport-devhub",
        description="The local Hub emulator: a Hub-compatible server on 127.0.0.1 for tests and demos.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="Serve the local Hub until interrupted.")
    serve.add_argument(
        "--root", type=Path, default=Path("hfexport-out/devhub"), help="Data folder (kept across restarts)."
    )
    serve.add_argument("--port", type=int, default=8765, help="Port on 127.0.0.1.")
    serve.add_argument(
        "--user", action="append", default=[], metavar="NAME=TOKEN", help="Register a user (repeatable)."
    )
    serve.add_argument(
        "--lfs",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Answer uploadMode=lfs for large files (clients with HF_HUB_DISABLE_XET=1); "
        "--no-lfs serves Xet-enabled clients inline.",
    )
    serve.add_argument(
        "--fault-rate", type=float, default=0.0, help="Share of requests that fail (0..1), for reliability tests."
    )
    serve.add_argument(
        "--fault-kinds",
        default="500,503,429,drop,drop-after",
        help="Which failures: 500, 503, 429, drop (before acting), drop-after (after acting).",
    )
    serve.add_argument("--retry-after", type=float, default=1.0, help="Retry-After seconds sent with 429.")
    serve.add_argument("--latency-ms", type=int, default=0, help="Delay added to every request.")
    args = parser.parse_args(argv)

    hub = DevHub(args.root, port=args.port)
    hub.settings.lfs = args.lfs
    hub.settings.faults.configure(
        rate=args.fault_rate,
        kinds=[k.strip() for k in args.fault_kinds.split(",") if k.strip()],
        retry_after_s=args.retry_after,
        latency_ms=args.latency_ms,
    )
    for item in args.user:
        name, _, token = item.partition("=")
        hub.add_user(name, token or None)
    hub.start()
    print(f"local Hub on {hub.url} (data in {args.root}); Ctrl-C to stop", file=sys.stderr, flush=True)
    xet = "" if not args.lfs else " HF_HUB_DISABLE_XET=1"
    print(f"point clients at it:  export HF_ENDPOINT={hub.url}{xet}", file=sys.stderr, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

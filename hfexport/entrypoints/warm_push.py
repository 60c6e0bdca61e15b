"""A warm push process: `hfexport push`, with its imports done and its workers started before its
job exists (kept ready by the service's `WarmPushes`, `service/warm.py`).

This process imports what `push` imports, starts the worker process its export will take
(`pipeline.export.prestart`: it holds no secret and forks a fresh process per backend), then
blocks on one line of stdin — the job as JSON: `{"arguments": [push arguments], "env": {...}}`,
the env holding at most the memory the service reserved for it — and runs it exactly as
`hfexport push ARGS` runs. An empty line or a closed stdin ends it without running anything.

`python -m hfexport.entrypoints.warm_push BACKENDS`: BACKENDS (comma-separated names, may be
empty) are the backends whose exporters the worker process imports ahead.
"""

from __future__ import annotations

import json
import os
import sys

from ..pipeline.export import prestart
from ..settings import MEMORY_LIMIT_MB
from . import cli


def main(backends: list[str]) -> None:
    """Import, pre-start the worker process, wait for the job's arguments, then run them as `hfexport push`."""
    import torch  # noqa: F401  (what push's planning imports: the config's classes)
    import transformers  # noqa: F401

    prestart(backends)
    line = sys.stdin.readline()
    if not line.strip():  # the service stopped, or no job came: nothing to do
        return
    job = json.loads(line)
    arguments, env = (job.get("arguments"), job.get("env") or {}) if isinstance(job, dict) else (None, {})
    if not (isinstance(arguments, list) and arguments[:1] == ["push"] and all(isinstance(a, str) for a in arguments)):
        sys.exit(f"a warm push takes {{'arguments': [push arguments], 'env': {{...}}}} as JSON, not {line[:80]!r}")
    if not (isinstance(env, dict) and set(env) <= {MEMORY_LIMIT_MB} and all(isinstance(v, str) for v in env.values())):
        sys.exit(f"a warm push's job may set {MEMORY_LIMIT_MB} alone, not {sorted(env)!r}")
    os.environ.update(env)  # the memory the service reserved for this job (`service/budget.py`)
    sys.argv = ["hfexport", *arguments]
    cli.main()


if __name__ == "__main__":
    main([name for name in (sys.argv[1] if len(sys.argv) > 1 else "").split(",") if name])

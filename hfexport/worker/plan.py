"""`python -m hfexport.worker.plan`: plan a model whose config runs code from its repo.

Reading such a config (`auto_map`, trusted by the user) imports the repo's Python: it happens here,
in a process started with no token or secret in its environment (`proc.child_env`), never in the
parent that holds them. Reads the request as JSON on stdin, writes `{"plan": ...}` or
`{"error": {"type", "cause", "fix"}}` as the last line of stdout.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> int:
    from ..errors import HfExportError
    from ..logs import quiet_known_noise
    from ..pipeline.plan import make_plan

    quiet_known_noise()
    request = json.loads(sys.stdin.read())
    try:
        plan = make_plan(
            Path(request["model_dir"]),
            request["backends"],
            task=request["task"],
            trust_remote_code=request["trust_remote_code"],
        )
    except HfExportError as e:
        answer = {"error": {"type": type(e).__name__, "cause": e.cause, "fix": e.fix}}
    else:
        answer = {"plan": plan.to_dict()}
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

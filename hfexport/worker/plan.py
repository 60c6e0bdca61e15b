"""`python -m hfexport.worker.plan`: plan a model whose config runs code from its repo.

Reading such a config (`auto_map`, trusted by the user) imports the repo's Python: it happens here,
in a process started with no token or secret in its environment (`sandbox.identity.child_env`), never in the
parent that holds them. Reads a `messages.PlanRequest` on stdin, writes a `messages.PlanAnswer` (the
plan, or the error) as the last line of stdout.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import HfExportError
from ..logs import quiet_known_noise
from ..messages import ErrorInfo, PlanAnswer, PlanRequest
from ..pipeline.plan import make_plan


def main() -> int:

    quiet_known_noise()
    request = PlanRequest.from_json(sys.stdin.read())
    try:
        plan = make_plan(
            Path(request.model_dir), request.backends, task=request.task, trust_remote_code=request.trust_remote_code
        )
    except HfExportError as e:
        answer = PlanAnswer(error=ErrorInfo(type(e).__name__, e.cause, e.fix))
    else:
        answer = PlanAnswer(plan=plan)
    sys.stdout.write("\n" + answer.to_json() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Child processes that cannot outlive their parent, and hold none of its secrets.

A worker or a push left running after its parent was killed (`kill -9`, OOM) would go on writing
to the Hub while a restarted service runs the same job again. On Linux the kernel can kill a
child when its parent dies (PR_SET_PDEATHSIG); elsewhere this is a no-op.

The processes that run a model repo's code (its remote code, its pickles) get `child_env()`: the
parent's environment without anything that grants access — Hub tokens, the webhook secret, the
GitHub Action's inputs and runtime tokens, any variable named like a secret — and with the Hub
client offline, so the repo's code can neither read a credential nor reach the Hub.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import sys

# Variable names that carry a credential, whatever tool set them.
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|PRIVATE_?KEY|AUTH", re.I)
# Prefixes of variables that may hold one under another name (Action inputs, runner internals).
_SECRET_PREFIXES = ("INPUT_", "ACTIONS_", "GITHUB_TOKEN", "WEBHOOK_")


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process that may run a repo's code: no secret, the Hub offline."""
    env = {
        k: v for k, v in os.environ.items()
        if k.startswith("TOKENIZERS_") or not (_SECRET_NAME.search(k) or k.startswith(_SECRET_PREFIXES))
    }
    # The client also reads a saved login from a file: point it at none.
    env.update(HF_HUB_OFFLINE="1", HF_TOKEN_PATH=os.devnull, **(extra or {}))
    return env

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """`preexec_fn` for `subprocess.Popen`: SIGKILL this child when its parent thread dies."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


# Test hook (docs/design.md, Isolation): HFEXPORT_FAULT="onnx:crash,dynamo:hang" makes that
# backend's worker die by SIGKILL (as the OOM killer does) or hang, to prove isolation;
# "run:raise" makes the run itself raise an unexpected exception (the internal-error path). It
# works only under the explicit switch HFEXPORT_TESTING=1, and the report records it when it fired.
FAULT_ENV = "HFEXPORT_FAULT"
TESTING_ENV = "HFEXPORT_TESTING"


def injected_fault(backend: str) -> str | None:
    """The fault the test hook injects into `backend`'s worker (`crash`, `hang`), or into the
    run (`injected_fault("run") == "raise"`), or None."""
    if os.environ.get(TESTING_ENV) != "1":
        return None
    for item in os.environ.get(FAULT_ENV, "").split(","):
        name, _, fault = item.partition(":")
        if name.strip() == backend and fault.strip() in ("crash", "hang", "raise"):
            return fault.strip()
    return None

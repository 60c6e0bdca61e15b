"""Child processes that cannot outlive their parent, and the test hook's injected faults.

A worker or a push left running after its parent was killed (`kill -9`, OOM) would go on writing
to the Hub while a restarted service runs the same job again. On Linux the kernel can kill a
child when its parent dies (PR_SET_PDEATHSIG); elsewhere this is a no-op. What a process that runs
a repo's code may hold and reach is `hfexport/sandbox/`'s.
"""

from __future__ import annotations

import ctypes
import signal
import sys

from .settings import FAULT, faults, testing

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
# backend's worker die by SIGKILL (as the OOM killer does) or hang, to prove isolation ("fail":
# raise, as an exporter that cannot handle the model does);
# "run:raise" makes the run itself raise an unexpected exception (the internal-error path). It
# works only under the explicit switch HFEXPORT_TESTING=1, and the report records it when it fired.
FAULT_ENV = FAULT


def injected_web_refusal(kind: str) -> bool:
    """Whether the test hook makes the browser's runtime refuse a variant of `kind`
    (HFEXPORT_FAULT="web:int8"): no file of ours fails there on its own, and what happens to one
    that does (a default left out, a named one published with its ✗) must still be shown."""
    return testing() and f"web:{kind}" in [item.strip() for item in faults().split(",")]


def injected_fault(backend: str) -> str | None:
    """The fault the test hook injects into `backend`'s worker (`crash`, `hang`, `fail`), or into the
    run (`injected_fault("run") == "raise"`), or None."""
    if not testing():
        return None
    for item in faults().split(","):
        name, _, fault = item.partition(":")
        if name.strip() == backend and fault.strip() in ("crash", "hang", "fail", "raise"):
            return fault.strip()
    return None

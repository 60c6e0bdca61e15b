"""Child processes that cannot outlive their parent.

A worker or a push left running after its parent was killed (`kill -9`, OOM) would go on writing
to the Hub while a restarted service runs the same job again. On Linux the kernel can kill a
child when its parent dies (PR_SET_PDEATHSIG); elsewhere this is a no-op.
"""

from __future__ import annotations

import ctypes
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """`preexec_fn` for `subprocess.Popen`: SIGKILL this child when its parent thread dies."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass

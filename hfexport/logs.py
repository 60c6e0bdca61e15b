"""Known-harmless third-party log lines, kept out of hfexport's output.

Importing torch and the exporters logs lines that are about the libraries, not about the user's
model: torchao's optional CUDA kernels that cannot load on a CPU build, and torch's deprecation of
`register_constant()` on Enum classes (called by torchao). Each is dropped by an exact pattern on
the logger that emits it; anything else those loggers say still shows. `--verbose` keeps them all.
"""

from __future__ import annotations

import logging
import re

# logger name → what it says that is known noise
KNOWN_NOISE = {
    "torchao": re.compile(r"^Failed to load .*torchao/_C_\w+.*\.so"),
    "torch.utils._pytree": re.compile(r"is an Enum subclass and is now natively supported by torch\.compile"),
}


class _DropKnownNoise(logging.Filter):
    def __init__(self, pattern: re.Pattern):
        super().__init__()
        self.pattern = pattern

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.search(record.getMessage())


def quiet_known_noise() -> None:
    """Drop the lines of `KNOWN_NOISE` (call before importing torch; idempotent)."""
    for name, pattern in KNOWN_NOISE.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropKnownNoise) for f in logger.filters):
            logger.addFilter(_DropKnownNoise(pattern))

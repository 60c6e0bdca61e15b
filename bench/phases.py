"""A library function wrapped by its dotted path, so a phase script can time or probe the exporters'
own calls without changing them (`bench/onnx_phases.py`, `bench/executorch_phases.py`)."""

from __future__ import annotations

import functools
import importlib
import time
from collections.abc import Callable


def around(path: str, after: Callable[[float], None]) -> None:
    """Replace the function at `path` (`module.function` or `module.Class.method`) with one that calls
    `after(started)` (its `time.perf_counter()` at the call) once the original returns or raises."""
    owner_path, _, name = path.rpartition(".")
    try:
        owner = importlib.import_module(owner_path)
    except ImportError:  # a class attribute
        module_path, _, cls = owner_path.rpartition(".")
        owner = getattr(importlib.import_module(module_path), cls)
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            after(started)

    setattr(owner, name, wrapper)

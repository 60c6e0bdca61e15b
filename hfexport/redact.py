"""No local path in anything published: what our processes say names this machine's folders
(`/tmp/x/.out.partial-1/onnx`, a venv's site-packages, a home), and a card, a PR description, a
published report or a service's job page is no place for them (issue 56, row 14)."""

from __future__ import annotations

import re
from dataclasses import fields, is_dataclass, replace
from enum import Enum
from typing import Any

_LOCAL_PATH = re.compile(r"(?<![\w.:/])(?:/[\w.@+-]+){2,}/?")


def without_local_paths(text: str) -> str:
    """`text` with absolute local paths cut to their last part (`/tmp/x/.out.partial-1/onnx` → `…/onnx`)."""
    return _LOCAL_PATH.sub(lambda m: "…/" + m.group(0).rstrip("/").rsplit("/", 1)[-1], text)


def without_local_paths_in(value: Any) -> Any:
    """`value` with `without_local_paths` applied to every string in it, through dataclasses, lists
    and dicts (enums and numbers as they are)."""
    if isinstance(value, Enum) or not isinstance(value, str | list | dict) and not is_dataclass(value):
        return value
    if isinstance(value, str):
        return without_local_paths(value)
    if isinstance(value, list):
        return [without_local_paths_in(v) for v in value]
    if isinstance(value, dict):
        return {k: without_local_paths_in(v) for k, v in value.items()}
    assert not isinstance(value, type)
    return replace(value, **{f.name: without_local_paths_in(getattr(value, f.name)) for f in fields(value) if f.init})

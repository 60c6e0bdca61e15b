"""Installed versions, the pins they should match, and the exporters' tested versions.

The pins live in one place, `pyproject.toml`'s dependencies; they are read back here from the
installed package metadata, so `doctor`, the report and the Dockerfile never disagree.
"""

from __future__ import annotations

import importlib.metadata as md
import re

_CORE = ("hfexport", "torch", "transformers", "huggingface_hub")


def installed(package: str) -> str | None:
    """The installed version without its local part (`2.13.0+cpu` → `2.13.0`), or `None`."""
    try:
        return md.version(package).split("+")[0]
    except md.PackageNotFoundError:
        return None


def pins() -> dict[str, str]:
    """`{package: pinned version}` from hfexport's own `==` requirements."""
    result = {}
    for requirement in md.requires("hfexport") or []:
        if ";" in requirement:  # extras (test, ...) are not runtime pins
            continue
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s,;]+)$", requirement.strip())
        if match:
            result[match.group(1)] = match.group(2)
    return result


def runtime_versions(packages: tuple[str, ...] = ()) -> dict[str, str]:
    """What built an artifact: hfexport, torch, transformers and the backend's packages."""
    names = dict.fromkeys([*_CORE, *packages])
    return {name: v for name in names if (v := installed(name)) is not None}


def drift() -> list[dict]:
    """Rows of (package, installed, pinned, tested by which exporter) for `doctor`."""
    from transformers.exporters.auto import get_exporter_class

    from .backends import BACKENDS

    tested: dict[str, dict[str, str]] = {}
    for backend in BACKENDS.values():
        try:
            exporter = get_exporter_class(backend.export_format)
        except Exception:
            continue
        for package, version in getattr(exporter, "tested_versions", {}).items():
            tested.setdefault(package, {})[exporter.__name__] = version
    rows = []
    for package in dict.fromkeys([*pins(), *tested]):
        have = installed(package)
        pinned = pins().get(package)
        rows.append(
            {
                "package": package,
                "installed": have,
                "pinned": pinned,
                "pin_ok": pinned is None or have == pinned,
                "tested": tested.get(package, {}),
                "tested_drift": sorted(e for e, v in tested.get(package, {}).items() if v != have),
            }
        )
    return rows

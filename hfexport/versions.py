"""Installed versions, the pins they should match, and the exporters' tested versions.

The pins live in one place, `pyproject.toml`'s dependencies; they are read back here from the
installed package metadata, so `doctor`, the report and the Dockerfile never disagree.
"""

from __future__ import annotations

import importlib.metadata as md
import re
from typing import Any

from .backends import BACKENDS

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

    tested: dict[str, dict[str, str]] = {}
    for export_format in dict.fromkeys(b.export_format for b in BACKENDS.values()):
        found = tested_versions(export_format)
        if found is None:
            continue
        name, versions = found
        for package, version in versions.items():
            tested.setdefault(package, {})[name] = version
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


def tested_versions(export_format: str) -> tuple[str, dict[str, str]] | None:
    """The exporter class of `export_format` and its `tested_versions`, read from the source of
    transformers' `exporters/exporter_*.py` (a class that declares both as literals): importing the
    exporters' registry pulls in torch._dynamo, executorch and torchao — 15 s of `doctor`'s 18. Else
    from the class itself."""
    import ast
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("transformers.exporters")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        for module in sorted(Path(folder).glob("exporter_*.py")):
            for node in ast.parse(module.read_text()).body:
                if not isinstance(node, ast.ClassDef):
                    continue
                facts: dict[str, Any] = {}
                for statement in node.body:
                    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                        target = statement.targets[0]
                        value = statement.value
                        if isinstance(target, ast.Name) and target.id == "export_format":
                            # `ExportFormat.ONNX`: the enum's members are named by their values
                            facts[target.id] = value.attr.lower() if isinstance(value, ast.Attribute) else None
                        elif isinstance(target, ast.Name) and target.id == "tested_versions":
                            try:
                                facts[target.id] = ast.literal_eval(value)
                            except ValueError:
                                pass
                if facts.get("export_format") == export_format and isinstance(facts.get("tested_versions"), dict):
                    return node.name, facts["tested_versions"]
    from transformers.exporters.auto import get_exporter_class

    try:
        exporter = get_exporter_class(export_format)
    except Exception:  # noqa: BLE001  (a backend whose packages are missing: nothing tested to show)
        return None
    return exporter.__name__, dict(getattr(exporter, "tested_versions", {}))

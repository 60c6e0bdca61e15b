"""The family sweep: every family of `tests/families.py` exported on each of its backends, and what
happened written to docs/families.md (and .json), as the run measured it.

CI runs a share of it (`tests/test_new_families.py`, the `ci` backends of each family); the whole
sweep takes about 40 minutes on 2 cores and is run by hand when the pin or the families change:

    .venv/bin/python tests/sweep_families.py              # every family, every backend
    .venv/bin/python tests/sweep_families.py lfm2 falcon  # some of them (the table keeps the others)

Each export runs as `hfexport export` does (`hfexport.export`, variants off: the variants' judges
are their own tests'); a row holds each backend's outcome and, where not ok, its reason's first line.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import families  # noqa: E402

DOCS = Path(__file__).parent.parent / "docs"
JSON = DOCS / "families.json"
MARKDOWN = DOCS / "families.md"


def sweep(family: families.Family, root: Path) -> dict:
    """One family on each of its backends: {backend: {"status", "reason", "checks"}}."""
    import hfexport

    folder = family.build(root / f"model-{family.name}")
    started = time.perf_counter()
    try:
        report = hfexport.export(
            str(folder), root / f"out-{family.name}", backends=family.backends, variants="none", progress=None
        )
    except Exception as error:  # noqa: BLE001  (a refusal before any backend runs: the row says it)
        reason = str(error).splitlines()[0]
        return {
            "task": family.task,
            "seconds": round(time.perf_counter() - started),
            "backends": {b: {"status": "refused", "reason": reason} for b in family.backends.split(",")},
        }
    outcome = {}
    for b in report.backends:
        checks = [c.name for c in b.validation.checks] if b.validation else []
        outcome[b.backend] = {
            "status": str(b.status),
            "reason": (b.error or "").splitlines()[0][:300] if b.error else None,
            "checks": checks,
        }
    return {"task": report.plan.task, "seconds": round(time.perf_counter() - started), "backends": outcome}


def markdown(results: dict) -> str:
    lines = [
        "# Families swept",
        "",
        "Written by `tests/sweep_families.py` (never by hand): each family of `tests/families.py`, a tiny",
        "random-weight model built from its own config class, exported and validated on each backend as",
        "`hfexport export` does — on another batch and length than traced; generation token for token",
        "against eager `generate()`. CI runs the share each family marks `ci` (`tests/test_new_families.py`).",
        "",
        "| family | task | " + " | ".join(_BACKENDS) + " |",
        "|---|---|" + "---|" * len(_BACKENDS),
    ]
    for name in sorted(results):
        row = results[name]
        cells = []
        for backend in _BACKENDS:
            got = row["backends"].get(backend)
            if got is None:
                cells.append("–")
            elif got["status"] == "ok":
                cells.append("✓")
            else:
                reason = (got.get("reason") or "").replace("|", "\\|")
                cells.append(f"{got['status']}: {reason[:300]}")
        lines.append(f"| {name} | `{row['task']}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


_BACKENDS = ("dynamo", "onnx", "executorch")


def main(names: list[str]) -> int:
    chosen = [families.BY_NAME[n] for n in names] if names else families.FAMILIES
    results = json.loads(JSON.read_text()) if JSON.exists() else {}
    results = {k: v for k, v in results.items() if k in families.BY_NAME}
    with tempfile.TemporaryDirectory(prefix="hfexport-sweep-") as root:
        for family in chosen:
            results[family.name] = sweep(family, Path(root))
            outcome = {b: r["status"] for b, r in results[family.name]["backends"].items()}
            print(f"{family.name}: {outcome} ({results[family.name]['seconds']} s)", flush=True)
            JSON.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
            MARKDOWN.write_text(markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

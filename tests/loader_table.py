"""docs/export.md's loader table, written by the test run, never by hand.

Every export the suite makes (`conftest._exported`) records how its own runtime's reload compares
with eager, and every test that reads a published folder with an ecosystem loader (transformers.js,
optimum, sentence-transformers) records what that loader computed. When the session ends,
conftest renders those rows and requires docs/export.md's table to say the same, failing the run if it
does not — or, under `HFEXPORT_WRITE_LOADER_TABLE=1`, writes it there. A partial run (a `-k`, one file, a failure)
records a partial table, so the check is left out then.

A difference is kept as the power of ten it stays under, and a published figure one power off the
measured one still holds: another CPU's kernels move the last digits, not what a reader decides on.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

TABLE_DOC = Path(__file__).parent.parent / "docs" / "export.md"  # where the loader table is published
START = "<!-- loader-table: written by the test run (HFEXPORT_WRITE_LOADER_TABLE=1 make test); do not edit -->"
END = "<!-- /loader-table -->"
HEADER = ["| family | task | loaded with | result |", "|---|---|---|---|"]

Key = tuple[str, str, str, str]  # family (the architecture), task, loader, what it got


# An exact 0 reads as this power when compared: float32 rounding (its epsilon is 1.2e-07) is the
# step by which another CPU's kernels can move a result that was exact here.
_ZERO = -7


def within(difference: float) -> str:
    """A difference as the power of ten it stays under (`< 1e-06`); none at all (or float noise
    under 0, as 1 − a cosine of 1.0000001) is `0`."""
    if difference <= 0:
        return "0"
    return f"< 1e{math.ceil(math.log10(difference)):+03d}"


_FIGURE = re.compile(r"^(?P<row>.*) (?P<figure>< 1e[+-]\d+|0) \|$")


class LoaderTable:
    def __init__(self) -> None:
        self.rows: dict[Key, float | None] = {}

    def record(self, family: str, task: str, loader: str, result: str, difference: float | None = None) -> None:
        """One row: `result` in words ("eager's text"), and the largest `difference` measured (max abs
        diff, or 1 − cosine) where it has one; the same row recorded again keeps the larger."""
        key = (family, task, loader, result)
        old = self.rows.get(key)
        self.rows[key] = difference if old is None else max(old, difference if difference is not None else old)

    def lines(self) -> list[str]:
        out = []
        for (family, task, loader, result), difference in sorted(self.rows.items()):
            figure = f" {within(difference)}" if difference is not None else ""
            out.append(f"| {family} | {task} | {loader} | {result}{figure} |")
        return out

    def render(self) -> str:
        return "\n".join([START, "", *HEADER, *self.lines(), "", END])

    @staticmethod
    def in_document(text: str) -> str | None:
        """docs/export.md's table, markers included (None: it has none)."""
        if START not in text or END not in text:
            return None
        return START + text.split(START, 1)[1].split(END, 1)[0] + END

    def disagreements(self, written: str) -> list[str]:
        """Where `written` (a published table) does not say what was measured: rows only one of them has,
        a different result, or a figure more than one power of ten off."""

        def parsed(lines: list[str]) -> dict[str, int | None]:
            rows: dict[str, int | None] = {}
            for line in lines:
                figure = _FIGURE.match(line)
                if figure is None:
                    rows[line] = None
                else:
                    power = figure["figure"].removeprefix("< 1e")
                    # Under float32's step every figure is noise (MobileNetV2 measured 1e-32 once, 0 the
                    # next run): compared as an exact 0.
                    rows[figure["row"]] = _ZERO if power == "0" else max(_ZERO, int(power))
            return rows

        table = [line for line in written.splitlines() if line.startswith("| ") and line not in HEADER]
        have, measured = parsed(table), parsed(self.lines())
        problems = [f"not measured: {row}" for row in have.keys() - measured.keys()]
        problems += [f"not in docs/export.md: {row}" for row in measured.keys() - have.keys()]
        for row in have.keys() & measured.keys():
            a, b = have[row], measured[row]
            if (a is None) != (b is None) or (a is not None and b is not None and abs(a - b) > 1):
                problems.append(f"{row}: published 1e{a}, measured 1e{b}")
        return sorted(problems)


TABLE = LoaderTable()


# A variant's figure on wasm as the loader table shows it: 1 − the figure its floor holds, by what it judges.
_WEB_FIGURES = (
    ("forced_top1_agreement", "1 − teacher-forced top-1 as eager"),
    ("cosine_mean", "1 − cosine mean to eager"),
    ("top1_agreement", "1 − top-1 agreement with eager"),
)


def record_web(report: dict) -> None:
    """The loader table's rows of hfexport's own run of each published ONNX file on onnxruntime-web's
    wasm backend (`report["backends"][i]["web"]`, and each variant's), one per family × dtype, and
    of where its WebGPU provider placed the file's nodes."""
    plan = report["plan"]
    for b in report["backends"]:
        published = [(b.get("dtype") or "float32", b.get("web"), None)]
        published += [(v["kind"], v.get("web"), v) for v in b.get("variants", []) if v["status"] == "ok"]
        for dtype, web, variant in published:
            if not web:
                continue
            loader = f"onnxruntime-web (wasm), hfexport's run (`{dtype}`)"
            figures = web.get("figures") or {}
            if web["wasm"] is None:
                note = web["wasm_note"] or ""
                result, difference = (note if note.startswith("not run") else f"not run: {note}"), None
            elif not web["wasm"]:
                result, difference = "misses its thresholds", None
            elif variant is None:
                tokens = figures.get("tokens_equal") == 1.0
                result = "eager's tokens; logits max abs diff" if tokens else "max abs diff"
                difference = figures.get("max_abs_diff")
            else:
                name, result = next(((n, r) for n, r in _WEB_FIGURES if n in figures), ("", "within its thresholds"))
                difference = 1 - figures[name] if name else None
            TABLE.record(plan["architecture"], plan["task"], loader, result, difference)
            if web.get("webgpu") is not None:  # where onnxruntime-web's WebGPU provider placed its nodes
                loader = f"onnxruntime-web (WebGPU), hfexport's placement (`{dtype}`)"
                cpu = web.get("webgpu_cpu") or []
                placed = "every computing node on the GPU" if web["webgpu"] else f"on the CPU: {', '.join(cpu)}"
                TABLE.record(plan["architecture"], plan["task"], loader, placed if cpu or web["webgpu"] else "fails")

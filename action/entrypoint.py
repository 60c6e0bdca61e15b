#!/usr/bin/env python3
"""The GitHub Action's entrypoint: run `hfexport push` and speak GitHub Actions back.

- the token is masked (`::add-mask::`) before anything else is printed, and reaches `hfexport`
  through its environment only;
- outputs `pr-url`, `status`, `report-path` go to $GITHUB_OUTPUT;
- a job summary (the backends table and the PR link) goes to $GITHUB_STEP_SUMMARY;
- each failed backend becomes an `::error::` annotation.

Exit code: 0, or hfexport's own (1 a backend failed — only with `fail-on-validation-error`,
2 bad input, 3 the Hub kept failing).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from hfexport.report import REPORT_FILE, PublishResult, Status, markdown_table


def _input(name: str, default: str = "") -> str:
    # Docker actions receive input `repo-id` as INPUT_REPO-ID (upper-cased, hyphens kept).
    return os.environ.get(f"INPUT_{name.upper()}", default).strip()


def _flag(name: str, default: bool) -> bool:
    value = _input(name, "true" if default else "false").lower()
    return value in ("1", "true", "yes", "on")


def _escape(text: str) -> str:
    """Workflow-command data escaping (%, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _append(env_var: str, text: str) -> None:
    path = os.environ.get(env_var)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)


def _set_output(name: str, value: str) -> None:
    _append("GITHUB_OUTPUT", f"{name}<<__HFEXPORT__\n{value}\n__HFEXPORT__\n")


def main() -> int:
    token = _input("hf-token") or os.environ.get("HF_TOKEN", "")
    if token:
        print(f"::add-mask::{token}", flush=True)
    repo_id = _input("repo-id")
    if not repo_id:
        print("::error title=hfexport::input 'repo-id' is required", flush=True)
        _set_output("status", "error")
        return 2
    command = [
        sys.executable, "-m", "hfexport", "push",
        "--backends", _input("backends", "dynamo,onnx,executorch"),
        "--task", _input("task", "auto"),
        "--json",
    ]
    if _input("revision"):
        command += ["--revision", _input("revision")]
    if _input("variants"):
        command += ["--variants", _input("variants")]
    for threshold in _input("min-quality").split():
        command += ["--min-quality", threshold]
    if _flag("dry-run", False):
        command.append("--dry-run")
    if _flag("force", False):
        command.append("--force")
    command += ["--", repo_id]  # the end of options: a repo id is never read as a flag
    env = {**os.environ, "HF_TOKEN": token} if token else dict(os.environ)
    print(f"::group::hfexport push {repo_id}", flush=True)
    process = subprocess.run(command, stdout=subprocess.PIPE, stderr=None, text=True, env=env)
    print("::endgroup::", flush=True)

    try:
        result = PublishResult.from_dict(json.loads(process.stdout))
    except (ValueError, KeyError, TypeError):
        print(f"::error title=hfexport::hfexport push failed (exit {process.returncode}); see the log above", flush=True)
        _set_output("status", "error")
        _append("GITHUB_STEP_SUMMARY", f"### hfexport: {repo_id}\n\nFailed before publishing (exit {process.returncode}); see the log.\n")
        return process.returncode or 1

    report = result.report
    report_path = ""
    if report is not None and report.out_dir:
        workspace = Path(os.environ.get("GITHUB_WORKSPACE") or ".")
        report_path = str(workspace / REPORT_FILE)
        shutil.copyfile(Path(report.out_dir) / REPORT_FILE, report_path)
    failed = [b for b in (report.backends if report else []) if b.status not in (Status.OK, Status.SKIPPED)]
    for b in failed:
        message = _escape(f"{b.status}: {b.error or ''}")
        print(f"::error title=hfexport {b.backend}::{message}", flush=True)

    _set_output("pr-url", result.pr_url or "")
    _set_output("status", str(result.action))
    _set_output("report-path", report_path)
    _append("GITHUB_STEP_SUMMARY", _summary(repo_id, result))

    if failed and _flag("fail-on-validation-error", True):
        return 1
    return 0


def _summary(repo_id: str, result: PublishResult) -> str:
    lines = [f"### hfexport: {repo_id}", ""]
    if result.pr_url:
        lines.append(f"**{result.action}**: [{result.pr_url}]({result.pr_url})")
    else:
        lines.append(f"**{result.action}**")
    if result.report is not None:
        lines += ["", *markdown_table(result.report, ["backend", "status", "max_abs_diff", "size"])]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

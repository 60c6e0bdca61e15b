#!/usr/bin/env python3
"""The GitHub Action's entrypoint: run `hfexport push` and speak GitHub Actions back.

- the token is masked (`::add-mask::`) before anything else is printed, and reaches `hfexport`
  through its environment only;
- outputs `pr-url` (or `repo-url`, with the `into` input), `status`, `report-path` go to $GITHUB_OUTPUT;
- a job summary (the backends table and the PR link) goes to $GITHUB_STEP_SUMMARY;
- each failed backend becomes an `::error::` annotation.

Inputs are untrusted text (a workflow may fill `repo-id` from a `repository_dispatch` payload):
every input is checked before anything is printed — no control characters anywhere (a newline
would start a workflow command such as `::set-output` in the log), `repo-id` a Hub repo id — and a
bad one is refused with exit 2, naming the input but never echoing it. What the entrypoint itself
writes into workflow commands, outputs and the summary is escaped.

Exit code: 0, or hfexport's own (1 a backend failed — only with `fail-on-validation-error`,
2 bad input, 3 the Hub kept failing).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

from hfexport.backends import DEFAULT_BACKENDS
from hfexport.errors import ConfigError, ExitCode
from hfexport.hub.state import OwnRepo
from hfexport.messages import PublishResult
from hfexport.pipeline.resolve import is_repo_id
from hfexport.report import REPORT_FILE, Status
from hfexport.table import markdown_table

INPUTS = (
    "repo-id",
    "revision",
    "backends",
    "task",
    "variants",
    "min-quality",
    "hf-token",
    "dry-run",
    "force",
    "force-memory",
    "allow-pickle",
    "trust-remote-code",
    "fail-on-validation-error",
    "into",
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class BadInput(Exception):
    """An input the Action refuses: the message names it and never holds its value."""


def _input(name: str, default: str = "") -> str:
    # Docker actions receive input `repo-id` as INPUT_REPO-ID (upper-cased, hyphens kept).
    return os.environ.get(f"INPUT_{name.upper()}", default).strip()


def _check_inputs() -> None:
    """Every input free of control characters, and `repo-id` a repo id, before anything is printed.

    Raises:
        BadInput: naming the input and the fix.
    """
    for name in INPUTS:
        if _CONTROL.search(_input(name)):
            raise BadInput(
                f"input '{name}' holds a line break or another control character; pass it as plain text on one line"
            )
    repo_id = _input("repo-id")
    if not repo_id:
        raise BadInput("input 'repo-id' is required (org/name)")
    if not is_repo_id(repo_id):
        raise BadInput("input 'repo-id' is not a Hub repo id; pass one such as org/name")
    if _input("into"):
        try:
            OwnRepo.checked(_input("into"), repo_id)
        except ConfigError as e:
            raise BadInput(f"input 'into': {e.cause} {e.fix} Or leave it empty for a pull request.") from None


def _flag(name: str, default: bool) -> bool:
    value = _input(name, "true" if default else "false").lower()
    return value in ("1", "true", "yes", "on")


def _escape(text: str) -> str:
    """Workflow-command data escaping (%, CR, LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    """Workflow-command property escaping (`title=…`): the data's, plus `:` and `,`."""
    return _escape(text).replace(":", "%3A").replace(",", "%2C")


def _markdown(text: str) -> str:
    """Text from elsewhere as inert Markdown for the job summary: one line, no markup, no HTML."""
    return re.sub(r"([\\`*_\[\]<>|~])", r"\\\1", _CONTROL.sub(" ", text))


def _append(env_var: str, text: str) -> None:
    path = os.environ.get(env_var)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text)


def _set_output(name: str, value: str) -> None:
    # A delimiter no value can hold: GitHub's own advice for multi-line outputs.
    delimiter = f"__HFEXPORT_{secrets.token_hex(8)}__"
    _append("GITHUB_OUTPUT", f"{name}<<{delimiter}\n{value}\n{delimiter}\n")


def main() -> int:
    try:
        _check_inputs()
        token = _input("hf-token") or os.environ.get("HF_TOKEN", "")
        if _CONTROL.search(token):
            raise BadInput("the token (hf-token or HF_TOKEN) holds a line break or another control character")
    except BadInput as e:
        print(f"::error title=hfexport::{_escape(str(e))}", flush=True)
        _set_output("status", "error")
        return ExitCode.BAD_INPUT
    if token:
        print(f"::add-mask::{token}", flush=True)
    repo_id = _input("repo-id")
    command = [
        sys.executable,
        "-m",
        "hfexport",
        "push",
        "--backends",
        _input("backends", ",".join(DEFAULT_BACKENDS)),
        "--task",
        _input("task", "auto"),
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
    if _flag("force-memory", False):
        command.append("--force-memory")
    if _flag("allow-pickle", False):
        command.append("--allow-pickle")
    if _flag("trust-remote-code", False):
        command.append("--trust-remote-code")
    if _input("into"):
        command += ["--into", _input("into")]
    command += ["--", repo_id]  # the end of options: a repo id is never read as a flag
    env = {**os.environ, "HF_TOKEN": token} if token else dict(os.environ)
    print(f"::group::hfexport push {_escape(repo_id)}", flush=True)
    # No line hfexport prints is a workflow command: its messages quote the inputs, and a message
    # wrapped at the log's 80 columns can start a line with `::warning::` from an input. GitHub's
    # own switch for logging text it must not read: stop-commands, resumed by a token none can guess.
    resume = secrets.token_hex(16)
    print(f"::stop-commands::{resume}", flush=True)
    process = subprocess.run(command, stdout=subprocess.PIPE, stderr=None, text=True, env=env)
    print(f"::{resume}::", flush=True)
    print("::endgroup::", flush=True)

    try:
        answer = json.loads(process.stdout)
        result = PublishResult.from_dict(answer) if answer.get("ok", True) is not False else None
    except (ValueError, KeyError, TypeError, AttributeError):
        answer, result = {}, None
    if result is None:
        # push's --json says why it stopped (`{"ok": false, "error", "fix", "exit_code"}`): the
        # annotation and the summary carry the cause and the fix, in this Action's own terms.
        cause = str(answer.get("error") or f"hfexport push failed (exit {process.returncode}); see the log above")
        fix = in_action_terms(str(answer.get("fix") or ""))
        print(f"::error title=hfexport::{_escape(cause + (' Fix: ' + fix if fix else ''))}", flush=True)
        _set_output("status", "error")
        said = f"**Error:** {_markdown(cause)}" + (f"\n\n**Fix:** {_markdown(fix)}" if fix else "")
        _append("GITHUB_STEP_SUMMARY", f"### hfexport: {_markdown(repo_id)}\n\n{said}\n")
        return process.returncode or ExitCode.BACKEND_FAILED

    report = result.report
    report_path = ""
    if report is not None:
        # This run's report (this repo, this commit), not the file in the export cache: that one
        # names whichever repo with the same weights filled the cache.
        report_path = str(Path(os.environ.get("GITHUB_WORKSPACE") or ".") / REPORT_FILE)
        Path(report_path).write_text(report.to_json(), encoding="utf-8")
    failed = [b for b in (report.backends if report else []) if b.status not in (Status.OK, Status.SKIPPED)]
    for b in failed:
        message = _escape(f"{b.status}: {b.error or ''}")
        print(f"::error title={_escape_property(f'hfexport {b.backend}')}::{message}", flush=True)

    _set_output("pr-url", result.pr_url or "")
    _set_output("repo-url", result.repo_url or "")
    _set_output("status", str(result.action))
    _set_output("report-path", report_path)
    _append("GITHUB_STEP_SUMMARY", _summary(repo_id, result))

    if failed and _flag("fail-on-validation-error", True):
        return ExitCode.BACKEND_FAILED
    return ExitCode.OK


# The command line's words in a fix, as this Action's user gives them (an input of action.yml).
_IN_ACTION_TERMS = {
    "set HF_TOKEN, pass --token, or run `hf auth login`": "set the `hf-token` input (from a repository secret)",
    "--token": "the `hf-token` input",
    "HF_TOKEN": "the `hf-token` input",
    **{f"--{name}": f"the `{name}` input" for name in INPUTS if name not in ("repo-id", "hf-token")},
}


def in_action_terms(fix: str) -> str:
    """A fix as this Action's user applies it: `--allow-pickle` is the `allow-pickle` input."""
    for words, inputs in sorted(_IN_ACTION_TERMS.items(), key=lambda item: -len(item[0])):
        fix = re.sub(rf"{re.escape(words)}(?![\w-])", inputs, fix)
    # What only the command line or Python has: dropped ("(--x on the command line, x=True in Python)").
    fix = re.sub(r" \(\w+=[^()]* in Python\)", "", fix)
    fix = re.sub(r", \w+=[^,()]* in Python", "", fix)
    return fix.replace(" on the command line", "").replace(" ()", "")


def _summary(repo_id: str, result: PublishResult) -> str:
    lines = [f"### hfexport: {_markdown(repo_id)}", ""]
    url = result.url or ""
    if url.startswith(("https://", "http://")) and not re.search(r"[\s()<>\[\]]", url):
        lines.append(f"**{result.action}**: [{_markdown(url)}]({url})")
    else:
        lines.append(f"**{result.action}**")
    if result.report is not None:
        lines += ["", *markdown_table(result.report, ["backend", "status", "max_abs_diff", "size"])]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())

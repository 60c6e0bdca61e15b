"""What a user reads of the CLI in an 80-column terminal, as a real process: the help teaches the
common path first and cuts nothing; a push says what it did once."""

from __future__ import annotations

import os
import subprocess
import sys


def _help(*args: str) -> str:
    shown = subprocess.run(
        [sys.executable, "-m", "hfexport", *args, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def test_help_at_80_columns_cuts_nothing_and_starts_with_the_common_path():
    top = _help()
    # Start with export, push, push --into, in that order; doctor after them.
    starts = [top.index(s) for s in ("hfexport export org/model", "hfexport push org/model  ", "--into me/model-ONNX")]
    assert starts == sorted(starts) and top.index("hfexport doctor") > starts[-1], top
    for command in ((), ("export",), ("push",), ("serve",)):
        shown = _help(*command)
        assert max(len(line) for line in shown.splitlines()) <= 80, shown
        assert "…" not in shown and "\\[" not in shown, shown
        # A default is whole, never cut mid-word ("[default: no-\ndry-run]").
        flat = " ".join(shown.split())
        assert "[default: no-" not in flat, flat
    flat = " ".join(_help("export").split())
    assert "[default: dynamo,onnx,executorch]" in flat, flat
    flat = " ".join(_help("push").split())
    assert "[default: dynamo,onnx,executorch; into a repo named for one format (me/model-ONNX)" in flat, flat


def test_push_help_opens_with_the_destination_and_hides_the_webhook_jobs_flag():
    shown = _help("push")
    options = [line.split()[0] for line in shown.split("Options:")[1].splitlines() if line.startswith("  --")]
    assert options[:3] == ["--into", "--backends", "--variants"], options
    assert "--from-webhook-env" not in shown and "REPO_ID" in shown, shown

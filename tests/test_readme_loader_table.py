"""The README's loader table is the one this run measured (tests/loader_table.py): every family the
suite exports, on its own runtime and in every ecosystem loader a card names, with what each got."""

from __future__ import annotations

import os

import pytest

from loader_table import END, README, START, TABLE, LoaderTable


def test_the_readme_loader_table_is_the_one_this_run_measured(whole_passing_run):
    text = README.read_text()
    written = LoaderTable.in_readme(text)
    if written is None:
        pytest.fail(f"README.md has no loader table: add the lines {START!r} and {END!r} where it goes")
    if os.environ.get("HFEXPORT_WRITE_LOADER_TABLE") == "1":
        README.write_text(text.replace(written, TABLE.render()))
        return
    assert TABLE.disagreements(written) == [], (
        "README.md's loader table is not what this run measured: run `HFEXPORT_WRITE_LOADER_TABLE=1 make test` "
        "and commit README.md"
    )

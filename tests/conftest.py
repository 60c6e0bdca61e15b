"""Shared fixtures. Exports are expensive (ExecuTorch lowering alone is a minute per model on 2
cores), so each model is exported ONCE per session and every test reads that result."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hfexport_devhub import DevHub  # noqa: E402  (imports no huggingface_hub)

# No test may reach the real Hub. The client reads HF_ENDPOINT once, at import: start the local Hub
# first and point every client in this process (and the processes it starts) at it.
_SESSION_ROOT = Path(tempfile.mkdtemp(prefix="hfexport-tests-"))
HUB = DevHub(_SESSION_ROOT / "hub").start()
HUB.settings.lfs = False  # this process's client has Xet on: serve it inline (see hfexport_devhub.app.Settings)
# HF Jobs run the image's `hfexport` entrypoint: here, this interpreter's hfexport.
HUB.settings.job_entrypoints["hfexport"] = [sys.executable, "-m", "hfexport"]
os.environ["HF_ENDPOINT"] = HUB.url
os.environ["HF_HOME"] = str(_SESSION_ROOT / "hf-home")
os.environ["HFEXPORT_CACHE"] = str(_SESSION_ROOT / "cache")
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ.pop("HF_TOKEN", None)
os.environ.pop("HF_HUB_DISABLE_XET", None)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# All of a model's backends at once: ExecuTorch lowering is mostly single-threaded Python, so on
# 2 cores it overlaps with the others (the sequential path is covered by the isolation test).
os.environ["HFEXPORT_JOBS"] = "3"
# No variants unless a test asks (tests/test_variants.py): they are judged there, and the other
# tests' exports stay fast.
os.environ["HFEXPORT_VARIANTS"] = "none"
# The fault hook (HFEXPORT_FAULT) is live only under this switch.
os.environ["HFEXPORT_TESTING"] = "1"
# The browser's runtimes (onnxruntime-web's wasm, WebGPU placement) only where a test reads what they
# say: the family exports (the loader table's rows), the pushes of tests/card_runs.py and
# tests/test_web.py turn them on (`web_checks`). Elsewhere they cost 3 s of each ONNX export.
os.environ["HFEXPORT_WEB_CHECKS"] = "0"

sys.path.insert(0, str(Path(__file__).parent))
import tiny_models  # noqa: E402
from loader_table import END, START, TABLE, TABLE_DOC, LoaderTable, record_web  # noqa: E402

ALL_CPU = "dynamo,onnx,executorch"


# Whether this run is the whole suite (docs/export.md's loader table is checked only then,
# tests/loader_table.py): no test deselected in this process.
_RUN = {"partial": False}


def pytest_deselected(items):
    """A deselected test makes the run partial, except the slow lane's, which the default run
    leaves out by design (`-m 'not slow'` in pyproject.toml): counted, it kept the loader-table
    check from ever running."""
    if any(item.get_closest_marker("slow") is None for item in items):
        _RUN["partial"] = True


def _whole(session) -> bool:
    """Every test file collected and none deselected."""
    collected = {item.path.name for item in session.items}
    files = {path.name for path in Path(__file__).parent.glob("test_*.py")}
    return not _RUN["partial"] and not files - collected


def _check_loader_table(session) -> None:
    """docs/export.md's loader table against the rows this run measured: written under
    HFEXPORT_WRITE_LOADER_TABLE=1, else any disagreement fails the run. Only for a whole, passing run."""
    if _RUN["partial"] or session.exitstatus != pytest.ExitCode.OK or session.config.option.collectonly:
        return
    say = session.config.pluginmanager.get_plugin("terminalreporter").write_line
    text = TABLE_DOC.read_text()
    written = LoaderTable.in_document(text)
    if written is None:
        problems = [f"docs/export.md has no loader table: add the lines {START!r} and {END!r} where it goes"]
    elif os.environ.get("HFEXPORT_WRITE_LOADER_TABLE") == "1":
        TABLE_DOC.write_text(text.replace(written, TABLE.render()))
        say(f"docs/export.md's loader table written: {len(TABLE.rows)} rows")
        return
    else:
        problems = TABLE.disagreements(written)
    if problems:
        say(
            "docs/export.md's loader table is not what this run measured (run `HFEXPORT_WRITE_LOADER_TABLE=1 make test`"
        )
        say("and commit docs/export.md):", red=True)
        for problem in problems:
            say(f"  {problem}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    else:
        say(f"docs/export.md's loader table is what this run measured: {len(TABLE.rows)} rows")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller, as each worker ends: its loader-table rows join this process's,
    and a worker that ran part of the suite (or died) makes the run partial."""
    rows = node.workeroutput.get("loader_rows") if hasattr(node, "workeroutput") else None
    if rows is None or error:
        _RUN["partial"] = True
        return
    for family, task, loader, result, difference in rows:
        TABLE.record(family, task, loader, result, difference)
    _RUN["partial"] = _RUN["partial"] or node.workeroutput["partial"]


def pytest_sessionfinish(session, exitstatus):
    """The loader table checked (a whole, passing run; under pytest-xdist, by the controller from
    its workers' rows). Then the session's Hub, caches and exports (~1 GB a whole run) go with it:
    /tmp is not a store. `HFEXPORT_KEEP_TEST_FILES=1` keeps them."""
    worker = getattr(session.config, "workeroutput", None)
    if worker is not None:  # an xdist worker: every worker collects the whole suite and runs a share
        worker["loader_rows"] = [[*key, difference] for key, difference in TABLE.rows.items()]
        worker["partial"] = _RUN["partial"] or not _whole(session)
    elif session.config.pluginmanager.has_plugin("dsession"):  # the xdist controller: its workers collected
        _check_loader_table(session)
    else:
        _RUN["partial"] = _RUN["partial"] or not _whole(session)
        _check_loader_table(session)
    if not os.environ.get("HFEXPORT_KEEP_TEST_FILES"):
        HUB.stop()
        shutil.rmtree(_SESSION_ROOT, ignore_errors=True)


# The test files that take longest, heaviest first. Under `--dist loadfile` a file runs whole on one
# worker, and xdist hands files out in collection order (`--no-loadscope-reorder`; its default orders
# them by test count, which sent the few-test, minutes-long loader files last and left one worker
# alone at the end). Handing out the longest first leaves the shortest tail; the rest follow as collected.
HEAVIEST_FIRST = (
    "test_families.py",
    "test_loaders_llm.py",
    "test_card_snippets.py",
    "test_variants.py",
    "test_exports.py",
    "test_loaders_heads.py",
    "test_publish.py",
    "test_new_families.py",
    "test_loaders_seq2seq.py",
    "test_loaders_executorch_llm.py",
    "test_web.py",
    "test_loaders_ort_genai.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: place for place, name in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest as collected
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run .ci/run-gpu on a GPU machine)")
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(skip)


@contextmanager
def web_checks() -> Iterator[None]:
    """The browser's runtimes on, for the exports made inside (their workers inherit it)."""
    os.environ["HFEXPORT_WEB_CHECKS"] = "1"
    try:
        yield
    finally:
        os.environ["HFEXPORT_WEB_CHECKS"] = "0"


@pytest.fixture(scope="session")
def hub() -> DevHub:
    """The in-process local Hub every client in this session talks to."""
    return HUB


@pytest.fixture(scope="module")
def accounts(hub):
    """The service's tests' two Hub accounts (tests/service/): the repos' owner and the service's bot."""
    return {"alice": hub.add_user("alice-svc"), "bot": hub.add_user("svc-bot")}


@pytest.fixture(scope="session")
def workspace(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("hfexport")


def _exported(workspace: Path, name: str, build, backends: str = ALL_CPU, **kwargs):
    import hfexport

    folder = build(workspace / f"model-{name}") if build else tiny_models.minilm_folder()
    # Variants are the variant tests' (test_variants.py): these exports judge the fp32 files alone.
    kwargs.setdefault("variants", "none")
    with web_checks():
        report = hfexport.export(str(folder), workspace / f"out-{name}", backends=backends, **kwargs)
    for b in report.succeeded:  # docs/export.md's loader table: each export reloaded on its own runtime
        v = b.validation
        result = "eager's tokens; logits max abs diff" if v.tokens_equal else "max abs diff"
        # ExecuTorch's LLM runner program: judged in ExecuTorch's runtime, its cache inside.
        loader = (
            "ExecuTorch runtime (`forward`)"
            if b.layout == "executorch-llm-runner"
            else f"`ExportedModel` ({b.backend})"
        )
        TABLE.record(report.plan.architecture, report.plan.task, loader, result, v.max_abs_diff)
    record_web(report.to_dict())  # and each file on the browser's runtime, onnxruntime-web's wasm backend
    return folder, report


@pytest.fixture(scope="session")
def bert_export(workspace):
    return _exported(workspace, "bert", tiny_models.bert)


@pytest.fixture(scope="session")
def llama_generation_export(workspace):
    return _exported(workspace, "llama-gen", tiny_models.llama)


@pytest.fixture(scope="session")
def llama_single_export(workspace):
    return _exported(workspace, "llama-single", tiny_models.llama, task="text-generation")


@pytest.fixture(scope="session")
def t5_export(workspace):
    return _exported(workspace, "t5", tiny_models.t5)


@pytest.fixture(scope="session")
def vit_export(workspace):
    return _exported(workspace, "vit", tiny_models.vit)


@pytest.fixture(scope="session")
def tiny_bert_folder(workspace) -> Path:
    return tiny_models.bert(workspace / "model-bert-plain")


def run_cli(*args: str, env: dict | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    """`hfexport ARGS` as a user runs it: a real process, its exit code, stdout and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "hfexport", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {}), "COLUMNS": "200"},
    )

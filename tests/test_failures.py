"""What goes wrong: the batch-1 trap, a backend that crashes or hangs, and every kind of bad input."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from pathlib import Path

import pytest
import tiny_models
from conftest import run_cli

import hfexport
from hfexport import Shape
from hfexport.report import REPORT_FILE, Report


def _leftovers(parent: Path, name: str) -> list[Path]:
    return [p for p in parent.iterdir() if p.name.startswith(f".{name}.partial-")]


# ── The batch-1 trap ─────────────────────────────────────────────────────────


def test_batch1_trace_is_caught_by_other_shape_validation(workspace):
    """A generation split traced on one prompt specialises the batch to 1: it exports fine and
    fails at run time. Forced through the API, the other-shape check must catch it."""
    folder = tiny_models.llama(workspace / "model-llama-b1")
    out = workspace / "out-llama-b1"

    def batch_one(plan):
        return dataclasses.replace(plan, sample=Shape(batch=1, sequence=8, padded=False))

    report = hfexport.export(str(folder), out, backends="dynamo,onnx", adjust_plan=batch_one)
    assert not report.ok
    for b in report.backends:
        assert b.status == "failed", b.backend
        checks = {c.name: c for c in b.validation.checks}
        # The traced shape itself works; the different batch does not.
        assert checks["generation_sample"].error is None
        assert checks["generation_sample"].tokens_equal is True
        assert checks["generation_other_shape"].error is not None
        assert "generation_other_shape" in b.error
        # A failed backend keeps no files that could be mistaken for a good export.
        assert not (out / b.subfolder).exists()
    saved = json.loads((out / REPORT_FILE).read_text())
    assert saved["ok"] is False and {b["status"] for b in saved["backends"]} == {"failed"}
    # A failed backend's report (errors, checks with no diffs) round-trips like a good one.
    assert Report.from_dict(report.to_dict()) == report
    assert Report.from_dict(saved) == dataclasses.replace(report, out_dir=None)


# ── Isolation ────────────────────────────────────────────────────────────────


def test_crash_and_hang_are_isolated(workspace, tiny_bert_folder):
    """onnx is SIGKILLed (as by the OOM killer), executorch hangs past its timeout; dynamo still
    completes and is reported, through the CLI with its exit code."""
    out = workspace / "out-isolation"
    result = run_cli(
        "export",
        str(tiny_bert_folder),
        "--backends",
        "dynamo,onnx,executorch",
        "--out",
        str(out),
        "--timeout",
        "30",
        "--jobs",
        "1",
        "--json",
        env={"HFEXPORT_FAULT": "onnx:crash,executorch:hang"},
    )
    assert result.returncode == 1, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert Report.from_dict(report).to_dict() == report  # crashed and timed-out entries too
    status = {b["backend"]: b for b in report["backends"]}
    assert status["dynamo"]["status"] == "ok"
    assert status["onnx"]["status"] == "crashed" and "SIGKILL" in status["onnx"]["error"]
    # The report says the test hook did it, instead of blaming the OOM killer.
    assert status["onnx"]["fault"] == "crash" and "test hook" in status["onnx"]["error"]
    assert status["executorch"]["fault"] == "hang" and status["dynamo"]["fault"] is None
    assert status["executorch"]["status"] == "timeout" and "30" in status["executorch"]["error"]
    assert (out / "dynamo" / "model.pt2").is_file()
    assert not (out / "onnx").exists() and not (out / "executorch").exists()
    assert "crashed" in result.stderr and "timeout" in result.stderr


def _worker_processes() -> list[int]:
    """Live `hfexport.worker` processes whose parent is this test process."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, ppid = stat.read_text().rsplit(")", 1)[1].split()[:2]
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(ppid) == os.getpid() and b"hfexport.worker" in cmdline and state != "Z":
            pids.append(int(stat.parent.name))
    return pids


def _worker_python(timeout: float = 30.0) -> int:
    """The pid of the Python running `-m hfexport.worker` under this test process: the sandbox's
    `unshare` child once it has exec'd it, or the direct child where the machine gives no sandbox."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        parents, argvs = {}, {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
                argvs[int(stat.parent.name)] = (stat.parent / "cmdline").read_bytes().split(b"\0")
            except (OSError, IndexError, ValueError):
                continue

        def ours(pid: int) -> bool:
            while pid > 1:
                pid = parents.get(pid, 0)
                if pid == os.getpid():
                    return True
            return False

        found = [pid for pid, argv in argvs.items() if argv[1:3] == [b"-m", b"hfexport.worker"] and ours(pid)]
        if found:
            return found[0]
        time.sleep(0.05)
    raise AssertionError("no `python -m hfexport.worker` started under this test")


def test_one_worker_process_imports_ahead_and_none_is_left_behind(tmp_path, tiny_bert_folder):
    """The worker process starts before the plan exists, so its imports overlap it: one process
    whatever the number of backends (each backend's is forked from it when its job is handed over),
    and none survives a run that turns out to need no export."""
    from hfexport.pipeline.export import BackendWorkers

    with BackendWorkers(["dynamo", "onnx", "executorch"], jobs=1) as workers:
        assert len(_worker_processes()) == 1
        with workers.take():
            assert len(_worker_processes()) == 1  # nothing forked before its job exists
        workers.skip()
        assert len(_worker_processes()) == 1  # a backend is left
        workers.skip()  # the other backends were skipped: the worker process is not needed
        assert _worker_processes() == []
    # Planning fails after the workers started (an unknown architecture shows only once transformers
    # is imported): they go with the error.
    folder = _folder(
        tmp_path, "unsupported", {**_bert_config(), "architectures": ["FancyNewModel"]}, "model.safetensors"
    )
    with pytest.raises(hfexport.HfExportError, match="FancyNewModel"):
        hfexport.export(str(folder), tmp_path / "out", backends="dynamo,onnx")
    assert _worker_processes() == []


def test_a_backend_whose_worker_process_died_before_its_job_ends_at_once_with_the_cause(tmp_path, tiny_bert_folder):
    """The worker process killed before it forked (by the OOM killer, say): the backend handed to it
    ends at once with that signal as its cause, instead of waiting out its timeout."""
    import signal

    from hfexport.messages import WorkerJob
    from hfexport.pipeline.export import BackendWorkers, _crash_reason
    from hfexport.pipeline.plan import make_plan

    plan = make_plan(tiny_bert_folder, ["onnx"])
    with BackendWorkers(["onnx"], jobs=1) as workers:
        # The OOM killer picks the big Python, not the sandbox's `unshare` around it. Killing `unshare`
        # itself in the moment before its child asked for PDEATHSIG left that child running the job.
        os.kill(_worker_python(), signal.SIGKILL)
        with workers.take() as worker:
            worker.hand(WorkerJob("onnx", "hfexport.backends", plan, str(tiny_bert_folder), str(tmp_path), True))
            assert worker.process.wait(timeout=30) == -signal.SIGKILL
            assert "SIGKILL" in _crash_reason(worker.process.returncode)
    assert _worker_processes() == []


# ── Bad input: message names cause and fix, exit code 2, nothing written ─────


def _bert_config() -> dict:
    return {
        "model_type": "bert",
        "architectures": ["BertModel"],
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 37,
        "vocab_size": 128,
    }


def _folder(workspace: Path, name: str, config: dict | str | None, weights: str | None = None) -> Path:
    folder = workspace / name
    folder.mkdir()
    if config is not None:
        (folder / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    if weights:
        (folder / weights).write_bytes(b"\0" * 16)
    return folder


CASES = {
    "unknown_backend": (
        lambda ws, bert: [str(bert), "--backends", "dynamo,tflite"],
        "Unknown backend 'tflite'",
        "--backends",
    ),
    "missing_folder": (lambda ws, bert: [str(ws / "no-such-model")], "No folder", "path"),
    "unreadable_config": (
        lambda ws, bert: [str(_folder(ws, "bad-config", "{not json", "model.safetensors"))],
        "not valid JSON",
        "config.json",
    ),
    "no_config": (
        lambda ws, bert: [str(_folder(ws, "no-config", None, "model.safetensors"))],
        "No config.json",
        "config.json",
    ),
    "unsupported_architecture": (
        lambda ws, bert: [
            str(_folder(ws, "unsupported", {**_bert_config(), "architectures": ["FancyNewModel"]}, "model.safetensors"))
        ],
        "has no class 'FancyNewModel'",
        "Upgrade transformers",
    ),
    "unknown_model_type": (
        lambda ws, bert: [
            str(_folder(ws, "unknown-type", {"model_type": "fancy-new", "architectures": []}, "model.safetensors"))
        ],
        "cannot read this config",
        "model_type",
    ),
    "no_weights": (lambda ws, bert: [str(_folder(ws, "no-weights", _bert_config()))], "No weights", "weights"),
    "pickle_only": (
        lambda ws, bert: [str(_folder(ws, "pickled", _bert_config(), "pytorch_model.bin"))],
        "pickled weights only",
        "--allow-pickle",
    ),
    "remote_code": (
        lambda ws, bert: [
            str(
                _folder(
                    ws, "remote", {**_bert_config(), "auto_map": {"AutoModel": "modeling.Fancy"}}, "model.safetensors"
                )
            )
        ],
        "code from its repo",
        "--trust-remote-code",
    ),
    "unknown_task": (lambda ws, bert: [str(bert), "--task", "teleportation"], "Unknown task", "--task"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_refused_clearly(case, tmp_path, tiny_bert_folder):
    make_args, cause, fix = CASES[case]
    out = tmp_path / "out"
    result = run_cli("export", *make_args(tmp_path, tiny_bert_folder), "--out", str(out), timeout=300)
    assert result.returncode == 2, (case, result.returncode, result.stderr[-2000:])
    assert "error:" in result.stderr and cause in result.stderr, result.stderr
    assert "fix:" in result.stderr and fix in result.stderr.split("fix:", 1)[1], result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists() and not _leftovers(tmp_path, "out")


@pytest.mark.parametrize(
    "case, kwargs, words",
    [
        ("unknown_backend", {"backends": "dynamo,tflite"}, ("--backends", "backends=")),
        ("unknown_task", {"task": "teleportation"}, ("--task", "task=")),
        ("pickle_only", {}, ("--allow-pickle", "allow_pickle=True")),
        ("remote_code", {}, ("--trust-remote-code", "trust_remote_code=True")),
    ],
)
def test_python_api_errors_name_the_keyword_as_well_as_the_flag(case, kwargs, words, tmp_path, tiny_bert_folder):
    """A caller of `hfexport.export` is told which keyword to pass, not only which CLI flag."""
    folder = Path(CASES[case][0](tmp_path, tiny_bert_folder)[0])
    with pytest.raises(hfexport.HfExportError) as raised:
        hfexport.export(str(folder), tmp_path / "out", **kwargs)
    for word in words:
        assert word in raised.value.fix, raised.value.fix
    assert not (tmp_path / "out").exists()


def test_output_folder_of_someone_else_is_not_overwritten(tmp_path, tiny_bert_folder):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "thesis.txt").write_text("do not delete")
    result = run_cli("export", str(tiny_bert_folder), "--backends", "dynamo", "--out", str(out), timeout=300)
    assert result.returncode == 2 and "not an earlier hfexport output" in result.stderr
    assert (out / "thesis.txt").read_text() == "do not delete"
    assert not _leftovers(tmp_path, "precious")


def test_allow_pickle_accepts_pickled_weights(tmp_path):
    """The opt-in works: a pickle-only model is planned and exported when the user allows it."""
    import torch
    from transformers import BertConfig, BertModel

    folder = tmp_path / "pickled-real"
    model = BertModel(
        BertConfig(**{k: v for k, v in _bert_config().items() if k not in ("model_type", "architectures")})
    )
    model.config.save_pretrained(folder)
    torch.save(model.state_dict(), folder / "pytorch_model.bin")  # transformers 5 saves safetensors only
    assert not list(folder.glob("*.safetensors")) and list(folder.glob("*.bin"))
    with pytest.raises(hfexport.PickleWeightsError):
        hfexport.export(str(folder), tmp_path / "refused", backends="dynamo")
    report = hfexport.export(str(folder), tmp_path / "allowed", backends="dynamo", allow_pickle=True)
    assert report.ok, report.backends[0].error


def test_cuda_backend_is_skipped_with_reason_not_dropped(tmp_path, tiny_bert_folder):
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is visible here: the backend runs (see test_cuda.py)")
    report = hfexport.export(str(tiny_bert_folder), tmp_path / "out", backends="dynamo,executorch-cuda")
    status = {b.backend: b for b in report.backends}
    assert status["executorch-cuda"].status == "skipped" and "CUDA" in status["executorch-cuda"].error
    assert status["dynamo"].status == "ok"
    assert report.ok  # a skip with its reason is not a failure


def test_doctor_reports_versions_and_backends(hub):
    """`doctor` says the versions, who the token is (never the token), the memory and disk the
    preflight counts on, the sandbox and the browser runtime; reads the exporters' tested versions without importing
    them; `-v` works anywhere on the line; `--version` answers alone."""
    token = hub.add_user("doctor-user")
    result = run_cli("doctor", "--json", env={"HF_TOKEN": token, "HFEXPORT_WEB_CHECKS": "1"}, timeout=300)
    assert result.returncode == 0, result.stderr
    # The libraries' known-harmless lines (torchao's CUDA kernels, pytree deprecations) are not ours to print.
    noise = ("Failed to load", "register_constant() on Enum")
    assert not any(line in result.stderr for line in noise), result.stderr
    verbose = run_cli("doctor", "--json", "-v", timeout=300)
    assert verbose.returncode == 0 and json.loads(verbose.stdout)["python"], verbose.stderr
    info = json.loads(result.stdout)
    assert info["token"] == "set: doctor-user (write)" and token not in result.stdout + result.stderr
    assert info["memory_gb"] > 0 and info["disk_free_gb"] > 0 and info["sandbox"] and info["hfexport"]
    # The browser's runtime the ONNX files are also run on: the version hfexport/web/package.json pins.
    pinned = json.loads((Path(hfexport.__file__).parent / "web" / "package.json").read_text())
    assert info["web_runtime"].startswith(f"onnxruntime-web {pinned['dependencies']['onnxruntime-web']} "), info
    off = json.loads(run_cli("doctor", "--json", env={"HFEXPORT_WEB_CHECKS": "0"}, timeout=300).stdout)
    assert off["web_runtime"] == "none — turned off (HFEXPORT_WEB_CHECKS=0)", off
    version = run_cli("--version", timeout=120)
    assert version.returncode == 0 and version.stdout.startswith(f"hfexport {info['hfexport']} (torch "), version
    packages = {row["package"]: row for row in info["packages"]}
    for name in ("torch", "transformers", "executorch", "onnx", "onnxruntime", "huggingface_hub"):
        assert packages[name]["pinned"] and packages[name]["pin_ok"], packages[name]
    assert packages["executorch"]["tested"] == {"ExecutorchExporter": "1.4.1"}
    assert info["backends"]["dynamo"]["available"] is True
    assert info["backends"]["executorch-cuda"]["available"] is info["cuda"]


def test_a_head_whose_weights_the_checkpoint_lacks_is_refused_and_a_sentence_transformer_is_an_embedder(tmp_path):
    """config.json names `BertForMaskedLM` over weights of the bare encoder, as sentence-transformers
    repos on the Hub do: the head would be random. Without `modules.json` the export is refused,
    naming the weights and the task that fits; with it, the repo is exported as the embedder it is."""
    folder = tiny_models.bert(tmp_path / "st")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "architectures": ["BertForMaskedLM"]}))

    refused = hfexport.export(str(folder), tmp_path / "refused", backends="dynamo")
    (backend,) = refused.backends
    assert not refused.ok and backend.status == "failed"
    assert "holds no weights" in backend.error and "cls.predictions" in backend.error, backend.error
    assert "--task feature-extraction" in backend.error and not backend.files

    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    report = hfexport.export(str(folder), tmp_path / "embedder", backends="dynamo")
    assert report.ok and report.plan.task == "feature-extraction", report.backends[0].error


# ── A user's first commands (issue 41) ───────────────────────────────────────


def test_push_without_a_token_is_bad_input_naming_the_three_ways_and_a_dry_run_needs_none(hub, workspace, tmp_path):
    """No HF_TOKEN, no --token, no saved login: `push` exits 2 before any work, saying what kind of
    token it needs and the three ways to give one; a dry run of a public repo needs none; a wrong
    token's fix asks for one that can open pull requests, not for read access."""
    from huggingface_hub import HfApi

    owner = hub.add_user("first-hour")
    api = HfApi(endpoint=hub.url, token=owner)
    api.create_repo("first-hour/tiny")
    api.upload_folder(repo_id="first-hour/tiny", folder_path=tiny_models.bert(workspace / "first-hour", seed=89))
    empty = {"HF_HOME": str(tmp_path / "no-login")}
    pushed = run_cli("push", "first-hour/tiny", "--backends", "dynamo", env=empty, timeout=300)
    said = " ".join(pushed.stderr.split())
    assert pushed.returncode == 2, pushed.stderr[-2000:]
    assert "No Hub token is set" in said and "internal error" not in said
    assert "set HF_TOKEN, pass --token, or run `hf auth login`" in said and "open pull requests" in said
    dry = run_cli("push", "first-hour/tiny", "--backends", "dynamo", "--dry-run", env=empty, timeout=600)
    assert dry.returncode == 0 and "dry run" in dry.stderr, dry.stderr[-2000:]
    wrong = run_cli("push", "first-hour/tiny", "--backends", "dynamo", "--token", "hf_wrong", env=empty, timeout=300)
    said = " ".join(wrong.stderr.split())
    assert wrong.returncode == 2 and "open pull requests" in said and "read access" not in said, said


def test_a_pasted_hub_url_is_its_repo_and_a_typo_is_not_found_not_a_folder_or_an_outage(hub, workspace, tmp_path):
    """`push https://…/org/name/tree/REV` is `push org/name --revision REV`; a typo'd id is "not
    found: check the id", without talk of folders (push) and without "retry later"."""
    from huggingface_hub import HfApi

    owner = hub.add_user("url-owner")
    api = HfApi(endpoint=hub.url, token=owner)
    api.create_repo("url-owner/tiny")
    api.upload_folder(repo_id="url-owner/tiny", folder_path=tiny_models.bert(workspace / "url-owner", seed=89))
    sha = api.model_info("url-owner/tiny").sha
    url = f"{hub.url}/url-owner/tiny/tree/{sha}"
    dry = run_cli("push", url, "--backends", "dynamo", "--dry-run", "--json", env={"HF_TOKEN": owner}, timeout=600)
    assert dry.returncode == 0, dry.stderr[-2000:]
    source = json.loads(dry.stdout)["report"]["source"]
    assert (source["ref"], source["sha"]) == ("url-owner/tiny", sha), source
    typo = run_cli("push", "url-owner/tinny", "--backends", "dynamo", env={"HF_TOKEN": owner}, timeout=300)
    said = " ".join(typo.stderr.split())
    assert typo.returncode == 2 and "has no repo 'url-owner/tinny'" in said and "not found" in said, said
    assert "Check the id (org/name" in said and "folder" not in said and "Retry later" not in said


def test_a_variant_no_export_of_the_model_derives_is_refused_before_the_export_and_json_says_so(
    tmp_path, tiny_bert_folder
):
    """`--variants onnx:q4f16` (decoder LLMs' only) on an encoder: exit 2 at plan time, nothing
    exported, and `--json` puts `{"ok": false, "error", "fix", "exit_code"}` on stdout."""
    out = tmp_path / "out"
    result = run_cli(
        "export",
        str(tiny_bert_folder),
        "--backends",
        "onnx",
        "--variants",
        "onnx:q4f16",
        "--out",
        str(out),
        "--json",
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    said = json.loads(result.stdout)
    assert said["ok"] is False and said["exit_code"] == 2 and "q4f16 is for decoder LLMs" in said["error"], said
    assert "default" in said["fix"] and not out.exists()


def test_a_model_without_a_dtype_gets_no_deprecation_noise_from_our_own_code(tmp_path):
    """A config.json from before `dtype` (none, nor `torch_dtype`): the export says nothing of
    `torch_dtype` — a warning hfexport's own lookup used to raise on every such model."""
    folder = tiny_models.bert(tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    config.pop("dtype", None)
    config.pop("torch_dtype", None)
    (folder / "config.json").write_text(json.dumps(config))
    result = run_cli("export", str(folder), "--backends", "dynamo", "--out", str(tmp_path / "out"), timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "torch_dtype" not in result.stderr, result.stderr[-2000:]


def test_the_output_folder_loads_as_the_repo_does_and_the_cli_says_what_next(tmp_path):
    """After `export`, the folder holds the model's config and tokenizer beside the exports (what
    the loaders read from a repo's root), the CLI prints the next commands, and the `load it` one
    runs as printed."""
    import shlex
    import subprocess

    folder = tiny_models.bert_head_with_tokenizer(tmp_path / "model", "BertForSequenceClassification")
    out = tmp_path / "out"
    result = run_cli("export", str(folder), "--backends", "onnx", "--out", str(out), timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert {"config.json", "tokenizer.json", "tokenizer_config.json"} <= {p.name for p in out.iterdir()}
    said = result.stderr
    assert "next:" in said and "hfexport push ORG/NAME --backends onnx --dry-run" in said, said[-2000:]
    assert re.search(r"done in \d+ s", said), said[-2000:]
    load = next(line.split("load it:", 1)[1] for line in said.splitlines() if "load it:" in line)
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # `python` is this environment's, as a user's
    ran = subprocess.run(
        shlex.split(load), capture_output=True, text=True, timeout=300, env={**os.environ, "PATH": path}
    )
    assert ran.returncode == 0 and "ExportedModel" in ran.stdout + ran.stderr, ran.stderr[-2000:]
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(out)("alpha beta")["input_ids"]


def test_an_executorch_program_calling_an_operator_its_runtime_lacks_is_refused_naming_it():
    """ExecuTorch's runtime refuses a method calling an operator it has no kernel for with a bare code
    ("Failed to load method forward, error: 0x:14"), naming the operator only on its own stderr. The
    export names it instead: an int64 sort (Qwen2.5-VL's window order, `argsort`) has no kernel; a
    program of kernels it has passes."""
    import torch
    from transformers.exporters import ExecutorchConfig, ExecutorchExporter

    from hfexport.errors import UnsupportedArchitectureError
    from hfexport.worker.job import _refuse_missing_kernels

    class Ordered(torch.nn.Module):
        def forward(self, order: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return x[torch.argsort(order)] * 2

    class Doubled(torch.nn.Module):
        def forward(self, order: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
            return x[order] * 2

    inputs = {"order": torch.tensor([2, 0, 1]), "x": torch.ones(3, 4)}
    with pytest.raises(UnsupportedArchitectureError) as refused:
        _refuse_missing_kernels(ExecutorchExporter().export(Ordered(), dict(inputs), ExecutorchConfig()))
    assert "no kernel for: aten::sort.values (in model)" in str(refused.value), refused.value
    assert "Fix: Export it with dynamo or onnx" in str(refused.value), refused.value
    _refuse_missing_kernels(ExecutorchExporter().export(Doubled(), dict(inputs), ExecutorchConfig()))

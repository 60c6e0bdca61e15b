"""hfexport/pipeline/preflight.py: the weights read from their headers, the estimate against the
machine, and the run that stops before any download when nothing fits — as a user runs it, on the
local Hub."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import tiny_models
from conftest import run_cli

from hfexport.pipeline import preflight
from hfexport.pipeline.preflight import Machine, Weights, check, estimate, smallest_flavor, weights_of
from hfexport.report import Source


def _local(folder: Path) -> Source:
    return Source(kind="local", ref=str(folder), sha="")


def test_a_folders_weights_are_counted_from_their_headers_across_shards_and_dtypes(tmp_path):
    from transformers import BertModel

    folder = tiny_models.bert(tmp_path / "fp32")
    model = BertModel.from_pretrained(folder)
    parameters = sum(p.numel() for p in model.state_dict().values())
    weights = weights_of(_local(folder))
    assert weights == Weights(parameters=parameters, stored_bytes=4 * parameters, dtypes=("F32",))
    assert weights.fp32_bytes == 4 * parameters

    import torch

    model.to(torch.bfloat16).save_pretrained(tmp_path / "bf16", max_shard_size=parameters)  # sharded, bf16
    assert len(list((tmp_path / "bf16").glob("*.safetensors"))) > 1
    halved = weights_of(_local(tmp_path / "bf16"))
    assert halved == Weights(parameters=parameters, stored_bytes=2 * parameters, dtypes=("BF16",))
    assert weights_of(_local(tmp_path)) is None  # no safetensors: nothing to estimate from
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "model.safetensors").write_bytes(b"")
    assert weights_of(_local(tmp_path / "broken")) is None  # unreadable: the stages after say what is wrong


def test_a_backend_that_does_not_fit_is_named_with_its_figures_and_the_others_still_run():
    weights = Weights(parameters=1_000_000_000, stored_bytes=2_000_000_000, dtypes=("BF16",))
    onnx, dynamo = estimate(weights, ["onnx", "dynamo"])
    assert onnx.memory_bytes > onnx.disk_bytes > 0 and dynamo.memory_bytes > 0
    between = (min(onnx.memory_bytes, dynamo.memory_bytes) + max(onnx.memory_bytes, dynamo.memory_bytes)) // 2
    larger = "onnx" if onnx.memory_bytes > dynamo.memory_bytes else "dynamo"
    verdict = check(weights, ["onnx", "dynamo"], Machine(memory_bytes=between, disk_bytes=10**13))
    assert list(verdict.too_large) == [larger] and verdict.fits == [b for b in ("onnx", "dynamo") if b != larger]
    reason = verdict.reasons()[larger]
    assert "1.00 B parameters (bf16)" in reason and "--force-memory" in reason and "GB of memory" in reason
    # Two at once: each needs its own peak and the other's; then neither fits.
    assert check(weights, ["onnx", "dynamo"], Machine(between, 10**13), jobs=2).fits == []
    # Disk: the download and every output.
    tight = check(weights, ["onnx"], Machine(memory_bytes=10**12, disk_bytes=weights.stored_bytes))
    assert tight.too_large["onnx"].resource == "disk"
    with pytest.raises(preflight.ResourceError, match="No backend fits this machine"):
        preflight.check_or_raise(tight)
    assert check(None, ["onnx"], Machine(1, 1)).fits == []  # unknown weights: no estimate, nothing refused
    assert preflight.check_or_raise(check(None, ["onnx"], Machine(1, 1))).too_large == {}


def test_the_cheapest_jobs_flavor_with_enough_memory_and_disk_is_chosen():
    from huggingface_hub._jobs_api import JobHardwareInfo

    from hfexport_devhub.jobs import hardware_list

    hardware = [JobHardwareInfo(**h) for h in hardware_list()]
    assert smallest_flavor(2 * 10**9, 10**9, hardware) == "cpu-basic"
    assert smallest_flavor(20 * 10**9, 10**9, hardware) == "cpu-upgrade"
    assert smallest_flavor(20 * 10**9, 100 * 10**9, hardware) == "cpu-xl"  # the disk decides
    assert smallest_flavor(2 * 10**9, 10**9, hardware, gpu=True) == "a10g-small"
    assert smallest_flavor(10**12, 10**9, hardware) is None


def _header_only_checkpoint(folder: Path, parameters: int) -> Path:
    """A config and a `model.safetensors` whose header declares `parameters` bf16 weights and holds
    none of them: what the preflight reads of a large model, without its bytes."""
    folder.mkdir(parents=True)
    tiny = tiny_models.bert(folder.with_name(folder.name + "-config"))
    (folder / "config.json").write_text((tiny / "config.json").read_text())
    rows = parameters // 4096
    header = {"weight": {"dtype": "BF16", "shape": [rows, 4096], "data_offsets": [0, rows * 4096 * 2]}}
    encoded = json.dumps(header).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(encoded)) + encoded)
    return folder


def seed_header_only(hub, api, repo: str, folder: Path, parameters: int) -> None:
    """Create `repo` holding a `parameters`-weight bf16 checkpoint as the Hub lists it — its files at
    their full size — of which the local Hub keeps only the header (`DevHub.put_large_file`)."""
    folder = _header_only_checkpoint(folder, parameters)
    api.create_repo(repo)
    api.upload_file(path_or_fileobj=folder / "config.json", path_in_repo="config.json", repo_id=repo)
    head = (folder / "model.safetensors").read_bytes()
    hub.put_large_file(repo, "model.safetensors", head, len(head) + parameters * 2, api.whoami()["name"])


def test_a_model_that_cannot_fit_is_refused_before_any_download_with_the_estimate_and_the_fix(hub, tmp_path):
    """A 60 B-parameter bf16 checkpoint (its header alone is on the Hub): `export` and `push` read
    its size from the header, exit 2 naming the estimate and the fix, and download no weight; with
    the machine's limit lowered, a real tiny model is refused the same way, and `--force-memory`
    exports it anyway."""
    from huggingface_hub import HfApi

    token = hub.add_user("preflight-owner")
    api = HfApi(endpoint=hub.url, token=token)
    huge, tiny = "preflight-owner/huge", "preflight-owner/tiny"
    seed_header_only(hub, api, huge, tmp_path / "huge", 60 * 10**9)
    api.create_repo(tiny)
    api.upload_folder(repo_id=tiny, folder_path=tiny_models.bert(tmp_path / "tiny"))
    home = tmp_path / "hf-home"
    env = {"HF_HOME": str(home), "HF_TOKEN": token}

    for command in (["export", huge, "--out", str(tmp_path / "out")], ["push", huge]):
        ran = run_cli(*command, "--backends", "dynamo,onnx", env=env)
        assert ran.returncode == 2, ran.stderr[-2000:]
        assert "No backend fits this machine" in ran.stderr and "60.00 B parameters (bf16)" in ran.stderr
        assert "GB of memory" in ran.stderr and "--force-memory" in ran.stderr, ran.stderr[-2000:]
        assert not list(home.rglob("*.safetensors")) and not (tmp_path / "out").exists()
    assert list(api.get_repo_discussions(huge)) == []  # no PR either

    limited = {**env, "HFEXPORT_MEMORY_LIMIT_MB": "200"}
    ran = run_cli("export", tiny, "--backends", "dynamo", "--out", str(tmp_path / "tiny-out"), env=limited)
    assert ran.returncode == 2 and "0.2 GB is available" in ran.stderr, ran.stderr[-2000:]
    assert not list(home.rglob("*.safetensors"))
    forced = run_cli(
        "export", tiny, "--backends", "dynamo", "--out", str(tmp_path / "tiny-out"), "--force-memory", env=limited
    )
    assert forced.returncode == 0, forced.stderr[-2000:]


def test_a_backend_over_the_limit_is_reported_skipped_and_the_others_export_one_at_a_time(tmp_path):
    """The machine's limit between ExecuTorch's estimate for a tiny model and the others': asked for
    two backends at once (`--jobs 2`), which nothing would fit beside ExecuTorch, the run exports
    one at a time instead — dynamo and onnx export —, ExecuTorch is reported skipped with its
    estimate, and the run exits 0."""
    folder = tiny_models.bert(tmp_path / "model")
    weights = weights_of(_local(folder))
    assert weights is not None
    dynamo, onnx, executorch = estimate(weights, ["dynamo", "onnx", "executorch"])
    assert max(dynamo.memory_bytes, onnx.memory_bytes) < executorch.memory_bytes, (dynamo, onnx, executorch)
    limit = (max(dynamo.memory_bytes, onnx.memory_bytes) + executorch.memory_bytes) // 2
    side_by_side = check(weights, ["dynamo", "onnx", "executorch"], Machine(limit, 10**13), jobs=2)
    assert side_by_side.fits == []  # each beside ExecuTorch: nothing fits two at a time
    ran = run_cli(
        "export",
        str(folder),
        "--backends",
        "dynamo,onnx,executorch",
        "--jobs",
        "2",
        "--out",
        str(tmp_path / "out"),
        "--json",
        env={"HFEXPORT_MEMORY_LIMIT_MB": str(limit // 1_000_000)},
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    results = {b["backend"]: b for b in json.loads(ran.stdout)["backends"]}
    assert results["dynamo"]["status"] == results["onnx"]["status"] == "ok", results
    assert results["executorch"]["status"] == "skipped" and "GB of memory" in results["executorch"]["error"]


def test_each_backend_is_costed_in_the_precision_it_exports_a_bfloat16_checkpoint_in():
    """A bfloat16 checkpoint's `.pt2` holds its weights at their stored size; its ONNX graph is float32."""
    half = Weights(parameters=1_000_000_000, stored_bytes=2_000_000_000, dtypes=("BF16",))
    full = Weights(parameters=1_000_000_000, stored_bytes=4_000_000_000, dtypes=("F32",))
    assert half.source_dtype == "bfloat16" and full.source_dtype == "float32"
    assert half.exported_bytes("dynamo") == 2 * 10**9 and half.exported_bytes("onnx") == 4 * 10**9
    (dynamo_half, onnx_half), (dynamo_full, onnx_full) = (estimate(w, ["dynamo", "onnx"]) for w in (half, full))
    assert onnx_half == onnx_full and dynamo_half.memory_bytes < dynamo_full.memory_bytes
    assert dynamo_half.disk_bytes * 2 == dynamo_full.disk_bytes

"""hfexport/sandbox/crossing.py: what a sandbox wrote crosses back only as regular files under plain names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hfexport.sandbox import crossing


@pytest.fixture
def folders(tmp_path):
    source, target = tmp_path / "sandbox", tmp_path / "ours"
    (source / "onnx").mkdir(parents=True)
    target.mkdir()
    (tmp_path / "token").write_text("hf_secret")
    return source, target, tmp_path / "token"


def test_regular_files_under_their_names_cross_and_nothing_else(folders):
    source, target, _ = folders
    (source / "onnx" / "model.onnx").write_bytes(b"graph")
    (source / "extra.bin").write_bytes(b"not named")
    crossing.take(source, target, ["onnx/model.onnx"], "The worker")
    assert (target / "onnx" / "model.onnx").read_bytes() == b"graph"
    assert not (target / "extra.bin").exists()


@pytest.mark.parametrize("kind", ["link", "linked folder", "hard link", "fifo"])
def test_a_link_a_hard_link_or_a_device_never_crosses(folders, kind):
    source, target, token = folders
    if kind == "link":
        (source / "onnx" / "model.onnx").symlink_to(token)
        name = "onnx/model.onnx"
    elif kind == "linked folder":
        (source / "linked").symlink_to(token.parent)
        name = "linked/token"
    elif kind == "hard link":
        os.link(token, source / "onnx" / "model.onnx")
        name = "onnx/model.onnx"
    else:
        os.mkfifo(source / "onnx" / "model.onnx")
        name = "onnx/model.onnx"
    with pytest.raises(crossing.PlantedFileError) as raised:
        crossing.take(source, target, [name], "The worker")
    assert repr(name) in raised.value.cause and "cross back" in raised.value.cause
    assert not any(p.is_file() and "hf_secret" in p.read_text() for p in target.rglob("*"))


@pytest.mark.parametrize("name", ["../token", "/etc/passwd", ".hidden", "onnx/../../x", "a\nb", "", "onnx//m"])
def test_a_name_that_is_not_plain_is_refused(folders, name):
    source, target, _ = folders
    with pytest.raises(crossing.PlantedFileError):
        crossing.take(source, target, [name], "The worker")


def test_a_result_read_through_a_link_is_no_result(folders):
    source, _, token = folders
    (source / "result.json").symlink_to(token)
    (source / "stage").write_text("validating")
    assert crossing.read_text(source / "result.json") is None
    assert crossing.read_text(source / "stage") == "validating"
    assert crossing.read_text(source / "missing") is None


def test_a_model_file_is_followed_only_into_its_own_repo(tmp_path):
    repo = tmp_path / "models--o--m"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "abc").mkdir(parents=True)
    (repo / "blobs" / "1234").write_text("{}")
    (repo / "snapshots" / "abc" / "config.json").symlink_to("../../blobs/1234")
    (tmp_path / "token").write_text("hf_secret")
    (repo / "snapshots" / "abc" / "added_tokens.json").symlink_to(tmp_path / "token")
    snapshot = repo / "snapshots" / "abc"
    assert crossing.repo_root(snapshot) == repo
    assert crossing.within(snapshot / "config.json", repo) == (repo / "blobs" / "1234").resolve()
    assert crossing.within(snapshot / "added_tokens.json", repo) is None


def test_a_file_on_another_filesystem_crosses_as_a_copy_of_what_was_checked(folders, monkeypatch):
    """The workers' folder on a tmpfs /tmp, the cache on disk: a rename cannot cross, the checked
    content is copied."""
    import errno

    source, target, _ = folders
    (source / "onnx" / "model.onnx").write_bytes(b"graph" * 1000)

    def cross_device(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "rename", cross_device)
    crossing.take(source, target, ["onnx/model.onnx"], "The worker")
    assert (target / "onnx" / "model.onnx").read_bytes() == b"graph" * 1000


def test_a_checkout_under_tmp_stays_importable_in_the_sandbox(monkeypatch, tmp_path):
    """CI may clone under /tmp, which the sandbox makes private: hfexport's own folder (an editable
    install's finder points there, not `sys.path`) is shown again, read-only; /tmp itself never is."""
    from hfexport.sandbox import launch as sandbox

    monkeypatch.setattr(sandbox, "PACKAGE_DIR", tmp_path / "checkout" / "hfexport")
    (tmp_path / "checkout" / "hfexport").mkdir(parents=True)
    shown = sandbox._runtime_paths()
    assert (tmp_path / "checkout" / "hfexport").resolve() in shown and Path("/tmp") not in shown

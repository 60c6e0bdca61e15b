"""hfexport/settings.py: each setting read when asked for, with its default."""

from __future__ import annotations

from pathlib import Path

from hfexport import settings


def test_defaults_apply_when_unset(monkeypatch):
    for name in (
        settings.CACHE,
        settings.JOBS,
        settings.HUB_RETRIES,
        settings.MAX_DOWNLOAD_MB,
        settings.QUIET_NOISE,
        settings.MEMORY_LIMIT_MB,
    ):
        monkeypatch.delenv(name, raising=False)
    assert settings.memory_limit_bytes() is None  # the preflight then reads the machine's
    assert settings.cache_dir() == Path.home() / ".cache" / "hfexport"
    assert settings.jobs() == 1 and settings.hub_retries() == 8 and settings.quiet_noise()
    assert settings.limit_bytes(settings.MAX_DOWNLOAD_MB) == 200_000 * 1_000_000


def test_values_are_read_at_call_time(monkeypatch, tmp_path):
    monkeypatch.setenv(settings.QUIET_NOISE, "1")  # restored after the test, whatever set_quiet_noise writes
    monkeypatch.setenv(settings.CACHE, str(tmp_path))
    monkeypatch.setenv(settings.JOBS, "0")  # at least one
    monkeypatch.setenv(settings.MAX_SUPPORT_FILE_MB, "0.5")
    assert settings.cache_dir() == tmp_path and settings.jobs() == 1
    assert settings.limit_bytes(settings.MAX_SUPPORT_FILE_MB) == 500_000
    monkeypatch.setenv(settings.MAX_SUPPORT_FILE_MB, "lots")  # unreadable: the default, not a crash
    assert settings.limit_bytes(settings.MAX_SUPPORT_FILE_MB) == 100 * 1_000_000
    monkeypatch.setenv(settings.MEMORY_LIMIT_MB, "16000")
    assert settings.memory_limit_bytes() == 16 * 10**9
    monkeypatch.setenv(settings.MEMORY_LIMIT_MB, "lots")
    assert settings.memory_limit_bytes() is None
    settings.set_quiet_noise(False)
    assert not settings.quiet_noise()
    settings.set_quiet_noise(True, only_if_unset=True)
    assert not settings.quiet_noise()


def test_the_fault_hook_is_live_only_under_the_testing_switch(monkeypatch):
    from hfexport.proc import injected_fault

    monkeypatch.setenv(settings.FAULT, "onnx:crash,run:raise")
    monkeypatch.setenv(settings.TESTING, "0")
    assert injected_fault("onnx") is None
    monkeypatch.setenv(settings.TESTING, "1")
    assert injected_fault("onnx") == "crash" and injected_fault("run") == "raise" and injected_fault("dynamo") is None

"""The local Hub itself: persistence across restarts, the `devhub serve` command, fault knobs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from hfexport_devhub import DevHub


def _api(url, token):
    from huggingface_hub import HfApi

    return HfApi(endpoint=url, token=token)


def test_data_survives_a_restart(tmp_path):
    with DevHub(tmp_path / "hub") as hub:
        hub.settings.lfs = False
        token = hub.add_user("keeper")
        api = _api(hub.url, token)
        api.create_repo("keeper/model", private=True)
        api.upload_file(path_or_fileobj=b"weights" * 1000, path_in_repo="w.bin", repo_id="keeper/model")
        num = api.create_discussion("keeper/model", "hello", description="first").num
        sha = api.model_info("keeper/model").sha
    with DevHub(tmp_path / "hub") as again:  # a new process would see the same: it is all on disk
        api = _api(again.url, token)
        assert api.model_info("keeper/model").sha == sha and api.model_info("keeper/model").private
        assert open(api.hf_hub_download("keeper/model", "w.bin"), "rb").read() == b"weights" * 1000
        assert api.get_discussion_details("keeper/model", num).events[0].content == "first"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(tmp_path, *extra):
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "hfexport_devhub", "serve", "--root", str(tmp_path / "hub"), "--port", str(port), "--user", "carol=hf_carol_token", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return process, url
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise RuntimeError("devhub serve did not start")


def test_devhub_serve_command_and_fault_knobs(tmp_path):
    from huggingface_hub.errors import HfHubHTTPError

    process, url = _serve(tmp_path)
    try:
        api = _api(url, "hf_carol_token")
        assert api.whoami()["name"] == "carol"
        api.create_repo("carol/m")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    process, url = _serve(tmp_path, "--fault-rate", "1.0", "--fault-kinds", "503")
    try:
        with pytest.raises(HfHubHTTPError) as raised:
            _api(url, "hf_carol_token").model_info("carol/m")
        assert raised.value.response.status_code == 503
    finally:
        process.terminate()
        process.wait()
    process, url = _serve(tmp_path)  # killed with -9 above, yet the repo is there
    try:
        assert _api(url, "hf_carol_token").model_info("carol/m").id == "carol/m"
    finally:
        process.terminate()
        process.wait()

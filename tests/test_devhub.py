"""The local Hub itself: persistence across restarts, the `devhub serve` command, fault knobs."""

from __future__ import annotations

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
        [
            sys.executable,
            "-m",
            "hfexport_devhub",
            "serve",
            "--root",
            str(tmp_path / "hub"),
            "--port",
            str(port),
            "--user",
            "carol=hf_carol_token",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
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


def test_the_emulator_refuses_a_stale_parent_and_paths_the_hub_refuses(tmp_path):
    """As strict as the Hub where publishing relies on it: a commit on a stale parent gets 412 (how
    concurrent runners notice each other), and a path escaping the repo gets 400."""
    import base64
    import json
    import urllib.error
    import urllib.request

    from huggingface_hub import CommitOperationAdd
    from huggingface_hub.errors import HfHubHTTPError

    with DevHub(tmp_path / "hub") as hub:
        hub.settings.lfs = False
        token = hub.add_user("strict")
        api = _api(hub.url, token)
        api.create_repo("strict/m")
        first = api.create_commit("strict/m", [CommitOperationAdd("a.txt", b"a")], commit_message="a")
        pr = api.create_commit("strict/m", [CommitOperationAdd("b.txt", b"b")], commit_message="b", create_pr=True)
        head = api.model_info("strict/m", revision=f"refs/pr/{pr.pr_num}").sha
        api.create_commit(
            "strict/m",
            [CommitOperationAdd("c.txt", b"c")],
            commit_message="c",
            revision=f"refs/pr/{pr.pr_num}",
            parent_commit=head,
        )
        with pytest.raises(HfHubHTTPError) as stale:  # a second writer still holding the old head
            api.create_commit(
                "strict/m",
                [CommitOperationAdd("d.txt", b"d")],
                commit_message="d",
                revision=f"refs/pr/{pr.pr_num}",
                parent_commit=head,
            )
        assert stale.value.response.status_code == 412
        root = api.list_repo_commits("strict/m")[-1].commit_id
        assert root != first.oid
        with pytest.raises(HfHubHTTPError) as stale_main:
            api.create_commit("strict/m", [CommitOperationAdd("e.txt", b"e")], commit_message="e", parent_commit=root)
        assert stale_main.value.response.status_code == 412

        # The client refuses such paths itself; the emulator must too, for any other client.
        for path in ("../escape.txt", "a/../../etc/passwd", "/abs.txt", "a//b.txt", ".git/config", "a\\b.txt"):
            lines = [
                {"key": "header", "value": {"summary": "bad", "description": ""}},
                {
                    "key": "file",
                    "value": {"path": path, "content": base64.b64encode(b"x").decode(), "encoding": "base64"},
                },
            ]
            request = urllib.request.Request(
                f"{hub.url}/api/models/strict/m/commit/main",
                method="POST",
                data="\n".join(json.dumps(line) for line in lines).encode(),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == 400, path
        assert sorted(api.list_repo_files("strict/m")) == [".gitattributes", "a.txt"]


def _commit(api, repo, files: dict[str, bytes], **kwargs):
    from huggingface_hub import CommitOperationAdd

    return api.create_commit(repo, [CommitOperationAdd(p, c) for p, c in files.items()], commit_message="c", **kwargs)


def test_a_pr_opened_with_a_parent_commit_branches_from_it_and_merges_three_ways(tmp_path):
    """As on the Hub: `create_pr` with `parent_commit` branches the PR from that commit; merging
    keeps what main gained since; text changed on both sides merges line by line; anything else
    changed on both sides is a conflict the merge refuses."""
    from huggingface_hub.errors import HfHubHTTPError

    with DevHub(tmp_path / "hub") as hub:
        hub.settings.lfs = False
        api = _api(hub.url, hub.add_user("dora"))
        api.create_repo("dora/m")
        card = b"# M\n\nline one\nline two\nline three\n"
        read = _commit(api, "dora/m", {"README.md": card, "w.bin": b"v1"}).oid
        # main moves on: a new file, the card's first line, and a file the PR will touch too.
        _commit(
            api,
            "dora/m",
            {"README.md": card.replace(b"# M", b"# M, retitled"), "owner.txt": b"theirs", "x.bin": b"main"},
        )
        pr = _commit(
            api,
            "dora/m",
            {"README.md": card + b"\nour section\n", "ours.txt": b"ours"},
            create_pr=True,
            parent_commit=read,
        )
        assert api.list_repo_commits("dora/m", revision=f"refs/pr/{pr.pr_num}")[1].commit_id == read
        assert api.get_discussion_details("dora/m", pr.pr_num).conflicting_files == []
        api.merge_pull_request("dora/m", pr.pr_num)
        merged = open(api.hf_hub_download("dora/m", "README.md"), "rb").read()
        assert merged == b"# M, retitled\n\nline one\nline two\nline three\n\nour section\n"
        assert {"owner.txt", "ours.txt", "x.bin", "w.bin"} <= set(api.list_repo_files("dora/m"))
        # A second PR from an old commit writes x.bin, which main changed too: a conflict.
        clash = _commit(api, "dora/m", {"x.bin": b"pr"}, create_pr=True, parent_commit=read)
        assert api.get_discussion_details("dora/m", clash.pr_num).conflicting_files == ["x.bin"]
        with pytest.raises(HfHubHTTPError) as refused:
            api.merge_pull_request("dora/m", clash.pr_num)
        assert refused.value.response.status_code == 409
        # A parent commit that is not on main is refused.
        other = _commit(api, "dora/m", {"y.bin": b"y"}, revision=f"refs/pr/{clash.pr_num}").oid
        with pytest.raises(HfHubHTTPError) as stale:
            _commit(api, "dora/m", {"z.bin": b"z"}, create_pr=True, parent_commit=other)
        assert stale.value.response.status_code == 412


def test_a_prs_link_opens_a_page_and_its_title_and_description_are_edited_by_the_hubs_rules(tmp_path):
    """The PR URL a client prints opens an HTML page (not a JSON 404); its author retitles it and
    edits its own description; another user may do neither."""
    import urllib.request

    from huggingface_hub.errors import HfHubHTTPError

    with DevHub(tmp_path / "hub") as hub:
        hub.settings.lfs = False
        owner, other = hub.add_user("erin"), hub.add_user("frank")
        api = _api(hub.url, owner)
        api.create_repo("erin/m")
        pr = _commit(api, "erin/m", {"a.txt": b"a"}, create_pr=True)
        with urllib.request.urlopen(pr.pr_url, timeout=10) as page:
            text = page.read().decode()
            assert page.headers["content-type"].startswith("text/html") and "Pull request #1 on erin/m" in text
        api.rename_discussion("erin/m", pr.pr_num, "A better title")
        first = api.get_discussion_details("erin/m", pr.pr_num).events[0]
        api.edit_discussion_comment("erin/m", pr.pr_num, first.id, "the new description")
        details = api.get_discussion_details("erin/m", pr.pr_num)
        assert details.title == "A better title" and details.events[0].content == "the new description"
        stranger = _api(hub.url, other)
        for attempt in (
            lambda: stranger.rename_discussion("erin/m", pr.pr_num, "mine now"),
            lambda: stranger.edit_discussion_comment("erin/m", pr.pr_num, first.id, "mine now"),
        ):
            with pytest.raises(HfHubHTTPError) as refused:
                attempt()
            assert refused.value.response.status_code == 403


def test_a_repos_url_opens_a_page_of_its_files_and_prs_and_a_private_one_stays_hidden(tmp_path):
    """The repo URL `push --into` prints opens an HTML page in a browser (not a JSON 404): its files
    on main, each a download link, and its PRs; a private repo shows nothing to a browser without a token."""
    import urllib.error
    import urllib.request

    with DevHub(tmp_path / "hub") as hub:
        hub.settings.lfs = False
        owner = hub.add_user("gina")
        api = _api(hub.url, owner)
        api.create_repo("gina/m")
        _commit(api, "gina/m", {"onnx/model.onnx": b"graph"})
        _commit(api, "gina/m", {"README.md": b"# card"}, create_pr=True)
        with urllib.request.urlopen(f"{hub.url}/gina/m", timeout=10) as page:
            text = page.read().decode()
            assert page.headers["content-type"].startswith("text/html"), page.headers
        assert 'href="/gina/m/resolve/main/onnx/model.onnx"' in text and "(5 bytes)" in text, text
        assert 'href="/gina/m/discussions/1"' in text and "(pull request, draft)" in text, text
        api.create_repo("gina/secret", private=True)
        with pytest.raises(urllib.error.HTTPError) as hidden:
            urllib.request.urlopen(f"{hub.url}/gina/secret", timeout=10)
        assert hidden.value.code in (401, 404)  # as the Hub answers an anonymous client


class _Client:
    def __init__(self, session, base: str):
        self.session, self.base = session, base

    def get(self, path: str, **kwargs):
        return self.session.get(self.base + path, follow_redirects=False, **kwargs)

    def post(self, path: str, **kwargs):
        return self.session.post(self.base + path, follow_redirects=False, **kwargs)


def test_sign_in_with_the_hub_refuses_what_the_hub_refuses(tmp_path):
    """The OAuth provider (`hfexport_devhub/oauth.py`): an unregistered redirect URI, a wrong
    secret and a code used twice are refused; a good code is one access token acting as the user."""
    from urllib.parse import parse_qs, urlparse

    from huggingface_hub.utils import get_session

    with DevHub(tmp_path / "hub") as hub:
        user = hub.add_user("oauth-user")
        app = hub.add_oauth_app(["http://127.0.0.1:9/request/callback"])
        client = _Client(get_session(), hub.url)  # the Hub client's own HTTP session; redirects not followed
        config = client.get("/.well-known/openid-configuration").json()
        assert config["token_endpoint"] == f"{hub.url}/oauth/token"
        query = {"client_id": app.client_id, "response_type": "code", "state": "s", "scope": "openid"}
        assert client.get("/oauth/authorize", params={**query, "redirect_uri": "http://evil/cb"}).status_code == 400
        good = {**query, "redirect_uri": app.redirect_uris[0]}
        assert client.get("/oauth/authorize", params=good).status_code == 200
        approved = client.post("/oauth/authorize", data={**good, "token": user})
        assert approved.status_code == 302 and parse_qs(urlparse(approved.headers["location"]).query)["state"] == ["s"]
        code = parse_qs(urlparse(approved.headers["location"]).query)["code"][0]
        trade = {"grant_type": "authorization_code", "code": code, "redirect_uri": app.redirect_uris[0]}
        assert client.post("/oauth/token", data=trade, auth=(app.client_id, "wrong")).status_code == 401
        token = client.post("/oauth/token", data=trade, auth=(app.client_id, app.client_secret)).json()["access_token"]
        assert client.post("/oauth/token", data=trade, auth=(app.client_id, app.client_secret)).status_code == 400
        who = client.get("/oauth/userinfo", headers={"authorization": f"Bearer {token}"}).json()
        assert who["preferred_username"] == "oauth-user" and _api(hub.url, token).whoami()["name"] == "oauth-user"

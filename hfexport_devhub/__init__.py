"""A local, Hub-compatible server: hfexport's test double for the Hugging Face Hub and the
embedded default of `hfexport demo`. The real `huggingface_hub` client talks to it over HTTP on
127.0.0.1 and cannot tell the difference for what hfexport uses.

A package of its own, importing nothing from `hfexport`: it computes its own git blob ids, LFS
entries and card metadata, so a bug on the publishing side cannot be mirrored here and pass.

    with DevHub(root) as hub:            # in-process, on a free port
        token = hub.add_user("alice")
        os.environ["HF_ENDPOINT"] = hub.url   # before importing huggingface_hub

or from a shell: `hfexport-devhub serve --root DIR --port 8765` (or `python -m hfexport_devhub`).
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import uvicorn

from .app import HubApp, Settings
from .faults import Faults
from .oauth import OAuthApp
from .store import Store
from .webhooks import WebhookDispatcher

__all__ = ["DevHub", "Settings", "Faults", "Store"]


class DevHub:
    """The emulator on a background thread, bound to 127.0.0.1 only."""

    def __init__(self, root: str | Path, port: int = 0, settings: Settings | None = None):
        self.root = Path(root)
        self.store = Store(self.root)
        self.app = HubApp(self.store, settings)
        self.port = port or _free_port()
        self.webhooks = WebhookDispatcher(self.url)
        self.settings.on_commit.append(self.webhooks.on_commit)
        self.settings.on_discussion.append(self.webhooks.on_discussion)
        # HF Jobs run here talk back to this Hub, through the client's LFS path (no Xet here).
        self.settings.job_env.setdefault("HF_ENDPOINT", self.url)
        self.settings.job_env.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def settings(self) -> Settings:
        return self.app.settings

    def add_user(self, name: str, token: str | None = None) -> str:
        return self.store.add_user(name, token)

    def grant_access(self, repo_id: str, user: str, repo_type: str = "model") -> None:
        """The owner of the gated `repo_id` accepts `user`'s access request (the Hub's "Accept")."""
        with self.store.transaction():
            data = self.store.load(repo_type, repo_id)
            assert data is not None, repo_id
            data["granted"] = sorted({*data.get("granted", []), user})
            self.store.save(data)

    def add_oauth_app(self, redirect_uris: list[str]) -> OAuthApp:
        """Register an app that signs users in with this Hub (its client id and secret), as a Space
        with `hf_oauth: true` gets one: its OPENID_PROVIDER_URL is this Hub's `url`."""
        return self.app.oauth.register(redirect_uris)

    def force_push(self, repo_id: str, commit_id: str, branch: str = "main", repo_type: str = "model") -> None:
        """Move `branch` to `commit_id`, an older commit of the repo, as `git push --force` does on
        the Hub (the client has no call for it): the commits after it leave the branch, and the
        webhooks hear the ref update."""
        ref = f"refs/heads/{branch}"
        with self.store.transaction():
            data = self.store.load(repo_type, repo_id)
            if data is None or commit_id not in data["commits"]:
                raise ValueError(f"{repo_id} has no commit {commit_id}")
            old, data["refs"][ref] = data["refs"].get(ref), commit_id
            self.store.save(data)
        for hook in self.settings.on_commit:
            hook(data, ref, old, commit_id)

    def git_push(self, repo_id: str, files: dict[str, bytes], author: str, branch: str = "main") -> str:
        """Commit `files` on `branch` as `git push` does: without the client's checks (it refuses a
        README that is not UTF-8; git takes any bytes). The new commit's id."""
        ref = f"refs/heads/{branch}"
        with self.store.transaction():
            data = self.store.load("model", repo_id)
            if data is None:
                raise ValueError(f"no repo {repo_id}")
            old = data["refs"][ref]
            additions = {path: self.store.file_entry(content, lfs=False) for path, content in files.items()}
            new = self.store.commit(data, old, "git push", "", author, additions, [], [])
            data["refs"][ref] = new
            self.store.save(data)
        for hook in self.settings.on_commit:
            hook(data, ref, old, new)
        return new

    def put_large_file(self, repo_id: str, path: str, head: bytes, size: int, author: str) -> str:
        """Commit an LFS file of `size` bytes on main of which this Hub keeps only the first ones,
        `head` (a large checkpoint's safetensors header, without its gigabytes): its listed size is
        `size`, reading past `head` fails. The new commit's id."""
        ref = "refs/heads/main"
        with self.store.transaction():
            data = self.store.load("model", repo_id)
            if data is None:
                raise ValueError(f"no repo {repo_id}")
            old = data["refs"][ref]
            entry = self.store.file_entry_for_blob(self.store.put_blob(head), size)
            new = self.store.commit(data, old, f"Upload {path}", "", author, {path: entry}, [], [])
            data["refs"][ref] = new
            self.store.save(data)
        for hook in self.settings.on_commit:
            hook(data, ref, old, new)
        return new

    def add_webhook(self, url: str, secret: str):
        """Send repo and discussion events to `url` with `X-Webhook-Secret: secret`."""
        return self.webhooks.add(url, secret)

    def start(self) -> DevHub:
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, log_level="error", access_log=False, lifespan="on"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="devhub", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the local Hub did not start on {self.url}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
            self._server = None

    def __enter__(self) -> DevHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

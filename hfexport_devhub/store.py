"""The local Hub's storage: repos, commits, refs, blobs, discussions and tokens, on disk.

Layout under `root/`:

    tokens.json                 {token: user}
    blobs/<sha256>              file contents, content-addressed (LFS and regular alike)
    repos/<type>/<ns>/<name>.json  one repo: settings, commits, refs, discussions

Every write goes to a temporary file that is renamed over the old one, under one lock, so a
killed server never leaves a half-written repo and a restart sees everything committed before.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def now_iso() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


class StoreError(Exception):
    """An error the HTTP layer turns into a Hub-shaped reply."""

    def __init__(self, status: int, message: str, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code = status, message, code


@dataclass
class Actor:
    """Who is asking: a user name, or None for an anonymous request."""

    name: str | None

    @property
    def anonymous(self) -> bool:
        return self.name is None


class Store:
    def __init__(self, root: Path):
        self.root = Path(root)
        (self.root / "blobs").mkdir(parents=True, exist_ok=True)
        (self.root / "repos").mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        # Multipart LFS uploads in flight: oid -> {part number: bytes}.
        self._parts: dict[str, dict[int, bytes]] = {}

    @contextmanager
    def transaction(self):
        """Hold the store's lock: a read-modify-`save` inside it is atomic for other requests."""
        with self._lock:
            yield

    # ── tokens ──

    def _tokens(self) -> dict[str, str]:
        path = self.root / "tokens.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def add_user(self, name: str, token: str | None = None) -> str:
        """Register `name` with a token (a fresh one if not given) and return the token."""
        with self._lock:
            tokens = self._tokens()
            token = token or f"hf_dev_{secrets.token_hex(16)}"
            tokens[token] = name
            self._write(self.root / "tokens.json", tokens)
            return token

    def user_for(self, token: str | None) -> str | None:
        """The user a token belongs to; raises 401 for an unknown token."""
        if not token:
            return None
        user = self._tokens().get(token)
        if user is None:
            raise StoreError(401, "Invalid credentials in Authorization header")
        return user

    # ── blobs ──

    def put_blob(self, content: bytes) -> str:
        sha = hashlib.sha256(content).hexdigest()
        path = self.root / "blobs" / sha
        if not path.exists():
            tmp = path.with_suffix(f".tmp{os.getpid()}-{threading.get_ident()}")
            tmp.write_bytes(content)
            os.replace(tmp, path)
        return sha

    def has_blob(self, sha: str) -> bool:
        return (self.root / "blobs" / sha).exists()

    def blob_path(self, sha: str) -> Path:
        return self.root / "blobs" / sha

    # ── repos ──

    def _repo_path(self, repo_type: str, repo_id: str) -> Path:
        return self.root / "repos" / repo_type / f"{repo_id}.json"

    def load(self, repo_type: str, repo_id: str) -> dict | None:
        path = self._repo_path(repo_type, repo_id)
        return json.loads(path.read_text()) if path.exists() else None

    def save(self, repo: dict) -> None:
        self._write(self._repo_path(repo["type"], repo["id"]), repo)

    def _write(self, path: Path, data: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp{threading.get_ident()}")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, path)

    def list_repos(self, repo_type: str) -> list[dict]:
        """Every repo of `repo_type` (models, datasets, spaces), in no order."""
        folder = self.root / "repos" / repo_type
        return [json.loads(p.read_text()) for p in folder.rglob("*.json")] if folder.exists() else []

    def count_download(self, repo_type: str, repo_id: str) -> None:
        """One more download of the repo (its `downloads`, which `list_models` sorts by)."""
        with self._lock:
            repo = self.load(repo_type, repo_id)
            if repo is not None:
                repo["downloads"] = repo.get("downloads", 0) + 1
                self.save(repo)

    def delete_repo(self, repo: dict) -> None:
        with self._lock:
            self._repo_path(repo["type"], repo["id"]).unlink()

    def create_repo(self, repo_type: str, repo_id: str, owner: str, private: bool) -> dict:
        with self._lock:
            existing = self.load(repo_type, repo_id)
            if existing is not None:
                raise StoreError(409, "You already created this model repo")
            root_commit = _commit_id()
            repo = {
                "type": repo_type,
                "id": repo_id,
                "owner": owner,
                "private": private,
                "created_at": now_iso(),
                "refs": {"refs/heads/main": root_commit},
                "commits": {
                    root_commit: {
                        "id": root_commit,
                        "parents": [],
                        "title": "initial commit",
                        "message": "",
                        "author": owner,
                        "date": now_iso(),
                        "files": {".gitattributes": self.file_entry(_GITATTRIBUTES, lfs=False)},
                    }
                },
                "discussions": [],
            }
            self.save(repo)
            return repo

    def file_entry(self, content: bytes, lfs: bool) -> dict:
        """Store `content` and describe it as a file of a commit (regular, or LFS)."""
        sha = self.put_blob(content)
        return {"sha256": sha, "git": git_blob_sha1(content), "size": len(content), "lfs": lfs}

    def file_entry_for_blob(self, sha256: str, size: int) -> dict:
        return {"sha256": sha256, "git": None, "size": size, "lfs": True}

    def git_oid(self, info: dict) -> str:
        """The git blob id of a file entry (computed on demand for an LFS upload, then kept)."""
        if info["git"] is None:
            info["git"] = git_blob_sha1(self.blob_path(info["sha256"]).read_bytes())
        return info["git"]

    # ── multipart LFS uploads ──

    def add_part(self, oid: str, part: int, content: bytes) -> None:
        with self._lock:
            self._parts.setdefault(oid, {})[part] = content

    def take_parts(self, oid: str) -> dict[int, bytes]:
        """The parts uploaded for `oid` so far (and forget them)."""
        with self._lock:
            return self._parts.pop(oid, {})

    # ── reading ──

    def get_repo(self, repo_type: str, repo_id: str, actor: Actor, write: bool = False) -> dict:
        """The repo if `actor` may see it (and write to it, with `write`), else the Hub's errors:
        a private repo is indistinguishable from a missing one."""
        repo = self.load(repo_type, repo_id)
        if repo is None or (repo["private"] and repo["owner"] != actor.name):
            raise StoreError(404 if actor.name else 401, "Repository not found", "RepoNotFound")
        if write and actor.name != repo["owner"]:
            raise StoreError(403, f"You don't have the rights to write to {repo_id}")
        return repo

    def resolve(self, repo: dict, revision: str) -> str:
        """A branch, `refs/...` name, or (a prefix of) a commit id → commit id."""
        refs = repo["refs"]
        for candidate in (revision, f"refs/heads/{revision}", f"refs/tags/{revision}"):
            if candidate in refs:
                return refs[candidate]
        if len(revision) >= 7 and all(c in "0123456789abcdef" for c in revision):
            matches = [c for c in repo["commits"] if c.startswith(revision)]
            if len(matches) == 1:
                return matches[0]
        raise StoreError(404, f"Invalid rev id: {revision}", "RevisionNotFound")

    def files_at(self, repo: dict, commit_id: str) -> dict[str, dict]:
        return repo["commits"][commit_id]["files"]

    # ── writing ──

    def commit(
        self,
        repo: dict,
        parent: str,
        title: str,
        message: str,
        author: str,
        additions: dict[str, dict],
        deletions: list[str],
        deleted_folders: list[str],
    ) -> str:
        """A new commit on top of `parent` with the changes; returns its id (the caller moves the ref)."""
        files = dict(repo["commits"][parent]["files"])
        for path in deletions:
            if path not in files:
                raise StoreError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
            del files[path]
        for folder in deleted_folders:
            prefix = folder.rstrip("/") + "/"
            for path in [p for p in files if p.startswith(prefix)]:
                del files[path]
        files.update(additions)
        commit_id = _commit_id()
        repo["commits"][commit_id] = {
            "id": commit_id,
            "parents": [parent],
            "title": title,
            "message": message,
            "author": author,
            "date": now_iso(),
            "files": files,
        }
        return commit_id

    def ancestors(self, repo: dict, commit_id: str) -> list[str]:
        """`commit_id` and every commit it descends from, nearest first (first parents before merged ones)."""
        seen, queue = [], [commit_id]
        while queue:
            sha = queue.pop(0)
            if sha not in seen:
                seen.append(sha)
                queue += repo["commits"][sha]["parents"]
        return seen

    def is_ancestor(self, repo: dict, ancestor: str, commit_id: str) -> bool:
        return ancestor in self.ancestors(repo, commit_id)

    def merge_files(self, repo: dict, base: str, head: str) -> tuple[dict[str, dict], list[str]]:
        """A three-way merge of `head` into `base`, as the Hub merges a pull request: a path changed
        on one side only takes that side; a regular (text) file changed on both sides is merged line
        by line by git itself (`git merge-file`); anything else changed on both sides to different
        content is a conflict."""
        on_base = set(self.ancestors(repo, base))
        fork = next(c for c in self.ancestors(repo, head) if c in on_base)
        old, ours, theirs = (self.files_at(repo, c) for c in (fork, base, head))
        merged, conflicts = {}, []
        for path in sorted(set(old) | set(ours) | set(theirs)):
            o, a, b = (_content(f.get(path)) for f in (old, ours, theirs))
            if a == b or b == o:
                chosen = ours.get(path)
            elif a == o:
                chosen = theirs.get(path)
            else:
                chosen = self._merge_text(old.get(path), ours.get(path), theirs.get(path))
                if chosen is None:
                    conflicts.append(path)
                    continue
            if chosen is not None:
                merged[path] = chosen
        return merged, conflicts

    def _merge_text(self, old: dict | None, ours: dict | None, theirs: dict | None) -> dict | None:
        """git's line-by-line merge of a regular file changed on both sides, or None (a conflict)."""
        import subprocess
        import tempfile

        if ours is None or theirs is None or any(e is not None and e["lfs"] for e in (old, ours, theirs)):
            return None
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for name, entry in (("ours", ours), ("base", old), ("theirs", theirs)):
                path = Path(tmp) / name
                path.write_bytes(self.blob_path(entry["sha256"]).read_bytes() if entry else b"")
                paths.append(str(path))
            merged = subprocess.run(["git", "merge-file", "-p", "--quiet", *paths], capture_output=True)
        return self.file_entry(merged.stdout, lfs=False) if merged.returncode == 0 else None


def _content(entry: dict | None) -> str | None:
    return None if entry is None else entry["sha256"]


def git_blob_sha1(content: bytes) -> str:
    """The git object id of a regular file (`blob <size>\\0<content>`), as the Hub's `oid`/`blobId`.

    The emulator's own: the client's side compares with its own implementation, so a bug in
    either one shows as a mismatch in the tests instead of cancelling out."""
    header = f"blob {len(content)}".encode() + b"\x00"
    return hashlib.sha1(header + content).hexdigest()


def _commit_id() -> str:
    return secrets.token_hex(20)


_GITATTRIBUTES = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.onnx filter=lfs diff=lfs merge=lfs -text\n"

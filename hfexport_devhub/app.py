"""The local Hub's HTTP API: what the real `huggingface_hub` client calls, answered as the Hub does.

Routing is on the raw request path (`scope["raw_path"]`): revisions travel URL-quoted
(`refs%2Fpr%2F1`) and a decoded path would be ambiguous. Every request is kept in `requests`
(method, raw path) so tests can assert what a client asked, and how often.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlencode

import yaml
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .faults import Faults, drop_connection
from .jobs import HARDWARE, JobRunner, hardware_list
from .oauth import OAuthProvider
from .store import Actor, Store, StoreError, now_iso

Handler = Callable[..., Awaitable[Response]]
_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
_PREFIX = {"model": "", "dataset": "datasets/", "space": "spaces/"}
_REPO = r"(?P<repo>[\w.\-]+/[\w.\-]+)"
_REV = r"(?P<rev>[^/]+)"


@dataclass
class Settings:
    """Behaviour switches of one emulator instance."""

    # Answer `uploadMode: "lfs"` for files >= lfs_threshold (the client's HF_HUB_DISABLE_XET=1 path).
    # Off, every file goes inline ("regular"), which is how an emulator without Xet serves the
    # client's default, Xet-enabled path (it never reaches Xet then).
    lfs: bool = True
    lfs_threshold: int = 1 << 20
    multipart_threshold: int = 8 << 20
    chunk_size: int = 5 << 20
    faults: Faults = field(default_factory=Faults)
    # Called after every commit with (repo, ref, old sha, new sha): the webhook dispatcher hooks in here.
    on_commit: list[Callable[[dict, str, str | None, str], None]] = field(default_factory=list)
    on_discussion: list[Callable[[dict, dict, str], None]] = field(default_factory=list)
    # Extra environment of HF Jobs run here (HF_ENDPOINT back to this Hub is added by DevHub).
    job_env: dict[str, str] = field(default_factory=dict)
    # An image's entrypoint as a local command: a job whose command starts with a key runs the
    # value instead (e.g. {"hfexport": [sys.executable, "-m", "hfexport"]}); others run as given.
    job_entrypoints: dict[str, list[str]] = field(default_factory=dict)


class HubApp:
    """An ASGI app over a `Store`."""

    def __init__(self, store: Store, settings: Settings | None = None):
        self.store = store
        self.settings = settings or Settings()
        self.stats = {"requests": 0, "bytes_uploaded": 0, "multipart_uploads": 0, "basic_uploads": 0}
        self._stats_lock = threading.Lock()
        self.routes: list[tuple[str, re.Pattern, Handler]] = []
        self.jobs = JobRunner(self.settings.job_env, self.settings.job_entrypoints)
        # (method, raw path) of every request, oldest first.
        self.requests: list[tuple[str, str]] = []
        api = rf"/api/(?P<t>models|datasets|spaces)/{_REPO}"
        for method, pattern, handler in [
            ("GET", r"/api/whoami-v2", self.whoami),
            ("POST", r"/api/repos/create", self.create_repo),
            ("POST", r"/api/repos/delete", self.delete_repo),
            ("PUT", rf"{api}/settings", self.repo_settings),
            ("POST", r"/api/validate-yaml", self.validate_yaml),
            ("GET", r"/api/models", self.list_models),
            ("GET", rf"{api}", self.repo_info),
            ("GET", rf"{api}/revision/{_REV}", self.repo_info),
            ("GET", rf"{api}/tree/{_REV}(?:/(?P<path>.*))?", self.tree),
            ("POST", rf"{api}/paths-info/{_REV}", self.paths_info),
            ("GET", rf"{api}/refs", self.refs),
            ("GET", rf"{api}/commits/{_REV}", self.commits),
            ("POST", rf"{api}/branch/{_REV}", self.create_branch),
            ("POST", rf"{api}/preupload/{_REV}", self.preupload),
            ("POST", rf"{api}/commit/{_REV}", self.commit),
            ("GET", rf"{api}/xet-write-token/{_REV}", self.no_xet),
            ("GET", rf"{api}/xet-read-token/{_REV}", self.no_xet),
            ("GET", rf"{api}/discussions", self.list_discussions),
            ("POST", rf"{api}/discussions", self.create_discussion),
            ("GET", rf"{api}/discussions/(?P<num>\d+)", self.discussion_details),
            ("POST", rf"{api}/discussions/(?P<num>\d+)/comment", self.comment),
            ("POST", rf"{api}/discussions/(?P<num>\d+)/status", self.change_status),
            ("POST", rf"{api}/discussions/(?P<num>\d+)/title", self.rename),
            ("POST", rf"{api}/discussions/(?P<num>\d+)/comment/(?P<comment>[0-9a-f]+)/edit", self.edit_comment),
            ("POST", rf"{api}/discussions/(?P<num>\d+)/merge", self.merge),
            ("POST", rf"/(?P<prefix>datasets/|spaces/)?{_REPO}\.git/info/lfs/objects/batch", self.lfs_batch),
            ("PUT", r"/_lfs/(?P<oid>[0-9a-f]{64})(?:/(?P<part>\d+))?", self.lfs_put),
            ("POST", r"/_lfs/(?P<oid>[0-9a-f]{64})/complete", self.lfs_complete),
            ("POST", r"/_lfs/(?P<oid>[0-9a-f]{64})/verify", self.lfs_verify),
            ("GET", r"/api/jobs/hardware", self.jobs_hardware),
            ("POST", r"/api/jobs/(?P<ns>[\w.\-]+)", self.run_job),
            ("GET", r"/api/jobs/(?P<ns>[\w.\-]+)", self.list_jobs),
            ("GET", r"/api/jobs/(?P<ns>[\w.\-]+)/(?P<job_id>[0-9a-f]+)", self.inspect_job),
            ("GET", r"/api/jobs/(?P<ns>[\w.\-]+)/(?P<job_id>[0-9a-f]+)/logs", self.job_logs),
            ("POST", r"/api/jobs/(?P<ns>[\w.\-]+)/(?P<job_id>[0-9a-f]+)/cancel", self.cancel_job),
            ("GET", rf"/{_REPO}/discussions/(?P<num>\d+)", self.discussion_page),
            ("HEAD", rf"/(?P<prefix>datasets/|spaces/)?{_REPO}/resolve/{_REV}/(?P<path>.+)", self.resolve_file),
            ("GET", rf"/(?P<prefix>datasets/|spaces/)?{_REPO}/resolve/{_REV}/(?P<path>.+)", self.resolve_file),
        ]:
            self.routes.append((method, re.compile(pattern + r"/?$"), handler))
        # "Sign in with Hugging Face" for the apps registered here (`DevHub.add_oauth_app`).
        self.oauth = OAuthProvider(store)
        for method, pattern, handler in self.oauth.routes():
            self.routes.append((method, re.compile(pattern + r"/?$"), handler))
        # Last: `/{namespace}/{name}` would match any two-part path above (`/.well-known/openid-…`).
        self.routes.append(("GET", re.compile(rf"/{_REPO}/?$"), self.repo_page))

    # ── ASGI plumbing ──

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        raw_path = scope.get("raw_path", scope["path"].encode()).decode("latin-1").split("?", 1)[0]
        with self._stats_lock:
            self.stats["requests"] += 1
            self.requests.append((scope["method"], raw_path))
        fault = await self.settings.faults.before(raw_path)
        if fault is not None:
            await fault(scope, receive, send)
            return
        response = await self._dispatch(request, raw_path)
        if self.settings.faults.drop_after(raw_path):
            await drop_connection(send)  # the request took effect; the client never hears so
            return
        await response(scope, receive, send)

    async def _dispatch(self, request: Request, raw_path: str) -> Response:
        method = request.method
        for route_method, pattern, handler in self.routes:
            if route_method != method:
                continue
            match = pattern.match(raw_path)
            if match:
                params = {k: unquote(v) if v is not None else None for k, v in match.groupdict().items()}
                try:
                    return await handler(request, **params)
                except StoreError as e:
                    return _error(e.status, e.message, e.code)
        return _error(404, f"Not found: {method} {raw_path}")

    # ── helpers ──

    def actor(self, request: Request) -> Actor:
        auth = request.headers.get("authorization", "")
        token = auth[7:].strip() if auth.lower().startswith("bearer ") else None
        return Actor(self.store.user_for(token))

    def signed_in(self, request: Request) -> Actor:
        """The actor of a request that must carry a valid token (401 otherwise, as the Hub answers)."""
        actor = self.actor(request)
        if actor.anonymous:
            raise StoreError(401, "Invalid credentials in Authorization header")
        return actor

    def base_url(self, request: Request) -> str:
        return str(request.base_url).rstrip("/")

    def repo(self, request: Request, t: str, repo: str, write: bool = False) -> dict:
        return self.store.get_repo(_TYPES[t], repo, self.actor(request), write=write)

    def _entry(self, path: str, info: dict) -> dict:
        entry = {"type": "file", "path": path, "size": info["size"], "oid": info["git"] or info["sha256"]}
        if info["lfs"]:
            entry["lfs"] = {"oid": info["sha256"], "size": info["size"], "pointerSize": 134}
        return entry

    # ── account and repos ──

    async def whoami(self, request: Request) -> Response:
        actor = self.signed_in(request)
        return JSONResponse(
            {
                "type": "user",
                "id": actor.name,
                "name": actor.name,
                "fullname": actor.name,
                "email": None,
                "orgs": [],
                "auth": {"type": "access_token", "accessToken": {"displayName": "devhub", "role": "write"}},
            }
        )

    async def create_repo(self, request: Request) -> Response:
        actor = self.signed_in(request)
        body = await request.json()
        namespace = body.get("organization") or actor.name
        repo_type = body.get("type") or "model"
        repo_id = f"{namespace}/{body['name']}"
        url = f"{self.base_url(request)}/{_PREFIX[repo_type]}{repo_id}"
        if namespace != actor.name:
            return _error(403, f"You don't have the rights to create a repo under {namespace}")
        try:
            private = bool(body.get("private")) or body.get("visibility") == "private"
            self.store.create_repo(repo_type, repo_id, actor.name, private)
        except StoreError as e:
            return JSONResponse({"error": e.message, "url": url}, status_code=e.status)
        return JSONResponse({"url": url, "name": repo_id, "id": repo_id})

    async def delete_repo(self, request: Request) -> Response:
        body = await request.json()
        repo_id = f"{body.get('organization') or self.actor(request).name}/{body['name']}"
        repo = self.store.get_repo(body.get("type") or "model", repo_id, self.actor(request), write=True)
        self.store.delete_repo(repo)
        return JSONResponse({})

    async def repo_settings(self, request: Request, t: str, repo: str) -> Response:
        with self.store.transaction():
            data = self.repo(request, t, repo, write=True)
            body = await request.json()
            if "private" in body:
                data["private"] = bool(body["private"])
            if "visibility" in body:
                data["private"] = body["visibility"] == "private"
            if "gated" in body:  # as the Hub: "auto", "manual" or false, nothing else
                if body["gated"] not in ("auto", "manual", False):
                    return _error(400, "gated must be one of 'auto', 'manual' or false")
                data["gated"] = body["gated"]
            self.store.save(data)
        return JSONResponse({})

    async def validate_yaml(self, request: Request) -> Response:
        body = await request.json()
        content = body.get("content", "")
        match = re.match(r"^---\n(.*?)\n---", content, re.S)
        if match:
            try:
                data = yaml.safe_load(match.group(1))
            except yaml.YAMLError as e:
                return JSONResponse({"errors": [{"message": f"Invalid YAML: {e}"}]}, status_code=400)
            if data is not None and not isinstance(data, dict):
                return JSONResponse({"errors": [{"message": "metadata must be a mapping"}]}, status_code=400)
        return JSONResponse({"errors": [], "warnings": []})

    async def list_models(self, request: Request) -> Response:
        """`HfApi.list_models`: the public models (and the caller's private ones) by `author`, a
        `search` in their ids, every `filter` tag (the card's tags and its pipeline_tag), sorted by
        `sort` (downloads, lastModified, createdAt, likes) descending, `limit` of them, in pages of
        `PAGE` linked by a `Link: <…>; rel="next"` header as the Hub pages them."""
        query = request.query_params
        actor = self.actor(request)
        author, search, tags = query.get("author"), query.get("search"), query.getlist("filter")
        rows = []
        for data in self.store.list_repos("model"):
            if data["private"] and data["owner"] != actor.name:
                continue
            if author and data["id"].split("/")[0] != author:
                continue
            if search and search.lower() not in data["id"].lower():
                continue
            sha = self.store.resolve(data, "main")
            commit = data["commits"][sha]
            card = _card_data(self.store, commit["files"].get("README.md"))
            labels = {*(card.get("tags") or []), *([card["pipeline_tag"]] if card.get("pipeline_tag") else [])}
            if any(tag not in labels for tag in tags):
                continue
            rows.append({**_model_summary(data, sha, commit, card), "tags": sorted(labels)})
        if (sort := query.get("sort")) in ("downloads", "lastModified", "createdAt", "likes"):
            rows.sort(key=lambda r: (r[sort], r["id"]), reverse=True)
        else:
            rows.sort(key=lambda r: r["id"])
        if (limit := query.get("limit")) and limit.isdigit():
            rows = rows[: int(limit)]
        start = int(query.get("cursor", "0") or 0)
        page = rows[start : start + self.PAGE]
        headers = {}
        if start + self.PAGE < len(rows):
            params = [(k, v) for k, v in query.multi_items() if k != "cursor"] + [("cursor", str(start + self.PAGE))]
            headers["Link"] = f'<{self.base_url(request)}/api/models?{urlencode(params)}>; rel="next"'
        return JSONResponse(page, headers=headers)

    # Models per page of `list_models`, as the Hub pages them (its page size; a test may lower it).
    PAGE = 1000

    async def repo_info(self, request: Request, t: str, repo: str, rev: str = "main") -> Response:
        data = self.repo(request, t, repo)
        sha = self.store.resolve(data, rev)
        commit = data["commits"][sha]
        files = commit["files"]
        blobs = request.query_params.get("blobs", "").lower() in ("1", "true")
        card = _card_data(self.store, files.get("README.md"))
        return JSONResponse(
            {
                **_model_summary(data, sha, commit, card),
                "gated": data.get("gated", False),
                "disabled": False,
                "tags": list(card.get("tags") or []),
                "cardData": card or None,
                "library_name": card.get("library_name"),
                # Sizes and content ids only when asked (`blobs=true`, the client's files_metadata), as on the Hub.
                "siblings": [
                    {
                        "rfilename": path,
                        **(
                            {
                                "size": info["size"],
                                "blobId": info["git"] or info["sha256"],
                                **(
                                    {"lfs": {"sha256": info["sha256"], "size": info["size"], "pointerSize": 134}}
                                    if info["lfs"]
                                    else {}
                                ),
                            }
                            if blobs
                            else {}
                        ),
                    }
                    for path, info in sorted(files.items())
                ],
                "usedStorage": sum(info["size"] for info in files.values()),
            }
        )

    async def tree(self, request: Request, t: str, repo: str, rev: str, path: str | None = None) -> Response:
        data = self.repo(request, t, repo)
        files = self.store.files_at(data, self.store.resolve(data, rev))
        recursive = request.query_params.get("recursive", "false").lower() in ("1", "true")
        prefix = (path or "").strip("/")
        prefix = prefix + "/" if prefix else ""
        if prefix and not any(p.startswith(prefix) for p in files):
            return _error(404, f"{path} does not exist", "EntryNotFound")
        entries, folders = [], set()
        for file_path, info in sorted(files.items()):
            if not file_path.startswith(prefix):
                continue
            rest = file_path[len(prefix) :]
            parts = rest.split("/")
            for depth in range(1, len(parts)):
                folder = prefix + "/".join(parts[:depth])
                if (recursive or depth == 1) and folder not in folders:
                    folders.add(folder)
                    entries.append({"type": "directory", "path": folder, "oid": _folder_oid(folder), "size": 0})
            if recursive or len(parts) == 1:
                entries.append(self._entry(file_path, info))
        return JSONResponse(entries)

    async def paths_info(self, request: Request, t: str, repo: str, rev: str) -> Response:
        data = self.repo(request, t, repo)
        files = self.store.files_at(data, self.store.resolve(data, rev))
        form = parse_qs((await request.body()).decode())
        result = []
        for path in form.get("paths", []):
            path = path.strip("/")
            if path in files:
                result.append(self._entry(path, files[path]))
            elif any(p.startswith(path + "/") for p in files):
                result.append({"type": "directory", "path": path, "oid": _folder_oid(path), "size": 0})
        return JSONResponse(result)

    async def refs(self, request: Request, t: str, repo: str) -> Response:
        data = self.repo(request, t, repo)
        include_prs = request.query_params.get("include_prs") in ("1", "true")
        out = {"branches": [], "tags": [], "converts": [], "pullRequests": [] if include_prs else None}
        for ref, sha in sorted(data["refs"].items()):
            if ref.startswith("refs/heads/"):
                out["branches"].append({"name": ref[11:], "ref": ref, "targetCommit": sha})
            elif ref.startswith("refs/tags/"):
                out["tags"].append({"name": ref[10:], "ref": ref, "targetCommit": sha})
            elif ref.startswith("refs/pr/") and include_prs:
                out["pullRequests"].append({"name": ref[5:], "ref": ref, "targetCommit": sha})
        if not include_prs:
            out.pop("pullRequests")
        return JSONResponse(out)

    async def commits(self, request: Request, t: str, repo: str, rev: str) -> Response:
        data = self.repo(request, t, repo)
        sha = self.store.resolve(data, rev)
        history = []
        while sha:
            commit = data["commits"][sha]
            history.append(
                {
                    "id": sha,
                    "title": commit["title"],
                    "message": commit["message"],
                    "authors": [{"user": commit["author"]}],
                    "date": commit["date"],
                }
            )
            sha = commit["parents"][0] if commit["parents"] else None
        return JSONResponse(history)

    async def create_branch(self, request: Request, t: str, repo: str, rev: str) -> Response:
        with self.store.transaction():
            data = self.repo(request, t, repo, write=True)
            body = await request.json() if (await request.body()) else {}
            start = self.store.resolve(data, body.get("startingPoint") or "main")
            ref = f"refs/heads/{rev}"
            if ref in data["refs"]:
                return _error(409, "Reference already exists")
            data["refs"][ref] = start
            self.store.save(data)
        return JSONResponse({})

    # ── uploads and commits ──

    async def no_xet(self, request: Request, **_) -> Response:
        return _error(501, "This local Hub does not speak Xet: set HF_HUB_DISABLE_XET=1, or start it with lfs off")

    async def preupload(self, request: Request, t: str, repo: str, rev: str) -> Response:
        data = self.repo(request, t, repo)
        body = await request.json()
        create_pr = request.query_params.get("create_pr") in ("1", "true")
        try:
            files = self.store.files_at(data, self.store.resolve(data, rev))
        except StoreError:
            if not create_pr:
                raise
            files = {}
        out = []
        for item in body.get("files", []):
            _check_path(item.get("path"))
            sample = base64.b64decode(item.get("sample", ""))
            binary = b"\0" in sample
            lfs = self.settings.lfs and (item["size"] >= self.settings.lfs_threshold or binary)
            existing = files.get(item["path"])
            oid = None
            if existing is not None:
                oid = existing["sha256"] if lfs else self.store.git_oid(existing)
            out.append(
                {"path": item["path"], "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False, "oid": oid}
            )
        return JSONResponse({"files": out, "commitOid": self.store.resolve(data, rev) if files else None})

    async def commit(self, request: Request, t: str, repo: str, rev: str) -> Response:
        actor = self.signed_in(request)
        create_pr = request.query_params.get("create_pr") in ("1", "true")
        lines = [json.loads(line) for line in (await request.body()).decode().splitlines() if line.strip()]
        header = next((line["value"] for line in lines if line.get("key") == "header"), {})
        with self.store.transaction():
            data = self.repo(request, t, repo)
            additions, deletions, deleted_folders = {}, [], []
            for line in lines:
                key, value = line.get("key"), line.get("value", {})
                if key in ("file", "lfsFile", "deletedFile", "deletedFolder"):
                    _check_path(value.get("path"))
                if key == "file":
                    content = (
                        base64.b64decode(value["content"])
                        if value.get("encoding", "base64") == "base64"
                        else value["content"].encode()
                    )
                    additions[value["path"]] = self.store.file_entry(content, lfs=False)
                    with self._stats_lock:
                        self.stats["bytes_uploaded"] += len(content)
                elif key == "lfsFile":
                    if not self.store.has_blob(value["oid"]):
                        return _error(422, f"LFS object {value['oid']} was never uploaded (path {value['path']})")
                    additions[value["path"]] = self.store.file_entry_for_blob(value["oid"], value["size"])
                elif key == "deletedFile":
                    deletions.append(value["path"])
                elif key == "deletedFolder":
                    deleted_folders.append(value["path"])
            pr = None
            if create_pr:
                base_ref = f"refs/heads/{rev}"
                if base_ref not in data["refs"]:
                    raise StoreError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
                # With a parent commit the PR branches from it (the client's documented contract),
                # otherwise from the base's head at this moment.
                parent = data["refs"][base_ref]
                if header.get("parentCommit"):
                    parent = self.store.resolve(data, header["parentCommit"])
                    if not self.store.is_ancestor(data, parent, data["refs"][base_ref]):
                        return _error(412, f"Commit {header['parentCommit']} is not on {rev}.")
                pr = self._new_discussion(
                    data, actor, header.get("summary", "PR"), header.get("description", ""), True, rev, head=parent
                )
                ref = f"refs/pr/{pr['num']}"
            else:
                ref = rev if rev.startswith("refs/") else f"refs/heads/{rev}"
                if ref not in data["refs"]:
                    raise StoreError(404, f"Invalid rev id: {rev}", "RevisionNotFound")
                parent = data["refs"][ref]
                if ref.startswith("refs/pr/"):
                    pr = self._discussion(data, int(ref.split("/")[-1]))
                    if pr["status"] != "open" and pr["status"] != "draft":
                        return _error(403, f"Pull request #{pr['num']} is {pr['status']}: reopen it to push to it")
                    if actor.name not in (pr["author"], data["owner"]):
                        return _error(403, "Only the PR's author or the repo's owner can push to it")
                elif actor.name != data["owner"]:
                    return _error(403, f"You don't have the rights to write to {data['id']}")
                if header.get("parentCommit") and header["parentCommit"] != parent:
                    return _error(412, "A commit has happened since. Please refresh and try again.")
            commit_id = self.store.commit(
                data,
                parent,
                header.get("summary", ""),
                header.get("description", ""),
                actor.name,
                additions,
                deletions,
                deleted_folders,
            )
            old = data["refs"].get(ref)
            data["refs"][ref] = commit_id
            if pr is not None:
                pr["events"].append(
                    _event("commit", actor.name, {"subject": header.get("summary", ""), "oid": commit_id})
                )
            self.store.save(data)
        for hook in self.settings.on_commit:
            hook(data, ref, old, commit_id)
        if create_pr and pr is not None:
            for hook in self.settings.on_discussion:
                hook(data, pr, "create")
        base = self.base_url(request)
        prefix = _PREFIX[data["type"]]
        return JSONResponse(
            {
                "success": True,
                "commitOid": commit_id,
                "commitUrl": f"{base}/{prefix}{data['id']}/commit/{commit_id}",
                "pullRequestUrl": f"{base}/{prefix}{data['id']}/discussions/{pr['num']}" if pr and create_pr else None,
            }
        )

    # ── LFS ──

    async def lfs_batch(self, request: Request, repo: str, prefix: str | None = None) -> Response:
        repo_type = {"datasets/": "dataset", "spaces/": "space"}.get(prefix or "", "model")
        actor = self.signed_in(request)
        self.store.get_repo(repo_type, repo, actor)
        body = await request.json()
        base = self.base_url(request)
        objects, multipart = [], False
        for obj in body.get("objects", []):
            oid, size = obj["oid"], obj["size"]
            entry = {"oid": oid, "size": size, "authenticated": True}
            if not self.store.has_blob(oid):
                verify = {"href": f"{base}/_lfs/{oid}/verify", "header": {}}
                if size >= self.settings.multipart_threshold and "multipart" in body.get("transfers", []):
                    multipart = True
                    chunk = self.settings.chunk_size
                    parts = -(-size // chunk)
                    header = {
                        "chunk_size": str(chunk),
                        **{str(i): f"{base}/_lfs/{oid}/{i}" for i in range(1, parts + 1)},
                    }
                    entry["actions"] = {
                        "upload": {"href": f"{base}/_lfs/{oid}/complete", "header": header},
                        "verify": verify,
                    }
                else:
                    entry["actions"] = {"upload": {"href": f"{base}/_lfs/{oid}"}, "verify": verify}
            objects.append(entry)
        return JSONResponse(
            {"transfer": "multipart" if multipart else "basic", "objects": objects, "hash_algo": "sha256"}
        )

    async def lfs_put(self, request: Request, oid: str, part: str | None = None) -> Response:
        content = await request.body()
        with self._stats_lock:
            self.stats["bytes_uploaded"] += len(content)
        if part is None:
            if self.store.put_blob(content) != oid:
                return _error(400, "Uploaded content does not match its sha256 oid")
            with self._stats_lock:
                self.stats["basic_uploads"] += 1
            return Response(status_code=200)
        self.store.add_part(oid, int(part), content)
        return Response(status_code=200, headers={"ETag": f'"{oid[:16]}-{part}"'})

    async def lfs_complete(self, request: Request, oid: str) -> Response:
        body = await request.json()
        parts = self.store.take_parts(oid)
        try:
            content = b"".join(parts[p["partNumber"]] for p in sorted(body["parts"], key=lambda p: p["partNumber"]))
        except KeyError as e:
            return _error(400, f"Part {e} was never uploaded")
        if self.store.put_blob(content) != oid:
            return _error(400, "Assembled content does not match its sha256 oid")
        with self._stats_lock:
            self.stats["multipart_uploads"] += 1
        return JSONResponse({})

    async def lfs_verify(self, request: Request, oid: str) -> Response:
        if not self.store.has_blob(oid):
            return _error(404, f"LFS object {oid} not found")
        return JSONResponse({})

    # ── downloads ──

    async def resolve_file(
        self, request: Request, repo: str, rev: str, path: str, prefix: str | None = None
    ) -> Response:
        repo_type = {"datasets/": "dataset", "spaces/": "space"}.get(prefix or "", "model")
        actor = self.actor(request)
        data = self.store.get_repo(repo_type, repo, actor)
        if data.get("gated") and actor.name != data["owner"] and actor.name not in data.get("granted", []):
            # As the Hub: a gated repo's card and metadata are public, its files only for those granted.
            status = 403 if actor.name else 401
            said = f"Access to model {repo} is restricted and you are not in the authorized list."
            return _error(status, said, "GatedRepo")
        sha = self.store.resolve(data, rev)
        files = self.store.files_at(data, sha)
        if path not in files:
            return _error(404, f"{path} does not exist at {rev}", "EntryNotFound", {"X-Repo-Commit": sha})
        info = files[path]
        etag = f'"{info["sha256"] if info["lfs"] else self.store.git_oid(info)}"'
        headers = {"X-Repo-Commit": sha, "ETag": etag, "Content-Length": str(info["size"]), "Accept-Ranges": "bytes"}
        if info["lfs"]:
            headers.update({"X-Linked-Etag": f'"{info["sha256"]}"', "X-Linked-Size": str(info["size"])})
        if request.method == "HEAD":
            return Response(status_code=200, headers=headers)
        if path == "config.json" and repo_type == "model":  # the file the Hub counts a model's downloads by
            self.store.count_download(repo_type, repo)
        from starlette.responses import FileResponse

        return FileResponse(
            self.store.blob_path(info["sha256"]), headers=headers, media_type="application/octet-stream"
        )

    # ── discussions and pull requests ──

    def _discussion(self, data: dict, num: int) -> dict:
        for d in data["discussions"]:
            if d["num"] == num:
                return d
        raise StoreError(404, f"Discussion #{num} not found")

    def _new_discussion(
        self,
        data: dict,
        actor: Actor,
        title: str,
        description: str,
        is_pr: bool,
        base: str = "main",
        head: str | None = None,
    ) -> dict:
        num = len(data["discussions"]) + 1
        discussion = {
            "num": num,
            "title": title,
            "status": "draft" if is_pr else "open",
            "isPullRequest": is_pr,
            "author": actor.name,
            "createdAt": now_iso(),
            "base": f"refs/heads/{base}" if not base.startswith("refs/") else base,
            "events": [_event("comment", actor.name, _comment_data(description or ""))],
        }
        data["discussions"].append(discussion)
        if is_pr:
            head = head or data["refs"].get(discussion["base"]) or data["refs"]["refs/heads/main"]
            data["refs"][f"refs/pr/{num}"] = head
        return discussion

    def _summary(self, data: dict, d: dict) -> dict:
        return {
            "num": d["num"],
            "title": d["title"],
            "status": d["status"],
            "isPullRequest": d["isPullRequest"],
            "createdAt": d["createdAt"],
            "author": {"name": d["author"], "type": "user"},
            "repo": {"name": data["id"], "type": data["type"]},
            "numComments": sum(1 for e in d["events"] if e["type"] == "comment"),
            "pinned": False,
        }

    async def list_discussions(self, request: Request, t: str, repo: str) -> Response:
        data = self.repo(request, t, repo)
        q = request.query_params
        items = list(reversed(data["discussions"]))  # newest first, as the Hub lists them
        if q.get("type") in ("pull_request", "discussion"):
            items = [d for d in items if d["isPullRequest"] == (q["type"] == "pull_request")]
        if q.get("status") == "open":
            items = [d for d in items if d["status"] in ("open", "draft")]
        elif q.get("status") == "closed":
            items = [d for d in items if d["status"] in ("closed", "merged")]
        if q.get("author"):
            items = [d for d in items if d["author"] == q["author"]]
        page, per_page = int(q.get("p", 0)), 50
        chunk = items[page * per_page : (page + 1) * per_page]
        return JSONResponse(
            {
                "discussions": [self._summary(data, d) for d in chunk],
                "count": len(items),
                "start": page * per_page,
                "numTotalItems": len(items),
            }
        )

    async def create_discussion(self, request: Request, t: str, repo: str) -> Response:
        actor = self.signed_in(request)
        body = await request.json()
        with self.store.transaction():
            data = self.repo(request, t, repo)
            d = self._new_discussion(
                data, actor, body["title"], body.get("description", ""), bool(body.get("pullRequest"))
            )
            self.store.save(data)
        for hook in self.settings.on_discussion:
            hook(data, d, "create")
        return JSONResponse(
            {
                "num": d["num"],
                "pullRequest": d["isPullRequest"],
                "url": f"{self.base_url(request)}/{data['id']}/discussions/{d['num']}",
            }
        )

    async def discussion_details(self, request: Request, t: str, repo: str, num: str) -> Response:
        data = self.repo(request, t, repo)
        d = self._discussion(data, int(num))
        details = self._summary(data, d)
        details["events"] = d["events"]
        if d["isPullRequest"]:
            details["changes"] = {
                "base": d["base"],
                **({"mergeCommitId": d["mergeCommitId"]} if d.get("mergeCommitId") else {}),
            }
            details["filesWithConflicts"] = (
                self.store.merge_files(data, data["refs"][d["base"]], data["refs"][f"refs/pr/{d['num']}"])[1]
                if d["status"] in ("open", "draft")
                else []
            )
            details["diff"] = ""
        return JSONResponse(details)

    async def discussion_page(self, request: Request, repo: str, num: str) -> Response:
        """A model's PR or discussion as a browser opens the link a client prints: its title,
        status and comments, on a plain HTML page (the Hub's is richer; the facts are these)."""
        import html

        data = self.repo(request, "models", repo)
        d = self._discussion(data, int(num))
        e = html.escape
        events = "".join(
            f"<li><b>{e(ev['author']['name'])}</b> ({e(ev['type'])}): "
            f"<pre>{e(ev['data'].get('latest', {}).get('raw', '') or ev['data'].get('status', '') or '')}</pre></li>"
            for ev in d["events"]
        )
        kind = "Pull request" if d["isPullRequest"] else "Discussion"
        page = (
            f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{e(d["title"])}</title></head><body>'
            f"<h1>{e(d['title'])}</h1><p>{kind} #{d['num']} on {e(data['id'])}: {e(d['status'])}</p>"
            f"<ol>{events}</ol></body></html>"
        )
        return Response(page, media_type="text/html")

    async def repo_page(self, request: Request, repo: str) -> Response:
        """A model repo as a browser opens the URL `push` prints: its files on `main` (with their
        sizes, each linked to its download) and its pull requests and discussions, on a plain HTML
        page. A repo the browser may not see is a 404, as on the Hub."""
        import html

        data = self.repo(request, "models", repo)
        files = self.store.files_at(data, self.store.resolve(data, "main"))
        e = html.escape
        rows = "".join(
            f'<li><a href="/{e(repo)}/resolve/main/{e(path)}">{e(path)}</a> ({info["size"]:,} bytes)</li>'
            for path, info in sorted(files.items())
        )
        threads = "".join(
            f'<li><a href="/{e(repo)}/discussions/{d["num"]}">#{d["num"]} {e(d["title"])}</a> '
            f"({'pull request' if d['isPullRequest'] else 'discussion'}, {e(d['status'])})</li>"
            for d in reversed(data["discussions"])
        )
        page = (
            f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{e(data["id"])}</title></head><body>'
            f"<h1>{e(data['id'])}</h1><h2>Files on main</h2><ul>{rows}</ul>"
            f"<h2>Pull requests and discussions</h2><ul>{threads or '<li>none</li>'}</ul></body></html>"
        )
        return Response(page, media_type="text/html")

    async def comment(self, request: Request, t: str, repo: str, num: str) -> Response:
        actor = self.signed_in(request)
        body = await request.json()
        with self.store.transaction():
            data = self.repo(request, t, repo)
            d = self._discussion(data, int(num))
            event = _event("comment", actor.name, _comment_data(body["comment"]))
            d["events"].append(event)
            self.store.save(data)
        return JSONResponse({"newMessage": event})

    async def change_status(self, request: Request, t: str, repo: str, num: str) -> Response:
        actor = self.actor(request)
        body = await request.json()
        with self.store.transaction():
            data = self.repo(request, t, repo)
            d = self._discussion(data, int(num))
            if actor.name not in (d["author"], data["owner"]):
                return _error(403, "Only the author or the repo's owner can change the status")
            d["status"] = body["status"]
            event = _event("status-change", actor.name, {"status": body["status"]})
            d["events"].append(event)
            if body.get("comment"):
                d["events"].append(_event("comment", actor.name, _comment_data(body["comment"])))
            self.store.save(data)
        return JSONResponse({"newStatus": event})

    async def rename(self, request: Request, t: str, repo: str, num: str) -> Response:
        """The Hub's rule: the author or the repo's owner may retitle a discussion or PR."""
        actor = self.signed_in(request)
        title = (await request.json()).get("title")
        if not isinstance(title, str) or not 3 <= len(title.strip()) <= 200:
            return _error(400, "A title is 3 to 200 characters")
        with self.store.transaction():
            data = self.repo(request, t, repo)
            d = self._discussion(data, int(num))
            if actor.name not in (d["author"], data["owner"]):
                return _error(403, "Only the author or the repo's owner can change the title")
            event = _event("title-change", actor.name, {"from": d["title"], "to": title})
            d["title"] = title
            d["events"].append(event)
            self.store.save(data)
        return JSONResponse({"newTitle": event})

    async def edit_comment(self, request: Request, t: str, repo: str, num: str, comment: str) -> Response:
        """The Hub's rule: a comment is edited by its author alone."""
        actor = self.signed_in(request)
        content = (await request.json()).get("content")
        if not isinstance(content, str) or not content:
            return _error(400, "A comment needs content")
        with self.store.transaction():
            data = self.repo(request, t, repo)
            d = self._discussion(data, int(num))
            event = next((e for e in d["events"] if e["id"] == comment and e["type"] == "comment"), None)
            if event is None:
                return _error(404, "Comment not found")
            if event["author"]["name"] != actor.name:
                return _error(403, "Only the comment's author can edit it")
            event["data"]["edited"] = True
            event["data"]["numEdits"] += 1
            event["data"]["latest"] = {"raw": content, "html": content, "updatedAt": now_iso()}
            self.store.save(data)
        return JSONResponse({"updatedComment": event})

    async def merge(self, request: Request, t: str, repo: str, num: str) -> Response:
        with self.store.transaction():
            data = self.repo(request, t, repo, write=True)
            d = self._discussion(data, int(num))
            if not d["isPullRequest"] or d["status"] not in ("open", "draft"):
                return _error(400, "Only an open pull request can be merged")
            head = data["refs"][f"refs/pr/{d['num']}"]
            base_head = data["refs"][d["base"]]
            files, conflicts = self.store.merge_files(data, base_head, head)
            if conflicts:
                return _error(409, f"Pull request #{d['num']} has conflicts with {d['base']}: {', '.join(conflicts)}")
            merged = self.store.commit(data, base_head, f"Merge PR #{d['num']}", d["title"], data["owner"], {}, [], [])
            data["commits"][merged]["files"] = files
            data["commits"][merged]["parents"].append(head)
            old = data["refs"][d["base"]]
            data["refs"][d["base"]] = merged
            d["status"] = "merged"
            d["mergeCommitId"] = merged
            d["events"].append(_event("status-change", data["owner"], {"status": "merged"}))
            self.store.save(data)
        for hook in self.settings.on_commit:
            hook(data, d["base"], old, merged)
        return JSONResponse({})

    # ── HF Jobs ──

    def _job(self, request: Request, ns: str, job_id: str):
        actor = self.actor(request)
        job = self.jobs.jobs.get(job_id)
        if job is None or job.owner != ns or actor.name != ns:
            raise StoreError(404, f"Job {job_id} not found")
        return job

    async def run_job(self, request: Request, ns: str) -> Response:
        actor = self.signed_in(request)
        if actor.name != ns:
            return _error(403, f"You cannot run jobs under {ns}")
        spec = await request.json()
        if not spec.get("dockerImage") and not spec.get("spaceId"):
            return _error(400, "a job needs dockerImage or spaceId")
        if spec.get("flavor") not in {h["name"] for h in HARDWARE}:
            return _error(400, f"unknown flavor {spec.get('flavor')!r}")
        job = self.jobs.start(actor.name, spec)
        return JSONResponse(job.info(self.base_url(request)))

    async def jobs_hardware(self, request: Request) -> Response:
        return JSONResponse(hardware_list())

    async def list_jobs(self, request: Request, ns: str) -> Response:
        actor = self.actor(request)
        return JSONResponse(
            [j.info(self.base_url(request)) for j in self.jobs.jobs.values() if j.owner == ns == actor.name]
        )

    async def inspect_job(self, request: Request, ns: str, job_id: str) -> Response:
        return JSONResponse(self._job(request, ns, job_id).info(self.base_url(request)))

    async def job_logs(self, request: Request, ns: str, job_id: str) -> Response:
        job = self._job(request, ns, job_id)
        body = "".join(f"data: {json.dumps({'timestamp': job.created_at, 'data': line})}\n\n" for line in job.logs)
        return Response(body, media_type="text/event-stream")

    async def cancel_job(self, request: Request, ns: str, job_id: str) -> Response:
        self.jobs.cancel(self._job(request, ns, job_id))
        return JSONResponse({})


def _event(kind: str, author: str, data: dict) -> dict:
    import secrets

    return {
        "id": secrets.token_hex(12),
        "type": kind,
        "createdAt": now_iso(),
        "author": {"name": author, "type": "user"},
        "data": data,
    }


def _comment_data(text: str) -> dict:
    return {
        "edited": False,
        "hidden": False,
        "latest": {"raw": text, "html": text, "updatedAt": now_iso()},
        "numEdits": 0,
    }


def _check_path(path: object) -> None:
    """Refuse what the Hub refuses in a commit: no path, an absolute one, `.`/`..`/empty segments,
    a backslash, or anything under `.git/` (a folder deletion may end in one `/`)."""
    if isinstance(path, str) and path.endswith("/"):
        path = path[:-1]
    parts = path.split("/") if isinstance(path, str) else []
    if (
        not parts
        or path.startswith("/")
        or "\\" in path
        or "\x00" in path
        or any(part in ("", ".", "..") for part in parts)
        or parts[0] == ".git"
    ):
        raise StoreError(400, f"Invalid path in commit: {path!r}", "InvalidPath")


def _folder_oid(path: str) -> str:
    import hashlib

    return hashlib.sha1(path.encode()).hexdigest()


def _model_summary(data: dict, sha: str, commit: dict, card: dict) -> dict:
    """What both `list_models` and `model_info` say of a model at commit `sha`."""
    return {
        "_id": data["id"],
        "id": data["id"],
        "modelId": data["id"],
        "author": data["id"].split("/")[0],
        "sha": sha,
        "private": data["private"],
        "downloads": data.get("downloads", 0),
        "likes": 0,
        "pipeline_tag": card.get("pipeline_tag"),
        "createdAt": data["created_at"],
        "lastModified": commit["date"],
    }


def _card_data(store: Store, readme: dict | None) -> dict:
    if readme is None:
        return {}
    text = store.blob_path(readme["sha256"]).read_text(errors="replace")
    match = re.match(r"^---\n(.*?)\n---", text, re.S)
    if not match:
        return {}
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}


def _error(status: int, message: str, code: str | None = None, extra: dict | None = None) -> Response:
    headers = {"X-Error-Message": message, **(extra or {})}
    if code:
        headers["X-Error-Code"] = code
    return JSONResponse({"error": message}, status_code=status, headers=headers)

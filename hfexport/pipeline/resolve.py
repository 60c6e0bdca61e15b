"""Stage 1 — resolve: turn SOURCE into something exact — a local folder, or a Hub repo pinned to
the commit sha its revision points at *now* (a branch moves; the sha is what we export and record)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..backends import export_folders
from ..errors import AuthError, RevisionNotFoundError, SourceNotFoundError
from ..report import Source


def is_repo_id(text: str) -> bool:
    """Whether `text` is a Hub repo id (`name` or `namespace/name`), by huggingface_hub's own rule:
    the one check every entry point (CLI, Action, webhooks) applies."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return True


# ── Stage 1: resolve ─────────────────────────────────────────────────────────


def resolve(source: str, revision: str | None = None, token: str | None = None, hub_only: bool = False) -> Source:
    """Resolve SOURCE (a folder or a Hub repo id) and, for a repo, its revision to a commit sha.

    Raises:
        SourceNotFoundError: neither a folder nor a repo the Hub knows.
        RevisionNotFoundError: the repo has no such branch, tag or commit.
        AuthError: the repo exists but the token cannot see it (private or gated).
    """
    if hub_only:  # never a local path, whatever exists on this disk
        if not is_repo_id(source):
            raise SourceNotFoundError(f"{source!r} is not a Hub repo id.", "Pass a repo id such as org/model.")
        return _resolve_hub(source, revision, token)
    path = Path(source).expanduser()
    looks_like_path = source.startswith((".", "/", "~")) or source.endswith("/") or source.count("/") > 1
    if looks_like_path and not path.exists():
        raise SourceNotFoundError(
            f"No folder {source!r} exists.", "Check the path; it must hold config.json and weights."
        )
    if path.exists():
        if not path.is_dir():
            raise SourceNotFoundError(
                f"{source} is a file, not a model folder.", "Pass the folder that holds config.json."
            )
        if revision:
            raise SourceNotFoundError(
                f"A revision ({revision}) was given for a local folder ({source}).",
                "Drop --revision (revision= in Python) for a folder, or pass a Hub repo id.",
            )
        return Source("local", str(path.resolve()), folder_digest(path))
    if not is_repo_id(source):
        raise SourceNotFoundError(
            f"No folder {source!r} exists, and it is not a Hub repo id either.",
            "Pass an existing model folder, or a repo id such as 'org/model'.",
        )
    return _resolve_hub(source, revision, token)


def _resolve_hub(repo_id: str, revision: str | None, token: str | None) -> Source:
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
    )
    from huggingface_hub.errors import RevisionNotFoundError as HubRevisionNotFound

    from ..hub.retry import retry

    api = HfApi(token=token)
    try:
        info = retry(f"resolve {repo_id}", lambda: api.model_info(repo_id, revision=revision))
    except GatedRepoError as e:
        raise AuthError(
            f"{repo_id} is gated and this token has no access.", "Accept its terms on the Hub, or use a token that has."
        ) from e
    except RepositoryNotFoundError as e:
        raise SourceNotFoundError(
            f"No folder {repo_id!r} here, and the Hub at {constants.ENDPOINT} has no repo {repo_id!r} this token can "
            "see.",
            "Check the spelling; for a private repo pass a token with read access (--token or token=, or set "
            "HF_TOKEN).",
        ) from e
    except HubRevisionNotFound as e:
        raise RevisionNotFoundError(
            f"{repo_id} has no revision {revision!r}.",
            "Pass an existing branch, tag or commit sha (--revision on the command line, revision= in Python).",
        ) from e
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else None
        if status in (401, 403):
            raise AuthError(
                f"The Hub refused the token for {repo_id} (HTTP {status}).", "Pass a valid token with read access."
            ) from e
        raise SourceNotFoundError(f"The Hub failed to answer for {repo_id}: HTTP {status}.", "Retry later.") from e
    except OSError as e:  # connection refused, DNS, timeouts
        raise SourceNotFoundError(
            f"Cannot reach the Hub at {constants.ENDPOINT} to resolve {repo_id}: {type(e).__name__}.",
            "Check the network or HF_ENDPOINT, or export a local folder instead.",
        ) from e
    return Source("hub", repo_id, info.sha, revision=revision or "main", private=bool(info.private))


def folder_digest(path: Path) -> str:
    """A content digest of a model folder (names and bytes), ignoring earlier export folders and
    the card: what an export depends on."""
    digest = hashlib.sha256()
    folders = export_folders()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        relative = file.relative_to(path)
        if relative.parts[0] in folders or relative.parts[0].startswith(".") or relative.name == "README.md":
            continue
        digest.update(str(relative).encode() + b"\0")
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:40]

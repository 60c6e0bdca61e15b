"""Stage 1 — resolve: turn SOURCE into something exact — a local folder, or a Hub repo pinned to
the commit sha its revision points at *now* (a branch moves; the sha is what we export and record)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ..backends import export_folders
from ..errors import TOKEN_FIX, AuthError, RevisionNotFoundError, SourceNotFoundError
from ..hub.retry import refused, retry
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


# scheme://host/ORG/NAME[/tree/REV[/...] | /blob/REV/...]: a model's page, not a dataset's or a Space's.
_MODEL_URL = re.compile(
    r"https?://[^/\s]+/(?!datasets/|spaces/)([^/\s]+(?:/[^/\s]+)?)(?:/(?:tree|blob)/([^/\s]+)(?:/\S*)?)?/?"
)


def from_url(source: str) -> tuple[str, str | None] | None:
    """The repo id (and revision, from `/tree/REV` or `/blob/REV/…`) of a model's Hub URL as a
    browser shows it (`https://huggingface.co/org/model/tree/main`), or None when `source` is no
    such URL. Any host: the local Hub's and mirrors' URLs read the same."""
    match = _MODEL_URL.fullmatch(source)
    if match is None or not is_repo_id(match.group(1)):
        return None
    return match.group(1), match.group(2)


def resolve(source: str, revision: str | None = None, token: str | None = None, hub_only: bool = False) -> Source:
    """Resolve SOURCE (a folder, a Hub repo id or its URL) and, for a repo, its revision to a
    commit sha. `hub_only`: for `push`, which publishes to a repo (and so needs a token that can).

    Raises:
        SourceNotFoundError: neither a folder nor a repo the Hub knows.
        RevisionNotFoundError: the repo has no such branch, tag or commit.
        AuthError: the repo exists but the token cannot see it (private or gated).
    """
    url = from_url(source)
    if url is not None:
        source, revision = url[0], revision or url[1]
        return _resolve_hub(source, revision, token, hub_only)
    if hub_only:  # never a local path, whatever exists on this disk
        if not is_repo_id(source):
            raise SourceNotFoundError(
                f"{source!r} is not a Hub repo id.", "Pass a repo id such as org/model (or its URL on the Hub)."
            )
        return _resolve_hub(source, revision, token, hub_only)
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


def _resolve_hub(repo_id: str, revision: str | None, token: str | None, publishing: bool = False) -> Source:
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
    )
    from huggingface_hub.errors import RevisionNotFoundError as HubRevisionNotFound

    api = HfApi(token=token)
    try:
        info = retry(f"resolve {repo_id}", lambda: api.model_info(repo_id, revision=revision))
    except GatedRepoError as e:
        raise AuthError(
            f"{repo_id} is gated and this token has no access.", "Accept its terms on the Hub, or use a token that has."
        ) from e
    except RepositoryNotFoundError as e:
        raise _not_found(repo_id, publishing) from e
    except HubRevisionNotFound as e:
        raise RevisionNotFoundError(
            f"{repo_id} has no revision {revision!r}.",
            "Pass an existing branch, tag or commit sha (--revision on the command line, revision= in Python).",
        ) from e
    except HfHubHTTPError as e:
        if status := refused(e):
            raise AuthError(
                f"The Hub refused the token for {repo_id} (HTTP {status}: wrong, expired or without access).",
                TOKEN_FIX
                if publishing
                else "Pass a valid token that can read the repo (HF_TOKEN, --token, or `hf auth login`).",
            ) from e
        if status == 404:
            raise _not_found(repo_id, publishing) from e
        raise SourceNotFoundError(f"The Hub failed to answer for {repo_id}: HTTP {status}.", "Retry later.") from e
    except OSError as e:  # connection refused, DNS, timeouts
        raise SourceNotFoundError(
            f"Cannot reach the Hub at {constants.ENDPOINT} to resolve {repo_id}: {type(e).__name__}.",
            "Check the network or HF_ENDPOINT, or export a local folder instead.",
        ) from e
    if not info.sha:  # the Hub names the commit of every answer; a mirror that does not is no source
        raise SourceNotFoundError(f"The Hub answered no commit for {repo_id}.", "Retry later, or check HF_ENDPOINT.")
    return Source("hub", repo_id, info.sha, revision=revision or "main", private=bool(info.private))


def _not_found(repo_id: str, publishing: bool) -> SourceNotFoundError:
    from huggingface_hub import constants

    where = "" if publishing else f"No folder {repo_id!r} here, and "
    hub = f"the Hub at {constants.ENDPOINT}" if constants.ENDPOINT != constants._HF_DEFAULT_ENDPOINT else "the Hub"
    return SourceNotFoundError(
        f"{where}{hub if where else hub[0].upper() + hub[1:]} has no repo {repo_id!r} this token can see: not found.",
        "Check the id (org/name, as in the repo's URL); a private repo needs a token that can read it "
        "(HF_TOKEN, --token, or `hf auth login`).",
    )


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

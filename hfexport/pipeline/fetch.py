"""Stage 2 — fetch: a local folder holding exactly the commit resolved in stage 1, safe to load.

Safetensors only unless the user allows pickles: loading a pickled checkpoint runs code, which a
bot that exports other people's repos must not do by default.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

from ..backends import export_folders
from ..errors import DownloadLimitError, NoWeightsError, PickleWeightsError, UnsafePathError
from ..hub.retry import retry
from ..report import Source
from ..settings import MAX_DOWNLOAD_MB, MAX_SUPPORT_FILE_MB, limit_bytes
from .resolve import folder_digest

SAFE_WEIGHTS = (".safetensors",)
PICKLE_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
# What a model folder needs besides weights: configs, tokenizers, processors (and code if trusted).
SUPPORT_FILES = ["*.json", "*.txt", "*.model", "*.tiktoken", "*.jinja"]
# Caps on what is downloaded from a repo (`settings.LIMITS_MB`; the environment overrides each): a
# support file (config, tokenizer, code) and the whole download. Real tokenizers stay far below
# the first; the second is a 50 B-parameter fp16 model with room to spare.
# A repo path we are willing to put on disk: relative, no `.`/`..`/empty segment, no backslash or
# control character, not absurdly long.
_CONTROL = re.compile(r"[\x00-\x1f\x7f\\]")


@dataclass(frozen=True)
class FetchedModel:
    source: Source
    model_dir: Path
    weights: tuple[str, ...]
    use_safetensors: bool
    # What the export depends on: the model files' content, not the commit (a README-only commit
    # changes the sha, not the exports). The export cache is keyed by it.
    content_digest: str


# ── Stage 2: fetch ───────────────────────────────────────────────────────────


def weights_in(names: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The weight files among a repo's paths: safetensors ones, and pickled ones at its root —
    never the files of an export folder (`onnx/`, `executorch/`: ours or the owner's)."""
    folders = export_folders()
    names = [n for n in names if n.split("/")[0] not in folders]
    safe = tuple(n for n in names if n.endswith(SAFE_WEIGHTS))
    return safe, tuple(n for n in names if n.endswith(PICKLE_WEIGHTS) and "/" not in n)


def fetch(
    source: Source, allow_pickle: bool = False, trust_remote_code: bool = False, token: str | None = None
) -> FetchedModel:
    """Make the model available as a folder, pinned to `source.sha`, and check its weights.

    Raises:
        NoWeightsError: no weight file at all.
        PickleWeightsError: only pickled weights and `allow_pickle` is False.
    """
    sizes: dict[str, int] = {}
    if source.kind == "local":
        names = [str(p.relative_to(source.ref)) for p in Path(source.ref).rglob("*") if p.is_file()]
    else:
        from huggingface_hub import HfApi
        from huggingface_hub.hf_api import RepoFile

        api = HfApi(token=token)
        entries = retry(
            f"list the files of {source.ref}",
            lambda: list(api.list_repo_tree(source.ref, revision=source.sha, recursive=True)),
        )
        sizes = {e.path: e.size for e in entries if isinstance(e, RepoFile)}
        names = list(sizes)
        for name in names:
            _check_path(name, source)
    folders = export_folders()
    safe, pickled = weights_in(names)
    where = source.ref if source.kind == "local" else f"{source.ref}@{source.sha[:8]}"
    if not safe and not pickled:
        raise NoWeightsError(
            f"No weights in {where}: no *.safetensors (nor pickled *.bin) file.",
            "Point SOURCE at a folder or repo that holds the model's weights.",
        )
    if not safe and not allow_pickle:
        raise PickleWeightsError(
            f"{where} has pickled weights only ({', '.join(pickled[:3])}); unpickling runs code from the file.",
            "Convert the weights to safetensors, or if you trust the repo allow pickles "
            "(--allow-pickle on the command line, allow_pickle=True in Python).",
        )
    use_safetensors = bool(safe)

    if source.kind == "local":
        return FetchedModel(source, Path(source.ref), safe or pickled, use_safetensors, source.sha)

    from huggingface_hub import snapshot_download

    patterns = SUPPORT_FILES + (["*.safetensors"] if safe else ["*.bin"])
    if trust_remote_code:
        patterns.append("*.py")
    _check_sizes(
        {
            n: size
            for n, size in sizes.items()
            if n.split("/")[0] not in folders and any(fnmatch.fnmatch(n, p) for p in patterns)
        },
        source,
    )
    folder = retry(
        f"download {source.ref}",
        lambda: snapshot_download(
            source.ref,
            revision=source.sha,
            allow_patterns=patterns,
            ignore_patterns=[f"{name}/*" for name in folders],
            token=token,
        ),
    )
    return FetchedModel(source, Path(folder), safe or pickled, use_safetensors, folder_digest(Path(folder)))


def _check_path(name: str, source: Source) -> None:
    parts = name.split("/")
    if name.startswith("/") or len(name) > 1000 or _CONTROL.search(name) or any(p in ("", ".", "..") for p in parts):
        raise UnsafePathError(
            f"{source.ref}@{source.sha[:8]} lists a file whose path is not safe to write to disk: {name!r}.",
            "Ask the repo's owner to rename it; nothing was downloaded.",
        )


def _check_sizes(sizes: dict[str, int], source: Source) -> None:
    """Refuse before downloading: a support file over its cap, or a download over the total cap."""
    support_cap = limit_bytes(MAX_SUPPORT_FILE_MB)
    total_cap = limit_bytes(MAX_DOWNLOAD_MB)
    for name, size in sorted(sizes.items()):
        if not name.endswith(SAFE_WEIGHTS + PICKLE_WEIGHTS) and size > support_cap:
            raise DownloadLimitError(
                f"{name} in {source.ref} is {size / 1e6:.1f} MB, over the {support_cap / 1e6:g} MB cap on a "
                "config, tokenizer or code file.",
                "Raise HFEXPORT_MAX_SUPPORT_FILE_MB if the file is expected to be that large; nothing was downloaded.",
            )
    total = sum(sizes.values())
    if total > total_cap:
        raise DownloadLimitError(
            f"{source.ref} needs {total / 1e6:.0f} MB downloaded, over the {total_cap / 1e6:g} MB cap.",
            "Raise HFEXPORT_MAX_DOWNLOAD_MB (or run on a machine meant for this model); nothing was downloaded.",
        )

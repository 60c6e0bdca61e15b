"""Stage 2 — fetch: a local folder holding exactly the commit resolved in stage 1, safe to load.

Safetensors only unless the user allows pickles: loading a pickled checkpoint runs code, which a
bot that exports other people's repos must not do by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..backends import export_folders
from ..errors import NoWeightsError, PickleWeightsError
from ..hub.retry import retry
from ..report import Source
from .resolve import folder_digest

SAFE_WEIGHTS = (".safetensors",)
PICKLE_WEIGHTS = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
# What a model folder needs besides weights: configs, tokenizers, processors (and code if trusted).
_SUPPORT_FILES = ["*.json", "*.txt", "*.model", "*.tiktoken", "*.jinja"]


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


def fetch(source: Source, allow_pickle: bool = False, trust_remote_code: bool = False, token: str | None = None) -> FetchedModel:
    """Make the model available as a folder, pinned to `source.sha`, and check its weights.

    Raises:
        NoWeightsError: no weight file at all.
        PickleWeightsError: only pickled weights and `allow_pickle` is False.
    """
    if source.kind == "local":
        names = [str(p.relative_to(source.ref)) for p in Path(source.ref).rglob("*") if p.is_file()]
    else:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
        names = retry(f"list the files of {source.ref}", lambda: api.list_repo_files(source.ref, revision=source.sha))
    folders = export_folders()
    names = [n for n in names if n.split("/")[0] not in folders]
    safe = tuple(n for n in names if n.endswith(SAFE_WEIGHTS))
    pickled = tuple(n for n in names if n.endswith(PICKLE_WEIGHTS) and "/" not in n)
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

    patterns = _SUPPORT_FILES + (["*.safetensors"] if safe else ["*.bin"])
    if trust_remote_code:
        patterns.append("*.py")
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

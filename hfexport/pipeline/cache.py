"""The export cache: `push` keeps each export under a key of what decides it — the model's content,
the plan and the runtimes' versions — so a README-only commit, a rerun after a failed upload or a
second runner on the same weights reuses the files instead of exporting again. Only exports whose
every backend succeeded are kept: a failure, a skip, a crash or a timeout is retried by a rerun.

The cache is bounded (`evict`, after each push): the exports used least recently go first once it
holds more than `HFEXPORT_CACHE_MAX_GB`, except those a push is using now (`in_use`, a shared
lock), and the half-written folders of runs that were killed (their process gone) go at once.

The plan takes importing torch and the model's classes to make (~5 s of a 7.4 s push that found
its export cached, measured on a tiny BERT). It is itself decided by the model's content and what
was asked, so each export is also found by that request (`export_key`, `by_request`): a push whose
request was exported before needs no plan, no import of torch and no worker process.

A kept export is handed on only while its files are the ones this process wrote: each export's
sha256 per file is sealed (`seal`) in `seals/`, a folder no sandbox sees (`sandbox.concealed_roots`)
or, as another user, may write; `cached` checks every file against it. An entry whose files or
report were changed, added to or lost — by a repo's code, a disk fault or a hand — is exported
again, never published."""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TypeVar

from ..backends import keyed_packages
from ..messages import ExportRequest
from ..report import ExportPlan, Report, Source
from ..settings import cache_dir, cache_max_bytes, web_checks
from ..versions import runtime_versions
from ..web.runtimes import BUNDLE
from ..web.runtimes import version as web_version
from .fetch import FetchedModel

W = TypeVar("W")


def reuse_or_export(
    fetched: FetchedModel,
    backends: list[str],
    request: ExportRequest,
    trust_remote_code: bool,
    *,
    planned: Callable[[], AbstractContextManager[tuple[ExportPlan, W]]],
    export: Callable[[Path, ExportPlan, W], Report],
    force: bool = False,
    log: Callable[[str], None] = lambda message: None,
) -> Report:
    """`push`'s cache policy: the export of `fetched` for this request, kept or made.

    A request exported before is found by its key, with no plan made; else `planned()` makes the
    plan and starts the workers (`W`, living in that context), and the export the plan decides
    is looked up; else `export(out_dir, plan, workers)` makes it into the cache, where it is kept when every backend
    succeeded. `force` exports again whatever is kept.
    """
    key = export_key(fetched, backends, request, trust_remote_code)
    kept = None if force else by_request(key, fetched.source)
    if kept is None:
        with planned() as (plan, workers):
            out_dir = export_dir(fetched, plan)
            kept = None if force else cached(out_dir, fetched.source)
            if kept is None:
                report = export(out_dir, plan, workers)
                if complete(report):
                    seal(out_dir)
                    remember(key, out_dir)
                return report
            remember(key, out_dir)
    log(f"reusing the cached exports in {kept.out_dir}")
    return kept


def _keyed_runtimes() -> dict[str, str]:
    """The versions of the packages the backends export with (`backends.keyed_packages`; torch and
    transformers are pinned with hfexport), and the browser's runtime the ONNX files were run on:
    its report rows and card cells are part of the export, so an export made with the web checks off (or on another
    onnxruntime-web) is not handed to a run that wants them."""

    versions = runtime_versions(keyed_packages())
    # The bundle too: the checks once ran another build of the same version, with other kernels.
    versions["onnxruntime-web"] = f"{web_version() or 'missing'} {BUNDLE}" if web_checks() else "not checked"
    return versions


def export_dir(fetched: FetchedModel, plan: ExportPlan) -> Path:
    """Where the export of `fetched` by `plan` is kept (`settings.cache_dir()/exports/<key>`)."""
    versions = _keyed_runtimes()
    digest = hashlib.sha256(json.dumps(versions, sort_keys=True).encode()).hexdigest()[:8]
    return cache_dir() / "exports" / f"{fetched.content_digest[:24]}-{plan.digest()}-{digest}"


def export_key(fetched: FetchedModel, backends: list[str], request: ExportRequest, trust_remote_code: bool) -> str:
    """What decides the plan, and so the export: the model's content, the backends, the task and
    variants asked, and the versions of hfexport and the libraries it plans and exports with."""
    decided = {
        "content": fetched.content_digest,
        "backends": sorted(backends),
        "request": request.to_dict(),
        "trust_remote_code": trust_remote_code,
        "versions": _keyed_runtimes(),
    }
    return hashlib.sha256(json.dumps(decided, sort_keys=True).encode()).hexdigest()[:32]


def by_request(key: str, source: Source) -> Report | None:
    """The export an earlier push made for the request `key` (`remember`), as `cached` gives it."""
    try:
        name = (cache_dir() / "requests" / key).read_text().strip()
    except OSError:
        return None
    if not name or "/" in name or name.startswith("."):
        return None
    return cached(cache_dir() / "exports" / name, source)


def remember(key: str, out_dir: Path) -> None:
    """Record that the request `key` was exported into `out_dir` (written whole, or not at all)."""
    folder = cache_dir() / "requests"
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{key}.{os.getpid()}"
    partial.write_text(out_dir.name)
    partial.replace(folder / key)


_LOCK = ".in-use"


@contextmanager
def in_use(out_dir: Path | str | None) -> Iterator[None]:
    """Hold `out_dir` (an export in the cache) while a push publishes from it: `evict` leaves it.
    Using it also makes it the most recently used."""
    if out_dir is None or not Path(out_dir).is_dir():
        yield
        return
    lock = Path(out_dir) / _LOCK
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_SH)
        os.utime(lock)
        yield


def evict(max_bytes: int | None = None) -> list[Path]:
    """Bound the export cache: remove the folders of killed runs, then the exports used least
    recently until the rest hold at most `max_bytes` (`HFEXPORT_CACHE_MAX_GB`). An export a push
    is using (`in_use`) stays. Returns what was removed."""
    root = cache_dir() / "exports"
    if not root.is_dir():
        return []
    limit = cache_max_bytes() if max_bytes is None else max_bytes
    removed = [p for p in root.glob(".*.partial-*") if _writer_gone(p.name) and _remove(p)]
    exports = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
    sizes = {p: sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) for p in exports}
    total = sum(sizes.values())
    for export in sorted(exports, key=_last_used):
        if total <= limit:
            break
        with open(export / _LOCK, "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # a push is publishing from it
                continue
            if _remove(export):
                total -= sizes[export]
                removed.append(export)
    for entry in (cache_dir() / "requests").glob("*"):  # what pointed at an export now gone
        if not entry.name.startswith(".") and not (root / entry.read_text().strip()).is_dir():
            entry.unlink(missing_ok=True)
    return removed


def _last_used(export: Path) -> float:
    lock = export / _LOCK
    return lock.stat().st_mtime if lock.exists() else export.stat().st_mtime


def _writer_gone(name: str) -> bool:
    """Whether the run writing the partial folder `name` (`.<export>.partial-<pid>-…`) has ended."""
    pid = name.rpartition(".partial-")[2].partition("-")[0]
    if not pid.isdigit():
        return True  # no pid: from before partial folders were named so
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _remove(path: Path) -> bool:
    shutil.rmtree(path, ignore_errors=True)
    return not path.exists()


def _digests(out_dir: Path) -> dict[str, str]:
    """Each file's sha256 under `out_dir` (links, devices and hard links make it unsealable: `{}`),
    but the `in_use` lock. Measured: ~0.5 s per GB on this machine's disk."""
    digests: dict[str, str] = {}
    for path in sorted(out_dir.rglob("*")):
        name = path.relative_to(out_dir).as_posix()
        if path.is_dir() and not path.is_symlink() or name == _LOCK:
            continue
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            return {}
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digests[name] = digest.hexdigest()
    return digests


def _seal_path(out_dir: Path) -> Path:
    return cache_dir() / "seals" / f"{out_dir.name}.json"


def seal(out_dir: Path) -> None:
    """Record the digests of the export in `out_dir`, as this process wrote it (`cached` checks them)."""
    folder = cache_dir() / "seals"
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{out_dir.name}.{os.getpid()}"
    partial.write_text(json.dumps(_digests(out_dir), sort_keys=True))
    partial.replace(_seal_path(out_dir))


def _sealed(out_dir: Path) -> bool:
    """Whether `out_dir` holds exactly the files its seal names, each with its digest."""
    try:
        kept = json.loads(_seal_path(out_dir).read_text())
    except (OSError, ValueError):
        return False
    return bool(kept) and kept == _digests(out_dir)


def complete(report: Report) -> bool:
    """Whether `report` may be kept: every backend exported. A skip (the memory preflight, no GPU),
    a crash or a timeout is an outcome of that run on that machine, not an export to hand on."""
    return bool(report.backends) and all(b.ok for b in report.backends)


def cached(out_dir: Path, source: Source) -> Report | None:
    """The export kept in `out_dir` as built from `source` (the same files: `source` holds the same
    content), or None when there is none or it failed."""
    if not _sealed(out_dir):
        return None
    report = Report.load(out_dir)
    if not complete(report):
        return None
    backends = [dataclasses.replace(b, source_sha=source.sha) for b in report.backends]
    return dataclasses.replace(report, source=source, backends=backends, out_dir=str(out_dir))

"""What crosses back from a sandbox: regular files with the names we planned, never a link followed.

A repo's code runs in the sandbox (`launch.py`) with its job's folders writable. Whatever it left
there is read later by a process that holds a token — the parent that packages, caches and
publishes the files. A symlink named `model.onnx` pointing at `/proc/self/environ` or the saved
login, followed by an `open()` or an `is_file()`, would publish the token (issue 56, row 1). So the
parent reads those folders only here, through descriptors opened without following links
(`O_NOFOLLOW` at every component), and takes a file only when it is a regular file with one link
(a hard link could be another file's content), under a name of plain characters. Everything else
is refused, naming the file and what it is.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
from pathlib import Path

from ..errors import ExitCode, HfExportError

# A name part we write and loaders read: letters, digits, `._+-`, not starting with a dot.
_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,254}")
_READ_LIMIT = 64 << 20  # a result, a stage or a log tail: never a model file


class PlantedFileError(HfExportError):
    """A sandbox left something other than the regular files it said it wrote."""

    exit_code = ExitCode.BACKEND_FAILED


def safe_name(name: str) -> bool:
    """Whether `name` is a relative path of plain parts: no `..`, no leading `/` or dot, no odd byte."""
    return bool(name) and all(_PART.fullmatch(part) for part in name.split("/"))


def _open_beneath(root: Path, name: str, flags: int = os.O_RDONLY) -> int:
    """A descriptor of `root/name`, every component opened without following a link.

    Raises:
        OSError: a component is a link (ELOOP, ENOTDIR) or missing.
    """
    parts = name.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)


def _what(info: os.stat_result) -> str | None:
    """Why a file of this stat may not cross, or None."""
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file (a device, a pipe or a folder)"
    if info.st_nlink != 1:
        return "a hard link to another file"
    return None


def read_text(path: Path, limit: int = _READ_LIMIT) -> str | None:
    """The text of the regular file `path` written in a sandbox, or None when it is missing or is
    anything else (a link is never followed). At most `limit` bytes are read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if _what(os.fstat(handle.fileno())) is not None:
            return None
        return handle.read(limit).decode(errors="replace")


def take(source: Path, target: Path, names: list[str], what: str) -> None:
    """Move each of `names` (relative to `source`, a sandbox's folder) to the same name under
    `target`, a folder the sandbox never sees, and nothing else.

    Raises:
        PlantedFileError: a name is not a plain relative path, or its file is a link, a device or a
            hard link. Files already moved stay in `target`; the caller drops the folder.
    """
    for name in names:
        if not safe_name(name):
            raise _planted(what, name, "not a plain relative name")
        try:
            fd = _open_beneath(source, name)
        except OSError as error:
            linked = any((source / part).is_symlink() for part in _prefixes(name))
            why = "a symbolic link" if linked else f"unreadable without following a link ({error.strerror})"
            raise _planted(what, name, why) from None
        try:
            before = os.fstat(fd)
            if (kind := _what(before)) is not None:
                raise _planted(what, name, kind)
            destination = target / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(source / name, destination)  # a rename never follows a link: what moved is checked next
            except OSError as error:
                if error.errno != errno.EXDEV:
                    raise
                _copy(fd, destination)  # another filesystem (a tmpfs /tmp): the checked file's content
                continue
            after = os.lstat(destination)
            if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino) or _what(after) is not None:
                destination.unlink()
                raise _planted(what, name, "replaced while it was taken")
        finally:
            os.close(fd)


def _copy(fd: int, destination: Path) -> None:
    """The content behind the checked descriptor `fd` into a new file `destination`."""
    with open(os.dup(fd), "rb", closefd=True) as source, open(destination, "xb") as copy:
        os.set_blocking(source.fileno(), True)
        shutil.copyfileobj(source, copy, 1 << 20)


def _prefixes(name: str) -> list[str]:
    """`a`, `a/b`, `a/b/c` for `a/b/c`: each component's path."""
    parts = name.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _planted(what: str, name: str, why: str) -> PlantedFileError:
    return PlantedFileError(
        f"{what} left {name!r}, which is {why}: only the regular files it wrote cross back from its sandbox",
        "Nothing of it was kept. If the model's own code made it, the repo's code is hostile or broken; "
        "otherwise report it as a bug in hfexport.",
    )


def within(path: Path, root: Path) -> Path | None:
    """`path`, resolved, when it is a regular file inside `root` (after following any link, as the
    Hub client's snapshot links into its blobs); else None."""
    try:
        resolved = path.resolve(strict=True)
        root = root.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if root not in resolved.parents or _what(os.lstat(resolved)) not in (None, "a hard link to another file"):
        return None
    return resolved


def repo_root(model_dir: Path) -> Path:
    """The folder a model's files may link into: the Hub client's repo folder for a snapshot
    (`models--org--name/snapshots/<sha>` links into `../../blobs`), else the model folder itself."""
    return model_dir.parents[1] if model_dir.parent.name == "snapshots" else model_dir

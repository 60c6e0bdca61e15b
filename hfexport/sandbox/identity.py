"""Who a process that runs a repo's code is, and what it holds: its environment and its user.

The processes that run a model repo's code (its remote code, its pickles) get `child_env()`: the
parent's environment without anything that grants access — Hub tokens, the webhook secret, the
GitHub Action's inputs and runtime tokens, any variable named like a secret — and with the Hub
client offline, so the repo's code can neither read a credential nor reach the Hub.

Where the parent runs as root — the GitHub Action's container must, as GitHub documents for Docker
actions — `HFEXPORT_WORKER_USER` names the unprivileged user those processes switch to before they
run anything (`sandboxed`). They then write only the folders lent to them (`lend`), and what they
wrote is taken back (`reclaim`) the moment they exit, so a later worker under the same user cannot
alter an earlier backend's validated files.
"""

from __future__ import annotations

import os
import pwd
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..proc import die_with_parent
from ..settings import WORKER_USER, worker_user_name

# Variable names that carry a credential, whatever tool set them.
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|API_?KEY|PRIVATE_?KEY|AUTH", re.I)
# Prefixes of variables that may hold one under another name (Action inputs, runner internals).
_SECRET_PREFIXES = ("INPUT_", "ACTIONS_", "GITHUB_TOKEN", "WEBHOOK_")


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process that may run a repo's code: no secret, the Hub offline."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith("TOKENIZERS_") or not (_SECRET_NAME.search(k) or k.startswith(_SECRET_PREFIXES))
    }
    # The client also reads a saved login from a file: point it at none.
    env.update(HF_HUB_OFFLINE="1", HF_TOKEN_PATH=os.devnull, **(extra or {}))
    return env


WORKER_USER_ENV = WORKER_USER


@dataclass(frozen=True)
class WorkerUser:
    """The unprivileged account that processes running a repo's code switch to."""

    name: str
    uid: int
    gid: int


def worker_user() -> WorkerUser | None:
    """The user named by `HFEXPORT_WORKER_USER` (a name or a uid), or None when unset or when this
    process already runs as that user.

    Raises:
        ConfigError: the user does not exist, or this process is not root and so cannot switch.
    """
    value = worker_user_name()
    if not value:
        return None
    try:
        entry = pwd.getpwuid(int(value)) if value.isdigit() else pwd.getpwnam(value)
    except KeyError:
        raise ConfigError(
            f"{WORKER_USER_ENV}={value!r} names no user on this machine",
            f"Create the user (e.g. `useradd --system {value}`) or unset {WORKER_USER_ENV}.",
        ) from None
    if entry.pw_uid == os.geteuid():
        return None
    if os.geteuid() != 0:
        raise ConfigError(
            f"{WORKER_USER_ENV}={value!r} asks to run model code as another user, but hfexport is not root",
            f"Run hfexport as root (as the Action's container does), or unset {WORKER_USER_ENV}.",
        )
    return WorkerUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def sandboxed(user: WorkerUser | None) -> Callable[[], None]:
    """`preexec_fn` for a process that runs a repo's code: become `user` (when given), then die
    with the parent. In that order: the kernel clears the parent-death signal on a change of user."""

    def preexec() -> None:
        if user is not None:
            os.setgroups([])
            os.setgid(user.gid)
            os.setuid(user.uid)
        die_with_parent()

    return preexec


def lend(path: Path, user: WorkerUser | None) -> None:
    """Make the folder `path` (created by this process) writable by `user`'s processes only."""
    if user is not None:
        os.chown(path, user.uid, user.gid)


def reclaim(path: Path, user: WorkerUser | None) -> None:
    """Take back everything under `path` that `user`'s process wrote, once it has exited."""
    if user is None or not path.exists():
        return
    uid, gid = os.geteuid(), os.getegid()
    for item in [path, *path.rglob("*")]:
        os.chown(item, uid, gid, follow_symlinks=False)


def check_readable(path: Path, user: WorkerUser | None, what: str, fix: str, *, reach_only: bool = False) -> None:
    """Raise `ConfigError` when `user` could not read `path`: every folder above it searchable, the
    path and (for a folder) the files directly in it readable. The workers would otherwise fail
    later with a bare PermissionError, or a FileNotFoundError that hides the cause. With
    `reach_only`, only the folders above `path` are checked (`user` will be lent what is inside)."""
    if user is None:
        return
    path = Path(path).resolve()
    for folder in reversed(path.parents):
        if not _granted(folder, user, stat.S_IXOTH):
            break
    else:
        if reach_only:
            return
        # The path itself, and a folder's files (safetensors writes its files 0600, for one).
        inside = sorted(path.iterdir()) if path.is_dir() else []
        for item in [path, *inside]:
            target = item.resolve()
            if not _granted(target, user, stat.S_IROTH | (stat.S_IXOTH if target.is_dir() else 0)):
                folder = item
                break
        else:
            return
    raise ConfigError(
        f"The worker user {user.name!r} ({WORKER_USER_ENV}) cannot read {what}: {folder} is not open to it",
        fix,
    )


def check_model_readable(model_dir: Path, user: WorkerUser | None) -> None:
    """`check_readable` for the model folder that the planner and the workers load."""
    check_readable(
        model_dir,
        user,
        "the model's files",
        "Keep the model where others can read it: HF_HOME (or the folder you pass) outside a private "
        "home, e.g. HF_HOME=/var/cache/hfexport/hf as the container sets.",
    )


def readable_by(path: Path, user: WorkerUser) -> bool:
    """Whether `user` (not root) could read `path` — and, for a folder, list it — by its mode bits
    and those of the folders above it."""
    path = Path(path).resolve()
    try:
        reachable = all(_granted(folder, user, stat.S_IXOTH) for folder in path.parents)
        bits = stat.S_IROTH | (stat.S_IXOTH if path.is_dir() else 0)
        return reachable and _granted(path, user, bits)
    except OSError:
        return False


def _granted(path: Path, user: WorkerUser, bits: int) -> bool:
    info = path.stat()
    if info.st_uid == user.uid:
        return info.st_mode & (bits << 6) == bits << 6
    if info.st_gid == user.gid:
        return info.st_mode & (bits << 3) == bits << 3
    return info.st_mode & bits == bits

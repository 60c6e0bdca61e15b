"""The sandbox a repo's code runs in: no credential within its reach.

A repo's remote code and pickles run with the rights of the process that loads them. A scrubbed
environment (`identity.child_env`) is not enough: a process of the same user can read every ancestor's
`/proc/PID/environ` (`HF_TOKEN`, the webhook secret) and the saved login (`HF_HOME/token`), and it
can reach the network.

`wrap(command)` starts `command` under `unshare` (util-linux) in namespaces of its own — user, PID,
mount and network: `/proc` shows its own processes only, its only network interface is its own
loopback (up: its processes reach each other, nothing outside). `namespaces.py` then runs inside them as
a script (`enter`): it lays an empty file or folder over every credential file (`credential_paths`),
drops every capability, so that nothing it runs can undo those mounts or remount `/proc`, and runs
`command` as its only child (its end read back by `exit_code`). Measured: 0.05 s more per start.

It also confines what the code can write (`confine`), so that nothing it leaves behind is read or
run later by a process that holds a token: every mount is read-only (site-packages, the home, the
checkout), `/tmp` and `/dev/shm` are private tmpfs, and only the job's own folders (`writes`) are
writable. The Hub client's home (saved logins, the HF cache of every other repo) and the export
cache are covered by empty read-only tmpfs, with only the model being exported (`reads`) shown
again, read-only. What the code wrote crosses back only through `crossing.py`.

Where the kernel or a seccomp profile refuses new namespaces (a container under Docker's default
profile, as the GitHub Action's is), `refusal()` says why; a root hfexport then relies on the
unprivileged `HFEXPORT_WORKER_USER` alone, and elsewhere a repo's code does not run at all
(`require`). `spawn` gives a process all of it at once, as the planner and the export start theirs.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..settings import cache_dir, onnxruntime_web_dir, test_writable
from .crossing import repo_root
from .identity import WORKER_USER_ENV, WorkerUser, child_env, lend, readable_by, sandboxed

# The script that lays the mounts out inside the namespaces (run by path: it imports no hfexport).
NAMESPACES = Path(__file__).with_name("namespaces.py")
UNSHARE = (
    *("unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child"),
    *("--mount", "--mount-proc", "--net"),
)

# Credentials by where tools keep them, relative to a home folder: git's and curl's logins, SSH
# keys, the GitHub, AWS, Docker and PyPI clients' tokens. The Hub client's files come from
# `huggingface_hub.constants`, wherever HF_HOME puts them.
HOME_CREDENTIALS = (
    ".cache/huggingface/token",
    ".cache/huggingface/stored_tokens",
    ".netrc",
    ".git-credentials",
    ".ssh",
    ".aws",
    ".docker",
    ".config/gh",
    ".config/git/credentials",
    ".pypirc",
    ".kaggle",
)


def credential_paths() -> list[Path]:
    """The credential files and folders on this machine that a sandbox hides: the Hub client's saved
    logins (where `HF_HOME`/`HF_TOKEN_PATH` put them) and `HOME_CREDENTIALS` under this user's home."""
    from huggingface_hub import constants

    homes = {Path.home()}
    try:
        import pwd

        homes.add(Path(pwd.getpwuid(os.geteuid()).pw_dir))
    except (ImportError, KeyError):
        pass
    found = [Path(constants.HF_TOKEN_PATH), Path(constants.HF_STORED_TOKENS_PATH)]
    found += [home / name for home in sorted(homes) for name in HOME_CREDENTIALS]
    return sorted({path.resolve() for path in found if path.exists()})


@functools.cache
def refusal(user: WorkerUser | None = None) -> str | None:
    """Why this machine gives no namespaces to `user`'s processes (the first line `unshare` said),
    or None when it does. Asked once per process and user: ~10 ms."""

    if not sys.platform.startswith("linux"):
        return f"new namespaces are Linux's, and this is {sys.platform}"
    try:
        done = subprocess.run(
            [*UNSHARE, "--", sys.executable, "-I", "-S", str(NAMESPACES), "--", "true"],  # with `enter`'s mounts
            capture_output=True,
            text=True,
            timeout=30,
            preexec_fn=sandboxed(user),
            env=child_env(),
        )
    except FileNotFoundError:
        return "`unshare` (util-linux) is not installed"
    except (OSError, subprocess.SubprocessError) as error:
        return f"`unshare` could not run ({error})"
    if done.returncode == 0:
        return None
    said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return f"`unshare` was refused ({said})"


def wrap(
    command: list[str], user: WorkerUser | None = None, *, writes: Sequence[Path] = (), reads: Sequence[Path] = ()
) -> list[str]:
    """`command`, to run in the sandbox where this machine gives one (`refusal`), else as it is:
    then `require` has already refused what must not run unprotected.

    `writes`: the job's own folders, the only places it may write. `reads`: what it must read that
    may lie under a concealed folder (`concealed_roots`) or `/tmp` — the model being exported."""
    if refusal(user) is not None:
        return command

    args = [arg for path in credential_paths() for arg in ("--hide", str(path))]
    args += [arg for path in concealed_roots() for arg in ("--conceal", str(path))]

    # A snapshot's files link into its repo's blobs: the repo's folder is shown whole. A covered
    # folder itself, or one holding it, is never shown: that would undo the cover.
    covered = _covered()
    shown = [repo_root(Path(path)) for path in [*reads, *_runtime_paths()] if Path(path).is_dir()]
    shown = [
        path for path in shown if not any(root == path.resolve() or path.resolve() in root.parents for root in covered)
    ]
    args += [arg for path in shown for arg in ("--read", str(path))]
    args += [arg for path in [*writes, *map(Path, test_writable())] if path.is_dir() for arg in ("--write", str(path))]
    return [*UNSHARE, "--", sys.executable, "-I", "-S", str(NAMESPACES), *args, "--", *command]


def concealed_roots() -> list[Path]:
    """The folders a sandbox sees as empty: the Hub client's home and cache (every repo's downloads,
    the saved logins) and the export cache (every repo's exports)."""
    from huggingface_hub import constants

    roots = {Path(constants.HF_HOME), Path(constants.HF_HUB_CACHE), Path(constants.HF_XET_CACHE), cache_dir()}
    return sorted({root.resolve() for root in roots if root.is_dir()})


def _covered() -> list[Path]:
    """What a sandbox sees as empty or private: `/tmp`, `/dev/shm` and the concealed folders."""
    return [Path("/tmp"), Path("/dev/shm"), *concealed_roots()]


def _under(path: Path, roots: Sequence[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def visible(path: Path, reads: Sequence[Path] = ()) -> bool:
    """Whether a sandbox (`wrap`) started with `reads` sees `path` as it is here."""

    path = Path(path).resolve()
    return _under(path, [repo_root(Path(p)).resolve() for p in reads]) or not _under(path, _covered())


# hfexport's own folder: an editable install imports it through a finder, not `sys.path`.
PACKAGE_DIR = Path(__file__).resolve().parent.parent


def _runtime_paths() -> list[Path]:
    """What the sandboxed Python and its tools run from, where a private `/tmp` or a concealed folder
    would hide it (a checkout and its venv under /tmp, as CI may clone it): the interpreter's
    prefixes, `sys.path`, and hfexport's own folder (with the browser runtime's node_modules)."""
    found = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, *sys.path) if p and Path(p).is_dir()}
    found.add(PACKAGE_DIR)
    # The browser runtimes a `pip install` put in the export cache (`web.runtimes.ensure`), read-only.
    web = onnxruntime_web_dir().parent.parent
    found |= {web.resolve()} if web.is_dir() else set()
    covered = _covered()
    # Inside a covered folder, never one itself (a script run from /tmp puts /tmp on sys.path).
    return sorted(p for p in found if _under(p, covered) and p not in covered)


def require(what: str, user: WorkerUser | None) -> None:
    """Refuse to run a repo's code (`what`: "the repo's code", "pickled weights") unprotected.

    Protected means in namespaces (`wrap`) or, where there are none, as `HFEXPORT_WORKER_USER` — a
    user that cannot read the credential files either.

    Raises:
        ConfigError: neither protection is there, or the worker user could read a credential file.
    """

    why = refusal(user)
    if why is None:
        return
    if user is None:
        raise ConfigError(
            f"Running {what} needs a sandbox, and this machine gives none: {why}. hfexport will not run "
            "a repo's code where it could read your token",
            "Run where unprivileged user namespaces are allowed (Linux with util-linux's `unshare`; in Docker, "
            f"a seccomp profile that allows `unshare`), or as root with {WORKER_USER_ENV} naming an "
            "unprivileged user, as the Action's container does.",
        )
    exposed = [str(path) for path in credential_paths() if readable_by(path, user)]
    if exposed:
        raise ConfigError(
            f"Running {what} as {user.name!r} ({WORKER_USER_ENV}) without namespaces ({why}), and that "
            f"user can read credential files: {', '.join(exposed)}",
            "Make them readable by their owner only (chmod 600 files, chmod 700 folders), "
            "or log out there (`hf auth logout`).",
        )


def exit_code(code: int) -> int:
    """The exit code of a process `wrap` started as `subprocess` reports it: a signal as minus its
    number whether or not it ran in the sandbox (`_run_as_init` ends with 128 + the number)."""
    return 128 - code if code > 128 else code


def spawn(
    command: list[str], user: WorkerUser | None, home: Path, *, reads: Sequence[Path] = (), env: dict | None = None
) -> dict[str, Any]:
    """The keyword arguments of `subprocess.run` or `Popen` that start `command` as a repo's code
    runs: in the sandbox (`wrap`), as `user` where one is named (`sandboxed`), in `home` — the one
    folder it may write, lent to that user, its HOME and the repo's imported code's cache — with an
    environment holding no secret (`child_env`, plus `env`). The planner and the export workers both
    start theirs with it."""
    lend(home, user)
    own = {"HOME": str(home), "HF_MODULES_CACHE": str(home / "modules"), **(env or {})}
    return {
        "args": wrap(command, user, writes=[home], reads=reads),
        "cwd": str(home),
        "env": child_env(own),
        "preexec_fn": sandboxed(user),
    }

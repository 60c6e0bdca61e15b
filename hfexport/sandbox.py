"""The sandbox a repo's code runs in: no credential within its reach.

A repo's remote code and pickles run with the rights of the process that loads them. A scrubbed
environment (`proc.child_env`) is not enough: a process of the same user can read every ancestor's
`/proc/PID/environ` (`HF_TOKEN`, the webhook secret) and the saved login (`HF_HOME/token`), and it
can reach the network.

`wrap(command)` starts `command` under `unshare` (util-linux) in namespaces of its own — user, PID,
mount and network: `/proc` shows its own processes only, its only network interface is its own
loopback (up: its processes reach each other, nothing outside). This file then runs inside them as
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
(`require`). Only the standard library is imported at the top: `enter` runs before anything else.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .crossing import repo_root
from .errors import ConfigError
from .proc import WORKER_USER_ENV, child_env, readable_by, sandboxed
from .settings import cache_dir, test_writable

if TYPE_CHECKING:
    from .proc import WorkerUser

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
            [*UNSHARE, "--", sys.executable, "-I", "-S", __file__, "--", "true"],  # with `enter`'s mounts
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
    return [*UNSHARE, "--", sys.executable, "-I", "-S", __file__, *args, "--", *command]


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
PACKAGE_DIR = Path(__file__).resolve().parent


def _runtime_paths() -> list[Path]:
    """What the sandboxed Python and its tools run from, where a private `/tmp` or a concealed folder
    would hide it (a checkout and its venv under /tmp, as CI may clone it): the interpreter's
    prefixes, `sys.path`, and hfexport's own folder (with the browser runtime's node_modules)."""
    found = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, *sys.path) if p and Path(p).is_dir()}
    found.add(PACKAGE_DIR)
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


# ── Inside the namespaces ───────────────────────────────────────────────────

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT, _MS_BIND, _MS_REC = 1, 2, 4, 8, 32, 4096, 16384
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME = 1024, 2048, 1 << 21
# statvfs's f_flag bits → the mount flags a remount must repeat: in a user namespace the kernel
# refuses a remount that would clear a flag the mount was given outside it (nosuid, nodev, atime).
_KEPT_FLAGS = {
    os.ST_RDONLY: _MS_RDONLY,
    os.ST_NOSUID: _MS_NOSUID,
    os.ST_NODEV: _MS_NODEV,
    os.ST_NOEXEC: _MS_NOEXEC,
    os.ST_NOATIME: _MS_NOATIME,
    os.ST_NODIRATIME: _MS_NODIRATIME,
    os.ST_RELATIME: _MS_RELATIME,
}
# Pseudo-filesystems whose mounts may refuse a remount in a user namespace: their files are the
# kernel's, writable by the real root alone, so a mount left as it is there grants nothing.
_PSEUDO = ("/proc", "/sys", "/dev")
_PR_CAPBSET_DROP, _PR_SET_SECUREBITS, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 24, 28, 38, 47
_SECBIT_NOROOT_LOCKED, _CAP_AMBIENT_CLEAR_ALL = 0b11, 4  # root gains no capability by exec, for good
_CAP_LAST = 63  # above the kernel's last capability: dropping one it lacks is a harmless EINVAL


_libc = ctypes.CDLL(None, use_errno=True)


def _call(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"hfexport sandbox: {what}: {os.strerror(errno)}")


@dataclass
class Mounts:
    """What `enter` lays out: credentials to hide, folders to conceal, what to show again read-only
    (`reads`) or writable (`writes`)."""

    hide: list[str] = field(default_factory=list)
    conceal: list[str] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)


def enter(mounts: Mounts, command: list[str]) -> None:
    """Lay an empty file or read-only tmpfs over each credential, confine writes (`confine`), give
    up every capability (the mounts stay), and exec `command`. Raises OSError when a mount fails:
    then nothing runs."""
    for path in mounts.hide:
        target = path.encode()
        if os.path.isdir(path):
            _call(_libc.mount(b"tmpfs", target, b"tmpfs", _MS_RDONLY, b"size=4k,mode=555"), f"hide {path}")
        else:
            _call(_libc.mount(b"/dev/null", target, None, _MS_BIND, None), f"hide {path}")
            _call(_libc.mount(None, target, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY, None), f"hide {path}")
    confine(mounts)
    _loopback_up()
    _call(_libc.prctl(_PR_SET_SECUREBITS, _SECBIT_NOROOT_LOCKED, 0, 0, 0), "no capabilities for root")
    _call(_libc.prctl(_PR_CAP_AMBIENT, _CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "no ambient capabilities")
    for cap in range(_CAP_LAST + 1):
        _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    _call(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no new privileges")
    # `command` starts with no capability (root or not), so it cannot undo the mounts or remount /proc.
    _run_as_init(command)


def confine(mounts: Mounts) -> None:
    """Make every mount read-only; a private writable tmpfs on `/tmp` and `/dev/shm`; an empty
    read-only tmpfs over each `conceal` folder; then `reads` shown again read-only and `writes`
    writable, each bound from a descriptor opened before anything covered it.

    Measured (this repo's CI machine, 20 mounts): ~4 ms. The model's own files are bound, not copied."""
    shown = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in [*mounts.reads, *mounts.writes]}
    for point in dict.fromkeys(_mount_points()):
        try:
            _remount(point, read_only=True)
        except OSError:
            if not point.startswith(_PSEUDO):
                raise
    concealed = []
    for point in ("/tmp", "/dev/shm", *mounts.conceal):
        if os.path.isdir(point):  # not one inside an earlier one (a concealed folder under /tmp): gone already
            private = _libc.mount(b"tmpfs", point.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=1777")
            _call(private, f"cover {point}")
            concealed += [point] if point in mounts.conceal else []
    # Shallowest first: a folder shown inside another shown one lands on top of it.
    for path in sorted(shown, key=lambda p: p.count("/")):
        os.makedirs(path, exist_ok=True)  # inside a fresh tmpfs: the mount point
        source = f"/proc/self/fd/{shown[path]}".encode()
        _call(_libc.mount(source, path.encode(), None, _MS_BIND | _MS_REC, None), f"show {path}")
        _remount(path, read_only=path not in mounts.writes)
        os.close(shown[path])
    for point in concealed:
        _remount(point, read_only=True)


def _mount_points() -> list[str]:
    """Every mount point this namespace sees (`/proc/self/mountinfo`'s fifth field, unescaped)."""
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as info:
        points = [line.split()[4] for line in info if len(line.split()) > 4]
    return [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), point) for point in points]


def _remount(point: str, *, read_only: bool) -> None:
    kept = os.statvfs(point).f_flag
    flags = sum(bit for st, bit in _KEPT_FLAGS.items() if kept & st and bit != _MS_RDONLY)
    flags |= _MS_RDONLY if read_only else 0
    _call(_libc.mount(None, point.encode(), None, _MS_BIND | _MS_REMOUNT | flags, None), f"remount {point}")


def _loopback_up() -> None:
    """This network namespace's loopback up: its processes reach each other on 127.0.0.1 (the web
    check's browser fetches the graphs from its own node process), and nothing outside — the
    namespace has no other interface. Where the kernel refuses, it stays down and that check says so."""
    import fcntl
    import socket
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            flags = struct.unpack("16sH", fcntl.ioctl(sock, siocgifflags, struct.pack("16sH", b"lo", 0)))[1]
            fcntl.ioctl(sock, siocsifflags, struct.pack("16sH", b"lo", flags | iff_up))
        except OSError:
            pass


def _run_as_init(command: list[str]) -> None:
    """Run `command` as this namespace's init's only child and end as it ended, a signal as the
    shell's 128 + its number (`exit_code` reads it back).

    `unshare` passes a child's exit code on, but not a SIGKILL — the out-of-memory killer's: it
    cannot raise SIGKILL on itself again and exits 1 ("sigprocmask unblock failed"). Waiting here
    costs one idle Python of ~10 MB. When this process ends the kernel kills the whole namespace."""
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(command[0], command)
        finally:
            os._exit(127)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    os._exit(128 - code if code < 0 else code)


def exit_code(code: int) -> int:
    """The exit code of a process `wrap` started as `subprocess` reports it: a signal as minus its
    number whether or not it ran in the sandbox (`_run_as_init` ends with 128 + the number)."""
    return 128 - code if code > 128 else code


def _main(argv: list[str]) -> None:
    mounts = Mounts()
    lists = {"--hide": mounts.hide, "--conceal": mounts.conceal, "--read": mounts.reads, "--write": mounts.writes}
    while len(argv) > 1 and argv[0] in lists:
        lists[argv[0]].append(argv[1])
        argv = argv[2:]
    if not argv or argv[0] != "--" or len(argv) < 2:
        raise SystemExit("usage: sandbox.py [--hide|--conceal|--read|--write PATH]... -- COMMAND...")
    enter(mounts, argv[1:])


if __name__ == "__main__":
    _main(sys.argv[1:])

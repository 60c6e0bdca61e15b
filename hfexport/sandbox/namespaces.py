"""Inside the sandbox's namespaces: lay the mounts out and run the command (`launch.wrap` starts
this file as a script, `python -I -S namespaces.py`, under `unshare`). The standard library only:
it runs before anything else, and imports nothing of hfexport's.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from dataclasses import dataclass, field

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


def _main(argv: list[str]) -> None:
    mounts = Mounts()
    lists = {"--hide": mounts.hide, "--conceal": mounts.conceal, "--read": mounts.reads, "--write": mounts.writes}
    while len(argv) > 1 and argv[0] in lists:
        lists[argv[0]].append(argv[1])
        argv = argv[2:]
    if not argv or argv[0] != "--" or len(argv) < 2:
        raise SystemExit("usage: namespaces.py [--hide|--conceal|--read|--write PATH]... -- COMMAND...")
    enter(mounts, argv[1:])


if __name__ == "__main__":
    _main(sys.argv[1:])

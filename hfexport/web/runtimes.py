"""Where the browser runtimes are (`locate`), and installing them on first use where hfexport was
installed without them (`ensure`). No numpy, no node started: the CLI and the export cache read it.

A clone gets them with `npm ci --prefix hfexport/web` (`make install`). A `pip install` ships their
pins (hfexport/web/package.json and package-lock.json) but no `node_modules`, so the wasm and WebGPU
checks were silently absent and the card said so with a path on the user's disk. The first export
that would run them now installs those pins with npm into the user's cache
(`settings.web_cache_dir`: `~/.cache/hfexport/web/<pins>/`, ~45 MB, ~10 s), here, in the process
that plans and publishes: it runs no repo code, and the sandboxed worker, which does, has no
network and only reads the folder. `npm ci --ignore-scripts`: the lock file's exact versions and
digests, no install script run.

Installed into a `.partial` folder renamed into place: a killed install leaves nothing half there,
and of two runs racing, one's folder stands and the other's is dropped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..settings import ONNXRUNTIME_WEB, WEB_PINS, onnxruntime_web_dir, web_cache_dir, web_checks

# The bundle `ort_wasm.mjs` loads: what transformers.js imports in a browser (`onnxruntime-web/webgpu`).
BUNDLE = "ort.webgpu.min.mjs"
NPM_TIMEOUT_S = 600
PINS = ("package.json", "package-lock.json")


class WebRuntimeMissing(RuntimeError):
    """node or onnxruntime-web is not installed where hfexport looks: the check cannot run."""


def locate() -> tuple[str, Path]:
    """node and onnxruntime-web's package folder.

    Raises:
        WebRuntimeMissing: either is missing; its message says which and how to install it.
    """
    node = shutil.which("node")
    if node is None:
        raise WebRuntimeMissing("node is not installed (Node.js 18 or newer runs onnxruntime-web)")
    package = onnxruntime_web_dir()
    if not (package / "dist" / BUNDLE).is_file():
        raise WebRuntimeMissing(missing_reason() or f"onnxruntime-web is not installed where {ONNXRUNTIME_WEB} points")
    return node, package


def version() -> str | None:
    """The installed onnxruntime-web's version (its package.json), None where it is missing."""
    try:
        _, package = locate()
        return str(json.loads((package / "package.json").read_text())["version"])
    except (WebRuntimeMissing, OSError, ValueError, KeyError):
        return None


def pinned_version() -> str:
    """The onnxruntime-web version hfexport/web/package.json pins."""
    return str(json.loads((WEB_PINS / "package.json").read_text())["dependencies"]["onnxruntime-web"])


def missing_reason() -> str | None:
    """Why the browser runtimes are not installed where hfexport looks, in words fit for a card
    (no path of this machine); None where they are, or where `HFEXPORT_ONNXRUNTIME_WEB` names a
    folder (that it lacks them is `locate`'s to say)."""
    if os.environ.get(ONNXRUNTIME_WEB) or onnxruntime_web_dir().is_dir():
        return None
    if shutil.which("npm") is None:
        return f"onnxruntime-web {pinned_version()} is not installed, and npm, which installs it, is not"
    return f"onnxruntime-web {pinned_version()} is not installed yet (hfexport installs it with npm on first use)"


def ensure(say: Callable[[str], None]) -> None:
    """Install the pinned browser runtimes into the user's cache where neither the package nor
    `HFEXPORT_ONNXRUNTIME_WEB` has them and npm is here; `say` tells the user, once, before and
    after. Does nothing with the web checks off. Never raises: a failed install is said, and the
    checks then report themselves not run."""
    missing = missing_reason() if web_checks() else None
    if missing is None:
        return
    npm = shutil.which("npm")
    if npm is None:
        say(f"browser runtimes: {missing}; the wasm and WebGPU checks are not run (install Node.js)")
        return
    target = web_cache_dir()
    say(f"browser runtimes: installing onnxruntime-web {pinned_version()} and playwright-core (once) into {target}")
    try:
        failed = _install(npm, target)
    except OSError as e:  # the cache cannot be written: said, as a failed npm is
        failed = f"{target.parent} cannot be written ({e.strerror})"
    say(
        f"browser runtimes: {failed}; the wasm and WebGPU checks are not run"
        if failed
        else "browser runtimes: installed"
    )


def _install(npm: str, target: Path) -> str | None:
    """The pins installed in a `.partial` folder, renamed to `target`; None, or what went wrong."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    try:
        failed = _npm_ci(npm, partial)
        if failed is None and not target.is_dir():
            try:
                os.rename(partial, target)
            except OSError:  # another run installed them first: theirs stands
                if not target.is_dir():
                    raise
        return failed
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def _npm_ci(npm: str, folder: Path) -> str | None:
    """`npm ci` of hfexport's pins into `folder`; None, or what went wrong."""
    for name in PINS:
        shutil.copyfile(WEB_PINS / name, folder / name)
    command = [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-offline", "--prefix", str(folder)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return f"npm did not finish in {NPM_TIMEOUT_S} s"
    if done.returncode != 0:
        return "npm failed: " + (done.stderr.strip().splitlines() or ["(no output)"])[-1]
    return None

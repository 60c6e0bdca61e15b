"""Every `HFEXPORT_*` setting, named and read here alone.

Each is read from the environment when asked for, not at import: the CLI sets some for the
processes it starts (`quiet_noise`), and tests set others per test. Defaults live beside the names.

| variable | what | default |
|---|---|---|
| `HFEXPORT_CACHE` | where exports are kept between runs | `~/.cache/hfexport` |
| `HFEXPORT_CACHE_MAX_GB` | the exports kept there, at most (least recently used go first) | 20 |
| `HFEXPORT_HF_CACHE_MAX_GB` | `serve`: the Hub downloads kept in the HF cache, at most | 50 |
| `HFEXPORT_JOBS` | backends exported at once | 1 |
| `HFEXPORT_VARIANTS` | the variants asked for when the caller names none | (the registry's default) |
| `HFEXPORT_HUB_RETRIES` | attempts of one Hub call | 8 |
| `HFEXPORT_MAX_SUPPORT_FILE_MB` | cap on a config/tokenizer/code file | 100 |
| `HFEXPORT_MAX_DOWNLOAD_MB` | cap on a whole download | 200000 |
| `HFEXPORT_WORKER_USER` | the user a repo's code runs as when hfexport is root | (none) |
| `HFEXPORT_MEMORY_LIMIT_MB` | the memory the preflight counts on | the cgroup's limit, else the machine's |
| `HFEXPORT_QUIET_NOISE` | hide the libraries' known-harmless log lines ("0": show them) | "1" |
| `HFEXPORT_TESTING`, `HFEXPORT_FAULT` | the fault-injection test hook, live only with TESTING=1 | off |
| `HFEXPORT_TEST_WRITABLE` | a test's records: folders a sandbox may write, live only with TESTING=1 | (none) |
| `HFEXPORT_WEBHOOK_SECRET`, `HFEXPORT_READ_TOKEN` | `hfexport serve`'s secret and read token | (none) |
| `HFEXPORT_ACTION_DIR` | where the Action's entrypoint lives | `action/` beside the package |
| `HFEXPORT_ONNXRUNTIME_WEB` | onnxruntime-web's folder (browsers' runtime) | `hfexport/web/node_modules`, the cache's |
| `HFEXPORT_CHROMIUM` | the Chromium WebGPU placement is read in | `chromium-headless-shell`, `chromium` |
| `HFEXPORT_WEB_CHECKS` | run ONNX files on the browser's runtimes ("0": skip; the card then names none) | "1" |
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

CACHE = "HFEXPORT_CACHE"
CACHE_MAX_GB = "HFEXPORT_CACHE_MAX_GB"
HF_CACHE_MAX_GB = "HFEXPORT_HF_CACHE_MAX_GB"
JOBS = "HFEXPORT_JOBS"
VARIANTS = "HFEXPORT_VARIANTS"
HUB_RETRIES = "HFEXPORT_HUB_RETRIES"
MAX_SUPPORT_FILE_MB = "HFEXPORT_MAX_SUPPORT_FILE_MB"
MAX_DOWNLOAD_MB = "HFEXPORT_MAX_DOWNLOAD_MB"
WORKER_USER = "HFEXPORT_WORKER_USER"
MEMORY_LIMIT_MB = "HFEXPORT_MEMORY_LIMIT_MB"
QUIET_NOISE = "HFEXPORT_QUIET_NOISE"
TESTING = "HFEXPORT_TESTING"
FAULT = "HFEXPORT_FAULT"
TEST_WRITABLE = "HFEXPORT_TEST_WRITABLE"
WEBHOOK_SECRET = "HFEXPORT_WEBHOOK_SECRET"
READ_TOKEN = "HFEXPORT_READ_TOKEN"
ACTION_DIR = "HFEXPORT_ACTION_DIR"
ONNXRUNTIME_WEB = "HFEXPORT_ONNXRUNTIME_WEB"
CHROMIUM = "HFEXPORT_CHROMIUM"
WEB_CHECKS = "HFEXPORT_WEB_CHECKS"
# The browser runtimes' pins (package.json, package-lock.json), shipped in the package.
WEB_PINS = Path(__file__).parent / "web"

LIMITS_MB = {MAX_SUPPORT_FILE_MB: 100, MAX_DOWNLOAD_MB: 200_000}


def cache_dir() -> Path:
    """Where exports are kept between runs."""
    return Path(os.environ.get(CACHE) or Path.home() / ".cache" / "hfexport")


def cache_max_bytes(variable: str = CACHE_MAX_GB) -> int:
    """The bound on a cache (`HFEXPORT_CACHE_MAX_GB`, or `HFEXPORT_HF_CACHE_MAX_GB`), in bytes."""
    default = {CACHE_MAX_GB: 20.0, HF_CACHE_MAX_GB: 50.0}[variable]
    try:
        return int(float(os.environ.get(variable) or default) * 1e9)
    except ValueError:
        return int(default * 1e9)


def jobs() -> int:
    return max(1, int(os.environ.get(JOBS, "1")))


def variants() -> str | None:
    return os.environ.get(VARIANTS)


def hub_retries() -> int:
    return int(os.environ.get(HUB_RETRIES, "8"))


def limit_bytes(variable: str) -> int:
    """A download cap in bytes, from its variable (in MB) or its default."""
    try:
        return int(float(os.environ.get(variable) or LIMITS_MB[variable]) * 1_000_000)
    except ValueError:
        return LIMITS_MB[variable] * 1_000_000


def memory_limit_bytes() -> int | None:
    """The memory the preflight counts on, when set (`HFEXPORT_MEMORY_LIMIT_MB`); else None."""
    try:
        return int(float(os.environ[MEMORY_LIMIT_MB]) * 1_000_000)
    except (KeyError, ValueError):  # unset, or unreadable: the machine's own
        return None


def worker_user_name() -> str:
    return os.environ.get(WORKER_USER, "").strip()


def quiet_noise() -> bool:
    return os.environ.get(QUIET_NOISE, "1") != "0"


def set_quiet_noise(quiet: bool, *, only_if_unset: bool = False) -> None:
    """For this process and the workers it starts (they read it too)."""
    if only_if_unset:
        os.environ.setdefault(QUIET_NOISE, "1" if quiet else "0")
    else:
        os.environ[QUIET_NOISE] = "1" if quiet else "0"


def testing() -> bool:
    return os.environ.get(TESTING) == "1"


def faults() -> str:
    return os.environ.get(FAULT, "")


def test_writable() -> list[str]:
    """Folders (`os.pathsep`-separated) a sandbox may write besides its job's own: where a test's
    hostile repo code records what it reached. Nothing unless `HFEXPORT_TESTING=1`."""
    value = os.environ.get(TEST_WRITABLE, "") if testing() else ""
    return [path for path in value.split(os.pathsep) if path]


def action_dir() -> Path | None:
    value = os.environ.get(ACTION_DIR)
    return Path(value) if value else None


def onnxruntime_web_dir() -> Path:
    """onnxruntime-web's package folder: the one `HFEXPORT_ONNXRUNTIME_WEB` names; else the one beside
    the package, where a clone's `npm ci --prefix hfexport/web` (`make install`) put the version
    hfexport/web/package.json pins; else the user cache's, where a `pip install` gets those pins on
    first use (`web.runtimes.ensure`)."""
    named = os.environ.get(ONNXRUNTIME_WEB)
    if named:
        return Path(named)
    beside = WEB_PINS / "node_modules" / "onnxruntime-web"
    return beside if beside.is_dir() else web_cache_dir() / "node_modules" / "onnxruntime-web"


def web_cache_dir() -> Path:
    """Where the browser runtimes are installed when the package holds none: a folder per pins (the
    lock file's digest), so a hfexport upgrade that moves them installs beside, never over, the old."""
    lock = (WEB_PINS / "package-lock.json").read_bytes()
    return cache_dir() / "web" / hashlib.sha256(lock).hexdigest()[:12]


def chromium() -> str | None:
    """The Chromium named by `HFEXPORT_CHROMIUM` (None: found on PATH by `web.webgpu.chromium`)."""
    return os.environ.get(CHROMIUM) or None


def web_checks() -> bool:
    """Whether ONNX files are run on onnxruntime-web (wasm, WebGPU placement) before publishing.
    Off ("0"), the report and card say nothing of the browser; the export cache keys it."""
    return os.environ.get(WEB_CHECKS, "1") != "0"

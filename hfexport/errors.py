"""Typed errors. Each names its cause and the fix, and carries the exit code the CLI returns.

Raised before anything is written: an `HfExportError` means the run stopped on bad input and
left no output folder behind. A backend that fails *during* export is not an exception at this
level: it is a `failed` entry in the report (see `report.py`), so the other backends still count.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What every hfexport process's exit status means: the CLI, the Action and the webhook
    service's executors read it from here alone."""

    OK = 0
    BACKEND_FAILED = 1  # a backend failed to export or validate; the report (and a PR, for the others) exists
    BAD_INPUT = 2  # an `HfExportError`: nothing was written
    HUB_UNAVAILABLE = 3  # the Hub kept failing after every retry
    INTERNAL_ERROR = 4  # an unexpected exception, a bug: not 1 nor 2, so it is told apart (and not retried)
    INTERRUPTED = 130  # Ctrl-C


def retryable_exit(code: int) -> bool:
    """Whether running the same job again can end otherwise: not after bad input or a bug (the
    Hub failing, a crash or a kill by signal: yes)."""
    return code not in (ExitCode.BAD_INPUT, ExitCode.INTERNAL_ERROR)


class HfExportError(Exception):
    """Base class: `cause` says what is wrong, `fix` what to do about it."""

    exit_code = ExitCode.BAD_INPUT

    def __init__(self, cause: str, fix: str):
        super().__init__(cause)
        self.cause = cause
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.cause}\nFix: {self.fix}"


class SourceNotFoundError(HfExportError):
    """The SOURCE is neither an existing folder nor a reachable Hub repo."""


class RevisionNotFoundError(HfExportError):
    """The requested revision does not exist in the repo."""


class ConfigError(HfExportError):
    """`config.json` is missing or cannot be read."""


class UnsupportedArchitectureError(HfExportError):
    """transformers has no class for the architecture, or the task does not fit it."""


class RemoteCodeError(HfExportError):
    """The model needs code from its repo and `--trust-remote-code` was not given."""


class NoWeightsError(HfExportError):
    """The folder holds no weight files at all."""


class PickleWeightsError(HfExportError):
    """The weights are pickled only and `--allow-pickle` was not given."""


class UnknownBackendError(HfExportError):
    """A backend name that is not registered."""


class OutputDirError(HfExportError):
    """The output folder exists and is not an earlier hfexport output."""


class UnsafePathError(HfExportError):
    """The repo lists a file whose path is not safe to write to disk."""


class DownloadLimitError(HfExportError):
    """A file, or the whole download, is over its size cap."""


class ResourceError(HfExportError):
    """No backend fits this machine's memory or disk by hfexport's measured cost (the preflight)."""


class AuthError(HfExportError):
    """The Hub refused the token (missing, wrong, or without access)."""


# The fix of every AuthError of `push`: what it needs, and the three ways to give it.
TOKEN_FIX = (
    "push needs a token that can open pull requests on the repo: set HF_TOKEN, pass --token, or run "
    "`hf auth login` (a write token, or a fine-grained one that may open pull requests there)."
)


def token_fix(into: str | None = None) -> str:
    """The fix of an AuthError of `push`, for the destination asked for: a PR (`TOKEN_FIX`), or the
    repo `into` names (`push --into`), which the token must be able to create and write to."""
    if into is None:
        return TOKEN_FIX
    namespace = into.split("/")[0]
    return (
        f"push --into needs a token that may create and write to {into}: one of {namespace} itself, or of a "
        f"member of the {namespace} organisation with write access (a write token, or a fine-grained one "
        "that may write to repos there). Set HF_TOKEN, pass --token, or run `hf auth login`; or name a repo "
        "of your own namespace."
    )


class HubUnavailableError(HfExportError):
    """The Hub kept failing after every retry."""

    exit_code = ExitCode.HUB_UNAVAILABLE


def error_class(name: str) -> type[HfExportError]:
    """The error class called `name` (an error that crossed a process boundary by name), else the base."""
    found = globals().get(name)
    return found if isinstance(found, type) and issubclass(found, HfExportError) else HfExportError


def describe_error(e: BaseException) -> str:
    """An exception's first line, and its causes' (exporters wrap the real error), as a report keeps it."""
    parts: list[str] = []
    current: BaseException | None = e
    while current is not None and len(parts) < 3:
        line = (str(current).strip().splitlines() or [""])[0][:400]
        parts.append(line or type(current).__name__)
        current = current.__cause__
    return " <- ".join(parts)

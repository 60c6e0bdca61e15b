"""Typed errors. Each names its cause and the fix, and carries the exit code the CLI returns.

Raised before anything is written: an `HfExportError` means the run stopped on bad input and
left no output folder behind. A backend that fails *during* export is not an exception at this
level: it is a `failed` entry in the report (see `report.py`), so the other backends still count.
"""

from __future__ import annotations


class HfExportError(Exception):
    """Base class: `cause` says what is wrong, `fix` what to do about it."""

    exit_code = 2

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


class AuthError(HfExportError):
    """The Hub refused the token (missing, wrong, or without access)."""


class ExportFailedError(HfExportError):
    """At least one backend failed to export or validate. The report was still written."""

    exit_code = 1


class HubUnavailableError(HfExportError):
    """The Hub kept failing after every retry."""

    exit_code = 3


# Exit code of an unexpected exception (a bug): not 1 ("a backend failed") nor 2 (bad input), so
# the webhook service does not retry it and a workflow can tell it apart.
INTERNAL_ERROR_EXIT = 4


def error_class(name: str) -> type[HfExportError]:
    """The error class called `name` (an error that crossed a process boundary by name), else the base."""
    found = globals().get(name)
    return found if isinstance(found, type) and issubclass(found, HfExportError) else HfExportError

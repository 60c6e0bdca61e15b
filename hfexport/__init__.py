"""hfexport: verified torch.export, ONNX and ExecuTorch exports of Hugging Face models, proposed back
to their repo as one pull request.

The Python API is `export(source)` and `push(repo_id)`; what they return is in `hfexport.report`.
Where the code lives, by where it runs:

    report.py, errors.py, backends.py   the contracts, typed errors and the backend registry
    pipeline/                           the stages run by the parent: resolve, fetch, plan, export, package
    worker/                             the isolated process that loads, exports and validates one backend
    hub/                                what talks to the Hub to publish: reads, decides, writes the PR
    entrypoints/                        the Python API, the CLI, the demo and the webhook service
"""

from .entrypoints.api import export, push
from .errors import (
    AuthError,
    ConfigError,
    ExitCode,
    HfExportError,
    HubUnavailableError,
    NoWeightsError,
    OutputDirError,
    PickleWeightsError,
    RemoteCodeError,
    RevisionNotFoundError,
    SourceNotFoundError,
    UnknownBackendError,
    UnsupportedArchitectureError,
)
from .messages import PublishResult
from .report import BackendResult, ExportPlan, PublishAction, Report, Shape, Source, Status

__version__ = "0.1.0"

__all__ = [
    "export",
    "push",
    "Report",
    "BackendResult",
    "PublishResult",
    "PublishAction",
    "Status",
    "Source",
    "ExportPlan",
    "Shape",
    "HfExportError",
    "AuthError",
    "ConfigError",
    "ExitCode",
    "HubUnavailableError",
    "NoWeightsError",
    "OutputDirError",
    "PickleWeightsError",
    "RemoteCodeError",
    "RevisionNotFoundError",
    "SourceNotFoundError",
    "UnknownBackendError",
    "UnsupportedArchitectureError",
]

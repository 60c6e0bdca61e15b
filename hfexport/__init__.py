"""hfexport: verified torch.export, ONNX and ExecuTorch exports of Hugging Face models."""

from .api import export
from .errors import (
    AuthError,
    ConfigError,
    ExportFailedError,
    HfExportError,
    NoWeightsError,
    OutputDirError,
    PickleWeightsError,
    RemoteCodeError,
    RevisionNotFoundError,
    SourceNotFoundError,
    UnknownBackendError,
    UnsupportedArchitectureError,
)
from .package import Report
from .plan import ExportPlan, Shape

__version__ = "0.1.0"

__all__ = [
    "export",
    "Report",
    "ExportPlan",
    "Shape",
    "HfExportError",
    "AuthError",
    "ConfigError",
    "ExportFailedError",
    "NoWeightsError",
    "OutputDirError",
    "PickleWeightsError",
    "RemoteCodeError",
    "RevisionNotFoundError",
    "SourceNotFoundError",
    "UnknownBackendError",
    "UnsupportedArchitectureError",
]

"""The messages that cross a process boundary beside the report: the job a worker is handed
(`WorkerJob`, `job.json`) and the plan it is asked for (`PlanRequest` → `PlanAnswer`, or the
`ErrorInfo` of why not), a push's request (`ExportRequest`), and the service queue's job plan
(`JobPlan`). Each is written by one process and read back by another (`to_json`/`from_json`,
`to_dict`/`from_dict`); like the report, this module imports nothing of hfexport's but `report`."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

from .report import ExportPlan, PublishAction, Report, known_fields


@dataclass(frozen=True)
class WorkerJob:
    """What the parent hands one backend's worker (`job.json`): the other direction of the process
    boundary is the `BackendResult` it writes back."""

    backend: str
    backend_module: str  # imported first in the worker: a backend registered outside hfexport is found
    plan: ExportPlan
    model_dir: str
    out_dir: str
    use_safetensors: bool = True

    def to_json(self) -> str:
        return json.dumps({**{f.name: getattr(self, f.name) for f in fields(self)}, "plan": self.plan.to_dict()})

    @classmethod
    def from_json(cls, text: str) -> WorkerJob:
        data = known_fields(cls, json.loads(text))
        return cls(**{**data, "plan": ExportPlan.from_dict(data["plan"])})


@dataclass(frozen=True)
class ExportRequest:
    """What a push was asked beyond its backends: the task, the variants and their quality
    thresholds. With the source sha it decides each backend's export (`hub.decide.mark_key`), so an
    unchanged rerun is recognised before anything is downloaded."""

    task: str = "auto"
    variants: list[str] = field(default_factory=list)
    min_quality: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class JobPlan:
    """What the webhook service exports of a repo it watches: the backends, the task, whether a
    repo's own code may run (in the sandbox, `hfexport/sandbox/`) and where the exports go (a PR
    on the repo, or `into` a repo of one's own: `push --into`). A queued job keeps it as the text
    `"onnx,dynamo|auto"` (`"…|auto|trust-remote-code"`, `"…|auto|into=me/model-ONNX"`,
    `"…|by=alice"` last; `str`, `parse`), part of its dedup key.

    `requester`: the Hub user who asked for it on the request page, whose token alone it runs with.
    Being part of the dedup key, a request is never merged into a watched repo's job or another
    requester's, so no job runs with a token that was not given for it (issue 56, row 7)."""

    backends: tuple[str, ...]
    task: str = "auto"
    trust_remote_code: bool = False
    into: str | None = None
    requester: str | None = None

    def __str__(self) -> str:
        flags = (["trust-remote-code"] if self.trust_remote_code else []) + ([f"into={self.into}"] if self.into else [])
        flags += [f"by={self.requester}"] if self.requester else []
        return "|".join([",".join(self.backends), self.task, *flags])

    @classmethod
    def parse(cls, text: str) -> JobPlan:
        backends, _, rest = text.partition("|")
        task, *flags = rest.split("|")
        names = tuple(name for name in backends.split(",") if name)
        into = next((flag.removeprefix("into=") for flag in flags if flag.startswith("into=")), None)
        requester = next((flag.removeprefix("by=") for flag in flags if flag.startswith("by=")), None)
        return cls(names, task or "auto", "trust-remote-code" in flags, into, requester)


@dataclass(frozen=True)
class PlanRequest:
    """What the parent asks `python -m hfexport.worker.plan` (on its stdin) for a model whose
    config runs the repo's code; the other direction is a `PlanAnswer`."""

    model_dir: str
    backends: list[str]
    task: str
    trust_remote_code: bool

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> PlanRequest:
        return cls(**known_fields(cls, json.loads(text)))


@dataclass(frozen=True)
class ErrorInfo:
    """An `HfExportError` across a process boundary: its class name, cause and fix."""

    type: str
    cause: str
    fix: str


@dataclass(frozen=True)
class PlanAnswer:
    """The planning child's answer, the last line of its stdout: the plan, or the error it raised."""

    plan: ExportPlan | None = None
    error: ErrorInfo | None = None

    def to_json(self) -> str:
        return json.dumps(
            {"plan": self.plan.to_dict() if self.plan else None, "error": asdict(self.error) if self.error else None}
        )

    @classmethod
    def from_json(cls, text: str) -> PlanAnswer:
        data = json.loads(text)
        plan, error = data.get("plan"), data.get("error")
        return cls(ExportPlan.from_dict(plan) if plan else None, ErrorInfo(**error) if error else None)


@dataclass
class PublishResult:
    """What `push` did on the Hub, with the report it published (None when nothing was exported).
    `hfexport push --json` prints `to_dict()`; the Action and the webhook service read it back
    with `from_dict`."""

    action: PublishAction
    repo_id: str
    pr_num: int | None = None
    pr_url: str | None = None
    commit: str | None = None
    files: list[str] = field(default_factory=list)
    description: str | None = None
    card: str | None = None
    report: Report | None = None
    title: str | None = None  # the PR's (or the discussion's) title
    repo_url: str | None = None  # a derived repo's page (`push --into`)

    def __post_init__(self) -> None:
        self.action = PublishAction(self.action)

    @property
    def url(self) -> str | None:
        """Where the exports are: the repo of one's own (`--into`), else the pull request."""
        return self.repo_url or self.pr_url

    @property
    def failed(self) -> bool:
        """A backend that ran did not validate (the exit code 1 of `push`)."""
        return self.report is not None and not self.report.ok

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["action"] = str(self.action)
        data["report"] = self.report.to_dict() if self.report is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict) -> PublishResult:
        data = known_fields(cls, data)
        if data.get("report") is not None:
            data["report"] = Report.from_dict(data["report"])
        return cls(**data)

"""What a job came to: the record an executor returns, the queue keeps as the job's result and
`/jobs` shows.

An executor is anything with `run(job) -> JobOutcome` and `close()` (`executors.Executor`). The outcome is
typed here once; the queue stores `to_dict()` (only the fields set, so a local job's record holds
no HF Jobs keys, and records written before this type existed read back the same). A dict with
these keys, from an executor of one's own, is read as one (`JobOutcome.of`), and an outcome reads
as its dict (`outcome["action"]`), the shape the job's JSON has always had.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, kw_only=True)
class HfJobRun:
    """One hardware group's HF Job, as it ended."""

    hf_job: str
    hf_job_url: str | None = None
    flavor: str | None = None
    timeout_s: int | None = None
    sized_for: str | None = None  # the preflight's estimate the CPU flavor was chosen by


@dataclass(frozen=True, kw_only=True)
class JobOutcome(Mapping[str, Any]):
    """A job run to its end by an executor.

    `action`, `pr_url` and `exit_code` are the push's own (`PublishResult`, run here); `stage`
    and `jobs` (per hardware group) an `HfJobsExecutor`'s, whose Jobs publish on their own;
    `seconds` the service's, once the run returned.
    """

    action: str | None = None
    pr_url: str | None = None
    repo_url: str | None = None  # a derived repo's (`push --into`)
    exit_code: int | None = None
    warm: bool | None = None  # run by a push process started ahead of the job
    stage: str | None = None
    jobs: dict[str, HfJobRun] = field(default_factory=dict)
    seconds: float | None = None
    # What it published, a line each (`table.summary`): the request page's summary when done.
    made: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, value: JobOutcome | Mapping[str, Any]) -> JobOutcome:
        """`value` as an outcome: itself, or a dict of these fields (`to_dict`'s shape).

        Raises:
            TypeError: a key that is no field of an outcome (an executor's bug: its job fails,
                saying which).
        """
        if isinstance(value, JobOutcome):
            return value
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise TypeError(f"the executor's result has keys no job outcome has: {', '.join(unknown)}")
        jobs = {hardware: HfJobRun(**run) for hardware, run in dict(value.get("jobs") or {}).items()}
        return cls(**{**value, "jobs": jobs})

    def to_dict(self) -> dict[str, Any]:
        """The fields set, as JSON (the queue's `result` column)."""
        record: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "jobs":
                value = {hardware: _set(dataclasses.asdict(run)) for hardware, run in value.items()} or None
            if f.name == "made":
                value = value or None
            if value is not None:
                record[f.name] = value
        return record

    @property
    def url(self) -> str | None:
        """Where the exports are: the repo of one's own (`--into`), else the pull request."""
        return self.repo_url or self.pr_url

    def timed(self, seconds: float) -> JobOutcome:
        return dataclasses.replace(self, seconds=round(seconds, 1))

    # Read as the job's JSON: `outcome["action"]`, `{**outcome}`.
    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


@dataclass(frozen=True)
class Superseded:
    """A job that did not run: its branch had moved on, and `job` runs the newer `head_sha` instead."""

    head_sha: str
    job: int

    def to_dict(self) -> dict[str, Any]:
        return {"head_sha": self.head_sha, "job": self.job}


# What a finished job's `result` holds: the run's outcome, or the job that superseded it.
JobResult = JobOutcome | Superseded


def result_of(record: Mapping[str, Any]) -> JobResult:
    """A stored `result` read back: a `Superseded` record, else an outcome (`JobOutcome.of`)."""
    if set(record) == {"head_sha", "job"}:
        return Superseded(str(record["head_sha"]), int(record["job"]))
    return JobOutcome.of(record)


def _set(record: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in record.items() if value is not None}

"""The Python API: one entry point per job, each chaining the stages.

    export(source)   resolve → fetch → plan → export (+ validate, in each backend's process) → package
    push(repo_id)    resolve → read the Hub → decide → fetch → plan → export → package → decide → apply

Each stage is a module with a small dataclass contract the next one reads (`hfexport/pipeline/`,
then `hfexport/hub/` for publishing); all of them meet in `hfexport.report`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..backends import get_backend, parse_backends
from ..errors import AuthError, ConfigError, HubUnavailableError, token_fix
from ..messages import ExportRequest, PublishResult
from ..pipeline import cache
from ..pipeline.export import DEFAULT_TIMEOUT_S, BackendWorkers, Progress, default_jobs, run_backends
from ..pipeline.fetch import FetchedModel, fetch
from ..pipeline.package import package, staging_folder
from ..pipeline.plan import check_request, plan_isolated
from ..pipeline.preflight import Machine, check, check_or_raise, weights_of
from ..pipeline.resolve import resolve
from ..proc import FAULT_ENV, injected_fault
from ..report import ExportPlan, Report, Source, Split
from ..sandbox.identity import worker_user
from ..sandbox.launch import require
from ..settings import cache_dir
from ..settings import variants as default_variants
from ..variants import DEFAULT, parse_thresholds, parse_variants, unavailable
from ..web.runtimes import ensure as ensure_browser_runtimes


def export(
    source: str,
    out: str | Path | None = None,
    *,
    backends: str | list[str] | None = None,
    revision: str | None = None,
    task: str = "auto",
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
    token: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    jobs: int | None = None,
    progress: Progress | None = None,
    adjust_plan: Callable[[ExportPlan], ExportPlan] | None = None,
    variants: str | list[str] | None = None,
    min_quality: list[str] | dict | None = None,
    force_memory: bool = False,
) -> Report:
    """Export a model folder or Hub repo to every backend, validate each export, and write them out.

    Args:
        source: a local model folder, or a Hub repo id (downloaded at the sha `revision` resolves to).
        out: output folder (default `./hfexport-out/<name>`); replaced whole if it is an earlier output.
        backends: names or `"dynamo,onnx"`; default dynamo, onnx and executorch.
        revision: branch, tag or sha of a Hub repo.
        task: `"auto"` or a name from `hfexport.plan.TASKS`.
        allow_pickle: accept pickled weights when no safetensors exist.
        trust_remote_code: accept a model whose code lives in its repo.
        token: Hub token (default: the client's, e.g. `HF_TOKEN`). Never printed or recorded.
        timeout_s: per backend.
        jobs: backends exported at once (default `HFEXPORT_JOBS`, else 1).
        variants: smaller/faster variants to derive where a backend offers them (`"int8,fp16"`,
            `"none"`; default `HFEXPORT_VARIANTS`, else `variants.DEFAULT_VARIANTS`).
        min_quality: overrides of the variants' quality thresholds (`["int8.cosine_mean=0.995"]`).
        force_memory: export every backend even where the preflight expects it not to fit.
        progress: `progress(backend, message)` callback.
        adjust_plan: edit the plan before exporting (e.g. `lambda p: replace(p, sample=Shape(1, 8))`).

    Returns:
        The `Report` (also written to `<out>/hfexport-report.json`). `report.ok` is False if any
        backend that ran failed; its files are then absent and its entry holds the error. A backend
        the preflight expects not to fit is reported skipped with its estimate.

    Raises:
        HfExportError subclasses for bad input, before anything is written; `ResourceError` when
        no backend fits this machine (before any download).
    """
    names = parse_backends(backends)
    request = _request(task, variants, min_quality)
    if injected_fault("run") == "raise":
        raise RuntimeError(f"injected by the {FAULT_ENV} test hook")
    resolved = resolve(source, revision=revision, token=token)
    out_dir = Path(out) if out is not None else Path("hfexport-out") / Path(resolved.ref).name
    too_large, jobs = _preflight(resolved, names, jobs, token, force_memory, out_dir, bool(request.variants))
    _browser_runtimes(names, progress)
    fetched = fetch(resolved, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code, token=token)
    with _planned(fetched, names, request, trust_remote_code, jobs) as (plan, workers):
        if adjust_plan is not None:
            plan = adjust_plan(dataclasses.replace(plan))
        return _export_into(
            out_dir, fetched, plan, workers, timeout_s=timeout_s, progress=progress, too_large=too_large
        )


def _preflight(
    source: Source, names: list[str], jobs: int | None, token: str | None, force: bool, out_dir: Path, variants: bool
) -> tuple[dict[str, str], int]:
    """The backends that will not fit this machine, each with why (`pipeline/preflight.py`), read
    from the weights' headers before anything is downloaded (none with `force`), and the backends
    to export at once: `jobs`, or 1 where running them side by side is what would not fit.
    `variants`: some are asked for (their cost counts).

    Raises:
        ResourceError: no backend fits (and not `force`).
    """
    jobs = jobs or default_jobs()
    if force:
        return {}, jobs
    weights, machine, downloads = weights_of(source, token), Machine.here(out_dir), source.kind == "hub"
    verdict = check(weights, names, machine, jobs, downloads, variants)
    if jobs > 1 and verdict.too_large:
        alone = check(weights, names, machine, 1, downloads, variants)
        if len(alone.too_large) < len(verdict.too_large):  # fewer at once rather than fewer backends
            verdict, jobs = alone, 1
    return check_or_raise(verdict).reasons(), jobs


def _browser_runtimes(names: list[str], progress: Progress | None) -> None:
    """Where a backend's files are checked in browsers' runtimes and hfexport was installed without
    them (`pip install`), they are installed now, here: never in the sandboxed worker."""
    browsers = [name for name in names if get_backend(name).runs_in_browsers]
    if browsers:
        ensure_browser_runtimes(lambda line: progress(browsers[0], line) if progress else None)


@contextmanager
def _planned(
    fetched: FetchedModel, names: list[str], request: ExportRequest, trust_remote_code: bool, jobs: int | None = None
) -> Iterator[tuple[ExportPlan, BackendWorkers]]:
    """The plan for `fetched` (what both jobs export), and the worker process, started before it
    so that it imports torch and the exporters while this process plans (it imports them too).

    Raises:
        HfExportError subclasses: a task or model that cannot be planned, before any worker starts.
    """
    task = request.task
    checked = check_request(fetched.model_dir, task, trust_remote_code)
    # No repo code runs unprotected: where this machine gives no sandbox, refuse it here (exit 2).
    if trust_remote_code:
        require("a repo's own code (--trust-remote-code)", worker_user())
    if not fetched.use_safetensors:
        require("a repo's pickled weights (--allow-pickle: unpickling runs code)", worker_user())
    with BackendWorkers(names, jobs, fetched.model_dir) as workers:
        plan = plan_isolated(fetched.model_dir, names, task, trust_remote_code, checked)
        missing = unavailable(request.variants, plan.backends, generates=plan.split != Split.SINGLE)
        asked = [name for name in request.variants if name != DEFAULT]
        # Nothing asked can be derived: refused now, not found missing after the export. (Some of it:
        # the rest is reported skipped with its reason, as the report always says.)
        if missing and len(missing) == len(asked):
            raise ConfigError(
                "No export of this model derives "
                + "; ".join(f"the {name} variant ({why})" for name, why in missing.items())
                + ".",
                "Drop it from --variants (variants= in Python, or .hfexport.yaml), or ask for default: each "
                "export gets the variants that suit it.",
            )
        yield dataclasses.replace(plan, variants=request.variants, min_quality=request.min_quality), workers


def _export_into(
    out_dir: Path, fetched: FetchedModel, plan: ExportPlan, workers: BackendWorkers, **run_options
) -> Report:
    """Stages 4-6 for both jobs: run the backends into a staging folder, then package it as `out_dir`
    (`run_options`: `run_backends`' own)."""
    with staging_folder(out_dir) as staging:
        results = run_backends(fetched, plan, staging, workers=workers, **run_options)
        return package(staging, out_dir, fetched.source, plan, results, fetched.model_dir)


PUBLISH_ATTEMPTS = 8


def push(
    repo_id: str,
    *,
    revision: str | None = None,
    backends: str | list[str] | None = None,
    task: str = "auto",
    token: str | None = None,
    dry_run: bool = False,
    force: bool = False,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: Progress | None = None,
    log: Callable[[str], None] = lambda message: None,
    variants: str | list[str] | None = None,
    min_quality: list[str] | dict | None = None,
    force_memory: bool = False,
    into: str | None = None,
) -> PublishResult:
    """Export a Hub repo and open (or update) one verified PR on it — the `hfexport push` job —
    or, with `into`, commit the exports to the `main` of a repo of one's own.

    The revision is resolved to a sha and the Hub's state read once (`hub.state.read_state`).
    Nothing is exported when the repo opted out, when our open PR already holds that sha and plan,
    or when a maintainer closed our PR (without `force`). Exports are cached (`pipeline/cache.py`)
    by model content, plan digest and runtime versions, so a README-only commit, or a rerun after a
    failed upload, does not export again. A new PR branches from the commit that was read; if the
    owner changed a path it writes meanwhile, the state is read again at main's new head and the
    PR decided from there (`hub.publish.BaseMoved`).

    With `into` (`"me/model-ONNX"`) the exports go to that repo's main instead, created when
    missing (`hub.state.OwnRepo`); an unchanged source writes nothing there.

    Returns:
        The `PublishResult`; its `report` is None when nothing had to be exported.

    Raises:
        HfExportError subclasses: bad input, auth (`AuthError`), Hub down (`HubUnavailableError`),
        no backend fitting this machine (`ResourceError`, before any download).
    """
    from huggingface_hub import HfApi

    # here: the publishing protocol and the card's text, ~26 ms of every start-up, for `push` alone
    from ..hub.decide import decide
    from ..hub.publish import apply
    from ..hub.state import OwnRepo, PullRequest, read_state

    names = parse_backends(backends, into)
    token = _checked_before_the_hub(repo_id, task, variants, min_quality, into, token, dry_run)
    resolved = resolve(repo_id, revision=revision, token=token, hub_only=True)
    repo_id = resolved.ref  # the id, where a URL was given
    destination = OwnRepo.checked(into, repo_id) if into else PullRequest(repo_id)
    api = HfApi(token=token)
    state = read_state(api, destination, resolved.sha, log=log)
    request = _request_for(state.settings, task, variants, min_quality)
    # Before downloading or planning: opted out, already published, or closed by a maintainer.
    early = decide(state, names, request, force=force)
    if early is not None:
        return apply(api, state, early, None, dry_run=dry_run, log=log)

    def exported(resolved: Source) -> Report:
        too_large, jobs = _preflight(resolved, names, None, token, force_memory, cache_dir(), bool(request.variants))
        _browser_runtimes(names, progress)  # before the cache key, which names their version
        fetched = fetch(resolved, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code, token=token)
        return cache.reuse_or_export(
            fetched,
            names,
            request,
            trust_remote_code,
            planned=lambda: _planned(fetched, names, request, trust_remote_code, jobs),
            export=lambda out, plan, workers: _export_into(
                out, fetched, plan, workers, timeout_s=timeout_s, progress=progress, too_large=too_large
            ),
            force=force,
            log=log,
        )

    report = exported(resolved)
    try:
        with cache.in_use(report.out_dir):
            options = {"force": force, "dry_run": dry_run, "revision": revision, "token": token, "log": log}
            return _publish(api, state, names, request, report, resolved, exported, **options)
    finally:
        cache.evict()  # within HFEXPORT_CACHE_MAX_GB: the least recently used exports go first


def _publish(api, state, names, request, report, resolved, exported, *, force, dry_run, revision, token, log):
    """`push`'s last stage: decide and write, again on a conflict (see below)."""
    from ..hub.decide import decide  # here: as in `push`
    from ..hub.publish import BaseMoved, PublishConflict, apply
    from ..hub.state import read_state

    repo_id = resolved.ref
    # Another runner (the GPU job, a second HF Job) may commit to the same PR meanwhile: our write
    # names the PR head it was decided on, and on a conflict we read the PR again and merge. The
    # owner may commit to main while we export: a new PR that would touch what they changed is
    # decided again from main's new head (and exported again only if the model itself changed).
    for _ in range(PUBLISH_ATTEMPTS):
        decision = decide(state, names, request, report, force=force)
        try:
            return apply(api, state, decision, report, dry_run=dry_run, log=log)
        except PublishConflict as e:
            log(f"{e}: reading the pull request again")
            state = read_state(api, state.destination, resolved.sha, log=log, base=state.base)
        except BaseMoved as e:
            log(f"{e}: deciding again from there")
            moved = resolve(repo_id, revision=revision, token=token, hub_only=True)
            if moved.sha != resolved.sha:  # the revision is a branch that moved: its model may have too
                resolved, report = moved, exported(moved)
            state = read_state(api, state.destination, resolved.sha, log=log, base=e.head)
    raise HubUnavailableError(
        f"Our pull request on {repo_id} kept changing under this run ({PUBLISH_ATTEMPTS} attempts).",
        "Run push again: it picks up what the other runs published.",
    )


def _checked_before_the_hub(
    repo_id: str,
    task: str,
    variants: str | list[str] | None,
    min_quality: list[str] | dict | None,
    into: str | None,
    token: str | None,
    dry_run: bool,
) -> str | None:
    """The caller's own choices checked before any Hub call, and the token to use (`token`, else
    `HF_TOKEN`, else the saved login).

    Raises:
        ConfigError: bad variants, thresholds or `into`.
        AuthError: no token, and this run would publish.
    """
    from huggingface_hub import get_token

    if variants is not None or min_quality:
        _request(task, variants or "none", min_quality)
    if into is not None:
        from ..hub.state import OwnRepo  # here: as in `push`

        OwnRepo.checked(into, repo_id)
    token = token or get_token()
    if token is None and not dry_run:  # before any work: nothing can be published without one
        what = f"writing to {into}" if into else "opening a pull request"
        raise AuthError(f"No Hub token is set, and {what} needs one.", token_fix(into))
    return token


def _request_for(
    settings: dict, task: str, variants: str | list[str] | None, min_quality: list[str] | dict | None
) -> ExportRequest:
    """`_request` for a push: the repo's own .hfexport.yaml (`settings`) may choose the variants;
    the caller's choice wins.

    Raises:
        ConfigError: the caller's or the repo's choice is bad input (saying which).
    """
    from_repo = variants is None and "variants" in settings
    try:
        return _request(task, settings.get("variants") if from_repo else variants, min_quality)
    except ConfigError as e:
        if not from_repo:
            raise
        raise ConfigError(f"{e.cause} (in the repo's .hfexport.yaml)", f"{e.fix} Or pass --variants.") from None


def _request(task: str, variants: str | list[str] | None, min_quality: list[str] | dict | None) -> ExportRequest:
    """What was asked beyond the backends: the task, and the plan's `variants` and `min_quality`,
    checked (bad names are bad input, before any work)."""
    if variants is None:
        variants = default_variants()
    if isinstance(variants, str) and not variants.strip():
        variants = "none"
    return ExportRequest(task, parse_variants(variants), parse_thresholds(min_quality))

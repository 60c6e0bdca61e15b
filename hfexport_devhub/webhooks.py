"""Outgoing webhooks of the local Hub, shaped like the Hub's webhooks (payload version 3).

A commit fires `repo.content/update` with `updatedRefs`; a new discussion or PR fires
`discussion/create` — and a new PR also moves `refs/pr/N`, which a bot must not react to.
Delivery runs on a background thread with a few retries, as the Hub's does.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import urllib.request
from dataclasses import dataclass, field


@dataclass
class Webhook:
    url: str
    secret: str
    id: str = field(default_factory=lambda: secrets.token_hex(12))


class WebhookDispatcher:
    def __init__(self, base_url: str):
        self.base_url = base_url
        self.hooks: list[Webhook] = []

    def add(self, url: str, secret: str) -> Webhook:
        hook = Webhook(url, secret)
        self.hooks.append(hook)
        return hook

    def _repo(self, repo: dict) -> dict:
        head = repo["refs"].get("refs/heads/main")
        web = f"{self.base_url}/{repo['id']}"
        return {
            "type": repo["type"],
            "name": repo["id"],
            "id": repo["id"],
            "private": repo["private"],
            "headSha": head,
            "url": {"web": web, "api": f"{self.base_url}/api/{repo['type']}s/{repo['id']}"},
            "owner": {"id": repo["owner"]},
        }

    def on_commit(self, repo: dict, ref: str, old: str | None, new: str) -> None:
        self._send(
            {
                "event": {"action": "update", "scope": "repo.content"},
                "repo": self._repo(repo),
                "updatedRefs": [{"ref": ref, "oldSha": old, "newSha": new}],
            }
        )

    def on_discussion(self, repo: dict, discussion: dict, action: str) -> None:
        self._send(
            {
                "event": {"action": action, "scope": "discussion"},
                "repo": self._repo(repo),
                "discussion": {
                    "num": discussion["num"],
                    "title": discussion["title"],
                    "status": discussion["status"],
                    "isPullRequest": discussion["isPullRequest"],
                    "author": {"id": discussion["author"]},
                    "changes": {"base": discussion.get("base")},
                },
            }
        )

    def _send(self, payload: dict) -> None:
        for hook in list(self.hooks):
            body = json.dumps({**payload, "webhook": {"id": hook.id, "version": 3}}).encode()
            threading.Thread(target=self._deliver, args=(hook, body), daemon=True).start()

    def _deliver(self, hook: Webhook, body: bytes) -> None:
        for attempt in range(4):
            request = urllib.request.Request(
                hook.url,
                data=body,
                method="POST",
                headers={"Content-Type": "application/json", "X-Webhook-Secret": hook.secret},
            )
            try:
                with urllib.request.urlopen(request, timeout=10):
                    return
            except Exception:
                time.sleep(0.5 * 2**attempt)

"""What the service watches (service/watch.py): the reconcile pass for webhooks that never came, and
where each watched repo's exports go."""

from __future__ import annotations

import time
import urllib.error
import urllib.request

import pytest
import tiny_models
from service_runs import SECRET, Service, free_port, hub_api, pull_requests, seeded, webhook_payload  # noqa: F401

from hfexport.messages import JobPlan


def test_reconcile_queues_what_webhooks_missed_across_a_namespace_a_watch_file_and_the_top_models(
    hub, accounts, tmp_path
):
    """No webhook is sent. Watched: `acme-recon/*`, a watch file naming one repo, and the most
    downloaded model tagged `rare-tag` (`--watch-top 1`). On start the service queues each of their
    heads (and nothing of the unwatched, less downloaded one); a commit made while it runs, and a
    repo created in the namespace, are queued by the next pass (every 2 s). A webhook of the top
    model is acted on; of the other, ignored."""
    apis = {ns: hub_api(hub, hub.add_user(ns)) for ns in ("acme-recon", "solo-recon", "tops-recon")}
    heads = {}

    def commit(repo: str, text: bytes, tags: str = "[demo]") -> None:
        api = apis[repo.split("/")[0]]
        api.create_repo(repo, exist_ok=True)
        api.upload_file(path_or_fileobj=b'{"model_type": "bert"}', path_in_repo="config.json", repo_id=repo)
        api.upload_file(
            path_or_fileobj=b"---\ntags: " + tags.encode() + b"\n---\n" + text, path_in_repo="README.md", repo_id=repo
        )
        heads[repo] = api.model_info(repo).sha

    for i in range(3):
        commit(f"acme-recon/r{i}", b"one")
    commit("solo-recon/one", b"one")
    commit("tops-recon/popular", b"one", "[rare-tag]")
    commit("tops-recon/obscure", b"one", "[rare-tag]")
    for _ in range(3):
        apis["tops-recon"].hf_hub_download("tops-recon/popular", "config.json", force_download=True)
    watch_file = tmp_path / "watch.txt"
    watch_file.write_text("# our one-off\nsolo-recon/one  # and a comment\n")
    service = Service(
        tmp_path / "q.sqlite",
        ["acme-recon/*"],
        accounts["bot"],
        extra=(
            "--watch-file",
            str(watch_file),
            "--watch-top",
            "1",
            "--watch-filter",
            "rare-tag",
            "--reconcile-every",
            "2",
        ),
    ).start()

    def queued() -> set[tuple[str, str]]:
        return {(j["repo_id"], j["head_sha"]) for j in service.get("/jobs")["jobs"]}

    def wait_for(expected: set[tuple[str, str]]) -> None:
        deadline = time.monotonic() + 30
        while not expected <= queued() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert expected <= queued(), (expected - queued(), queued())

    try:
        watched = {r: s for r, s in heads.items() if r != "tops-recon/obscure"}
        wait_for(set(watched.items()))
        assert not any(repo == "tops-recon/obscure" for repo, _ in queued())
        commit("acme-recon/r0", b"two")  # no webhook for it, nor for the new repo
        commit("acme-recon/new", b"one")
        wait_for({("acme-recon/r0", heads["acme-recon/r0"]), ("acme-recon/new", heads["acme-recon/new"])})
        commit("tops-recon/popular", b"two")
        status, answer = service.post(webhook_payload("tops-recon/popular", heads["tops-recon/popular"]))
        assert status in (200, 202) and "job" in answer, answer  # the reconcile pass may have queued it first
        status, answer = service.post(webhook_payload("tops-recon/obscure", heads["tops-recon/obscure"]))
        assert status == 200 and "not watched" in answer["ignored"]
    finally:
        service.stop()


def test_a_reconcile_pass_keeps_to_the_namespace_cap_and_the_next_pass_queues_the_rest(hub, tmp_path):
    """A watched namespace of three repos and a cap of two waiting jobs per namespace: the first pass
    queues two heads and leaves the third for later (as its webhook would get 503); once a job is
    done, the next pass queues it."""
    from hfexport.entrypoints.service.queue import JobQueue
    from hfexport.entrypoints.service.watch import Reconciler, Watch

    api = hub_api(hub, hub.add_user("capped-recon"))
    for i in range(3):
        api.create_repo(f"capped-recon/r{i}")
        api.upload_file(path_or_fileobj=b"{}", path_in_repo="config.json", repo_id=f"capped-recon/r{i}")
    plan = JobPlan(("dynamo",))
    queue = JobQueue(tmp_path / "q.sqlite", max_queued_per_namespace=2)
    reconciler = Reconciler(
        Watch(frozenset({"capped-recon/*"})),
        lambda repo_id, sha: queue.enqueue(repo_id, sha, plan, is_head=True)[1],
        api,
        full=queue.full,
    )

    assert reconciler.run_once() == {"visited": 3, "queued": 2, "deferred": 1, "unreadable": 0}
    assert len(queue.list()) == 2
    claimed = queue.claim()
    assert claimed is not None
    job, token = claimed
    assert queue.finish(job.id, token, {"action": "opened"})
    assert reconciler.run_once() == {"visited": 3, "queued": 1, "deferred": 0, "unreadable": 0}
    assert {j.repo_id for j in queue.list()} == {f"capped-recon/r{i}" for i in range(3)}


def test_a_watched_namespace_with_a_destination_publishes_each_repo_into_its_derived_repo(
    hub, accounts, tmp_path, workspace
):
    """`--watch 'alice-svc/* -> svc-bot/{name}-ONNX'`: a commit on a repo of the namespace is
    exported into the service account's derived repo (created), not a PR on the source; the job's
    result and the status page link that repo."""
    repo = "alice-svc/derived-e2e"
    sha = seeded(hub, accounts["alice"], repo, tiny_models.bert(workspace / "svc-derived"))
    watch = "alice-svc/* -> svc-bot/{name}-ONNX"
    token = "read-token-0123456789"
    service = Service(tmp_path / "q.sqlite", [watch], accounts["bot"], extra=("--read-token", token)).start()
    try:
        status, body = service.post(webhook_payload(repo, sha))
        assert status == 202, body
        job = service.wait_done(body["job"])
        assert job["status"] == "done" and job["result"]["action"] == "created", job
        assert job["plan"].endswith("|into=svc-bot/derived-e2e-ONNX"), job
        assert job["result"]["repo_url"].endswith("/svc-bot/derived-e2e-ONNX"), job
        api = hub_api(hub, accounts["bot"])
        assert "dynamo/model.pt2" in api.list_repo_files("svc-bot/derived-e2e-ONNX")
        assert pull_requests(hub, accounts["alice"], repo) == []
        request = urllib.request.Request(service.url + "/", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as r:
            page = r.read().decode()
        assert f'href="{job["result"]["repo_url"]}">svc-bot/derived-e2e-ONNX</a>' in page, page
    finally:
        service.stop()


def test_a_watch_destination_is_the_most_specific_patterns_and_a_bad_one_is_refused():
    from hfexport.entrypoints.service.watch import Watch
    from hfexport.messages import JobPlan

    watch = Watch.parse(["org/* -> me/{name}-ONNX", "org/special -> me/special-web", "other/model", "*"])
    assert watch.patterns == frozenset({"org/*", "org/special", "other/model", "*"})
    assert watch.destination("org/bert") == "me/bert-ONNX"
    assert watch.destination("org/special") == "me/special-web"
    assert watch.destination("other/model") is None and watch.destination("else/model") is None
    for bad in ("org/* -> {name}", "org/* -> me/{name.__class__}", "org/* -> me/a b"):
        with pytest.raises(ValueError, match="is not a repo id template"):
            Watch.parse([bad])
    plan = JobPlan(("onnx", "dynamo"), "auto", True, "me/bert-ONNX")
    assert str(plan) == "onnx,dynamo|auto|trust-remote-code|into=me/bert-ONNX" and JobPlan.parse(str(plan)) == plan
    assert JobPlan.parse("onnx|auto") == JobPlan(("onnx",)) and str(JobPlan(("onnx",))) == "onnx|auto"

"""The service's request page (`serve --request-page`), driven in headless Chromium against the
local Hub: a user names a model, formats and a destination with a token of theirs, the job runs
with that token, and the request's page links what it published. Bad input gets the form again
with what is wrong, and no job."""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import tiny_models
from service_runs import Service

JS = Path(__file__).parent / "js"
CHROMIUM = shutil.which("chromium-headless-shell") or shutil.which("chromium")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Chromium: `apt-get install chromium-headless-shell` (make test does)"
)


def _drive(service: Service, fields: dict, shot: Path) -> dict:
    run = subprocess.run(
        ["node", str(JS / "request_form.mjs"), str(CHROMIUM), service.url, json.dumps(fields), str(shot)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert shot.exists()
    # The test's artifacts (each step's screenshot): where CI keeps them, when it names a folder.
    if os.environ.get("HFEXPORT_TEST_ARTIFACTS"):
        Path(os.environ["HFEXPORT_TEST_ARTIFACTS"]).mkdir(parents=True, exist_ok=True)
        for step in shot.parent.glob(f"{shot.stem}*.png"):
            shutil.copy(step, Path(os.environ["HFEXPORT_TEST_ARTIFACTS"]) / step.name)
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def asked(hub, tmp_path_factory):
    """A model of one user, a service offering the page (its own token another account's), and a
    second user who asks for an export into a repo of theirs."""
    from huggingface_hub import HfApi

    owner, service_token, user = hub.add_user("form-owner"), hub.add_user("form-service"), hub.add_user("form-user")
    folder = tiny_models.bert(tmp_path_factory.mktemp("form") / "model")
    api = HfApi(endpoint=hub.url, token=owner)
    api.create_repo("form-owner/tiny-bert")
    api.upload_folder(repo_id="form-owner/tiny-bert", folder_path=folder)
    # A head hfexport does not export: its job fails, saying why in the page's terms.
    choice = tiny_models.bert_head_with_tokenizer(tmp_path_factory.mktemp("choice") / "model", "BertForMultipleChoice")
    api.create_repo("form-owner/tiny-choice")
    api.upload_folder(repo_id="form-owner/tiny-choice", folder_path=choice)
    db = tmp_path_factory.mktemp("form-service") / "q.sqlite"
    # Started as docs/service.md says: the page alone, no webhook secret.
    # An export cache of its own: the session's may hold this tiny BERT's ONNX export from another test
    # on the same worker, and a push that reuses it runs no stage for the page to show.
    cache = {"HFEXPORT_CACHE": str(tmp_path_factory.mktemp("form-cache"))}
    service = Service(
        db, [], service_token, backends="onnx,dynamo", extra=("--request-page", "--warm", "0"), secret=None, env=cache
    ).start()
    yield service, user
    service.stop()


def test_a_user_asks_in_the_browser_and_the_requests_page_links_the_repo_it_made(hub, asked, tmp_path):
    from huggingface_hub import HfApi

    service, user = asked
    shot = tmp_path / "request-page-done.png"
    # The formats as the form ticks them: ONNX alone (the service offers .pt2 too, unticked).
    fields = {"repo": "form-owner/tiny-bert", "into": "form-user/tiny-bert-ONNX", "token": user}
    page = _drive(service, fields, shot)
    assert page["status"] == 200 and "/request/" in page["url"], page
    assert page["state"] == "done" and page["outcome"].startswith("created"), page
    assert page["link"] == f"{hub.url}/form-user/tiny-bert-ONNX" and not page["token_shown"], page
    # On the way: how long it waited or ran, and the stage its push was at ("onnx: exporting").
    assert any(line.startswith("Running for ") and "onnx: " in line for line in page["seen"]), page["seen"]
    assert all(line.startswith(("Waiting for ", "Running for ")) for line in page["seen"]), page["seen"]
    # Done: what it made, each with its figures.
    assert any(line.startswith("onnx/ — ") and "max abs diff" in line for line in page["made"]), page["made"]
    assert {p.name for p in tmp_path.glob("request-page-done*.png")} == {
        "request-page-done-asked.png",
        "request-page-done-waiting.png",
        "request-page-done.png",
    }
    files = HfApi(endpoint=hub.url, token=user).list_repo_files("form-user/tiny-bert-ONNX")
    assert "onnx/model.onnx" in files and not any(f.startswith("dynamo/") for f in files), files
    # Asked by the user, run with the user's token: the job says so nowhere, and keeps no token.
    (job,) = service.get("/jobs")["jobs"]
    assert job["plan"] == "onnx|auto|into=form-user/tiny-bert-ONNX|by=form-user" and user not in json.dumps(job), job
    assert user not in (service.db.with_suffix(".log")).read_text()


def test_a_page_only_service_starts_without_a_secret_names_its_page_and_takes_no_webhooks(asked):
    """`hfexport serve --request-page` as docs/service.md prints it (no `--secret`) starts; its first
    log line names the page's URL; a webhook is answered with why it is not taken."""
    service, _ = asked
    first = json.loads(service.db.with_suffix(".log").read_text().splitlines()[0])
    assert first["msg"] == "listening" and first["request_page"] == f"{service.url}/request", first
    assert first["webhook"] is None, first
    status, body = service.post({"event": {"action": "update", "scope": "repo.content"}}, secret="any-secret-at-all")
    assert status == 404 and "started without --secret" in body["error"], body


def test_a_request_whose_job_fails_says_the_cause_and_the_fix_in_the_pages_own_terms(asked, tmp_path):
    """Ask, wait, fail: a model whose head hfexport does not export. The page says the cause whole
    (not the last lines of a log) and a fix a web user can act on: no command-line flag."""
    service, user = asked
    shot = tmp_path / "request-page-failed.png"
    fields = {"repo": "form-owner/tiny-choice", "into": "form-user/tiny-choice-ONNX", "token": user}
    page = _drive(service, fields, shot)
    assert page["state"] == "failed", page
    assert "BertForMultipleChoice's head is not one hfexport exports" in page["outcome"], page
    assert page["fix"].startswith("This service exports a model for its own head's task"), page
    assert "--task" not in page["fix"].split("yourself")[0] and not page["token_shown"], page
    assert (tmp_path / "request-page-failed-asked.png").exists()


def _post(service: Service, form: dict) -> tuple[int, str]:
    request = urllib.request.Request(service.url + "/request", data=urllib.parse.urlencode(form).encode())
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_a_second_user_asking_for_the_same_pull_request_is_pointed_to_the_open_one(hub, asked):
    """One PR per model: a user's request opens one; another user asking for the same exports as a
    PR is shown that PR's link, and no second job (nor PR) is made. The service knows it from its own
    jobs, never from a PR's text."""
    service, user = asked
    other = hub.add_user("form-user2")
    form = {"repo": "form-owner/tiny-bert", "backends": "onnx", "destination": "pr"}
    status, _ = _post(service, {**form, "token": user})
    assert status == 200
    job = next(j for j in service.get("/jobs")["jobs"] if j["plan"] == "onnx|auto|by=form-user")
    done = service.wait_done(job["id"], timeout=600)
    assert done["status"] == "done" and done["result"]["action"] == "opened", done
    before = service.get("/jobs")["jobs"]
    status, page = _post(service, {**form, "token": other})
    said = html.unescape(page)
    assert status == 400 and "already proposes these exports (of this commit)" in said, said
    assert done["result"]["pr_url"] in said and other not in page
    assert service.get("/jobs")["jobs"] == before
    from huggingface_hub import HfApi

    prs = list(HfApi(endpoint=hub.url, token=user).get_repo_discussions("form-owner/tiny-bert"))
    assert len(prs) == 1, prs


BAD = [
    ({"repo": "not a repo", "token": "hf_never-shown-token"}, "is not a model repo id"),
    ({"repo": "form-owner/tiny-bert", "token": "hf_wrong-token-value"}, "refused this token"),
    ({"repo": "form-owner/no-such-model", "token": None}, "no model repo form-owner/no-such-model"),
    ({"repo": "form-owner/tiny-bert", "into": "form-owner/taken", "token": None}, "cannot publish into"),
    ({"repo": "form-owner/tiny-bert", "into": "bad into", "token": None}, "is not a repo id to publish into"),
]


def test_bad_input_in_the_browser_gets_the_form_again_saying_what_is_wrong_and_queues_nothing(asked, tmp_path):
    service, user = asked
    before = service.get("/jobs")["jobs"]
    fields, said = BAD[3]  # someone else's namespace: the Hub's answer, shown in the browser
    page = _drive(service, {**fields, "token": user}, tmp_path / "request-page-refused.png")
    assert page["status"] == 400 and page["url"].endswith("/request"), page
    assert said in page["error"] and not page["token_shown"], page
    assert service.get("/jobs")["jobs"] == before


@pytest.mark.parametrize(("fields", "said"), BAD)
def test_each_bad_input_is_refused_with_its_cause_and_no_job(asked, fields, said):
    """The same form posted as a browser posts it (urlencoded), without one: each refusal."""
    service, user = asked
    before = service.get("/jobs")["jobs"]
    form = {"backends": "onnx", "destination": "repo" if "into" in fields else "pr", **fields}
    form["token"] = fields["token"] or user
    request = urllib.request.Request(service.url + "/request", data=urllib.parse.urlencode(form).encode())
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=60)
    page = refused.value.read().decode()
    assert refused.value.code == 400 and said in html.unescape(page), page
    assert form["token"] not in page and service.get("/jobs")["jobs"] == before


def test_where_the_hub_offers_sign_in_a_user_signs_in_with_hugging_face_instead_of_pasting_a_token(hub, tmp_path):
    """A service with the OAuth app a Space gets (`OAUTH_CLIENT_ID`, `OAUTH_CLIENT_SECRET`,
    `OAUTH_SCOPES`, `OPENID_PROVIDER_URL`): the page offers "Sign in with Hugging Face", the Hub's
    authorize page sends the browser back signed in, and the request runs as that user — here a
    PR on the model, opened in their name."""
    from huggingface_hub import HfApi

    owner, user = hub.add_user("signin-owner"), hub.add_user("signin-user")
    api = HfApi(endpoint=hub.url, token=owner)
    api.create_repo("signin-owner/tiny-bert")
    api.upload_folder(repo_id="signin-owner/tiny-bert", folder_path=tiny_models.bert(tmp_path / "model"))
    service = Service(tmp_path / "q.sqlite", [], hub.add_user("signin-service"), backends="onnx")
    app = hub.add_oauth_app([f"{service.url}/request/callback"])
    service.env = {
        "OAUTH_CLIENT_ID": app.client_id,
        "OAUTH_CLIENT_SECRET": app.client_secret,
        "OAUTH_SCOPES": "openid profile write-repos manage-repos",
        "OPENID_PROVIDER_URL": hub.url,
    }
    service.extra = ("--request-page", "--warm", "0")
    service.start()
    try:
        fields = {"repo": "signin-owner/tiny-bert", "sign_in": user}
        page = _drive(service, fields, tmp_path / "request-page-signed-in.png")
    finally:
        service.stop()
    assert page["signed_in"].startswith("Signed in as signin-user"), page
    assert page["state"] == "done" and page["outcome"].startswith("opened") and not page["token_shown"], page
    (pr,) = list(HfApi(endpoint=hub.url, token=user).get_repo_discussions("signin-owner/tiny-bert"))
    assert pr.is_pull_request and pr.author == "signin-user" and page["link"].endswith(f"/discussions/{pr.num}")
    assert app.client_secret not in (tmp_path / "q.log").read_text()


def test_the_form_names_every_field_for_a_screen_reader_and_says_formats_plainly():
    """Every field a user fills has a label (or is described by its hint, tied to it); a format is
    named once, as users call it ("ONNX", not "ONNX onnx")."""
    from html.parser import HTMLParser

    from hfexport.entrypoints.service.request_page import render_form

    class Fields(HTMLParser):
        def __init__(self):
            super().__init__()
            self.inputs, self.labels_for, self.ids, self.in_label, self.wrapped = [], set(), set(), 0, set()

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if "id" in a:
                self.ids.add(a["id"])
            if tag == "label":
                self.in_label += 1
                if "for" in a:
                    self.labels_for.add(a["for"])
            if tag == "input" and a.get("type") != "hidden":
                self.inputs.append(a)
                if self.in_label:
                    self.wrapped.add(id(a))

        def handle_endtag(self, tag):
            if tag == "label":
                self.in_label -= 1

    page = render_form(("onnx", "dynamo"))
    fields = Fields()
    fields.feed(page)
    for a in fields.inputs:
        assert id(a) in fields.wrapped or a.get("id") in fields.labels_for, a
        if "aria-describedby" in a:
            assert a["aria-describedby"] in fields.ids, a
    token = next(a for a in fields.inputs if a.get("name") == "token")
    into = next(a for a in fields.inputs if a.get("name") == "into")
    assert token.get("aria-describedby") == "token-hint" and into.get("aria-describedby") == "into-hint"
    assert "ONNX</label>" in page and "<code>onnx</code>" not in page, page
    # Ticked by default: ONNX alone; the rest a user ticks (no pickled .pt2 nobody asked for).
    ticked = [a["value"] for a in fields.inputs if a.get("name") == "backends" and "checked" in a]
    assert ticked == ["onnx"], ticked


def test_the_operator_reads_each_request_back_from_the_log_with_its_time_and_requester(asked):
    """The journeys above, as the service's log tells them: one JSON object a line, each with its
    time; a request with its requester, its run, and its end (what it made, or the whole failure
    with the push's output); a refused request with why. No token anywhere."""
    from datetime import datetime

    service, user = asked
    log = service.db.with_suffix(".log").read_text()
    events = [json.loads(line) for line in log.splitlines() if line.strip()]
    assert all(datetime.fromisoformat(e["time"]) and e["level"] in ("info", "warning", "error") for e in events)
    requested = {e["repo"]: e for e in events if e["msg"] == "requested"}
    assert requested["form-owner/tiny-bert"]["by"] == "form-user", requested
    done = next(e for e in events if e["msg"] == "done" and e["job"] == requested["form-owner/tiny-bert"]["job"])
    assert any(line.startswith("onnx/ — ") for line in done["made"]), done
    failed = next(e for e in events if e["msg"] == "failed" and e["job"] == requested["form-owner/tiny-choice"]["job"])
    assert "head is not one hfexport exports" in failed["error"] and "hfexport push" not in failed["error"], failed
    assert "BertForMultipleChoice" in failed["output"], failed  # the push's own stderr, whole
    refused = [e for e in events if e["msg"] == "refused"]
    assert refused and all(e["why"] for e in refused), refused
    assert user not in log

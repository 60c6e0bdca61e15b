"""`hfexport serve`: the Hub webhook receiver.

    GET  /          the status page (HTML; the read token or secret as a Basic-auth password)
    POST /webhook   a Hub webhook (JSON; the secret in X-Webhook-Secret)
    GET  /healthz   liveness and queue counts
    GET  /jobs      recent jobs;  GET /jobs/{id}  one job
    GET|POST /request, GET /request/{key}   (with --request-page) a form to ask for an export, and
                    the request's page (`request_page.py`)

What triggers work: a `repo.content` update of the `main` branch of a watched model repo
(`watch.py`: ids, `org/*`, the most downloaded of a tag), and the reconcile pass that queues each
watched repo's head on start and on a schedule, for the webhooks that never arrived. Our
own PR refs (`refs/pr/N`) and discussion events never do, so the bot's PRs cannot loop. Events
are deduplicated by (repo, head sha, plan) in the durable queue (`queue.py`): a replay is
harmless. QueueWorkers run the jobs with bounded concurrency, retrying with backoff.

The rooms: `config.py` (what the service was started with), `events.py` (which webhook events
trigger, from the JSON alone), `app.py` (the HTTP app), `workers.py` (the threads that run the
queue's jobs), `queue.py` (the durable queue), `executors.py` (local and HF Jobs), `watch.py`,
`request_page.py` + `signin.py` + `tokens.py` (the request form), `status_page.py`; `run.py` wires
them from the options `serve_options.py` declares. This package's root imports none of them.
"""

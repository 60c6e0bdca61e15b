"""Re-run costs of `hfexport push` against the local Hub: cold, unchanged source, README-only commit.

Prints one JSON line: {"backends", "cold", "unchanged", "readme"}, each {wall_s, bytes_uploaded, action}.
Each push is a separate `hfexport push` process, as a user or CI job runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    backends = sys.argv[1] if len(sys.argv) > 1 else "dynamo,onnx,executorch"
    work = Path(tempfile.mkdtemp(prefix="hfexport-bench-"))
    os.environ.update(HF_HUB_DISABLE_TELEMETRY="1", HF_HOME=str(work / "hf-home"), HFEXPORT_CACHE=str(work / "cache"))
    from hfexport.entrypoints.demo import minilm_folder
    from hfexport_devhub import DevHub

    hub = DevHub(work / "hub").start()
    hub.settings.lfs = False  # the client below has Xet on: everything inline
    os.environ["HF_ENDPOINT"] = hub.url
    from huggingface_hub import HfApi

    owner, bot = hub.add_user("owner"), hub.add_user("bot")
    api = HfApi(endpoint=hub.url, token=owner)
    api.create_repo("owner/minilm")
    api.upload_folder(repo_id="owner/minilm", folder_path=minilm_folder())

    def push() -> dict:
        before = hub.app.stats["bytes_uploaded"]
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-m", "hfexport", "push", "owner/minilm", "--backends", backends, "--json"],
            capture_output=True,
            text=True,
            env={**os.environ, "HF_TOKEN": bot},
        )
        wall = time.perf_counter() - start
        if out.returncode != 0:
            raise SystemExit(out.stderr[-3000:])
        action = json.loads(out.stdout)["action"]
        return {"wall_s": wall, "bytes_uploaded": hub.app.stats["bytes_uploaded"] - before, "action": action}

    result = {"backends": backends, "cold": push(), "unchanged": push()}
    api.upload_file(
        path_or_fileobj=b"# all-MiniLM-L6-v2\n\nA README-only change.\n",
        path_in_repo="README.md",
        repo_id="owner/minilm",
    )
    result["readme"] = push()
    hub.stop()
    print(json.dumps(result))


if __name__ == "__main__":
    main()

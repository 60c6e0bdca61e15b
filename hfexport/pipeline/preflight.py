"""Stage 1½ — preflight: whether this machine can export the model, decided before any download.

Cost grows faster than the model: a 1 B-parameter LLM's ONNX export needs ~10 GB of memory by
today's measured cost, and on a 16 GB runner the out-of-memory killer ends it after minutes of
download and tracing, with nothing said up front. The repo's safetensors headers (a few kB each, read by
`HfApi.get_safetensors_metadata`; a local folder's by `safetensors.safe_open`) give the parameters
and their stored dtype; hfexport's own cost, measured per backend by `bench/scale.py`, turns them
into peak memory and disk; a backend that will not fit is skipped with the figures and the fix,
and when none fits the run stops with exit 2. `--force-memory` tries anyway.

`estimate` is also what the webhook service's HF Jobs executor sizes its flavor by
(`smallest_flavor`).
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ..backends import BACKENDS, UNMEASURED, Cost
from ..errors import ResourceError
from ..hub.retry import retry
from ..report import Source
from ..settings import memory_limit_bytes

GB = 1e9
_Dtype = TypeVar("_Dtype", bound=str)  # a safetensors header's dtype name ("BF16")


@dataclass(frozen=True)
class Weights:
    """What a checkpoint's safetensors headers say: its parameters and the bytes they are stored in."""

    parameters: int
    stored_bytes: int
    dtypes: tuple[str, ...]  # the stored dtypes, most parameters first ("BF16", "F32"…)

    @property
    def fp32_bytes(self) -> int:
        """The weights in float32 (as every backend but a half-precision export holds them)."""
        return self.parameters * 4

    @property
    def source_dtype(self) -> str:
        """The dtype most parameters are stored in, as `ExportPlan.source_dtype` names it."""
        return _TORCH_NAMES.get(self.dtypes[0], "float32") if self.dtypes else "float32"

    def exported_bytes(self, backend: str) -> int:
        """The weights in the dtype `backend` exports this checkpoint in (`Backend.precision`): a
        bfloat16 checkpoint's `.pt2` holds them at their stored size, its ONNX graph in float32."""

        spec = BACKENDS.get(backend)
        dtype = spec.precision(self.source_dtype)[0] if spec is not None else "float32"
        return self.parameters * (2 if dtype in ("bfloat16", "float16") else 4)

    def describe(self) -> str:
        count = f"{self.parameters / 1e9:.2f} B" if self.parameters >= 1e9 else f"{self.parameters / 1e6:.1f} M"
        return f"{count} parameters ({'/'.join(self.dtypes).lower()})"


def cost_of(backend: str) -> Cost:
    """The cost `backend` declares (`Backend.cost`, measured by bench/scale.py), or, for one never
    measured, `UNMEASURED`: the dearest measured, so preflight errs towards refusing."""

    spec = BACKENDS.get(backend)
    return spec.cost if spec is not None and spec.cost is not None else UNMEASURED


@dataclass(frozen=True)
class Estimate:
    """What one backend is expected to need for one model."""

    backend: str
    memory_bytes: int
    disk_bytes: int


def estimate(weights: Weights, backends: list[str], variants: bool = True) -> list[Estimate]:
    """Each backend's peak memory and disk for `weights`, from its measured `Cost` (`variants`: its
    variants are built too, as by default)."""
    return [
        Estimate(b, cost_of(b).memory(weights.exported_bytes(b), variants), cost_of(b).disk(weights.exported_bytes(b)))
        for b in backends
    ]


def needs(
    weights: Weights, backends: list[str], jobs: int = 1, downloads: bool = True, variants: bool = True
) -> tuple[int, int]:
    """What exporting `backends` needs at most: memory (the largest worker's peak, and with `jobs`
    at once the next largest beside it) and disk (the download, unless the weights are local:
    `downloads`, and every backend's output). The HF Jobs executor sizes a flavor by it."""
    estimates = estimate(weights, backends, variants)
    peaks = sorted((e.memory_bytes for e in estimates), reverse=True)
    disk = (weights.stored_bytes if downloads else 0) + sum(e.disk_bytes for e in estimates)
    return sum(peaks[: max(1, jobs)]), disk


@dataclass(frozen=True)
class Machine:
    """What this process may use: memory (the cgroup's limit where one is set, else the machine's,
    or `HFEXPORT_MEMORY_LIMIT_MB`) and free disk where the exports are written."""

    memory_bytes: int
    disk_bytes: int

    @classmethod
    def here(cls, out_dir: Path | None = None) -> Machine:
        return cls(memory_bytes=memory_limit_bytes() or _physical_memory(), disk_bytes=_free_disk(out_dir))


def _physical_memory() -> int:
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def _free_disk(out_dir: Path | None) -> int:
    folder = Path(out_dir or ".").resolve()
    while not folder.exists():
        folder = folder.parent
    return shutil.disk_usage(folder).free


@dataclass(frozen=True)
class TooLarge:
    """Why one backend will not fit: the resource, what it needs and what the machine has."""

    backend: str
    resource: str  # "memory" or "disk"
    needed: int
    available: int
    alone: int = 0  # memory: what it needs with no other backend beside it
    bare: int = 0  # memory: what it needs alone without building its variants (`--variants none`)

    def cause(self, weights: Weights) -> str:
        where = "" if self.resource == "memory" else " where the download and the exports are written"
        beside = ""
        if self.needed > self.alone > 0:
            beside = f" with the backends exported beside it (~{_gb(self.alone)} alone)"
        return (
            f"{self.backend} needs ~{_gb(self.needed)} of {self.resource}{beside} for {weights.describe()} by "
            f"hfexport's measured cost; {_gb(self.available)} is available{where}"
        )

    @property
    def fix(self) -> str:
        if self.resource == "memory":
            one_at_a_time = (
                f"export one backend at a time (--jobs 1: ~{_gb(self.alone)}), "
                if self.alone and self.alone <= self.available
                else ""
            )
            no_variants = (
                f"export it without variants (--variants none: ~{_gb(self.bare)}), "
                if 0 < self.bare < self.alone and self.bare <= self.available
                else ""
            )
            return (
                f"Run it where {_gb(self.needed)} of memory is free (a larger runner or HF Jobs flavor), "
                f"{one_at_a_time}{no_variants}or pass --force-memory to try anyway."
            )
        return "Free disk, write elsewhere (--out, HFEXPORT_CACHE), or pass --force-memory to try anyway."


@dataclass(frozen=True)
class Preflight:
    """The verdict: each backend's estimate, and those that will not fit."""

    weights: Weights | None
    estimates: list[Estimate]
    machine: Machine
    too_large: dict[str, TooLarge]

    @property
    def fits(self) -> list[str]:
        return [e.backend for e in self.estimates if e.backend not in self.too_large]

    def reasons(self) -> dict[str, str]:
        """Each backend that will not fit → why, with the figures and the fix (the report's words)."""
        assert self.weights is not None or not self.too_large
        return {b: f"{t.cause(self.weights)}. {t.fix}" for b, t in self.too_large.items() if self.weights}


def check(
    weights: Weights | None,
    backends: list[str],
    machine: Machine,
    jobs: int = 1,
    downloads: bool = True,
    variants: bool = True,
) -> Preflight:
    """Which `backends` fit `machine`. Memory: each backend's own peak (with its variants where
    `variants`) plus, with `jobs` at once, the next largest peaks (their workers run side by side).
    Disk: the download (unless the weights are local: `downloads`) and every backend's output.
    Unknown weights (no safetensors) pass: nothing to estimate from.

    Returns:
        The `Preflight`; `check_or_raise` stops the run when nothing fits.
    """
    if weights is None:
        return Preflight(None, [], machine, {})
    estimates = estimate(weights, backends, variants)
    _, disk = needs(weights, backends, jobs, downloads, variants)
    too_large = {}
    for e in estimates:
        others = sorted((o.memory_bytes for o in estimates if o is not e), reverse=True)
        memory = e.memory_bytes + sum(others[: max(0, jobs - 1)])
        if memory > machine.memory_bytes:
            bare = cost_of(e.backend).memory(weights.exported_bytes(e.backend), variants=False)
            too_large[e.backend] = TooLarge(e.backend, "memory", memory, machine.memory_bytes, e.memory_bytes, bare)
        elif disk > machine.disk_bytes:
            too_large[e.backend] = TooLarge(e.backend, "disk", disk, machine.disk_bytes)
    return Preflight(weights, estimates, machine, too_large)


def check_or_raise(preflight: Preflight) -> Preflight:
    """`preflight`, or `ResourceError` (exit 2) when no backend fits: nothing is downloaded."""
    if preflight.estimates and not preflight.fits and preflight.weights is not None:
        weights = preflight.weights
        causes = "; ".join(t.cause(weights) for t in preflight.too_large.values())
        raise ResourceError(f"No backend fits this machine: {causes}.", next(iter(preflight.too_large.values())).fix)
    return preflight


def smallest_flavor(memory_bytes: int, disk_bytes: int, hardware: list, gpu: bool = False) -> str | None:
    """The cheapest HF Jobs flavor (`HfApi.list_jobs_hardware()`'s entries) with at least this much
    memory and ephemeral disk, with an accelerator or without one; None when none has enough."""

    def size(text: str) -> float:  # "16 GB"
        number, _, unit = (text or "0").partition(" ")
        try:
            return float(number) * {"TB": 1e12, "GB": 1e9, "MB": 1e6}.get(unit.strip().upper(), 1e9)
        except ValueError:
            return 0.0

    def fits(h) -> bool:
        enough = size(h.ram) >= memory_bytes and size(h.ephemeral_storage) >= disk_bytes
        return enough and (h.accelerator is not None) == gpu

    fitting = [h for h in hardware if fits(h)]
    return min(fitting, key=lambda h: h.unit_cost_micro_usd).name if fitting else None


def _gb(n: float) -> str:
    return f"{math.ceil(n / GB * 10) / 10:.1f} GB"


# ── Reading the weights' headers ─────────────────────────────────────────────


def weights_of(source: Source, token: str | None = None) -> Weights | None:
    """The checkpoint's parameters and stored bytes from its safetensors headers, without
    downloading a weight: a Hub repo's through `HfApi.get_safetensors_metadata` (HTTP range reads,
    sharded checkpoints through their index), a local folder's through `safetensors.safe_open`.
    None where there are no safetensors (pickled weights, which the fetch stage refuses or not), or
    a header does not parse: nothing to estimate from, and the stages after say what is wrong."""
    counts: dict[str, int] = {}
    if source.kind == "local":
        from safetensors import SafetensorError, safe_open

        files = sorted(Path(source.ref).glob("*.safetensors"))
        try:
            for path in files:
                with safe_open(str(path), framework="numpy") as f:
                    for name in f.keys():
                        tensor = f.get_slice(name)
                        dtype = tensor.get_dtype()
                        counts[dtype] = counts.get(dtype, 0) + math.prod(tensor.get_shape())
        except (SafetensorError, OSError):
            return None
    else:
        from huggingface_hub import HfApi, RepoFile
        from huggingface_hub.errors import HfHubHTTPError, NotASafetensorsRepoError, SafetensorsParsingError

        api = HfApi(token=token)
        try:
            metadata = retry(
                f"read the safetensors headers of {source.ref}",
                lambda: api.get_safetensors_metadata(source.ref, revision=source.sha),
            )
            # A header is the file's own word: it may claim more than the file holds (safetensors
            # checks that when it opens a file; reading the header alone does not).
            sizes = {
                entry.path: entry.size
                for entry in retry(
                    f"read the sizes of {source.ref}'s weights",
                    lambda: api.get_paths_info(source.ref, list(metadata.files_metadata), revision=source.sha),
                )
                if isinstance(entry, RepoFile)
            }
        except (NotASafetensorsRepoError, SafetensorsParsingError, HfHubHTTPError):
            return None  # an answer, not a glitch (a gated repo, a bad header): the fetch stage says it
        for name, file in metadata.files_metadata.items():
            for dtype, count in _capped(file.parameter_count, sizes.get(name)).items():
                counts[dtype] = counts.get(dtype, 0) + count
    if not counts:
        return None
    stored = sum(count * _DTYPE_BYTES.get(dtype, 4) for dtype, count in counts.items())
    dtypes = tuple(sorted(counts, key=counts.__getitem__, reverse=True))
    return Weights(parameters=sum(counts.values()), stored_bytes=stored, dtypes=dtypes)


def _capped(counts: Mapping[_Dtype, int], size: int | None) -> dict[_Dtype, int]:
    """A file's parameter counts by dtype, scaled down to what `size` bytes can hold where its
    header claims more (measured: an 86-byte file claiming 50 B parameters)."""
    claimed = sum(count * _DTYPE_BYTES.get(dtype, 4) for dtype, count in counts.items())
    if size is None or claimed <= size:
        return dict(counts)
    return {dtype: count * size // claimed for dtype, count in counts.items()}


# The safetensors names of the dtypes a backend may export in, as torch names them.
_TORCH_NAMES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16"}

# Bytes per element of the safetensors dtypes (an unknown one counts as 4).
_DTYPE_BYTES = {
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "F32": 4,
    "I32": 4,
    "U32": 4,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "U16": 2,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}

"""A decoder LLM's ExecuTorch program as ExecuTorch's own LLM runner reads it.

ExecuTorch's apps (its Android and iOS LLM demos, `llama_main`) and optimum-executorch drive an LLM
through the C++ `TextLLMRunner` (Python bindings in the pinned wheel: `executorch.extension.llm.runner`):
one `model.pte` whose `forward(input_ids, cache_position)` keeps the KV cache inside the program (a
static cache of `max_seq_len` positions), and constant methods it reads before the first token
(`get_max_seq_len`, `use_kv_cache`, `get_eos_ids`, …; without `get_max_seq_len` it refuses the program).
The exporter's decode program takes the cache in and hands it back, which no runner feeds. So once that
program has validated, the decoder is exported again as the runner's: transformers' own exportable
module (`TorchExportableModuleForDecoderOnlyLM`: a `StaticCache` held as buffers) traced by torch.export,
lowered by ExecuTorch's `to_edge_transform_and_lower` with XNNPACK's partitioner and the metadata as
constant methods — optimum-executorch's xnnpack recipe, with the pinned stack's parts.

It is judged as apps run it, on prompts of other lengths than its trace (3 tokens): a greedy loop over
`forward` in ExecuTorch's Python runtime must give eager `generate()`'s token ids, and the runner itself,
reading the repo's `tokenizer.json`, must write the bytes of eager's token ids. The runner reads byte-level BPE,
SentencePiece and tiktoken tokenizers; one it cannot read is said in the check, not hidden.
"""

from __future__ import annotations

import contextlib
import copy
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch

from ..errors import describe_error
from ..report import Check, Figure, Layout, Status, Validation, VariantKind, VariantResult
from ..variants import misses, thresholds_for, variants_of
from . import executorch_llm, exporter_fixes  # noqa: F401  (exporter_fixes: registers the exporter's patches)
from .caches import CacheLayout
from .derive import reported, why_skipped
from .executorch_variants import quantize_8da4w, quantized_kernels
from .inputs import unpadded_rows
from .validate import Reference, compare_generation, generation_quality

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

    from ..backends import Backend
    from ..report import BackendResult
    from ..variants import Variant
    from .inputs import Judged
    from .splits import ExportSplit
    from .validate import Reference

# The file the runner and optimum-executorch's `ExecuTorchModelForCausalLM` load, one per folder: the fp32
# program's in `fp32/`, each variant's in a folder named by its kind (`8da4w/`), none a prefix of another.
# optimum-executorch takes every `.pte` whose path starts with the `subfolder` it is given and loads the
# first `model.pte` of them: a variant nested under the fp32 program's folder (`8da4w/model.pte` beside
# `model.pte`) sorts first, and `subfolder="executorch/xnnpack"` would load the variant.
PROGRAM = "model.pte"
BASE = "fp32"
# The static cache's positions: the model's own context, bounded. Its bytes are layers × 2 × key-value
# heads × head size × positions × 4 (fp32) — 64 MB for a 1 B Llama (16 layers, 8 heads of 64) at 2048.
MAX_SEQ_LEN_BOUND = 2048
# The prompts the runner is judged on: real text, of other lengths than the trace's 3 tokens.
PROMPTS = ("hfexport validated this file against the original model.", "Short one, then a longer one.")
_TRACE_LENGTH = 3  # above 1, so torch.export keeps the prompt length dynamic


def max_seq_len(config: PretrainedConfig) -> int:
    """The static cache's positions: the model's `max_position_embeddings`, at most `MAX_SEQ_LEN_BOUND`."""
    text = config.get_text_config()
    return min(int(getattr(text, "max_position_embeddings", None) or MAX_SEQ_LEN_BOUND), MAX_SEQ_LEN_BOUND)


def metadata(model: PreTrainedModel, seq_len: int) -> dict[str, Any]:
    """The constant methods the runner (`llm_runner_helper.cpp`) and optimum-executorch read."""
    config = model.config.get_text_config()
    generation = model.generation_config
    eos = generation.eos_token_id if generation.eos_token_id is not None else config.eos_token_id
    bos = generation.bos_token_id if generation.bos_token_id is not None else config.bos_token_id
    values = {
        "get_max_seq_len": seq_len,
        "get_max_context_len": seq_len,
        "get_max_batch_size": 1,
        "get_dtype": 6,  # float32, in ExecuTorch's scalar type numbering (float16: 5)
        "get_vocab_size": config.vocab_size,
        "get_n_layers": config.num_hidden_layers,
        "get_bos_id": bos,
        "get_eos_ids": [eos] if isinstance(eos, int) else list(eos or []),
        "use_kv_cache": True,
        "use_sdpa_with_kv_cache": False,
        "enable_dynamic_shape": True,
    }
    return {name: value for name, value in values.items() if value is not None and value != []}


class StatefulDecoder(torch.nn.Module):
    """The runner's program for a decoder whose cache holds conv and recurrent states and that ExecuTorch
    defines no model of (Granite 4 hybrid, Falcon-H1, Mamba 2): transformers' own `StaticCache`, whose
    layers the config's layer types make (static keys and values, states of fixed shape), every tensor
    of it a buffer of the program, so ExecuTorch keeps them between calls. transformers' exportable
    module holds keys and values only ("'LinearAttentionLayer' object has no attribute 'keys'").

    A call is `forward(input_ids, cache_position)`, as the runner feeds it. Its states are always
    continued (`has_previous_state`): zero states continued are a fresh start, so one traced branch
    serves the prompt and each token. A text starting at position 0 starts from zero states (the runner
    feeds a new prompt so; ExecuTorch's own LFM2 keeps the last prompt's, 1.2e-4 off), and each static
    layer's count of what it holds is where the call starts. Measured on the tiny Granite 4 hybrid:
    2e-7 to 8e-7 off the model's forward from the start, prompt, token and a second prompt alike."""

    def __init__(self, model: PreTrainedModel, seq_len: int):
        from transformers import StaticCache

        super().__init__()
        self.model = model
        self.cache = StaticCache(config=model.config, max_cache_len=seq_len)
        with torch.no_grad():  # each layer's tensors made, at the sizes the model fills them
            model(input_ids=torch.zeros((1, 2), dtype=torch.long), cache=self.cache, cache_position=torch.arange(2))
        self.cache.reset()
        self.states: list[str] = []
        self.lengths: list[str] = []
        for index, layer in enumerate(self.cache.layers):
            for kind in ("keys", "values"):
                if isinstance(tensor := getattr(layer, kind, None), torch.Tensor):
                    self.register_buffer(f"{kind}_{index}", tensor, persistent=False)
            if isinstance(length := getattr(layer, "cumulative_length", None), torch.Tensor):
                self.register_buffer(f"length_{index}", length, persistent=False)
                self.lengths.append(f"length_{index}")
            for kind in ("conv_states", "recurrent_states"):
                for state, tensor in (getattr(layer, kind, None) or {}).items():
                    if isinstance(tensor, torch.Tensor):
                        self.register_buffer(f"{kind}_{index}_{state}", tensor, persistent=False)
                        self.states.append(f"{kind}_{index}_{state}")
                        cast(Any, layer).has_previous_state[state] = True

    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        continued = cache_position[:1] > 0
        for name in self.states:  # `where`, not a product: ExecuTorch leaves a mutated buffer's start unset
            state = getattr(self, name)
            state.copy_(torch.where(continued, state, torch.zeros_like(state)))
        for name in self.lengths:
            getattr(self, name).copy_(cache_position[0])
        return self.model(
            input_ids=input_ids,
            cache=self.cache,
            cache_position=cache_position,
            position_ids=cache_position.unsqueeze(0),
            use_cache=True,
        ).logits


def _sized_as_measured(module: torch.nn.Module, layout: CacheLayout | None, seq_len: int) -> None:
    """The exportable module's static cache, each layer's keys and values re-made in the sizes the model
    fills them with (`layout`), where transformers sized them from the config's names (`get_head_shapes`:
    one head count and one dim for keys and values). Falcon's one key/value head (its config names 4:
    "index_copy_(): Source/destination tensor must have same slice shapes") and DeepSeek's latent keys
    wider than its values (16 and 4) each fill the cache they have; the buffers the module registered for
    them (`key_cache_<i>`, `value_cache_<i>`) are the re-made ones, so torch.export keeps those."""
    if layout is None:
        return
    # transformers' module holds it as `static_cache`, its hybrid one (Gemma 2's) as `cache`.
    found = [(m, c) for m in module.modules() for c in (getattr(m, "static_cache", None), getattr(m, "cache", None))]
    holder, cache = next(((m, c) for m, c in found if hasattr(c, "layers")), (None, None))
    if holder is None or cache is None:
        return
    for index, layer in enumerate(cache.layers):
        measured = layout.attention.get(index)
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if measured is None or keys is None or values is None or keys.shape[2] != seq_len:
            continue
        heads, key_dim, value_dim = measured
        if (keys.shape[1], keys.shape[3], values.shape[3]) == measured:
            continue
        batch = keys.shape[0]
        layer.keys = torch.zeros(batch, heads, seq_len, key_dim, dtype=keys.dtype, device=keys.device)
        layer.values = torch.zeros(batch, heads, seq_len, value_dim, dtype=values.dtype, device=values.device)
        holder.register_buffer(f"key_cache_{index}", layer.keys, persistent=False)
        holder.register_buffer(f"value_cache_{index}", layer.values, persistent=False)


def export(model: PreTrainedModel, path: Path, seq_len: int, layout: CacheLayout | None, quantized: bool) -> None:
    """`model` (a decoder LLM) as the runner's program at `path`, its cache `seq_len` positions, each
    layer's keys and values of the sizes in `layout` (the split's, measured). A cache with states is
    exported by ExecuTorch's own LLM export where ExecuTorch defines the family (`executorch_llm`),
    else as a `StatefulDecoder`. `quantized`: the 8da4w program, by the recipe of the export that writes
    it (ExecuTorch's own, or optimum-executorch's, `quantize_8da4w`)."""
    states = layout is not None and bool(layout.states)
    if states and executorch_llm.definition_of(model.config) is not None:
        executorch_llm.export(model, path, seq_len, metadata(model, seq_len), quantized=quantized)
        return
    if quantized:
        model = quantize_8da4w(model)

    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass
    from transformers.exporters.exporter_executorch import prepare_for_xnnpack
    from transformers.exporters.utils import apply_patches
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    constants = metadata(model, seq_len)
    # The exporter's own XNNPACK preparation: on CPU, MoE experts as batched matmuls (XNNPACK has no
    # grouped one: gpt-oss's "Missing out variants: {'transformers::grouped_mm_fallback'}").
    model, _, partitioner = prepare_for_xnnpack(model, {})
    saved = model.generation_config
    # transformers' exportable module sizes its static cache from the generation config.
    model.generation_config = copy.deepcopy(saved)
    model.generation_config.use_cache = True
    model.generation_config.cache_implementation = "static"
    model.generation_config.cache_config = {"batch_size": 1, "max_cache_len": seq_len}
    trace = {
        "input_ids": torch.zeros((1, _TRACE_LENGTH), dtype=torch.long),
        "cache_position": torch.arange(_TRACE_LENGTH),
    }
    try:
        if states:
            # Dim.AUTO: the chunked scan pads the tokens to its chunk (Mamba 2's 256), guards torch.export
            # cannot prove over a named range ("resulted in a specialized value of 3"); AUTO keeps them as
            # run-time checks, and the program takes a prompt and one token alike. Strict:
            # traced without it, the cache's in-place updates were not the buffers' mutations, and
            # ExecuTorch's decomposition failed ("expected compiled_fn to be GraphModule").
            auto = torch.export.Dim.AUTO(max=seq_len - 1)  # the bound ExecuTorch plans its memory for
            with torch.no_grad():
                program = torch.export.export(
                    StatefulDecoder(model, seq_len),
                    (),
                    trace,
                    dynamic_shapes={"input_ids": {1: auto}, "cache_position": {0: auto}},
                    strict=True,
                )
        else:
            module = TorchExportableModuleForDecoderOnlyLM(model, batch_size=1, max_cache_len=seq_len)
            _sized_as_measured(module, layout, seq_len)
            length = torch.export.Dim("prompt_length", max=seq_len - 1)
            with torch.no_grad():
                program = module.export(
                    **trace, dynamic_shapes={"input_ids": {1: length}, "cache_position": {0: length}}, strict=True
                )
    finally:
        model.generation_config = saved
    if states:
        partitioner = [_xnnpack_without_views()]

    def lowered(planning: MemoryPlanningPass) -> Any:
        # Under the ExecuTorch patches the exporter lowers every other program under (ours among them).
        with apply_patches("executorch"):
            return to_edge_transform_and_lower(
                {"forward": program},
                partitioner=partitioner,
                compile_config=EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True),
                constant_methods=constants,
            ).to_executorch(
                config=ExecutorchBackendConfig(extract_delegate_segments=True, memory_planning_pass=planning)
            )

    made = lowered(MemoryPlanningPass(alloc_graph_input=False))
    if states and not _loads(made.buffer):
        # ExecuTorch's greedy plan placed a tensor past the memory it planned (Mamba 2's chunked scan at
        # 2048 positions: "offset_bytes (16777216) + size_bytes (16777216) >= allocator size (24929536)",
        # and the method refused to load, 0x21); its naive plan gives every tensor memory of its own.
        from executorch.exir.memory_planning import MemoryPlanningAlgorithmSuite, naive

        naive_plan = MemoryPlanningAlgorithmSuite([naive])
        made = lowered(MemoryPlanningPass(memory_planning_algo=naive_plan, alloc_graph_input=False))
    with open(path, "wb") as file:
        made.write_to_file(file)


def _loads(program: bytes) -> bool:
    """Whether ExecuTorch's runtime loads the program's `forward`."""
    from executorch.runtime import Runtime

    try:
        Runtime.get().load_program(program).load_method("forward")
    except RuntimeError:
        return False
    return True


def _xnnpack_without_views() -> Any:
    """XNNPACK's partitioner leaving reshapes to ExecuTorch's own kernels: a state-space layer's chunked
    scan reshapes over the prompt's length and its chunks, two dynamic sizes, which XNNPACK's reshape
    refuses at lowering ("XNNPACK reshape only supports 1 dynamic dimension"). Its matmuls, where the
    time goes, stay XNNPACK's."""
    from executorch.backends.xnnpack.partition.config import ALL_PARTITIONER_CONFIGS
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    views = {"ViewCopyConfig", "UnsqueezeCopyConfig"}
    return XnnpackPartitioner(configs=[c for c in ALL_PARTITIONER_CONFIGS if c.__name__ not in views])


def program_run(path: Path, prefix: int = 0):
    """`run(component, **kwargs)` over the runner's program in ExecuTorch's Python runtime, for the
    split's greedy loop (`validate.greedy_loop`): fed `input_ids` and `cache_position` only, its cache
    inside it (one prompt at a time, unpadded: the runner's batch is 1). A program of ExecuTorch's own
    LLM export is fed the first position alone and returns the last token's logits
    (`executorch_llm.feeds_start_position`). Its positions start at 0 where the split's start after
    `prefix` masked ones (`CacheLayout.prefix`): a `StatefulDecoder` starts a new text from zero states there."""
    from executorch.runtime import Runtime

    method = Runtime.get().load_program(path).load_method("forward")
    if executorch_llm.feeds_start_position(method):

        def run_from_start(component: str, input_ids: torch.Tensor, cache_position: torch.Tensor, **_: Any) -> dict:
            logits = method.execute([input_ids, cache_position[:1] - prefix])[0]
            return {"logits": logits.unsqueeze(1) if logits.dim() == 2 else logits, "cache": ()}

        run_from_start.last_logits_only = True  # type: ignore[attr-defined]
        return run_from_start

    def run(component: str, input_ids: torch.Tensor, cache_position: torch.Tensor, **_: Any) -> dict:
        return {"logits": method.execute([input_ids, cache_position - prefix])[0], "cache": ()}

    return run


def rows(prompt: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """A left-padded batch as its prompts one by one, unpadded: what the runner is fed."""

    return [{"input_ids": r["input_ids"], "attention_mask": r["attention_mask"]} for r in unpadded_rows(prompt)]


# What the split's greedy loop builds for a decode step (the eager model takes them all; the program's
# run keeps `input_ids` and `cache_position`).
_STEP = {"input_ids", "attention_mask", "position_ids", "cache_position", "cache"}


def _traced(split: ExportSplit) -> dict[str, set[str]]:
    """The split's one component (the decoder) and what each of its steps is fed."""
    (component,) = split.components
    return {component: _STEP}


def _layout(split: ExportSplit) -> CacheLayout | None:
    """The split's cache as the model fills it (a decoder's; None for a split without one)."""
    return getattr(split, "cache_layout", None)


def prefix_of(split: ExportSplit) -> int:
    """The masked positions the split's cache holds before a prompt (`CacheLayout.prefix`)."""
    layout = _layout(split)
    return layout.prefix if layout is not None else 0


# `open_run(path) -> run`: the runtime's `run(component, input_ids, cache_position)` over the file or
# folder at `path` (None: ExecuTorch's, `program_run`). Another LLM runtime's judge passes its own.
OpenRun = Callable[[Path], Callable[..., dict]]


def eager_side(
    split: ExportSplit, model: PreTrainedModel, model_dir: Path, other: dict, judging: bool
) -> tuple[Reference, list[dict], list[Judged]]:
    """Eager's side of an LLM runtime's every check, computed once: the reference over `other`'s
    prompts one by one (the runtime's batch is 1), their greedy loops, and, where variants are judged
    (`judging`), the teacher-forced prose (`inputs.Judged`) and eager's logits over it."""
    prompts = rows(other)
    reference = Reference(model, split, _traced(split))
    judged = split.judged(model_dir, model.config, other).rows() if judging else []
    for row in prompts:
        reference.loop(row, split.plan.validation.new_tokens)
    for each in judged:
        reference.forced(each)
    return reference, prompts, judged


def compare(name: str, reference: Reference, path: Path, prompts: list[dict], open_run: OpenRun | None = None) -> Check:
    """The split's greedy-loop check (`validate.compare_generation`) of the program at `path`, prompt
    by prompt (`rows` of a batch), gathered into one check: eager `generate()`'s token ids, and the
    logits' largest diff."""

    split = reference.split
    run = open_run(path) if open_run is not None else program_run(path, prefix_of(split))
    checks = [compare_generation(name, reference, split, run, _traced(split), row) for row in prompts]
    gathered = Check(
        name,
        max_abs_diff={"logits": max(c.worst() for c in checks)},
        scale={"logits": max(c.scale.get("logits", 1.0) for c in checks)},
    )
    gathered.eager_tokens = [row for c in checks for row in c.eager_tokens or []]
    gathered.exported_tokens = [row for c in checks for row in c.exported_tokens or []]
    gathered.tokens_equal = all(c.tokens_equal for c in checks)
    gathered.error = next((c.error for c in checks if c.error), None)
    return gathered


def quality(
    reference: Reference, path: Path, prompts: list[dict], judged: list[Judged], open_run: OpenRun | None = None
) -> dict[str, float]:
    """A variant's program against eager fp32 (`validate.generation_quality`), row by row (the runner's
    batch is 1): greedy tokens on `prompts`, teacher-forced on `judged`, each figure weighted by the
    positions it was taken over."""

    split = reference.split
    run = open_run(path) if open_run is not None else program_run(path, prefix_of(split))
    if getattr(run, "last_logits_only", False) and split.forces_at_once:
        # A continuation fed at once gives one position's logits here: fed a token at a time instead.
        split = copy.copy(split)
        split.forces_at_once = False
    traced = _traced(split)
    figures = [generation_quality(reference, split, run, traced, p, j) for p, j in zip(prompts, judged)]
    weights = [f[Figure.FORCED_TOKENS] for f in figures]
    out = {name: sum(f[name] * w for f, w in zip(figures, weights)) / sum(weights) for name in figures[0]}
    out[Figure.FORCED_TOKENS] = sum(weights)
    out[Figure.TOKEN_AGREEMENT] = sum(f[Figure.TOKEN_AGREEMENT] for f in figures) / len(figures)
    return out


@contextlib.contextmanager
def _captured_stdout():
    """What C++ writes to this process's stdout meanwhile, as bytes (a list filled on exit): the runner
    prints each token's bytes as an app's console shows them — a piece may end mid-character, which
    its Python callback cannot take."""
    import sys

    sys.stdout.flush()
    saved = os.dup(1)
    captured: list[bytes] = []
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 1)
        try:
            yield captured
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            captured.append(sink.read())


def runner_bytes(path: Path, tokenizer: Path, prompt: str, new_tokens: int, bos: int) -> bytes:
    """What `TextLLMRunner` writes for `prompt`, greedy (temperature 0), `bos` start tokens added: each
    token's bytes as it decodes them, before the newline and statistics line it ends with.

    Raises:
        RuntimeError: the runner refuses the program or the tokenizer.
    """
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    runner = TextLLMRunner(str(path), str(tokenizer))
    config = GenerationConfig(echo=False, max_new_tokens=new_tokens, temperature=0.0, num_bos=bos)
    with _captured_stdout() as out:
        runner.generate(prompt, config)
    return out[0].split(b"\nPyTorchObserver", 1)[0]


# The runner prints each token's piece through `safe_printf` (llama2.c's, kept in ExecuTorch's LLM
# runner): a piece of one byte that is neither printable ASCII nor whitespace is dropped. A random
# model over a bytes-only vocabulary wrote e1 fb ":" "$" ee "2" …; the runner printed ":$2…".
_PRINTED_SINGLE_BYTES = frozenset(range(0x20, 0x7F)) | frozenset(b"\t\n\v\f\r")


def token_bytes(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> bytes:
    """The bytes ExecuTorch's runner prints for `ids`, token by token: each token's bytes, the start and
    end tokens and lone unprintable bytes left out (`_PRINTED_SINGLE_BYTES`); another special token
    mid-text is printed as its text (measured: a random DeepSeek-V3 wrote pad, 257, and the runner
    printed "<|pad|>"). A byte-level BPE token (GPT-2's,
    Llama 3's) is bytes spelled in GPT-2's printable alphabet; a SentencePiece one is text with "▁" for
    a space, or a byte `<0xNN>`. Decoding the ids to text instead writes U+FFFD for a character split
    across tokens, where the runner writes its bytes or nothing: a correct program would read as wrong.
    What the runner drops the ids still decide: `compare` checks the same program's ids exactly."""
    import re

    from transformers.convert_slow_tokenizer import bytes_to_unicode

    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    byte_level = _byte_level(tokenizer)
    ends = {tokenizer.bos_token_id, tokenizer.eos_token_id}
    special = set(tokenizer.all_special_ids)
    out = bytearray()
    for token_id, piece in zip(ids, tokenizer.convert_ids_to_tokens(ids)):
        if token_id in ends or piece is None:
            continue
        if token_id in special:
            out.extend(piece.encode())
            continue
        if match := re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", piece):
            written = bytes([int(match[1], 16)])
        elif byte_level and all(c in byte_of for c in piece):
            written = bytes(byte_of[c] for c in piece)
        else:
            written = piece.replace("\u2581", " ").encode()
        if len(written) != 1 or written[0] in _PRINTED_SINGLE_BYTES:
            out.extend(written)
    return bytes(out)


def _byte_level(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether the tokenizer's decoder is byte-level (its tokens spelled in GPT-2's byte alphabet)."""
    import json

    decoder = json.loads(tokenizer.backend_tokenizer.to_str()).get("decoder") or {}
    kinds = {decoder.get("type")} | {d.get("type") for d in decoder.get("decoders", [])}
    return "ByteLevel" in kinds


def _start_tokens(tokenizer: PreTrainedTokenizerBase, prompt: str) -> int:
    """How many tokens the repo's tokenizer puts before a prompt's own (a BOS): the runner adds them by count."""
    ids = tokenizer(prompt)["input_ids"]
    plain = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    return len(ids) - len(plain) if plain and ids[-len(plain) :] == plain else 0


def runs_in_runner(model_dir: Path, path: Path, new_tokens: int) -> str | None:
    """Why ExecuTorch's LLM runner cannot generate with the program at `path` and the repo's
    tokenizer, or None when it can (or the repo has no tokenizer it reads: nothing to try)."""
    from transformers import AutoTokenizer

    tokenizer_file = model_dir / "tokenizer.json"
    if not tokenizer_file.exists():
        return None
    bos = _start_tokens(AutoTokenizer.from_pretrained(model_dir), PROMPTS[0])
    try:
        runner_bytes(path, tokenizer_file, PROMPTS[0], new_tokens, bos)
    except RuntimeError as e:
        return None if _refused_tokenizer(e) else f"ExecuTorch's LLM runner cannot run it: {_without_paths(e, path)}"
    return None


def _without_paths(error: Exception, path: Path) -> str:
    """The runner's message with this machine's path to the program as its name in the folder."""
    return str(error).replace(str(path.parent), ".")


def _refused_tokenizer(error: RuntimeError) -> bool:
    """The runner's refusal of the tokenizer ("Failed to load tokenizer from: …"), not of the program.
    It reads byte-level BPE, SentencePiece and tiktoken; not, for one, a word-level `tokenizer.json`."""
    return "tokenizer" in str(error).lower()


def runner_expectations(model: Any, model_dir: Path, new_tokens: int) -> dict[str, list[int]] | None:
    """The token ids eager `generate()` writes for each of `PROMPTS` (stopping at end of sequence, as
    the runner does): `runner_check`'s reference, computed while the model is here. None: the repo
    has no `tokenizer.json`, which the runner reads."""
    from transformers import AutoTokenizer

    if not (model_dir / "tokenizer.json").exists():
        return None
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    expected = {}
    for prompt in PROMPTS:
        ids = tokenizer(prompt)["input_ids"]
        with torch.inference_mode():
            new = model.generate(
                torch.tensor([ids]),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=new_tokens,
                do_sample=False,
            )[0, len(ids) :].tolist()
        expected[prompt] = new
    return expected


def runner_check(expected: dict[str, list[int]] | None, model_dir: Path, path: Path, new_tokens: int) -> Check:
    """ExecuTorch's `TextLLMRunner` itself, reading the repo's `tokenizer.json`, against eager
    `generate()`'s token ids (`runner_expectations`) on `PROMPTS`: the runner prints each token's
    bytes, so it must print exactly the bytes of eager's ids (`token_bytes`) — judged by ids, not by
    decoded text, which differs wherever a character is split across tokens."""
    from transformers import AutoTokenizer

    check = Check("llm_runner")
    tokenizer_file = model_dir / "tokenizer.json"
    if expected is None:
        check.note = "the repo has no tokenizer.json, which ExecuTorch's LLM runner reads: it was not run"
        return check
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    for prompt in PROMPTS:
        bos = _start_tokens(tokenizer, prompt)
        try:
            written = runner_bytes(path, tokenizer_file, prompt, new_tokens, bos)
        except RuntimeError as e:
            if not _refused_tokenizer(e):
                check.error = f"ExecuTorch's LLM runner cannot run it: {_without_paths(e, path)}"
                return check
            # Not the runner's message: it names this machine's path to the file.
            check.note = (
                "ExecuTorch's LLM runner cannot read the repo's tokenizer.json (it reads byte-level BPE, "
                "SentencePiece and tiktoken ones): it was not run"
            )
            return check
        want = token_bytes(tokenizer, expected[prompt])
        if written != want:
            # Where they part, as ids and escaped bytes: never the raw text, which may not be text at all.
            at = next((i for i, (a, b) in enumerate(zip(written, want)) if a != b), min(len(written), len(want)))
            check.error = (
                f"the runner wrote other tokens than eager generate()'s {expected[prompt]}: their bytes part at "
                f"byte {at} ({written[at : at + 8]!r} where eager's are {want[at : at + 8]!r})"
            )
    check.tokens_equal = check.error is None
    return check


def run(
    split: ExportSplit,
    backend: Backend,
    model: PreTrainedModel,
    model_dir: Path,
    out_dir: Path,
    result: BackendResult,
    stage: Callable[[str], None],
) -> None:
    """A decoder LLM's whole backend job in the runner's layout (`Backend.llm_runner` names this):
    `fp32/model.pte` exported and judged, its variants (8da4w: `8da4w/model.pte`): one program a
    folder, each with the name the runner's users look for (see `BASE`), `result` filled in."""
    import time

    plan = split.plan
    seq_len = max_seq_len(model.config)
    other = split.inputs(model_dir, model.config, plan.validation, seed=1)
    stage("exporting for ExecuTorch's LLM runner")
    started = time.perf_counter()
    program = out_dir / BASE / PROGRAM
    program.parent.mkdir(parents=True)
    export(model, program, seq_len, _layout(split), quantized=False)
    result.export_seconds = round(time.perf_counter() - started, 2)
    model.config.save_pretrained(out_dir)
    model.generation_config.save_pretrained(out_dir)

    # Eager's side of every check, computed once; the weights go before the program is loaded
    # unless 8da4w re-exports the model.
    stage("eager reference")
    wanted = _wanted(split, backend)
    n = plan.validation.new_tokens
    reference, prompts, judged = eager_side(split, model, model_dir, other, bool(wanted))
    expected = runner_expectations(model, model_dir, n)
    if not wanted:
        reference.release()

    stage("validating")
    started = time.perf_counter()
    validation = Validation(tolerance=backend.tolerance[result.dtype or "float32"])
    validation.checks.append(compare("generation_other_shape", reference, program, prompts))
    validation.checks.append(runner_check(expected, model_dir, program, n))
    result.validate_seconds = round(time.perf_counter() - started, 2)
    if plan.variants and validation.passed:
        stage("variants")
        result.variants = _variants(split, backend, reference, model_dir, out_dir, prompts, judged, seq_len, stage)
    result.layout, result.max_seq_len = Layout.LLM_RUNNER, seq_len
    result.components = list(split.components)
    result.programs = {c: f"{BASE}/{PROGRAM}" for c in split.components}
    result.inputs = {c: ["input_ids", "cache_position"] for c in split.components}
    result.validation = validation
    result.status = Status.OK if validation.passed else Status.FAILED
    result.error = validation.first_problem()


def _why_skipped(variant: Variant, split: ExportSplit, backend: Backend) -> str | None:
    """Why `variant` is not built in the runner's layout (8da4w alone is), or None: it is."""

    return why_skipped(variant, split, backend.name) or (
        None if variant.kind == VariantKind.DA8W4 else f"{variant.kind} is not built in the LLM runner's layout"
    )


def _wanted(split: ExportSplit, backend: Backend) -> list[Variant]:
    """The plan's variants this layout builds (each re-exports the eager model)."""

    return [
        v for v in variants_of(backend.name, split.plan.variants, generates=True) if not _why_skipped(v, split, backend)
    ]


def _variants(
    split: ExportSplit,
    backend: Backend,
    reference: Reference,
    model_dir: Path,
    out_dir: Path,
    prompts: list[dict],
    judged: list[Judged],
    seq_len: int,
    stage: Callable[[str], None],
) -> list:
    """The plan's ExecuTorch variants in the runner's layout: 8da4w re-exported from the quantized
    model (`executorch_variants.quantize_8da4w`) into a folder of its own, judged by the same figures
    as every generation variant; others are not built in this layout yet (reported skipped)."""
    import shutil
    import traceback

    plan, base = split.plan, (out_dir / BASE / PROGRAM).stat().st_size
    results = []
    for variant in variants_of(backend.name, plan.variants, generates=True):
        stage(f"variant {variant.kind}")
        outcome = VariantResult(variant.kind, Status.FAILED, thresholds=thresholds_for(variant.kind, plan.min_quality))
        results.append(outcome)
        skipped = _why_skipped(variant, split, backend)
        if skipped:
            outcome.status, outcome.error = Status.SKIPPED, skipped
            continue
        folder = out_dir / str(variant.kind)
        try:
            folder.mkdir()
            export(reference.model, folder / PROGRAM, seq_len, _layout(reference.split), quantized=True)
            figures = quality(reference, folder / PROGRAM, prompts, judged)
        except Exception as e:
            traceback.print_exc()
            outcome.error = f"{type(e).__name__}: {describe_error(e)}"
            shutil.rmtree(folder, ignore_errors=True)
            continue
        outcome.quality = reported(figures)
        missed = misses(figures, outcome.thresholds)
        refused = runs_in_runner(model_dir, folder / PROGRAM, plan.validation.new_tokens)
        missed += [refused] if refused else []
        if missed:
            shutil.rmtree(folder)
            outcome.error = ", ".join(missed) + " (not published)"
            continue
        outcome.status, outcome.file = Status.OK, f"{variant.kind}/{PROGRAM}"
        outcome.files = [outcome.file]
        outcome.size = (folder / PROGRAM).stat().st_size
        outcome.size_share = round(outcome.size / base, 4)
        outcome.runtime_ops = quantized_kernels(folder / PROGRAM)
    return results

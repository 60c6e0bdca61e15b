"""Stage 5 — validate: compare a reloaded export with the eager model.

Runs inside the backend's worker process (`hfexport/worker/`), on the artifact as a user would load
it: `ExportedModel.from_pretrained(folder)` on the backend's own runtime. The checks:

- sample: the inputs the graph was traced with;
- other shape: a different batch, sequence and (encoder-decoders) decoder prompt length, which is
  what catches an axis torch.export specialised;
- generation: the exported components driven in a greedy loop (each split's steps, from
  `worker/splits.py`) must produce exactly the token ids of eager `generate()`, for
  `Shape.new_tokens` tokens (the plan's `validation` shape);
- loaders_layout (the ONNX of a decoder LLM or an encoder-decoder): the same greedy loop on the
  graphs renamed for optimum and transformers.js, fed as those loaders feed them (`loaders_run`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from ..report import Check, Figure
from .inputs import Judged
from .memory import drop_checkpoint_pages, free_weights

if TYPE_CHECKING:
    from transformers import PretrainedConfig, PreTrainedModel

Run = Callable[..., Any]  # run(component_name, **kwargs) -> model output


def max_abs_diffs(reference: Any, candidate: Any) -> dict[str, float]:
    """Max abs diff of every tensor output the two have in common, by name. NaN in the same place on
    both sides counts as equal; NaN on one side only is an infinite diff."""
    diffs: dict[str, float] = {}
    for name, ref in _named_tensors(reference).items():
        got = _named_tensors(candidate).get(name)
        if got is None:
            diffs[name] = math.inf
            continue
        if ref.shape != got.shape:
            diffs[name] = math.inf
            continue
        ref, got = ref.detach().float().cpu(), got.detach().float().cpu()
        diff = (ref - got).abs()
        diff[ref.isnan() & got.isnan()] = 0
        diff[diff.isnan()] = math.inf
        diffs[name] = float(diff.max()) if diff.numel() else 0.0
    return diffs


def scales(reference: Any) -> dict[str, float]:
    """Each float output's largest |value| (`Check.scale`: what its tolerance is relative to)."""
    return {
        name: float(t.detach().float().abs().nan_to_num(0, 0, 0).max()) if t.numel() else 0.0
        for name, t in _named_tensors(reference).items()
        if t.is_floating_point()
    }


def _named_tensors(output: Any) -> dict[str, torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return {"output": output}
    if isinstance(output, Mapping):
        return {k: v for k, v in output.items() if isinstance(v, torch.Tensor)}
    if isinstance(output, (tuple, list)):
        return {f"output_{i}": v for i, v in enumerate(output) if isinstance(v, torch.Tensor)}
    return {}


def compare_forward(name: str, eager: Reference, exported: Callable, inputs: dict) -> Check:
    """Run the export on `inputs` and record its diffs to eager's (an exception is recorded, not raised)."""
    check = Check(name)
    reference = eager.forward(inputs)
    with torch.inference_mode():
        try:
            candidate = exported(**inputs)
        except Exception as e:  # the runtime refused the shape: exactly what this check is for
            check.error = f"{type(e).__name__}: {_first_line(e)}"
            return check
    check.max_abs_diff = max_abs_diffs(reference, candidate)
    check.scale = scales(reference)
    check.note = tied_selection(reference)
    return check


def tied_selection(reference: Any) -> str | None:
    """Why a DETR-style detector's outputs cannot be compared, where eager's own encoder picks its
    queries among tied scores: the `k` anchors of highest score (`enc_outputs_class`; `k` is
    `enc_topk_logits`' count) decoded as queries, the k-th score shared past the boundary. Measured on
    an RT-DETR of default initialisation (its signal damped to a spread of 4e-8): every anchor's score
    exactly eager's in ONNX Runtime (0.0 off) and the chosen anchors' boxes 0.19 off, another pick of
    equals. None: no such output, or no tie."""
    named = _named_tensors(reference)
    scores, chosen = named.get("enc_outputs_class"), named.get("enc_topk_logits")
    if scores is None or chosen is None or scores.dim() != 3 or scores.shape[1] <= chosen.shape[1]:
        return None
    k = chosen.shape[1]
    best = scores.float().amax(-1).sort(dim=-1, descending=True).values
    boundary = best[:, k - 1 : k]
    equal = (best - boundary).abs() <= 1e-6 * boundary.abs().clamp(min=1.0)  # float32's rounding, no more
    if not bool(equal[:, k].any()):  # the first anchor left out scores below the last one taken
        return None
    shared = equal.sum(-1)
    return (
        f"eager's own encoder scores tie at its top-{k} boundary ({int(shared.max())} anchors share the "
        f"{k}th score, {float(boundary.max()):.4g}): which anchors become queries is arbitrary in any runtime, "
        "so its detections cannot be compared (weights untrained, or damped to equal scores)"
    )


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0][:500] if text else ""


class Reference:
    """The eager model's side of every comparison, each result computed once.

    Validation, the loaders' layout and each variant compare against the same eager runs (the
    greedy loop of the validation prompts ran up to four times per variant before). `prepare`
    computes all the ones a backend's checks will ask for, so that `release` can drop the model's
    weights before any exported program is loaded beside them: the eager model and an ONNX Runtime
    session together were 2.55x the fp32 weights of a 362 M Llama at peak, the session alone 1.25x.

    Args:
        model: the eager model, prepared as the split exports it.
        split: the plan's `ExportSplit` (its eager components and greedy steps).
        traced: per component, the kwargs its program was traced with.
    """

    def __init__(self, model: PreTrainedModel, split, traced: dict[str, set[str]]):
        self.model, self.split, self.traced = model, split, traced
        self.config = model.config
        self.dtype = model.dtype  # the precision both sides run in (`Backend.precision`)
        self._eager = split.eager(model)
        self._memo: dict[tuple, tuple[Any, Any]] = {}  # key → (the inputs it keys on, kept alive; the result)
        self.released = False

    def _once(self, key: tuple, inputs: dict, compute: Callable[[], Any]) -> Any:
        key = (*key, id(inputs))
        if key not in self._memo:
            if self.released:
                raise RuntimeError(f"eager result {key[:-1]} was not prepared before the model was released")
            self._memo[key] = (inputs, compute())
        return self._memo[key][1]

    def forward(self, inputs: dict) -> Any:
        """The eager model's output on `inputs` (a single graph's reference)."""

        def compute():
            with torch.inference_mode():
                return self.model(**inputs)

        return self._once(("forward",), inputs, compute)

    def generate(self, prompt: dict, new_tokens: int) -> tuple[torch.Tensor, Callable]:
        """`eager_generate` of `prompt`: its new tokens and generate()'s logits processors."""
        return self._once(("generate", new_tokens), prompt, lambda: eager_generate(self.model, prompt, new_tokens))

    def loop(self, prompt: dict, new_tokens: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The greedy loop on the eager components, with generate()'s processors."""
        tokens, processors = self.generate(prompt, new_tokens)

        def compute():
            with torch.inference_mode():
                return greedy_loop(
                    self.split,
                    self._run,
                    self.traced,
                    prompt,
                    self.config,
                    new_tokens,
                    processors,
                    cache_dtype=self.dtype,
                )

        return self._once(("loop", new_tokens), prompt, compute)

    def forced(self, judged: Judged) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The continuation `judged` forces (eager `generate()`'s own where it names none), and the eager
        components' raw logits at each of its steps, fed it (teacher forcing)."""

        def compute():
            tokens = judged.forced if judged.forced is not None else self.generate(judged.prompt, judged.new_tokens)[0]
            with torch.inference_mode():
                _, logits = greedy_loop(
                    self.split,
                    self._run,
                    self.traced,
                    judged.prompt,
                    self.config,
                    judged.new_tokens,
                    force=tokens,
                    cache_dtype=self.dtype,
                )
            return tokens, logits

        return self._once(("forced", judged.new_tokens), judged.prompt, compute)

    def _run(self, component: str, **kwargs):
        return self._eager[component](**kwargs)

    def prepare(self, sample: dict, other: dict, judged: Judged | None) -> None:
        """Compute every result the checks ask for: the validation's on `sample` and `other`, and
        (`judged`: variants will be judged) the variants' teacher-forced run and greedy tokens."""
        if not self.split.generates:
            self.forward(sample)
            self.forward(other)
            return
        n = self.split.plan.validation.new_tokens
        for prompt in (sample, other):
            self.loop(prompt, n)
        if judged is not None:
            self.forced(judged)

    def release(self) -> None:
        """Drop the eager model's weights (it stays a module on the meta device): from here on only
        what `prepare` computed is answered, and asking for anything else is an error, not a rerun."""

        free_weights(self.model)
        self.released = True
        drop_checkpoint_pages()


# ── Generation: a greedy loop over components ────────────────────────────────


def greedy_loop(
    split,
    run: Run,
    traced: dict[str, set[str]],
    prompt: dict[str, torch.Tensor],
    config: PretrainedConfig,
    new_tokens: int,
    processors: Callable | None = None,
    force: torch.Tensor | None = None,
    cache_dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Greedy decoding over a split's components (`worker/splits.py`: its `start` on the prompt,
    then a `step` per new token).

    Args:
        split: the plan's `ExportSplit`, which knows its components and how each step feeds them.
        run: `run(component, **kwargs)` — an exported runner or the eager model, same interface.
        traced: per component, the kwargs it was traced with (only those are passed).
        prompt: `generate()` kwargs (input_ids/attention_mask, input_features, decoder_input_ids).
        processors: `generate()`'s own logits processors for this prompt (`eager_generate` returns
            them), applied to each step's logits before the argmax, as generate() applies them:
            the model's forced, suppressed and banned tokens, n-gram and repetition rules, and
            EOS held back until `new_tokens`. The logits returned are the raw ones.
        force: `[batch, new_tokens]` ids to feed instead of the argmax (teacher forcing: the logits
            of each step are then those of a given continuation); fed at once where the split
            takes a continuation so (`ExportSplit.forces_at_once`), the same causal logits.
        cache_dtype: the dtype of the empty cache one decoder starts from (a float16 program's is float16).

    Returns:
        The new token ids `[batch, new_tokens]`, and the logits of each step.

    Raises:
        ValueError: a component takes inputs the split's steps do not build.
    """

    def call(component: str, **kwargs):
        known = traced[component]
        missing = [k for k in known if k not in kwargs]
        if missing:
            raise ValueError(f"component {component!r} takes inputs the greedy loop cannot build: {missing}")
        return run(component, **{k: v for k, v in kwargs.items() if k in known})

    if force is not None and processors is None and split.forces_at_once:
        return force, split.forced_logits(call, prompt, force, config, cache_dtype)
    tokens: list[torch.Tensor] = []
    logits_per_step: list[torch.Tensor] = []
    output, sequence, state = split.start(call, prompt, config, cache_dtype)
    for step in range(new_tokens):
        next_token = _pick(output, processors, sequence, logits_per_step)
        if force is not None:
            next_token = force[:, step : step + 1]
        tokens.append(next_token)
        sequence = torch.cat([sequence, next_token], dim=-1)
        if step + 1 < new_tokens:
            output = split.step(call, output, next_token, state)
    return torch.cat(tokens, dim=-1), logits_per_step


def ort_checking_options() -> dict[str, Any]:
    """ONNX Runtime sessions that only check outputs skip prepacking the weights of the CPU's matrix
    kernels: prepacking is a copy of every weight made when the session opens, which pays off over a
    served model's many runs, not over a validation's few. Measured on a 1.24 B Llama's graph: opening
    17.0 s -> 2.2 s, the process's peak 5.8 -> 2.1 GB; a 16-token prompt 0.38 -> 0.87 s. The same
    kernels compute either way. Sessions that are timed (a variant against its fp32 graph) keep the
    defaults, as served."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.add_session_config_entry("session.disable_prepacking", "1")
    return {"session_options": options}


def loaders_run(
    paths: Mapping[str, Any],
    config: PretrainedConfig,
    open_session: Callable[[Any], Any] | None = None,
    *,
    quantized: bool = False,
) -> Run:
    """`run(component, **kwargs)` over graphs laid out for optimum and transformers.js
    (`Layout.DECODER_WITH_PAST`, `Layout.ENCODER_DECODER_WITH_PAST`; `paths`: each component's
    file), each in a plain ONNX Runtime session as those loaders open it: the greedy loop feeds them
    as it feeds the exporter's programs, so the published files are judged too. A cache goes in as
    `past_key_values.N[.decoder].key/value` (a state as `past_conv.N`, `past_ssm.N` or
    `past_recurrent.N`) and comes back from `present*`. `open_session(path)`: another runtime's
    session answering as ONNX Runtime's (onnxruntime-web's, `web.wasm.WasmSession`); default ORT for CPU.
    `quantized`: a variant's files, whose `MatMulNBits` weights are packed for its kernels when the
    session opens (`ort_checking_options` skips that for the float ones): unpacked, one decode step
    of SmolLM2-135M's w8 file took 1.09 s instead of 0.09."""
    if open_session is None:
        import onnxruntime as ort

        # The loaders' files are checked here, not timed.
        options = ort.SessionOptions() if quantized else ort_checking_options()["session_options"]

        def open_session(path):
            return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    sessions = {c: open_session(p) for c, p in paths.items()}

    def run(component: str, cache=None, **kwargs):
        session = sessions[component]
        inputs = {i.name: i for i in session.get_inputs()}
        outputs = [o.name for o in session.get_outputs()]
        feed = {name: value.numpy() for name, value in kwargs.items()}
        infix = "decoder." if "past_key_values.0.decoder.key" in inputs else ""
        if cache is not None:
            # A float16 graph (`model_fp16.onnx`) takes its cache in float16, as transformers.js feeds it.
            half = any("float16" in i.type for n, i in inputs.items() if n.startswith("past_"))
            for index, layer in enumerate(cache.layers):
                leaves = {
                    f"past_key_values.{index}.{infix}key": getattr(layer, "keys", None),
                    f"past_key_values.{index}.{infix}value": getattr(layer, "values", None),
                }
                # A layer's states (`layouts.state_names`): the conv state, the recurrent one by either name.
                conv, recurrent = (getattr(layer, kind, None) or {} for kind in ("conv_states", "recurrent_states"))
                leaves |= {f"past_conv.{index}": conv.get(0)}
                leaves |= {f"past_{name}.{index}": recurrent.get(0) for name in ("ssm", "recurrent")}
                for name, leaf in leaves.items():
                    if name in inputs and leaf is not None:
                        feed[name] = (leaf.to(torch.float16) if half else leaf).numpy()
        got = dict(zip(outputs, session.run(None, {name: feed[name] for name in inputs})))
        if not any(name.startswith("present") for name in outputs):  # an encoder: its outputs by name
            return {name: torch.from_numpy(value) for name, value in got.items()}
        return {"logits": torch.from_numpy(got["logits"]), "cache": Present(got, infix)}

    return run


class Present:
    """A graph's `present*` outputs as the cache the greedy loop feeds back (`layers[i].keys`,
    `.values`, `.conv_states[0]`, `.recurrent_states[0]`), read by transformers.js's names."""

    def __init__(self, got: dict, infix: str):
        import types

        indexes = {int(name.split(".")[1]) for name in got if name.startswith("present")}
        self.layers = [types.SimpleNamespace(conv_states={}, recurrent_states={}) for _ in range(max(indexes) + 1)]
        for name, value in got.items():
            head, _, rest = name.partition(".")
            if not head.startswith("present"):
                continue
            index, _, leaf = rest.partition(".")
            layer, tensor = self.layers[int(index)], torch.from_numpy(value)
            if head == "present" and leaf in (f"{infix}key", f"{infix}value"):
                setattr(layer, "keys" if leaf.endswith("key") else "values", tensor)
            elif head == "present_conv":
                layer.conv_states[0] = tensor
            elif head in ("present_ssm", "present_recurrent"):
                layer.recurrent_states[0] = tensor


def _pick(
    output: Any, processors: Callable | None, sequence: torch.Tensor, logits_per_step: list[torch.Tensor]
) -> torch.Tensor:
    logits = (output["logits"] if isinstance(output, Mapping) else output.logits)[:, -1, :].float().clone()
    logits_per_step.append(logits.clone())
    if processors is not None:
        logits = processors(sequence, logits)
    return logits.argmax(dim=-1, keepdim=True)


def eager_generate(
    model: Any,  # one that generates (transformers names that type only privately)
    prompt: dict[str, torch.Tensor],
    new_tokens: int,
) -> tuple[torch.Tensor, Callable]:
    """The reference: eager `generate()` with the model's own generation config, made greedy and
    exactly `new_tokens` long (EOS held back until then). Returns the new tokens and the logits
    processors generate() built from that config for this prompt — its forced BOS/EOS, suppressed
    and banned tokens, no-repeat n-grams, repetition penalty — so the greedy loop over the exported
    components applies the very same ones (none of it is re-implemented here)."""
    import copy

    config = copy.deepcopy(model.generation_config)
    # Greedy: a shipped config's beams and sampling are how the model is *used*; the export is
    # judged on its logits, token for token, which greedy decoding exposes.
    config.do_sample, config.num_beams, config.num_beam_groups = False, 1, 1
    config.temperature = config.top_k = config.top_p = None
    config.max_new_tokens = config.min_new_tokens = new_tokens
    config.max_length = None
    for name in ("eos_token_id", "pad_token_id", "bos_token_id", "decoder_start_token_id"):
        if getattr(config, name, None) is None and getattr(model.config, name, None) is not None:
            setattr(config, name, getattr(model.config, name))
    built = []
    own = model._get_logits_processor

    def keep(*args, **kwargs):
        processors = own(*args, **kwargs)
        built.append(processors)
        return processors

    model._get_logits_processor = keep  # this instance only, for this one call
    try:
        with torch.inference_mode():
            out = model.generate(**prompt, generation_config=config)
    finally:
        del model._get_logits_processor
    start = prompt["decoder_input_ids"].shape[1] if "decoder_input_ids" in prompt else prompt["input_ids"].shape[1]
    return out[:, start:], built[-1]


def compare_generation(
    name: str, reference: Reference, split, exported_run: Run, traced: dict[str, set[str]], prompt: dict
) -> Check:
    """Token parity with eager `generate()` and logit diffs with the eager model in the same loop
    (`split`: the plan's `ExportSplit`, whose eager twins are the reference)."""
    check = Check(name)
    n = split.plan.validation.new_tokens
    expected, processors = reference.generate(prompt, n)
    eager_tokens, eager_logits = reference.loop(prompt, n)
    with torch.inference_mode():
        try:
            tokens, logits = greedy_loop(
                split, exported_run, traced, prompt, reference.config, n, processors, cache_dtype=reference.dtype
            )
        except Exception as e:
            check.error = f"{type(e).__name__}: {_first_line(e)}"
            check.eager_tokens = expected.tolist()
            return check
    check.eager_tokens = expected.tolist()
    check.exported_tokens = tokens.tolist()
    check.tokens_equal = torch.equal(expected, tokens)
    if not torch.equal(expected, eager_tokens):
        # Our loop disagrees with generate() on the eager model itself: a loop bug, not an export bug.
        check.error = "the greedy loop on the eager model does not reproduce generate(); cannot judge the export"
    check.max_abs_diff = {
        "logits": max(max_abs_diffs(a, b)["output"] for a, b in zip(eager_logits, logits)) if logits else 0.0
    }
    check.scale = {"logits": max((scales(a)["output"] for a in eager_logits), default=0.0)}
    return check


# ── Variants: quality against eager fp32, and speed against the fp32 artifact ──


def quality_figures(task: str, reference: Any, candidate: Any, inputs: dict) -> dict[str, float]:
    """How close a variant's outputs are to eager fp32's, in the terms its users care about.

    Embeddings (feature-extraction): `cosine_mean`, `cosine_min` over real tokens (padding left
    out). Heads: `top1_agreement` — per example for sequence/image classification, per real token
    for fill-mask and token classification, per position output for question answering. Always
    `max_abs_diff` of the primary output.
    """
    ref, got = _named_tensors(reference), _named_tensors(candidate)
    primary = [name for name in ref if name in got and ref[name].is_floating_point()]
    if not primary:
        raise ValueError("the variant produced none of the eager model's outputs")
    mask = inputs.get("attention_mask")
    figures = {"max_abs_diff": max(max_abs_diffs({n: ref[n] for n in primary}, {n: got[n] for n in primary}).values())}
    if task == "feature-extraction":
        a, b = ref[primary[0]].float(), got[primary[0]].float()
        if a.dim() == 3 and mask is not None and mask.shape == a.shape[:2]:
            a, b = a[mask.bool()], b[mask.bool()]
        else:
            a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
        cosine = torch.nn.functional.cosine_similarity(a, b, dim=-1)
        figures.update({Figure.COSINE_MEAN: float(cosine.mean()), Figure.COSINE_MIN: float(cosine.min())})
        return figures
    heads = [n for n in primary if "logits" in n] or primary[:1]
    agree = []
    for name in heads:
        a, b = ref[name].float().argmax(-1), got[name].float().argmax(-1)
        same = a == b
        if same.dim() == 2 and mask is not None and mask.shape == same.shape:
            same = same[mask.bool()]
        agree.append(same.reshape(-1))
    figures[Figure.TOP1_AGREEMENT] = float(torch.cat(agree).float().mean())
    return figures


def generation_quality(
    reference: Reference,
    split,
    run: Run,
    traced: dict[str, set[str]],
    prompt: dict,
    judged: Judged,
    cache_dtype: torch.dtype = torch.float32,
) -> dict[str, float]:
    """A generation variant against eager fp32, teacher-forced: both fed `judged`'s continuation
    (real prose, or speech's transcript: `inputs.Judged`), `forced_top1_agreement` is the share of
    its positions whose arg-max is eager's ("same top"), `logprob_delta_mean` the mean |Δ log-prob| of
    the continuation's tokens and `kld_mean` the mean KL divergence of its next-token distribution
    from eager's (± `kld_se`), over `forced_tokens` positions. These gate (the standard error aside).
    `token_agreement`, the share of the plan's validation new tokens (8) its greedy loop on `prompt`
    picks as eager `generate()` does, is reported, not gating: one flip at a near-tie changes every
    later greedy token.
    `cache_dtype`: the variant's (float16 for a float16 program)."""
    config, greedy = reference.config, split.plan.validation.new_tokens
    expected, processors = reference.generate(prompt, greedy)
    forced, eager_logits = reference.forced(judged)
    with torch.inference_mode():
        tokens, _ = greedy_loop(split, run, traced, prompt, config, greedy, processors, cache_dtype=cache_dtype)
        _, logits = greedy_loop(
            split, run, traced, judged.prompt, config, judged.new_tokens, force=forced, cache_dtype=cache_dtype
        )
    mask = judged.mask if judged.mask is not None else torch.ones_like(forced)
    deltas, same, klds, counted = [], [], [], []
    for step, (a, b) in enumerate(zip(eager_logits, logits)):
        picked = forced[:, step : step + 1]
        want, got = torch.log_softmax(a.float(), -1), torch.log_softmax(b.float(), -1)
        deltas.append((want.gather(-1, picked) - got.gather(-1, picked)).abs()[:, 0])
        klds.append((want.exp() * (want - got)).sum(-1))
        same.append(a.float().argmax(-1) == b.float().argmax(-1))
        counted.append(mask[:, step].bool())
    kept = torch.stack(counted, 1)
    kld = torch.stack(klds, 1)[kept].double()
    return {
        Figure.TOKEN_AGREEMENT: float((tokens == expected).float().mean()),
        Figure.FORCED_TOP1_AGREEMENT: float(torch.stack(same, 1)[kept].float().mean()),
        Figure.LOGPROB_DELTA_MEAN: float(torch.stack(deltas, 1)[kept].mean()),
        Figure.KLD_MEAN: float(kld.mean()),
        Figure.KLD_SE: float(kld.std() / len(kld) ** 0.5) if len(kld) > 1 else 0.0,
        Figure.FORCED_TOKENS: float(kept.sum()),
    }


def paired_speedup(
    baseline: Callable, variant: Callable, inputs: dict, variant_inputs: dict | None = None, rounds: int = 5
) -> list[float]:
    """Baseline time over variant time in each of `rounds` paired rounds (one of each, alternating,
    after a warm-up of both), sorted: its median is the figure (>1: the variant is faster on this
    runtime and these inputs), its ends the spread the card gives with it. One push's median of
    MiniLM's int8 went 1.42x to 2.98x between three pushes on a shared 2-core machine."""
    import time

    variant_inputs = variant_inputs if variant_inputs is not None else inputs
    with torch.inference_mode():
        baseline(**inputs)
        variant(**variant_inputs)
        ratios = []
        for _ in range(rounds):
            started = time.perf_counter()
            baseline(**inputs)
            middle = time.perf_counter()
            variant(**variant_inputs)
            ratios.append((middle - started) / max(time.perf_counter() - middle, 1e-9))
    return sorted(ratios)

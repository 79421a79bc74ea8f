"""The Python API, shaped like mlx-lm's: `load`, then `generate` or `stream_generate`.

    from redrafter_mlx import load, generate, stream_generate

    pipeline = load("smollm2-135m")            # the LLM, its shipped drafter, its calibration
    print(generate(pipeline, "Explain RoPE in one sentence.", max_tokens=64))
    for response in stream_generate(pipeline, "Name three rivers.", max_tokens=32):
        print(response.text, end="", flush=True)

The tree (W, L, S) comes from the drafter's calibration unless given, as in the CLI
(`tuning.plan_drafting`); `drafter=False` decodes plainly (autoregressive).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from . import runtime
from .decoding import GenerationStats, Step, decode_steps
from .drafting import TreeDrafter
from .drafting.loading import load_draft_model, load_drafter_for
from .errors import InputError
from .formats.loading import DEFAULT_MODEL, LoadedModel, shipped_drafter
from .formats.loading import load as load_model
from .formats.slices import read_own_slices
from .models.cache import KVCache
from .models.sharding import pipeline_llm, shard_llm
from .options import TREE_FIELDS, DecodingOptions
from .prompting import encode_prompt
from .runtime import distributed
from .runtime.timers import PhaseTimer
from .tuning import DraftPlan, plan_drafting


@dataclass
class Pipeline:
    """A loaded LLM with its drafter (None: plain decoding) and the dtype they run in. It
    decodes one answer at a time: its plans (and their compiled draft phases and step
    policies) are kept from one answer to the next."""

    loaded: LoadedModel
    drafter: TreeDrafter | None
    dtype: mx.Dtype
    all_reduces: int = 0  # per forward pass of the LLM, split across ranks (0: one process)
    plans: dict[tuple, DraftPlan] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    def materialize(self) -> None:
        """Evaluate every weight now. MLX loads lazily, on the loading thread's stream, so a
        pipeline handed to another thread (the server's worker) must be loaded first."""
        arrays: list = [self.loaded.model.parameters()]
        if self.drafter is not None:
            arrays.append(self.drafter.parameters())
            if self.drafter.ngrams is not None:
                arrays += [self.drafter.ngrams.keys, self.drafter.ngrams.drafts]
        mx.eval(arrays)

    def autoregressive(self) -> Pipeline:
        """The same LLM without its drafter (plain decoding)."""
        return Pipeline(self.loaded, None, self.dtype, self.all_reduces)

    def plan(self, options: DecodingOptions = DecodingOptions()) -> DraftPlan | None:
        """The drafting plan for this pair on this device (explicit tree fields win), made
        once per set of tree fields; None without a drafter."""
        if self.drafter is None:
            return None
        key = tuple(getattr(options, name) for name in TREE_FIELDS)
        if key not in self.plans:
            self.plans[key] = self._new_plan(options)
        return self.plans[key]

    def _new_plan(self, options: DecodingOptions) -> DraftPlan:
        limit = self.drafter.max_beam_length
        if limit and options.beam_length and options.beam_length > limit:
            raise InputError(
                f"this drafter drafts at most {limit - 1} tokens: beam length at most {limit}, "
                f"got {options.beam_length}"
            )
        plan = plan_drafting(
            self.loaded.source,
            getattr(self.drafter, "source", None),
            runtime.device_name(),
            runtime.dtype_name(self.dtype),
            options.beam_width,
            options.beam_length,
            options.search_width,
            options.node_budget,
            options.adaptive and distributed.world() is None,  # ranks must not follow their own clocks
            options.lookup,
            max_beam_length=limit,
        )
        distributed.agree("tree (a calibration differs: give -w/-l/-s)", str(plan.shape))
        return plan

    def steps(
        self,
        ids: list[int],
        options: DecodingOptions,
        drafting: DraftPlan | None = None,
        *,
        cache: KVCache | None = None,
        context: Sequence[int] = (),
        timer: PhaseTimer | None = None,
    ) -> Iterator[Step]:
        """The decoding steps for prompt token ids (`decoding.decode_steps`): sampled as
        `options` say, drafted as `drafting` says (default: `plan(options)`); `cache` to
        continue, holding the tokens `context`; a phase `timer`."""
        if options.seed is not None:
            mx.random.seed(options.seed)
        drafting = drafting or self.plan(options)
        return decode_steps(
            self.loaded.model,
            ids,
            self.drafter,
            drafting,
            max_tokens=options.max_tokens,
            sampler=options.sampler(),
            eos_ids=self.tokenizer.eos_token_ids,
            cache=cache,
            context=context,
            timer=timer,
        )


@dataclass
class Response:
    """One decoding step's output: the new text, its tokens and the running stats."""

    text: str  # the text these tokens completed (may be empty mid-character)
    tokens: list[int]  # tokens of this step (1..L with ReDrafter)
    stats: GenerationStats  # prompt/generation tokens and tokens/s, tokens/step, finish reason

    @property
    def token(self) -> int | None:
        """The step's last token (mlx-lm's `GenerationResponse.token`); None on the final
        response that only flushes the detokenizer's last characters."""
        return self.tokens[-1] if self.tokens else None


def load(
    model: str = DEFAULT_MODEL,
    drafter: str | bool | None = None,
    dtype: str | None = None,
    draft_model: str | None = None,
) -> Pipeline:
    """Load an LLM (alias, folder, hub id or .gguf) and its drafter: `drafter` names a drafter
    folder or hub id of any kind; None takes the one shipped for the model (none: plain
    decoding); False never drafts. `draft_model` names a small LLM of the same tokenizer to
    draft with instead (as mlx-lm's `--draft-model`), with `drafter` left None. The CLI
    loads through here too."""
    dtype_ = runtime.parse_dtype(dtype)
    if draft_model is not None and drafter is not None:
        raise InputError("give a drafter or a draft model, not both")
    loaded = load_model(model, dtype_)
    if draft_model is not None:
        return split_across_ranks(Pipeline(loaded, load_draft_model(loaded, draft_model, dtype_), dtype_))
    if drafter is False or (drafter is None and shipped_drafter(loaded) is None):
        return split_across_ranks(Pipeline(loaded, None, dtype_))
    return split_across_ranks(Pipeline(loaded, load_drafter_for(loaded, drafter or None, dtype_), dtype_))


def split_across_ranks(pipeline: Pipeline) -> Pipeline:
    """Under `mlx.launch -n N`: this rank's shard of the LLM (`models.sharding`, read by slice
    where the checkpoint allows: `formats.slices`; or its run of layers with
    `distributed.split_mode()` "pipeline"), the drafter whole, both checked to be what
    every rank loaded, and every rank's generators seeded alike. A single process is returned
    as it is."""
    group = distributed.world()
    if group is None:
        return pipeline
    model, drafter, split = pipeline.loaded.model, pipeline.drafter, distributed.split_mode()
    distributed.agree("model", fingerprint(model, model.embedding.weight, pipeline.loaded.config))
    weights = [p for _, p in tree_flatten(drafter.parameters())] if drafter else []
    distributed.agree("drafter", fingerprint(drafter, *weights))
    distributed.agree("split (give every rank --pipeline or none)", split)
    if split == "pipeline":
        if drafter is not None and drafter.target_layers:
            raise InputError("an EAGLE-3 drafter reads layers that other ranks run: drop --pipeline")
        pipeline.all_reduces = pipeline_llm(model, group)
    else:
        pipeline.all_reduces = shard_llm(model, group)
        read_own_slices(model, pipeline.loaded.source, group.rank(), group.size())  # not the whole checkpoint
    distributed.shared_seed()
    return pipeline


def fingerprint(module: nn.Module | None, *contents: Any) -> str:
    """What ranks compare before they split a model: every parameter's name, shape and dtype,
    and `contents` (arrays by their sum, the rest as they print)."""
    if module is None:
        return "none"
    shapes = [(name, tuple(p.shape), str(p.dtype)) for name, p in tree_flatten(module.parameters())]
    sums = [c.astype(mx.float32).sum().item() if isinstance(c, mx.array) else repr(c) for c in contents]
    return repr((shapes, sums))


def stream_generate(
    pipeline: Pipeline,
    prompt: str | list[int],
    options: DecodingOptions | None = None,
    *,
    system_prompt: str | None = None,
    **fields: Any,
) -> Iterator[Response]:
    """Decode `prompt` (text, put through the chat template, or token ids as they are) and
    yield a `Response` per step. `options` and/or its fields as keywords (`max_tokens=64`,
    `temp=0.7`, `beam_width=3`, ...; see `DecodingOptions`). Greedy at temp 0; sampling is
    exactly the LLM's distribution."""
    options = replace(options or DecodingOptions(), **fields)
    ids = (
        prompt
        if isinstance(prompt, list)
        else encode_prompt(pipeline.tokenizer, prompt, system_prompt=system_prompt, vicuna=pipeline.loaded.is_vicuna)
    )
    yield from with_text(pipeline.tokenizer, pipeline.steps(ids, options))


def with_text(tokenizer, steps: Iterable[Step]) -> Iterator[Response]:
    """A `Response` per decoding step with the text its tokens completed, then one without
    tokens for what the detokenizer held back, if anything (the CLI streams through this too)."""
    detokenizer = tokenizer.detokenizer
    detokenizer.reset()
    stats = GenerationStats()
    for step in steps:
        for token in step.tokens:
            detokenizer.add_token(token)
        stats = step.stats
        yield Response(detokenizer.last_segment, step.tokens, stats)
    detokenizer.finalize()
    if detokenizer.last_segment:
        yield Response(detokenizer.last_segment, [], stats)


def generate(pipeline: Pipeline, prompt: str | list[int], options: DecodingOptions | None = None, **fields: Any) -> str:
    """The whole answer as text; arguments as for `stream_generate`."""
    return "".join(response.text for response in stream_generate(pipeline, prompt, options, **fields))

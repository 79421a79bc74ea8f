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

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import mlx.core as mx

from . import runtime
from .decoding import GenerationStats, Step, generate as decode, make_greedy_or_sampler
from .drafter import Drafter
from .loading import DEFAULT_MODEL, LoadedModel, load as load_model, load_drafter_for, shipped_drafter
from .prompting import encode_prompt
from .tuning import DraftPlan, plan_drafting


@dataclass
class Pipeline:
    """A loaded LLM with its drafter (None: plain decoding) and the dtype they run in."""

    loaded: LoadedModel
    drafter: Drafter | None
    dtype: mx.Dtype

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    def plan(self, beam_width: int | None = None, beam_length: int | None = None,
             search_width: int | None = None, adaptive: bool = True) -> DraftPlan:
        """The drafting plan for this pair on this device (explicit values win)."""
        return plan_for(self.loaded, self.drafter, self.dtype, beam_width, beam_length, search_width, adaptive)


def plan_for(
    loaded: LoadedModel, drafter: Drafter | None, dtype: mx.Dtype, beam_width: int | None = None,
    beam_length: int | None = None, search_width: int | None = None, adaptive: bool = True,
) -> DraftPlan:
    """`tuning.plan_drafting` for a loaded pair on the device this process runs on."""
    return plan_drafting(loaded.source, drafter.source if drafter else None, runtime.device_name(),
                         runtime.dtype_name(dtype), beam_width, beam_length, search_width, adaptive)


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


def load(model: str = DEFAULT_MODEL, drafter: str | bool | None = None, dtype: str | None = None) -> Pipeline:
    """Load an LLM (alias, folder, hub id or .gguf) and its drafter: `drafter` names a folder or
    hub id; None takes the one shipped for the model (none: plain decoding); False never drafts."""
    dtype_ = runtime.parse_dtype(dtype)
    loaded = load_model(model, dtype_)
    if drafter is False or (drafter is None and shipped_drafter(loaded) is None):
        return Pipeline(loaded, None, dtype_)
    return Pipeline(loaded, load_drafter_for(loaded, drafter or None, dtype_), dtype_)


def stream_generate(
    pipeline: Pipeline,
    prompt: str | list[int],
    *,
    max_tokens: int = 256,
    temp: float = 0.0,
    top_p: float = 0.0,
    top_k: int = 0,
    seed: int | None = None,
    system_prompt: str | None = None,
    beam_width: int | None = None,
    beam_length: int | None = None,
    search_width: int | None = None,
    lookup: bool = True,
    adaptive: bool = True,
) -> Iterator[Response]:
    """Decode `prompt` (text, put through the chat template, or token ids as they are) and
    yield a `Response` per step. Greedy at temp 0; sampling is exactly the LLM's distribution."""
    tokenizer = pipeline.tokenizer
    ids = prompt if isinstance(prompt, list) else encode_prompt(
        tokenizer, prompt, system_prompt=system_prompt, vicuna=pipeline.loaded.is_vicuna)
    if seed is not None:
        mx.random.seed(seed)
    drafting = pipeline.plan(beam_width, beam_length, search_width, adaptive).options() if pipeline.drafter else {}
    yield from with_text(tokenizer, decode(
        pipeline.loaded.model, ids, drafter=pipeline.drafter, max_tokens=max_tokens,
        sampler=make_greedy_or_sampler(temp, top_p, top_k), eos_ids=tokenizer.eos_token_ids, lookup=lookup,
        **drafting))


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


def generate(pipeline: Pipeline, prompt: str | list[int], **options) -> str:
    """The whole answer as text; `options` as for `stream_generate`."""
    return "".join(response.text for response in stream_generate(pipeline, prompt, **options))

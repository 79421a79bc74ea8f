"""Benchmark runner: mlx-lm greedy generation (the peer), our AR, and ReDrafter, on the same
prompt ids, timed the same way.

Throughput is measured by the harness for all three methods from token arrival times:
decode tokens/s = (tokens - 1) / (last arrival - first arrival), summed over prompts, so
prefill is excluded and every method is clocked identically.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten

from redrafter_mlx.api import Pipeline
from redrafter_mlx.decoding import GenerationStats
from redrafter_mlx.formats.export import export_hf_folder
from redrafter_mlx.formats.loading import LoadedModel
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.runtime.timers import PhaseTimer
from redrafter_mlx.sampling import make_greedy_or_sampler
from redrafter_mlx.tuning import DraftPlan


@dataclass
class MethodResult:
    """Totals for one decoding method over all prompts."""

    name: str
    tokens: list[list[int]] = field(default_factory=list)
    decode_tokens: int = 0  # tokens after the first, summed over prompts
    decode_time: float = 0.0
    steps: int = 0
    accepted: int = 0
    verified: list[int] = field(default_factory=list)
    tree_cells: int = 0  # W * L summed over verified trees
    peak_memory_gb: float = 0.0
    phase_times: dict[str, float] = field(default_factory=dict)
    runs: list[tuple[int, int, float]] = field(default_factory=list)  # (prompt index, decode tokens, seconds)

    @property
    def tokens_per_s(self) -> float:
        return self.decode_tokens / self.decode_time if self.decode_time else 0.0

    @property
    def compression(self) -> float | None:
        """Verified tokens / the W * L cells drafted, over all steps (None for AR)."""
        return sum(self.verified) / self.tree_cells if self.tree_cells else None

    @property
    def tokens_per_step(self) -> float:
        return self.accepted / self.steps if self.steps else 1.0

    def same_answers(self, other: MethodResult) -> bool:
        """Whether every run's tokens equal `other`'s first run of the same prompt."""
        first: dict[int, list[int]] = {}
        for (index, *_), tokens in zip(other.runs, other.tokens):
            first.setdefault(index, tokens)
        return all(first.get(index) == tokens for (index, *_), tokens in zip(self.runs, self.tokens))

    def prompt_tokens_per_s(self) -> list[float]:
        """Each prompt's decode tokens/s, the median over its runs (rounds)."""
        by_prompt: dict[int, list[float]] = {}
        for index, tokens, seconds in self.runs:
            by_prompt.setdefault(index, []).append(tokens / seconds if seconds else 0.0)
        return [statistics.median(by_prompt[i]) for i in sorted(by_prompt)]

    def summary(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k not in ("tokens", "verified", "tree_cells", "runs")}
        out["prompt_tokens_per_s"] = self.prompt_tokens_per_s()
        out |= {
            "tokens_per_s": self.tokens_per_s,
            "tokens_per_step": self.tokens_per_step,
            "num_tokens": sum(map(len, self.tokens)),
        }
        if self.verified:
            out["mean_verified_tokens"] = sum(self.verified) / len(self.verified)
            out["compression"] = self.compression
        return out


Decoder = Callable[[list[int]], Iterator[tuple[list[int], GenerationStats | None]]]


def mlx_lm_folder(loaded: LoadedModel, scratch: Path) -> Path:
    """A folder mlx-lm can load holding the very same weights (exported when needed)."""
    if loaded.source.is_dir():
        return loaded.source
    weights = dict(tree_flatten(loaded.model.parameters()))
    return export_hf_folder(loaded.config, weights, loaded.tokenizer._tokenizer, scratch / "model")


def run_mlx_lm(
    folder: Path, prompts: list[list[int]], max_tokens: int, draft: Path | None = None, num_draft_tokens: int = 2
) -> MethodResult:
    """mlx-lm's own greedy `stream_generate` on the same weights and prompt ids; with `draft`
    (a model folder), mlx-lm's speculative decoding with that draft model, whose steps end at
    each token the model itself chose (`from_draft` False)."""
    from mlx_lm import load as mlx_lm_load
    from mlx_lm import stream_generate
    from mlx_lm.utils import load_model

    model, tokenizer = mlx_lm_load(str(folder))
    extra = {"draft_model": load_model(draft)[0], "num_draft_tokens": num_draft_tokens} if draft else {}

    def decode(ids: list[int]):
        stats, block, prefilled = GenerationStats(), [], False
        for response in stream_generate(
            model, tokenizer, mx.array(ids), max_tokens=max_tokens, sampler=make_greedy_or_sampler(), **extra
        ):
            if response.token in tokenizer.eos_token_ids:
                break
            block.append(response.token)
            if not response.from_draft:  # the first such token comes from prefill: not a step
                stats.accepted_per_step += [len(block)] if prefilled else []
                prefilled = True
                yield block, (stats if draft else None)
                block = []
        if block:
            stats.accepted_per_step.append(len(block))
            yield block, (stats if draft else None)

    return measure(MethodResult(f"mlx-lm draft {draft.name}" if draft else "mlx-lm AR"), prompts, decode)


def ours(
    pipeline: Pipeline, options: DecodingOptions, drafting: DraftPlan | None = None, timer: PhaseTimer | None = None
) -> Decoder:
    """Our AR (a pipeline without drafter) or ReDrafter as a `Decoder`; `drafting` defaults to
    the pipeline's plan for `options`."""
    drafting = drafting or pipeline.plan(options)

    def decode(ids: list[int]):
        for step in pipeline.steps(ids, options, drafting, timer=timer):
            yield step.tokens, step.stats

    return decode


def run_ours(
    pipeline: Pipeline,
    prompts: list[list[int]],
    options: DecodingOptions,
    drafting: DraftPlan | None = None,
    profile: bool = False,
) -> MethodResult:
    """Our AR (a pipeline without drafter) or ReDrafter, optionally with per-phase profiling."""
    timer = PhaseTimer(profile)
    decode = ours(pipeline, options, drafting, timer)
    result = measure(MethodResult("ReDrafter" if pipeline.drafter else "AR (ours)"), prompts, decode)
    result.phase_times = dict(timer.totals)
    return result


def measure(result: MethodResult, prompts: list[list[int]], decode: Decoder) -> MethodResult:
    """Drain `decode` for every prompt, timing token arrivals, and fill `result`."""
    for index, ids in enumerate(prompts):
        add_run(result, index, ids, decode)
    return result


def run_interleaved(prompts: list[list[int]], decoders: dict[str, Decoder], rounds: int = 1) -> list[MethodResult]:
    """Every decoder on every prompt, `rounds` times, the order rotating from prompt to
    prompt and round to round, so that a machine's drift during the run weighs on all of
    them alike; per-prompt figures are then medians over the rounds."""
    results = {name: MethodResult(name) for name in decoders}
    names = list(decoders)
    for round_ in range(rounds):
        for index, ids in enumerate(prompts):
            turn = (index + round_) % len(names)
            for name in names[turn:] + names[:turn]:
                add_run(results[name], index, ids, decoders[name])
    return list(results.values())


def add_run(result: MethodResult, index: int, ids: list[int], decode: Decoder) -> None:
    """Decode prompt number `index`, timing token arrivals (and the peak memory), into `result`."""
    mx.reset_peak_memory()
    tokens: list[int] = []
    stats = None
    first = last = time.perf_counter()
    for block, stats in decode(ids):
        last = time.perf_counter()
        if not tokens:
            first = last
        tokens += block
    result.peak_memory_gb = max(result.peak_memory_gb, mx.get_peak_memory() / 1e9)
    result.tokens.append(tokens)
    result.runs.append((index, max(len(tokens) - 1, 0), last - first))
    result.decode_tokens += max(len(tokens) - 1, 0)
    result.decode_time += last - first
    result.steps += len(stats.accepted_per_step) if stats else max(len(tokens) - 1, 0)
    result.accepted += sum(stats.accepted_per_step) if stats else max(len(tokens) - 1, 0)
    result.verified += stats.verified_tokens if stats else []
    result.tree_cells += sum(stats.tree_cells) if stats else 0


def warm_up(pipeline: Pipeline, options: DecodingOptions, drafting: DraftPlan | None = None) -> None:
    """One short run of each decoder so one-time costs do not land on the first prompt: with
    a step policy, one per tree it may choose, which traces each one's draft phase into
    the plan (`DraftPlan.phases`)."""
    ids = pipeline.tokenizer.encode("Hello")
    short = replace(options, max_tokens=8)
    drafting = drafting or pipeline.plan(options)
    runs = [(pipeline.autoregressive(), None), (pipeline, drafting)]
    if drafting is not None and drafting.policy is not None:
        runs += [(pipeline, replace(drafting, shape=tree, policy=None)) for tree in drafting.policy.trees]
    for each, plan in runs:
        for _ in each.steps(ids, short, plan):
            pass


def scratch_dir() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="redrafter-bench-")

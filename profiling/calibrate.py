"""Measure a `tuning.Calibration`: what `redrafter tune` runs.

Four measurements on the user's own model, drafter, device and dtype:
1. the verify pass's cost for every packed length up to the largest tree (`verify_cost`);
2. the compiled draft phase's cost for every tree shape of the grid;
3. tokens/step and packed lengths of every shape, replayed on the LLM's recorded greedy
   answers to held-out prompts (`replay.py`: no verify passes, so the grid is affordable);
4. the per-step overhead (acceptance, cache, host read): a short real decode's step time
   minus its measured draft and verify parts; and one AR token for reference.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from itertools import product

import mlx.core as mx

from redrafter_mlx.decoding import generate_ar, generate_redrafter
from redrafter_mlx.drafting import TreeShape, make_draft_fn
from redrafter_mlx.drafting.kinds.rnn import RecurrentDrafter
from redrafter_mlx.errors import InputError
from redrafter_mlx.formats.loading import LoadedModel
from redrafter_mlx.training.replay import record_answers, replay
from redrafter_mlx.tuning import Calibration, DraftPlan, ShapeCost

from .verify_cost import verify_cost

DEFAULT_WIDTHS = (1, 2, 3, 4, 6)
DEFAULT_LENGTHS = (2, 3, 4, 5, 6)
WIDE_SEARCH = 16
DEFAULT_BUDGETS = (6, 8, 12)


def shape_grid(
    widths: Sequence[int],
    lengths: Sequence[int],
    searches: Sequence[int] = (1, WIDE_SEARCH),
    budgets: Sequence[int] = (),
) -> list[TreeShape]:
    """Every (W, L, S) of the grid (S <= W becomes S = W, the paper's search), and for each
    node budget N the widest W's trees of every L and S that hold more than N tokens, cut to N."""
    shapes = {TreeShape(w, length, max(s, w)) for w, length, s in product(widths, lengths, searches)}
    widest = max(widths)
    for budget, length, s in product(budgets, lengths, searches):
        shape = TreeShape(widest, length, max(s, widest), budget)
        if shape.budgeted:
            shapes.add(shape)
    return sorted(shapes, key=lambda s: (s.beam_width, s.beam_length, s.search_width, s.node_budget or 0))


def time_draft(
    drafter: RecurrentDrafter, embedding, shape: TreeShape, lookup: bool, hidden_size: int, repeats: int = 5
) -> float:
    """Median ms of the compiled draft phase for `shape` (costs do not depend on the data)."""
    draft = make_draft_fn(drafter, embedding, shape, lookup=lookup)
    hidden = mx.random.normal((hidden_size,))
    token = mx.array(7, mx.int32)
    text = (mx.arange(512, dtype=mx.int32) % 97 + 5)[None]
    length = mx.array([300], mx.int32)
    samples = []
    for i in range(repeats + 2):  # two warm-up calls: the trace, then one clean run
        tic = time.perf_counter()
        beams, layout = draft(hidden, token, text, length)
        mx.eval(beams, layout.unpack_index, layout.count)
        if i >= 2:
            samples.append(time.perf_counter() - tic)
    return 1e3 * sorted(samples)[len(samples) // 2]


def calibrate(
    loaded: LoadedModel,
    drafter: RecurrentDrafter,
    prompts: list[list[int]],
    grid: Sequence[TreeShape],
    *,
    device: str,
    dtype: str,
    max_tokens: int = 96,
    lookup: bool = True,
    advance: Callable[[str], None] = lambda _: None,
) -> Calibration:
    """Measure everything `Calibration` needs; `advance(what)` is called after each of the
    `work_units(grid)` units of work (for a progress bar)."""
    if drafter.stateful:  # before any measuring: the replay below cannot run it
        raise InputError(
            f"`tune` calibrates stateless drafters (it replays recorded answers); a {drafter.kind} "
            "drafter keeps its own cache of the text: pass -w/-l/-s instead"
        )
    model = loaded.model
    longest = max(s.max_packed for s in grid)
    sizes = sorted(set(range(1, longest + 1)) | {p for p in (8, 16, 24, 32) if p > longest and p < 2 * longest})
    verify_ms = {p: 1e3 * t for p, t in verify_cost(model, sizes, repeats=2).items()}
    advance("verify cost")
    draft_ms = {}
    for shape in grid:
        draft_ms[shape] = time_draft(drafter, model.embedding, shape, lookup, model.args.hidden_size)
        advance(f"draft {shape}")
    eos = loaded.tokenizer.eos_token_ids or []
    answers = record_answers(model, prompts, max_tokens + max(s.beam_length for s in grid) - 1, eos)
    advance("record answers")
    shapes = {}
    for shape in grid:
        result = replay(
            drafter,
            model.embedding,
            answers,
            shape,
            max_tokens=max_tokens,
            prompts=prompts,
            lookup=lookup,
        )
        shapes[shape] = ShapeCost(result.tokens_per_step, draft_ms[shape], dict(result.packed))
        advance(f"replay {shape}")
    calibration = Calibration(device, dtype, verify_ms, 0.0, shapes)
    calibration.overhead_ms, calibration.ar_ms = measure_overhead(loaded, drafter, prompts[0], calibration, lookup)
    advance("overhead")
    return calibration


def work_units(grid: Sequence[TreeShape]) -> int:
    return 3 + 2 * len(grid)


def measure_overhead(
    loaded: LoadedModel,
    drafter: RecurrentDrafter,
    prompt: list[int],
    calibration: Calibration,
    lookup: bool,
    tokens: int = 48,
) -> tuple[float, float]:
    """(ms per step that is neither draft nor verify, ms per AR token), from real decodes."""
    model = loaded.model
    shape = calibration.best() or next(iter(calibration.shapes))
    lengths = calibration.verify_lengths(shape.max_packed)
    plan = DraftPlan(shape, lengths, calibration, lookup=lookup)

    def run():
        return generate_redrafter(model, drafter, prompt, plan, max_tokens=tokens)

    for _ in run():  # warm-up
        pass
    stats = None
    for step in run():
        stats = step.stats
    verify = sum(calibration.verify_ms[lengths[c]] for c in stats.verified_tokens) / max(stats.steps, 1)
    step_ms = 1e3 * stats.generation_time / max(stats.steps, 1)
    overhead = max(step_ms - calibration.shapes[shape].draft_ms - verify, 0.0)
    ar = None
    for step in generate_ar(model, prompt, max_tokens=tokens):
        ar = step.stats
    return overhead, 1e3 * ar.generation_time / max(ar.num_tokens - 1, 1)

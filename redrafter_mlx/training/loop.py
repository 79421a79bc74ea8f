"""The training loop: AdamW steps on sampled positions (EAGLE: sampled answers), evals, the
best drafter so far, checkpoints, and resuming from one."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
from mlx import nn
from mlx.utils import tree_map

from ..drafting.kinds.rnn import RecurrentDrafter
from ..drafting.ngrams import NgramTable
from ..drafting.seam import TreeDrafter
from ..errors import InputError
from ..runtime.progress import start_progress
from . import checkpoint
from .config import TrainConfig
from .dataset import later_states
from .eagle import eagle_loss_and_grad, record_spans, training_batch
from .evaluation import HeldOut, evaluate, format_entry, score
from .loss import loss_and_grad, loss_blas_threads
from .schedule import make_optimizer
from .start import check_depths, make_drafter, starting_drafter

LOSS_EMA = 0.95  # smoothing of the loss shown and logged (the raw values go to the run state)


@dataclass
class TrainResult:
    steps: int
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] | None = None
    drafter: TreeDrafter | None = None


def batch_rows(cfg: TrainConfig, n_train: int, micro_batch: int, size: int | None = None) -> np.ndarray:
    """The training rows of micro-batch number `micro_batch` of the run: `size` (default
    `cfg.batch_positions`) of the n_train positions (EAGLE: answers), drawn without replacement
    within an epoch. The permutation depends only on (seed, epoch), so a resumed run continues
    the same stream."""
    size = size or cfg.batch_positions
    epoch, slot = divmod(micro_batch * size, n_train)
    rows = np.random.default_rng([cfg.seed, epoch]).permutation(n_train)[slot : slot + size]
    if len(rows) < size:  # wrap into the next epoch
        following = np.random.default_rng([cfg.seed, epoch + 1]).permutation(n_train)
        rows = np.concatenate([rows, following[: size - len(rows)]])
    return rows


def micro_batch(
    train_data: tuple[np.ndarray, np.ndarray],
    rows: np.ndarray,
    cfg: TrainConfig,
) -> tuple[mx.array, mx.array, mx.array | None]:
    """The loss's inputs for `rows`: hidden (M, D), windows (M, T+1), and with soft targets
    the later states (M, T, D)."""
    hidden, windows = train_data
    later = mx.array(later_states(hidden, rows, cfg.predict)) if cfg.soft_targets > 0 else None
    return mx.array(hidden[rows]), mx.array(windows[rows]), later


def batch_source(
    cfg: TrainConfig,
    train_data: tuple[np.ndarray, np.ndarray],
) -> tuple[int, int, Callable[[int], tuple[mx.array, ...]]]:
    """(units an epoch draws, units per micro-batch, micro-batch number -> the loss's inputs):
    positions for the stateless kinds; for EAGLE answers (`eagle.record_spans`), `cfg.eagle_rows`
    a micro-batch, cropped and noised (`eagle.training_batch`)."""
    if cfg.kind == "eagle":
        spans = record_spans(train_data[1])
        if not len(spans):
            raise InputError("no answers of two tokens or more to train EAGLE on")
        return (
            len(spans),
            cfg.eagle_rows,
            lambda k: training_batch(train_data, spans[batch_rows(cfg, len(spans), k, cfg.eagle_rows)], cfg, k),
        )
    n = len(train_data[0])
    return n, cfg.batch_positions, lambda k: micro_batch(train_data, batch_rows(cfg, n, k), cfg)


def optimizer_step(
    drafter: TreeDrafter,
    opt: optim.Optimizer,
    loss_and_grad_fn: Callable[..., Any],
    batches: Iterable[tuple[mx.array, mx.array, mx.array | None]],
    cfg: TrainConfig,
) -> float:
    """One update with the gradient averaged over the micro-batches (`cfg.grad_accum` of
    them) and clipped; returns their mean loss."""
    grads_sum, loss_sum = None, 0.0
    for batch in batches:
        loss, grads = loss_and_grad_fn(drafter, *batch)
        grads_sum = grads if grads_sum is None else tree_map(mx.add, grads_sum, grads)
        loss_sum = loss_sum + loss
    if cfg.grad_accum > 1:
        grads_sum = tree_map(lambda g: g / cfg.grad_accum, grads_sum)
    if cfg.grad_clip:
        grads_sum, _ = optim.clip_grad_norm(grads_sum, cfg.grad_clip)
    opt.update(drafter, grads_sum)
    mx.eval(drafter.parameters(), opt.state, loss_sum)
    return float(loss_sum) / cfg.grad_accum


def train_drafter(
    model: nn.Module,
    llm_config: dict[str, Any],
    train_data: tuple[np.ndarray, np.ndarray],
    heldout_data: tuple[np.ndarray, np.ndarray],
    work_dir: str | Path,
    cfg: TrainConfig,
    *,
    token_ids: np.ndarray | None = None,
    heldout_answers: Sequence[tuple[np.ndarray, np.ndarray]] = (),
    eval_prompt_ids: Sequence[list[int]] = (),
    eos_ids: frozenset[int] | set[int] = frozenset(),
    resume: bool = False,
    init_from: str | Path | None = None,
    out_dir: str | Path | None = None,
    ngrams: NgramTable | None = None,
    console: Any = None,
    log: Callable[[dict[str, Any]], None] | None = None,
) -> TrainResult:
    """Train a drafter of kind `cfg.kind` on cached hidden states; checkpoints go to
    work_dir/checkpoint.

    train_data / heldout_data: (hidden (N, D), windows (N, T+1)) from `prepare_data` (EAGLE
    reads each answer's rows of them as one sequence: `eagle.py`).
    A new run starts from a fresh drafter (Medusa's heads copy `model`'s output head), or
    from the drafter folder `init_from` (of kind `cfg.kind`: its weights, architecture and
    token subset; `cfg`'s architecture fields are then unused) with a fresh optimizer and
    schedule: fine-tuning, e.g. with other targets or data.
    At every eval the drafter is scored (`evaluation.evaluate`) on the held-out positions,
    `heldout_answers` ((tokens, hidden) per held-out answer) and `eval_prompt_ids`; when
    `out_dir` is set it is saved there whenever its `evaluation.score` is the best so far.
    `ngrams` (from `prepare_data`) is saved with an RNN drafter (the other kinds' folders
    hold none); the held-out replay drafts without lookups, so it does not change which
    checkpoint is best.
    """
    if len(train_data[0]) == 0:
        raise InputError("no training positions (empty distillation data?)")
    heldout = HeldOut(heldout_data, heldout_answers, eval_prompt_ids, eos_ids)
    eval_set = heldout.settings(cfg)
    folder = Path(work_dir) / checkpoint.CHECKPOINT_DIR
    units, per_batch, next_batch = batch_source(cfg, train_data)
    if resume and checkpoint.exists(folder):
        drafter, state, opt = _resumed(folder, cfg, eval_set, console)
    else:
        drafter, state, opt = _started(model, cfg, llm_config, (units, per_batch), token_ids, init_from, eval_set)
    if isinstance(drafter, RecurrentDrafter):
        drafter.ngrams = ngrams
    step_loss_and_grad = (
        eagle_loss_and_grad(model, drafter, cfg)
        if cfg.kind == "eagle"
        else loss_and_grad(model, drafter, cfg.predict, cfg.soft_targets)
    )
    total_steps = state["total_steps"]
    bar, task = start_progress(
        console,
        "training",
        total_steps,
        completed=state["step"],
        extra="loss {task.fields[loss]:.3f}",
        loss=float("nan"),
    )
    tic = time.perf_counter()
    ema = None
    with contextlib.ExitStack() as scope:
        scope.enter_context(loss_blas_threads(cfg.predict))
        if bar is not None:
            scope.callback(bar.stop)
        while state["step"] < total_steps:
            first = state["step"] * cfg.grad_accum
            batches = (next_batch(first + k) for k in range(cfg.grad_accum))
            value = optimizer_step(drafter, opt, step_loss_and_grad, batches, cfg)
            ema = value if ema is None else LOSS_EMA * ema + (1 - LOSS_EMA) * value
            state["step"] = done = state["step"] + 1
            state.setdefault("losses", []).append(round(value, 5))
            if bar is not None:
                bar.update(task, advance=1, loss=ema)
            if log is not None and cfg.log_every and done % cfg.log_every == 0:
                log({"step": done, "loss": ema, "lr": float(opt.learning_rate), "seconds": time.perf_counter() - tic})
            if done % cfg.eval_every == 0 or done == total_steps:
                entry = evaluate(model, drafter, heldout, cfg, done)
                entry |= {"loss": ema, "seconds": time.perf_counter() - tic}
                _record(state, entry, drafter, cfg, out_dir, log)
                if bar is not None:
                    bar.console.print(format_entry(entry))
            if done % cfg.checkpoint_every == 0 or done == total_steps:
                checkpoint.save(folder, drafter, opt, state)
    return TrainResult(state["step"], time.perf_counter() - tic, state["history"], state["best"], drafter)


def _started(
    model: nn.Module,
    cfg: TrainConfig,
    llm_config: dict[str, Any],
    epoch: tuple[int, int],
    token_ids: np.ndarray | None,
    init_from: str | Path | None,
    eval_set: dict[str, int],
) -> tuple[TreeDrafter, dict[str, Any], optim.Optimizer]:
    """A new run's drafter (fresh, or the one in `init_from`), run state and optimizer, its
    schedule planned for `cfg.steps`, else `cfg.epochs` over `epoch` = (units an epoch draws,
    units per micro-batch) (`batch_source`)."""
    drafter = (
        starting_drafter(init_from, llm_config, cfg.kind, cfg.predict)
        if init_from is not None
        else make_drafter(cfg, llm_config, token_ids, cfg.seed, model)
    )
    units, per_batch = epoch
    total_steps = cfg.steps or max(1, math.ceil(cfg.epochs * units / (per_batch * cfg.grad_accum)))
    state = {
        "step": 0,
        "history": [],
        "best": None,
        "config": asdict(cfg),
        "total_steps": total_steps,
        "eval_set": eval_set,
    }
    return drafter, state, make_optimizer(cfg, total_steps)


def _resumed(
    folder: Path,
    cfg: TrainConfig,
    eval_set: dict[str, int],
    console: Any,
) -> tuple[TreeDrafter, dict[str, Any], optim.Optimizer]:
    """The checkpoint's drafter, run state and optimizer (`cfg.steps`, when set, replaces the
    planned total). A best-so-far score measured on another held-out set or with other eval
    settings is not comparable: it starts over."""
    drafter, state, opt_state = checkpoint.load(folder)
    if drafter.kind != cfg.kind:
        raise InputError(f"the checkpoint in {folder} holds a {drafter.kind} drafter; the run trains kind {cfg.kind}")
    check_depths(drafter, cfg.predict, str(folder))
    if cfg.steps is not None:
        state["total_steps"] = cfg.steps
    if state.get("eval_set") != eval_set:
        if state["best"] is not None and console is not None:
            console.print(
                "[yellow]the held-out set or the eval settings changed since the checkpoint: "
                "the best-so-far score starts over[/yellow]"
            )
        state["best"], state["eval_set"] = None, eval_set
    opt = make_optimizer(cfg, state["total_steps"])
    opt.init(drafter.trainable_parameters())
    opt.state = opt_state
    return drafter, state, opt


def _record(
    state: dict[str, Any],
    entry: dict[str, Any],
    drafter: TreeDrafter,
    cfg: TrainConfig,
    out_dir: str | Path | None,
    log: Callable[[dict[str, Any]], None] | None,
) -> None:
    """Add an eval entry to the run's history; a new best is saved to `out_dir`."""
    state["history"].append(entry)
    if log is not None:
        log(entry)
    best = state["best"]
    if best is None or score(entry, cfg.beam_length) > score(best, cfg.beam_length):
        state["best"] = entry
        if out_dir is not None:
            checkpoint.save_drafter_as(drafter, out_dir, cfg.save_dtype)

"""The training loop: AdamW steps on the recipe's micro-batches, evals, the best drafter so
far, checkpoints, and resuming from one."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
from mlx import nn
from mlx.utils import tree_map

from ..drafting.ngrams import NgramTable
from ..drafting.seam import TreeDrafter
from ..errors import InputError
from ..runtime.progress import start_progress
from . import checkpoint
from .config import Optimisation, TrainConfig
from .evaluation import HeldOut, evaluate, format_entry, score
from .loss import loss_blas_threads
from .schedule import make_optimizer
from .start import check_depths, make_drafter, starting_drafter

LOSS_EMA = 0.95  # smoothing of the loss shown and logged (the raw values go to the run state)
SPIKE = 2.0  # a step's loss over this many times the run's first: warn that the run may be diverging


class TrainingDiverged(InputError):
    """A non-finite loss: the weights are lost, so the run stops before a checkpoint holds them."""


@dataclass
class TrainResult:
    steps: int
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] | None = None
    drafter: TreeDrafter | None = None


def optimizer_step(
    drafter: TreeDrafter,
    opt: optim.Optimizer,
    loss_and_grad_fn: Callable[..., Any],
    batches: Iterable[tuple[Any, ...]],
    cfg: Optimisation,
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
    """Train a drafter of `cfg.recipe`'s kind on cached hidden states; checkpoints go to
    work_dir/checkpoint.

    train_data / heldout_data: (hidden (N, D), windows (N, T+1)) from `prepare_data`; the
    recipe draws its micro-batches from them (positions, or whole answers: `recipe.py`).
    A new run starts from a fresh drafter (Medusa's heads copy `model`'s output head), or
    from the drafter folder `init_from` (of the recipe's kind: its weights, architecture and
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
    evals = cfg.evaluation
    eval_set = heldout.settings(evals)
    folder = Path(work_dir) / checkpoint.CHECKPOINT_DIR
    recipe, optimisation = cfg.recipe, cfg.optimisation
    units, per_batch, next_batch = recipe.batches(train_data, optimisation.batch_positions, cfg.seed)
    if resume and checkpoint.exists(folder):
        drafter, state, opt = _resumed(folder, cfg, eval_set, console)
    else:
        drafter, state, opt = _started(model, cfg, llm_config, (units, per_batch), token_ids, init_from, eval_set)
    if recipe.ngrams:
        drafter.ngrams = ngrams
    step_loss_and_grad = recipe.loss_and_grad(model, drafter)
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
    ema, warned = None, False
    with contextlib.ExitStack() as scope:
        scope.enter_context(loss_blas_threads(recipe.depths))
        if bar is not None:
            scope.callback(bar.stop)
        while state["step"] < total_steps:
            first = state["step"] * optimisation.grad_accum
            batches = (next_batch(first + k) for k in range(optimisation.grad_accum))
            value = optimizer_step(drafter, opt, step_loss_and_grad, batches, optimisation)
            first_loss = state["losses"][0] if state.get("losses") else value  # a resumed run's own first
            alarm = loss_alarm(value, first_loss, state["step"] + 1, optimisation.lr)
            if alarm is not None and not warned:
                warned = True
                _warn(alarm, console, log)
            ema = value if ema is None else LOSS_EMA * ema + (1 - LOSS_EMA) * value
            state["step"] = done = state["step"] + 1
            state.setdefault("losses", []).append(round(value, 5))
            if bar is not None:
                bar.update(task, advance=1, loss=ema)
            if log is not None and evals.log_every and done % evals.log_every == 0:
                log({"step": done, "loss": ema, "lr": float(opt.learning_rate), "seconds": time.perf_counter() - tic})
            if done % evals.eval_every == 0 or done == total_steps:
                entry = evaluate(model, drafter, heldout, cfg, done)
                entry |= {"loss": ema, "seconds": time.perf_counter() - tic}
                _record(state, entry, drafter, cfg, out_dir, log)
                if bar is not None:
                    bar.console.print(format_entry(entry))
            if done % evals.checkpoint_every == 0 or done == total_steps:
                checkpoint.save(folder, drafter, opt, state)
    return TrainResult(state["step"], time.perf_counter() - tic, state["history"], state["best"], drafter)


def loss_alarm(value: float, first: float, step: int, lr: float) -> str | None:
    """A warning when a step's loss is over `SPIKE` times the run's first (a drafter as it
    starts is about as wrong as a sane run gets; a run may still recover from a spike, so it
    goes on); `TrainingDiverged` when the loss is not finite."""
    advice = f"lower the learning rate (peak {lr:g}) or warm up longer"
    if not math.isfinite(value):
        raise TrainingDiverged(
            f"training diverged at step {step}: loss {value}; {advice} (the best drafter so far and "
            "the last checkpoint are kept)"
        )
    if value > SPIKE * first:
        return f"the loss jumped at step {step}: {value:.3g}, against {first:.3g} at first; if it stays up, {advice}"
    return None


def _warn(message: str, console: Any, log: Callable[[dict[str, Any]], None] | None) -> None:
    if console is not None:
        console.print(f"[yellow]{message}[/yellow]")
    if log is not None:
        log({"warning": message})


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
    schedule planned for its steps, else its epochs over `epoch` = (units an epoch draws,
    units per micro-batch) (`Recipe.batches`)."""
    drafter = (
        starting_drafter(init_from, llm_config, cfg.recipe)
        if init_from is not None
        else make_drafter(cfg.recipe, llm_config, token_ids, cfg.seed, model)
    )
    units, per_batch = epoch
    opt = cfg.optimisation
    total_steps = opt.steps or max(1, math.ceil(opt.epochs * units / (per_batch * opt.grad_accum)))
    state = {
        "step": 0,
        "history": [],
        "best": None,
        "config": cfg.to_dict(),
        "total_steps": total_steps,
        "eval_set": eval_set,
    }
    return drafter, state, make_optimizer(opt, total_steps)


def _resumed(
    folder: Path,
    cfg: TrainConfig,
    eval_set: dict[str, int],
    console: Any,
) -> tuple[TreeDrafter, dict[str, Any], optim.Optimizer]:
    """The checkpoint's drafter, run state and optimizer (the run's steps, when set, replace the
    planned total). A best-so-far score measured on another held-out set or with other eval
    settings is not comparable: it starts over."""
    drafter, state, opt_state = checkpoint.load(folder)
    if drafter.kind != cfg.kind:
        raise InputError(f"the checkpoint in {folder} holds a {drafter.kind} drafter; the run trains kind {cfg.kind}")
    check_depths(drafter, cfg.recipe.depths, str(folder))
    if cfg.optimisation.steps is not None:
        state["total_steps"] = cfg.optimisation.steps
    if state.get("eval_set") != eval_set:
        if state["best"] is not None and console is not None:
            console.print(
                "[yellow]the held-out set or the eval settings changed since the checkpoint: "
                "the best-so-far score starts over[/yellow]"
            )
        state["best"], state["eval_set"] = None, eval_set
    opt = make_optimizer(cfg.optimisation, state["total_steps"])
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
    length = cfg.evaluation.tree.beam_length
    if best is None or score(entry, length) > score(best, length):
        state["best"] = entry
        if out_dir is not None:
            checkpoint.save_drafter_as(drafter, out_dir, cfg.save_dtype)

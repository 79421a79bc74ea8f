"""Phase 2 of drafter training: fit the drafter to the LLM's own answers (paper Eq. 2).

Semantics (identical to `beam_search` at inference). For a distilled sequence y (prompt +
LLM response) and a position t whose next token y_{t+1} lies in the response, let h_t be
the LLM's final-norm hidden state after y_{<=t} (the one that produced y_{t+1}). At
inference y_{t+1} is the *guaranteed token*: the first beam token and the drafter's first
RNN input. So the drafter, conditioned on h_t, reads y_{t+1}, ..., y_{t+T} one at a time
(s_j = update(s_{j-1}, E(y_{t+j})), s_0 = 0) and after reading y_{t+j} predicts y_{t+j+1},
j = 1..T. The loss is the sum over j of the mean cross-entropy at depth j (Eq. 2), over
every valid position t of every sequence in the batch at once: the work is (M, hidden)
tensors for M sampled positions, T recurrent steps.

The LLM is frozen and only its hidden states are needed: distillation saves them as it
generates (`distill.HiddenStore`); records without them get one batched causal forward
here (`prefill_hidden`), stored too, so a grown distillation file is only extended.

Vocabulary trimming: `select_token_subset` picks the K most frequent *target* tokens of
the distillation data; targets outside it are ignored by the loss (the trimmed drafter can
never propose them) and the subset is stored in the drafter as `token_ids`.

Soft targets (`TrainConfig.soft_targets` = weight alpha in [0, 1]): the stored states also
give the LLM's whole next-token distribution at every response position, for the price of
one matmul with its output head: p_LLM(. | y_{<=t+j}) = softmax(head(h_{t+j})). Depth j is
then also trained by cross-entropy against that distribution (restricted to the head's
tokens), which carries the LLM's ranking of all candidates, not just its argmax:
loss_j = (1 - alpha) * CE(y_{t+j+1}) + alpha * CE(p_LLM). On a greedy answer y_{t+j+1} is the
argmax of p_LLM, so both terms pull the same way; the soft one also shapes the runner-ups
that the other beams draft. h_{t+j} is the stored state j rows after h_t (same record
exactly when the depth-j target exists).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.optimizers as optim
import numpy as np
from mlx import nn
from mlx.utils import tree_flatten, tree_map, tree_unflatten

from . import fastmath, runtime
from .beam_search import DEFAULT_SEARCH_WIDTH
from .distill import DistillRecord, HiddenStore, read_distill_file
from .ngrams import NgramTable, build_ngram_table
from .progress import start_progress
from .replay import replay
from .drafter import (
    Drafter,
    DrafterConfig,
    Embedding,
    embed_tokens,
    load_drafter,
    save_drafter,
)

CHECKPOINT_DIR = "checkpoint"
STATE_FILE = "train_state.json"
OPTIMIZER_FILE = "optimizer.safetensors"


# ----------------------------------------------------------------------------- config


@dataclass
class TrainConfig:
    """Drafter architecture + optimisation settings (saved with every checkpoint)."""

    # architecture (DrafterConfig fields)
    exit_dim: int = -1  # <= 0: 2 * hidden (reference)
    num_draft_layers: int = 1
    rnn: bool = True
    head_tied: bool = False
    token_subset_size: int | None = 8192  # None: full vocabulary
    # objective
    predict: int = 5  # T, tokens predicted per position (beam_length - 1 are used)
    soft_targets: float = 0.0  # weight of the CE against the LLM's distribution (0: Eq. 2 only)
    # optimisation
    lr: float = 1e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    batch_positions: int = 1024  # positions per micro-batch
    grad_accum: int = 1
    steps: int | None = None  # optimizer steps; None: derived from epochs
    epochs: float = 2.0
    # evaluation / bookkeeping
    holdout_fraction: float = 0.03
    eval_every: int = 250
    checkpoint_every: int = 250
    log_every: int = 50  # progress lines ({"step", "loss", "seconds"}) passed to `log`
    eval_prompts: int = 4  # prompts decoded with generate_redrafter at each eval (0: none)
    eval_max_tokens: int = 64
    beam_width: int = 4
    beam_length: int = 5
    search_width: int = DEFAULT_SEARCH_WIDTH
    seed: int = 0
    save_dtype: str = "float16"  # dtype of the shipped weights (loaded back as float32)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


# ----------------------------------------------------------------------------- data


def is_holdout(record_id: str, fraction: float) -> bool:
    """Stable train/held-out split by a hash of the record id (unchanged as files grow)."""
    digest = hashlib.sha1(record_id.encode()).digest()
    return int.from_bytes(digest[:4], "little") / 2**32 < fraction


def split_records(records: Sequence[DistillRecord], fraction: float) -> tuple[list, list]:
    train, held = [], []
    for r in records:
        (held if is_holdout(r.id, fraction) else train).append(r)
    if not held and len(train) > 1 and fraction > 0:
        held.append(train.pop())
    return train, held


def windows(record: DistillRecord, predict: int) -> tuple[np.ndarray, np.ndarray]:
    """Training positions of one sequence.

    Returns (positions (n,), tokens (n, predict + 1)): for each position t with y_{t+1} in
    the response, row [y_{t+1}, ..., y_{t+predict+1}] (column 0 = guaranteed token, column
    j = target of depth j), -1 past the end of the sequence.
    """
    seq = np.asarray(record.prompt_ids + record.response_ids, dtype=np.int64)
    p, n = len(record.prompt_ids), len(seq)
    positions = np.arange(p - 1, n - 1)  # y_{t+1} = seq[t + 1] is a response token
    if p < 1 or len(positions) == 0:
        return np.zeros((0,), np.int64), np.zeros((0, predict + 1), np.int32)
    padded = np.concatenate([seq, np.full(predict + 1, -1)])
    idx = positions[:, None] + 1 + np.arange(predict + 1)[None]
    return positions, padded[idx].astype(np.int32)


def prefill_hidden(
    model: nn.Module,
    records: Sequence[DistillRecord],
    *,
    max_batch_tokens: int = 4096,
    on_batch: Callable[[int], None] | None = None,
) -> list[np.ndarray]:
    """Final-norm hidden states at every training position of each record, (R_i, hidden),
    by one causal forward per group of sequences (no gradient).

    Sequences are grouped by length and right-padded: under a causal mask padding on the
    right cannot change the states of real tokens.
    """
    order = sorted(range(len(records)), key=lambda i: len(records[i].prompt_ids) + len(records[i].response_ids))
    out: list[np.ndarray | None] = [None] * len(records)
    start = 0
    while start < len(order):
        longest = 0
        end = start
        while end < len(order):
            r = records[order[end]]
            length = max(longest, len(r.prompt_ids) + len(r.response_ids))
            if end > start and length * (end - start + 1) > max_batch_tokens:
                break
            longest, end = length, end + 1
        group = order[start:end]
        tokens = np.zeros((len(group), longest), dtype=np.int32)
        for row, i in enumerate(group):
            seq = records[i].prompt_ids + records[i].response_ids
            tokens[row, : len(seq)] = seq
        hidden = mx.stop_gradient(model(mx.array(tokens), None, None, "causal"))
        hidden_np = np.array(hidden.astype(mx.float32))
        for row, i in enumerate(group):
            p, n = len(records[i].prompt_ids), len(records[i].response_ids)
            out[i] = hidden_np[row, p - 1 : p - 1 + n]
        if on_batch is not None:
            on_batch(len(group))
        start = end
    return out  # type: ignore[return-value]


def assemble(
    records: Sequence[DistillRecord], hiddens: Sequence[np.ndarray], predict: int
) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate per-record states and token windows: (N, hidden) float32, (N, T+1) int32."""
    if not records:
        return np.zeros((0, 0), np.float32), np.zeros((0, predict + 1), np.int32)
    hs = [np.asarray(h, np.float32) for h in hiddens]
    ws = [windows(r, predict)[1] for r in records]
    return np.concatenate(hs), np.concatenate(ws)


def select_token_subset(records: Sequence[DistillRecord], size: int, vocab_size: int) -> np.ndarray:
    """The `size` most frequent response tokens (targets), most frequent first (ties by id);
    padded with the lowest unused ids when the data has fewer distinct tokens."""
    counts = np.zeros(vocab_size, np.int64)
    for r in records:
        np.add.at(counts, np.asarray(r.response_ids, np.int64), 1)
    order = np.lexsort((np.arange(vocab_size), -counts))
    return order[:size].astype(np.int32)


def subset_coverage(records: Sequence[DistillRecord], token_ids: np.ndarray) -> float:
    """Fraction of response tokens inside the subset."""
    allowed = np.zeros(int(max(token_ids.max(initial=0) + 1, 1)), bool)
    allowed[token_ids] = True
    total = hit = 0
    for r in records:
        ids = np.asarray(r.response_ids)
        total += len(ids)
        hit += int(allowed[ids[ids < len(allowed)]].sum())
    return hit / total if total else 0.0


def head_index_map(drafter: Drafter) -> mx.array:
    """(V,) int32: full-vocabulary id -> head index, -1 for tokens the head cannot score."""
    vocab = drafter.config.vocab_size
    if not drafter.is_trimmed:
        return mx.arange(vocab, dtype=mx.int32)
    table = np.full(vocab, -1, np.int32)
    table[np.array(drafter.token_ids)] = np.arange(drafter.config.head_size, dtype=np.int32)
    return mx.array(table)


# ----------------------------------------------------------------------------- drafter


def make_drafter(
    cfg: TrainConfig, llm_config: dict[str, Any], embedding: Embedding, token_ids: np.ndarray | None,
    seed: int = 0,
) -> Drafter:
    """A fresh drafter for the LLM. Default nn.Linear init everywhere except the head,
    which starts small (std 0.02 untied, so the initial loss is ~log K and no token is
    favoured) or, tied, as head_proj = the exit->hidden map that is 0 (the table is the
    frozen LLM embedding)."""
    mx.random.seed(seed)
    config = DrafterConfig(
        vocab_size=llm_config["vocab_size"], hidden_size=llm_config["hidden_size"],
        num_draft_layers=cfg.num_draft_layers, exit_dim=cfg.exit_dim, rnn=cfg.rnn,
        head_tied=cfg.head_tied, token_subset_size=cfg.token_subset_size,
    )
    drafter = Drafter(config, None if token_ids is None else mx.array(token_ids))
    if cfg.head_tied:
        drafter.head_proj.weight = mx.random.normal(drafter.head_proj.weight.shape) * 0.02
    else:
        head = drafter.lm_head[config.num_draft_layers]
        head.weight = mx.random.normal(head.weight.shape) * 0.02
    mx.eval(drafter.parameters())
    return drafter


def starting_drafter(path: str | Path, llm_config: dict[str, Any]) -> Drafter:
    """The drafter in folder `path`, to fine-tune, checked against the LLM it will serve."""
    drafter = load_drafter(path)
    have = (drafter.config.hidden_size, drafter.config.vocab_size)
    want = (llm_config["hidden_size"], llm_config["vocab_size"])
    if have != want:
        raise ValueError(f"{path}: the drafter is for hidden size {have[0]} and vocabulary {have[1]}, "
                         f"the LLM has {want[0]} and {want[1]}")
    return drafter


def loss_blas_threads(predict: int) -> contextlib.AbstractContextManager:
    """While the loss's `predict` depths run on parallel streams, split the cores' BLAS
    threads between the busy streams (one each on 2 cores); with one stream, no change."""
    busy = min(len(runtime.parallel_streams()), predict)
    if busy < 2:
        return contextlib.nullcontext()
    return runtime.blas_threads(max(1, (os.cpu_count() or 1) // busy))


def depth_stream(streams: Sequence[mx.Stream], depth: int) -> contextlib.AbstractContextManager:
    """Run depth `depth`'s work on its stream (round robin over `streams`; none: default)."""
    return mx.stream(streams[depth % len(streams)]) if streams else contextlib.nullcontext()


def unrolled_logits(
    drafter: Drafter, embedding: Embedding, hidden: mx.array, tokens: mx.array, predict: int,
    table: Any = None, streams: Sequence[mx.Stream] = (),
) -> list[mx.array]:
    """Head logits at depths 1..predict for a batch of positions, as in beam search.

    hidden (M, D): h_t; tokens (M, predict + 1): [y_{t+1}, ...] (column 0 = guaranteed
    token; -1 entries are clamped, their outputs are masked by the caller).
    Depth j reads y_{t+j} into the RNN state and scores y_{t+j+1}, on stream
    `depth_stream(streams, j)` (the depths' heads are independent).
    """
    inputs = mx.stop_gradient(embed_tokens(embedding, mx.maximum(tokens[:, :predict], 0)))
    state = drafter.init_state(hidden.shape[:1], dtype=hidden.dtype)
    out = []
    for j in range(predict):
        state = drafter.update_state(state, inputs[:, j])
        with depth_stream(streams, j):
            out.append(drafter.head_logits(drafter.features(hidden, state), table))
    return out


def teacher_head(model: nn.Module, hidden_size: int, token_ids: mx.array | np.ndarray | None) -> mx.array:
    """(K, D) rows of the LLM's output head for the drafter head's tokens (all when None):
    the LLM's logits over them are h @ rows.T. Read off `model.logits` of the identity, so
    tied, untied and quantized heads all work."""
    rows = model.logits(mx.eye(hidden_size)).T.astype(mx.float32)
    rows = rows if token_ids is None else rows[mx.array(token_ids)]
    mx.eval(rows)
    return rows


def later_states(hidden: np.ndarray, rows: np.ndarray, predict: int) -> np.ndarray:
    """(M, predict, D): h_{t+1..t+predict} of the positions `rows` of an `assemble`d array
    (clamped at its end; rows past their record's end are masked by the loss)."""
    later = np.minimum(rows[:, None] + np.arange(1, predict + 1), len(hidden) - 1)
    return hidden[later]


def drafter_loss(
    drafter: Drafter, embedding: Embedding, hidden: mx.array, tokens: mx.array, index_map: mx.array,
    predict: int, soft: float = 0.0, teacher: tuple[mx.array, mx.array] | None = None,
) -> tuple[mx.array, mx.array]:
    """Eq. 2: sum over depths of the mean cross-entropy of valid targets (targets outside
    the head's token subset or past the sequence end are ignored), mixed with weight
    `soft` with the cross-entropy against the LLM's distribution (module docstring);
    teacher = (h_{t+1..t+predict} (M, predict, D), `teacher_head` rows (K, D)).
    Returns (loss, per-depth valid counts (predict,)).

    The depths' heads and cross-entropies (the exp over K logits per target: most of a
    step on CPU) run on `runtime.parallel_streams()`, i.e. on all cores of a CPU."""
    if soft > 0 and teacher is None:
        raise ValueError("soft targets need the teacher's states and head rows")
    table = drafter.head_table(embedding)
    if table is not None and isinstance(table, mx.array):
        table = mx.stop_gradient(table)
    streams = runtime.parallel_streams()
    logits = unrolled_logits(drafter, embedding, hidden, tokens, predict, table, streams)
    total = mx.array(0.0)
    counts = []
    for j, lg in enumerate(logits):
        with depth_stream(streams, j):
            target = tokens[:, j + 1]
            head_target = mx.where(target >= 0, index_map[mx.maximum(target, 0)], -1)
            valid = head_target >= 0
            lg = lg.astype(mx.float32)
            norm = fastmath.logsumexp(lg)  # CE(p, q) = norm - sum_k p_k lg_k for any p
            ce = norm - mx.take_along_axis(lg, mx.maximum(head_target, 0)[:, None], axis=-1)[:, 0]
            n = valid.sum()
            depth_loss = mx.where(valid, ce, 0.0).sum() / mx.maximum(n, 1)
            if soft > 0:
                states, rows = teacher
                probs = fastmath.softmax(mx.stop_gradient(states[:, j] @ rows.T))
                present = target >= 0
                soft_ce = norm - (probs * lg).sum(axis=-1)
                soft_loss = mx.where(present, soft_ce, 0.0).sum() / mx.maximum(present.sum(), 1)
                depth_loss = (1 - soft) * depth_loss + soft * soft_loss
        total = total + depth_loss
        counts.append(n)
    return total, mx.stack(counts)


def accuracy(
    drafter: Drafter, embedding: Embedding, hidden: np.ndarray, tokens: np.ndarray, predict: int,
    batch: int = 2048,
) -> dict[str, list[float]]:
    """Teacher-forced top-1 / top-5 accuracy per depth over ALL targets (a target outside
    the token subset counts as a miss, so trimming is charged for what it cannot propose)."""
    index_map = head_index_map(drafter)
    table = drafter.head_table(embedding)
    hit1 = np.zeros(predict)
    hit5 = np.zeros(predict)
    total = np.zeros(predict)
    for s in range(0, len(hidden), batch):
        h = mx.array(hidden[s : s + batch])
        tok = mx.array(tokens[s : s + batch])
        logits = unrolled_logits(drafter, embedding, h, tok, predict, table)
        for j, lg in enumerate(logits):
            target = tok[:, j + 1]
            head_target = mx.where(target >= 0, index_map[mx.maximum(target, 0)], -1)
            top5 = mx.argpartition(-lg, kth=4, axis=-1)[:, :5] if lg.shape[-1] > 5 else mx.argsort(-lg)[:, :5]
            top1 = mx.argmax(lg, axis=-1)
            valid = target >= 0
            in1 = (top1 == head_target) & (head_target >= 0)
            in5 = ((top5 == head_target[:, None]).any(axis=-1)) & (head_target >= 0)
            r = mx.stack([in1.sum(), in5.sum(), valid.sum()])
            a, b, c = np.array(r).tolist()
            hit1[j] += a
            hit5[j] += b
            total[j] += c
    total = np.maximum(total, 1)
    return {"top1": (hit1 / total).tolist(), "top5": (hit5 / total).tolist()}


def decode_eval(
    model: nn.Module, drafter: Drafter, prompts: Sequence[list[int]], *, beam_width: int = 4,
    beam_length: int = 5, search_width: int | None = DEFAULT_SEARCH_WIDTH, max_tokens: int = 128,
    eos_ids: frozenset[int] | set[int] = frozenset(), lookup: bool = False,
) -> dict[str, float]:
    """Greedy ReDrafter decoding of the prompts: tokens/step, compression, time per step.
    Without the context lookup by default: training's evals measure the drafter."""
    from .decoding import generate_redrafter

    tokens = steps = verified = 0
    seconds = 0.0
    for ids in prompts:
        last = None
        for step in generate_redrafter(model, drafter, ids, beam_width=beam_width, beam_length=beam_length,
                                       search_width=search_width, lookup=lookup, max_tokens=max_tokens,
                                       eos_ids=eos_ids):
            last = step.stats
        if last is None:
            continue
        tokens += sum(last.accepted_per_step)
        steps += len(last.accepted_per_step)
        verified += sum(last.verified_tokens)
        seconds += last.generation_time
    return {
        "tokens_per_step": tokens / steps if steps else 0.0,
        "compression": verified / (steps * beam_width * beam_length) if steps else 0.0,
        "ms_per_step": 1000 * seconds / steps if steps else 0.0,
        "steps": steps,
    }


def save_drafter_as(drafter: Drafter, out_dir: str | Path, dtype: str = "float32") -> Path:
    """`save_drafter` with floating weights cast to `dtype` (load_drafter casts back)."""
    target = getattr(mx, dtype)
    return save_drafter(drafter.rebuilt(drafter.config, [
        (k, v.astype(target) if mx.issubdtype(v.dtype, mx.floating) else v)
        for k, v in tree_flatten(drafter.parameters())
    ]), out_dir)


# ----------------------------------------------------------------------------- training


@dataclass
class TrainResult:
    steps: int
    seconds: float
    history: list[dict[str, Any]] = field(default_factory=list)
    best: dict[str, Any] | None = None
    drafter: Drafter | None = None


def make_optimizer(cfg: TrainConfig, total_steps: int) -> optim.Optimizer:
    warmup = max(1, min(cfg.warmup_steps, total_steps // 5 or 1))
    decay = max(1, total_steps - warmup)
    schedule = optim.join_schedules(
        [optim.linear_schedule(cfg.lr * 0.01, cfg.lr, warmup),
         optim.cosine_decay(cfg.lr, decay, cfg.lr * cfg.min_lr_ratio)],
        [warmup],
    )
    return optim.AdamW(learning_rate=schedule, weight_decay=cfg.weight_decay)


def _save_checkpoint(folder: Path, drafter: Drafter, opt: optim.Optimizer, state: dict[str, Any]) -> None:
    tmp = folder.with_name(folder.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    save_drafter(drafter, tmp)
    mx.save_safetensors(str(tmp / OPTIMIZER_FILE), dict(tree_flatten(opt.state)))
    (tmp / STATE_FILE).write_text(json.dumps(state, indent=1))
    if folder.exists():
        old = folder.with_name(folder.name + ".old")
        if old.exists():
            _rmtree(old)
        folder.rename(old)
        tmp.rename(folder)
        _rmtree(old)
    else:
        tmp.rename(folder)


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


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
    """Train a drafter on cached hidden states; checkpoints go to work_dir/checkpoint.

    train_data / heldout_data: (hidden (N, D), windows (N, T+1)) from `prepare_data`.
    A new run starts from a fresh drafter, or from the drafter folder `init_from` (its
    weights, architecture and token subset; `cfg`'s architecture fields are then unused)
    with a fresh optimizer and schedule: fine-tuning, e.g. with other targets or data.
    At every eval the drafter is scored: held-out top-1/top-5 per depth; tokens/step
    replayed on `heldout_answers` ((tokens, hidden) per held-out answer, `replay.replay`);
    tokens/step decoding `eval_prompt_ids`. When `out_dir` is set it is saved there
    whenever it is the best so far, by the first of these that was measured: replayed
    tokens/step (every held-out answer), decoded tokens/step (a few prompts), held-out top-1
    averaged over depths. Tokens/step decides because it is what decoding gets; top-1
    weighs all depths alike, while a step only reaches depth j through depths 1..j-1.
    `ngrams` (from `prepare_data`) is saved with the drafter; the held-out replay drafts
    without lookups, so it does not change which checkpoint is best.
    """
    work = Path(work_dir)
    embedding = model.embedding
    h_train, w_train = train_data
    n_train = len(h_train)
    if n_train == 0:
        raise ValueError("no training positions (empty distillation data?)")
    per_step = cfg.batch_positions * cfg.grad_accum
    total_steps = cfg.steps or max(1, math.ceil(cfg.epochs * n_train / per_step))
    ckpt = work / CHECKPOINT_DIR

    # What an eval score depends on: scores measured on another held-out set are not comparable.
    eval_set = {"heldout_positions": len(heldout_data[0]), "heldout_answers": len(heldout_answers),
                "eval_prompts": min(cfg.eval_prompts, len(eval_prompt_ids)), "beam_width": cfg.beam_width,
                "beam_length": cfg.beam_length, "search_width": cfg.search_width,
                "eval_max_tokens": cfg.eval_max_tokens}
    state: dict[str, Any] = {"step": 0, "history": [], "best": None, "config": asdict(cfg),
                             "total_steps": total_steps, "eval_set": eval_set}
    if resume and (ckpt / STATE_FILE).exists():
        drafter = load_drafter(ckpt)
        state = json.loads((ckpt / STATE_FILE).read_text())
        total_steps = state["total_steps"] if cfg.steps is None else cfg.steps
        state["total_steps"] = total_steps
        if state.get("eval_set") != eval_set:
            if state["best"] is not None and console is not None:
                console.print("[yellow]the held-out set or the eval settings changed since the checkpoint: "
                              "the best-so-far score starts over[/yellow]")
            state["best"], state["eval_set"] = None, eval_set
        opt = make_optimizer(cfg, total_steps)
        opt.init(drafter.trainable_parameters())
        opt.state = tree_unflatten(list(mx.load(str(ckpt / OPTIMIZER_FILE)).items()))
    else:
        drafter = (starting_drafter(init_from, llm_config) if init_from is not None
                   else make_drafter(cfg, llm_config, embedding, token_ids, cfg.seed))
        opt = make_optimizer(cfg, total_steps)
    drafter.ngrams = ngrams
    index_map = head_index_map(drafter)
    predict = cfg.predict
    soft = cfg.soft_targets
    rows = None
    if soft > 0:
        rows = teacher_head(model, llm_config["hidden_size"], drafter.get("token_ids"))

    def loss_fn(d: Drafter, h: mx.array, w: mx.array, later: mx.array | None) -> mx.array:
        teacher = None if later is None else (later, rows)
        return drafter_loss(d, embedding, h, w, index_map, predict, soft, teacher)[0]

    loss_and_grad = nn.value_and_grad(drafter, loss_fn)

    def evaluate(step: int) -> dict[str, Any]:
        entry: dict[str, Any] = {"step": step}
        if len(heldout_data[0]):
            entry |= accuracy(drafter, embedding, heldout_data[0], heldout_data[1], predict)
        if heldout_answers:
            entry["replay_tokens_per_step"] = replay(
                drafter, embedding, heldout_answers, beam_width=cfg.beam_width, beam_length=cfg.beam_length,
                search_width=cfg.search_width, max_tokens=cfg.eval_max_tokens, lookup=False).tokens_per_step
        if eval_prompt_ids and cfg.eval_prompts:
            entry |= decode_eval(model, drafter, list(eval_prompt_ids)[: cfg.eval_prompts],
                                 beam_width=cfg.beam_width, beam_length=cfg.beam_length,
                                 search_width=cfg.search_width,
                                 max_tokens=cfg.eval_max_tokens, eos_ids=eos_ids)
        return entry

    def score(entry: dict[str, Any]) -> float:
        for key in ("replay_tokens_per_step", "tokens_per_step"):
            if key in entry:
                return entry[key]
        top1 = entry.get("top1", [0.0])
        return float(np.mean(top1[: max(1, cfg.beam_length - 1)]))

    def record(entry: dict[str, Any], step: int) -> None:
        state["history"].append(entry)
        if log is not None:
            log(entry)
        best = state["best"]
        if best is None or score(entry) > score(best):
            state["best"] = entry
            if out_dir is not None:
                save_drafter_as(drafter, out_dir, cfg.save_dtype)

    bar, task = start_progress(console, "training", total_steps, completed=state["step"],
                               extra="loss {task.fields[loss]:.3f}", loss=float("nan"))

    tic = time.perf_counter()
    ema = None
    with contextlib.ExitStack() as scope:
        scope.enter_context(loss_blas_threads(cfg.predict))
        if bar is not None:
            scope.callback(bar.stop)
        while state["step"] < total_steps:
            step = state["step"]
            # Positions drawn without replacement within an epoch; the permutation depends
            # only on (seed, epoch), so a resumed run continues the same stream.
            grads_sum = None
            loss_sum = 0.0
            for micro in range(cfg.grad_accum):
                k = step * cfg.grad_accum + micro
                epoch, slot = divmod(k * cfg.batch_positions, n_train)
                perm = np.random.default_rng([cfg.seed, epoch]).permutation(n_train)
                sel = perm[slot : slot + cfg.batch_positions]
                if len(sel) < cfg.batch_positions:  # wrap into the next epoch
                    nxt = np.random.default_rng([cfg.seed, epoch + 1]).permutation(n_train)
                    sel = np.concatenate([sel, nxt[: cfg.batch_positions - len(sel)]])
                h = mx.array(h_train[sel])
                w = mx.array(w_train[sel])
                later = mx.array(later_states(h_train, sel, predict)) if soft > 0 else None
                loss, grads = loss_and_grad(drafter, h, w, later)
                grads_sum = grads if grads_sum is None else tree_map(mx.add, grads_sum, grads)
                loss_sum = loss_sum + loss
            if cfg.grad_accum > 1:
                grads_sum = tree_map(lambda g: g / cfg.grad_accum, grads_sum)
            if cfg.grad_clip:
                grads_sum, _ = optim.clip_grad_norm(grads_sum, cfg.grad_clip)
            opt.update(drafter, grads_sum)
            mx.eval(drafter.parameters(), opt.state, loss_sum)
            value = float(loss_sum) / cfg.grad_accum
            ema = value if ema is None else 0.95 * ema + 0.05 * value
            state["step"] = step + 1
            state.setdefault("losses", []).append(round(value, 5))
            if bar is not None:
                bar.update(task, advance=1, loss=ema)
            done = state["step"]
            if log is not None and cfg.log_every and done % cfg.log_every == 0:
                log({"step": done, "loss": ema, "lr": float(opt.learning_rate),
                     "seconds": time.perf_counter() - tic})
            if done % cfg.eval_every == 0 or done == total_steps:
                entry = evaluate(done) | {"loss": ema, "seconds": time.perf_counter() - tic}
                record(entry, done)
                if bar is not None:
                    bar.console.print(_format_entry(entry))
            if done % cfg.checkpoint_every == 0 or done == total_steps:
                _save_checkpoint(ckpt, drafter, opt, state)
    return TrainResult(state["step"], time.perf_counter() - tic, state["history"], state["best"], drafter)


def _format_entry(entry: dict[str, Any]) -> str:
    parts = [f"step {entry['step']}", f"loss {entry.get('loss', float('nan')):.3f}"]
    if "top1" in entry:
        parts.append("top1 " + "/".join(f"{a:.2f}" for a in entry["top1"]))
        parts.append("top5 " + "/".join(f"{a:.2f}" for a in entry["top5"]))
    if "replay_tokens_per_step" in entry:
        parts.append(f"held-out tokens/step {entry['replay_tokens_per_step']:.2f}")
    if "tokens_per_step" in entry:
        parts.append(f"tokens/step {entry['tokens_per_step']:.2f} ({entry['ms_per_step']:.0f} ms/step)")
    return "  ".join(parts)


# ----------------------------------------------------------------------------- pipeline


def prepare_data(
    model: nn.Module,
    distill_file: str | Path,
    hidden_dir: str | Path,
    cfg: TrainConfig,
    vocab_size: int,
    console: Any = None,
) -> dict[str, Any]:
    """Read the distillation file, fill the hidden-state store for records that lack
    states (e.g. answers made by mlx-lm), split, pick the token subset, and tabulate the
    training answers' set phrases (`ngrams.py`)."""
    records = read_distill_file(distill_file)
    if not records:
        raise ValueError(f"{distill_file}: no distillation records")
    store = HiddenStore(hidden_dir)
    stored = store.load([r.id for r in records])
    missing = [r for r in records
               if r.id not in stored or len(stored[r.id]) != len(r.response_ids)]
    if missing:
        bar, task = start_progress(console, "LLM hidden states", len(missing))
        try:
            for k in range(0, len(missing), 64):  # saved in chunks: interruptible
                part = missing[k : k + 64]
                states = prefill_hidden(model, part, on_batch=(lambda n: bar.update(task, advance=n)) if bar else None)
                store.add([r.id for r in part], states)
                stored |= dict(zip([r.id for r in part], states))
        finally:
            if bar is not None:
                bar.stop()
    train_recs, held_recs = split_records(records, cfg.holdout_fraction)
    token_ids = None
    if cfg.token_subset_size:
        token_ids = select_token_subset(train_recs, cfg.token_subset_size, vocab_size)
    return {
        "train": assemble(train_recs, [stored[r.id] for r in train_recs], cfg.predict),
        "heldout": assemble(held_recs, [stored[r.id] for r in held_recs], cfg.predict),
        "heldout_answers": [(np.array(r.response_ids), stored[r.id]) for r in held_recs],
        "token_ids": token_ids,
        "ngrams": build_ngram_table([r.response_ids for r in train_recs], vocab_size),
        "coverage": subset_coverage(held_recs or train_recs, token_ids) if token_ids is not None else 1.0,
        "records": len(records),
        "train_records": len(train_recs),
        "heldout_records": len(held_recs),
    }

"""What `redrafter train` decides around the training itself: the prompts, the kind, the
config, and the one-line summary of the best checkpoint."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer

from redrafter_mlx.formats.prompt_sets import TRAIN_SPLITS, follow_up_turns, load_prompts
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.training import TrainConfig
from redrafter_mlx.training.config import KINDS, MODEL_TYPES
from redrafter_mlx.tuning import resolve_shape

from .app import UsageError

WORK = "training"  # OUT/training/: distillation data, hidden-state cache, checkpoint, log
DEFAULTS = TrainConfig()  # the shipped drafter's recipe
# Architecture flags of one kind: refused (one line) when given with another kind.
KIND_ONLY = {
    "exit_dim": ("--exit-dim", ("redrafter",)),
    "rnn": ("--rnn/--no-rnn", ("redrafter",)),
    "tied": ("--tied/--untied", ("redrafter",)),
    "token_subset": ("--token-subset", ("redrafter",)),
    "layers": ("--layers", ("redrafter", "medusa")),
    "inner_dim": ("--inner-dim", ("mlp-speculator",)),
    "tie_weights": ("--tie-weights", ("mlp-speculator",)),
    "scale_input": ("--scale-input", ("mlp-speculator",)),
    "predict": ("--predict", ("redrafter", "mlp-speculator", "medusa")),
    "eagle_layers": ("--eagle-layers", ("eagle",)),
    "eagle_seq": ("--eagle-seq", ("eagle",)),
    "eagle_noise": ("--eagle-noise", ("eagle",)),
    "eagle_reg_weight": ("--eagle-reg-weight", ("eagle",)),
    "eagle_cls_weight": ("--eagle-cls-weight", ("eagle",)),
    "eagle_stage_prompt": ("--eagle-stage-prompt", ("eagle",)),
}


def read_prompt_file(path: Path) -> list[dict]:
    """JSONL with a "prompt" (or "turns") field per line; ids default to the line number."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such prompts file")
    records = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            raise UsageError(f"{path}:{i + 1}: invalid JSON ({e.msg})") from None
        if isinstance(r, str):
            r = {"prompt": r}
        if not isinstance(r, dict) or not (r.get("prompt") or r.get("turns")):
            raise UsageError(f'{path}:{i + 1}: expected an object with a "prompt" field')
        r.setdefault("id", f"line-{i + 1}")
        records.append(r)
    return records


def eval_prompt_ids(tokenizer, count: int) -> list[list[int]]:
    """`count` held-out eval prompts, spread over the categories (never training prompts), each
    its last user message alone, as `redrafter bench` runs them."""
    from redrafter_mlx.prompting import encode_prompt

    prompts = load_prompts("eval")
    if count <= 0 or not prompts:
        return []
    stride = max(1, len(prompts) // count)
    return [encode_prompt(tokenizer, p["prompt"]) for p in prompts[::stride][:count]]


def train_config(options: Mapping[str, Any], decoding: DecodingOptions = DecodingOptions()) -> TrainConfig:
    """The TrainConfig that `redrafter train`'s parsed options describe (kind None: redrafter;
    --layers None: the kind's default); the evals decode with the tree every command uses for
    a drafter without calibration (explicit -w/-l/-s win)."""
    tree = resolve_shape(None, decoding.beam_width, decoding.beam_length, decoding.search_width)
    kind, layers = options.get("kind") or "redrafter", options["layers"]
    eagle = {
        k: options[k]
        for k in (
            "eagle_layers",
            "eagle_seq",
            "eagle_noise",
            "eagle_reg_weight",
            "eagle_cls_weight",
            "eagle_stage_prompt",
        )
    }
    return TrainConfig(
        kind=kind,
        exit_dim=options["exit_dim"],
        rnn=options["rnn"],
        head_tied=options["tied"],
        num_draft_layers=DEFAULTS.num_draft_layers if layers is None or kind != "redrafter" else layers,
        token_subset_size=(options["token_subset"] or None) if kind == "redrafter" else None,
        inner_dim=options["inner_dim"],
        tie_weights=options["tie_weights"],
        scale_input=options["scale_input"],
        medusa_layers=DEFAULTS.medusa_layers if layers is None or kind != "medusa" else layers,
        predict=1 if kind == "eagle" else options["predict"],
        **eagle,
        soft_targets=options["soft_targets"],
        lr=options["lr"],
        warmup_steps=options["warmup_steps"],
        batch_positions=options["batch_positions"],
        grad_accum=options["grad_accum"],
        steps=options["steps"],
        epochs=options["epochs"],
        eval_every=options["eval_every"],
        checkpoint_every=options["eval_every"],
        eval_prompts=options["eval_prompts"],
        eval_max_tokens=options["eval_max_tokens"],
        beam_width=tree.beam_width,
        beam_length=tree.beam_length,
        search_width=tree.search_width,
        seed=options["seed"],
    )


def resolve_kind(kind: str | None, out: Path, resume: bool, init_from: Path | None) -> str:
    """The kind to train: --kind, else that of the checkpoint a --resume continues, else that
    of the --init-from folder, else redrafter; a --kind that contradicts either is refused."""
    from redrafter_mlx.drafting.registry import drafter_kind
    from redrafter_mlx.training.checkpoint import CHECKPOINT_DIR

    if kind is not None and kind not in KINDS:
        raise UsageError(f"--kind: choose one of {', '.join(KINDS)}, got {kind!r}")
    sources = [(out / WORK / CHECKPOINT_DIR, "OUT's checkpoint")] if resume else []
    sources += [(init_from, "--init-from")] if init_from is not None else []
    for folder, name in sources:
        if not (folder / "config.json").is_file():
            continue
        model_type = drafter_kind(folder) or MODEL_TYPES["redrafter"]  # reference RNN configs may lack it
        found = next((k for k, t in MODEL_TYPES.items() if t == model_type), None)
        if found is None:
            raise UsageError(f"{folder}: a {model_type} folder; train trains {', '.join(KINDS)} drafters")
        if kind is not None and kind != found:
            raise UsageError(f"--kind {kind}: {name} ({folder}) holds a {found} drafter")
        return found
    return kind or "redrafter"


def check_kind_flags(ctx: typer.Context, kind: str) -> None:
    """One line for an architecture flag given with a kind it does not apply to."""
    for name, (flag, kinds) in KIND_ONLY.items():
        source = ctx.get_parameter_source(name)  # typer's own click: compare the enum by name
        given = source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")
        if given and kind not in kinds:
            hint = (
                " (the MLP speculator's shared stages: --tie-weights)"
                if name == "tied" and kind == "mlp-speculator"
                else ""
            )
            raise UsageError(f"{flag} is for --kind {' or '.join(kinds)}, not {kind}{hint}")


def check_folders(out: Path, init_from: Path | None) -> None:
    """OUT must be a folder (or not exist yet); --init-from a drafter folder."""
    if init_from is not None and not (init_from / "config.json").is_file():
        raise UsageError(f"{init_from}: not a drafter folder (no config.json)")
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a folder")


def shuffled_records(splits: list[list[dict]], seed: int) -> list[dict]:
    """The prompts to distil, in order: each split shuffled on its own (seeded), then the
    follow-up turns of all of them."""
    splits = [*splits, follow_up_turns([r for split in splits for r in split])]
    records = []
    for split in splits:
        random.Random(seed).shuffle(split)
        records += split
    return records


def prompt_splits(prompts: Path | None) -> list[list[dict]]:
    """The prompts to distil: the --prompts file, else the checkout's training splits (the
    train split, its extra draw, then the hand-written batches; the caller appends the
    follow-up turns of all of them). Each is shuffled on its own, so `--max-prompts 3089`
    still picks exactly the train split and 8127 train + train-extra."""
    if prompts is not None:
        return [read_prompt_file(prompts)]
    try:
        return [load_prompts(split) for split in TRAIN_SPLITS]
    except FileNotFoundError as e:
        raise UsageError(
            f'no training prompts: {e}; or pass --prompts FILE.jsonl (one {{"prompt": ...}} per line)'
        ) from None


def best_summary(best: dict) -> str:
    """The best checkpoint's figures, as `train_drafter` logged them."""
    parts = []
    if "replay_tokens_per_step" in best:
        parts.append(f"{best['replay_tokens_per_step']:.2f} tokens/step replayed on the held-out answers")
    if "tokens_per_step" in best:
        parts.append(f"{best['tokens_per_step']:.2f} tokens/step decoding eval prompts")
    if "top1" in best:
        parts.append("top-1 " + "/".join(f"{a:.2f}" for a in best["top1"]))
    return f"best at step {best.get('step')}: " + ", ".join(parts)

"""What `redrafter train` decides around the training itself: the prompts, the kind, the
config, and the one-line summary of the best checkpoint."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Collection
from dataclasses import fields
from pathlib import Path

import typer

from redrafter_mlx.drafting.registry import kind_named
from redrafter_mlx.formats.loading import LoadedModel
from redrafter_mlx.formats.prompt_sets import TRAIN_SPLITS, follow_up_turns, load_prompts
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.training import (
    Evaluation,
    Optimisation,
    TrainConfig,
    TrainingData,
    prepare_data,
    recipe_type,
    trainable_kinds,
)
from redrafter_mlx.training.distill import Answering
from redrafter_mlx.tuning import resolve_shape

from .app import UsageError, console

WORK = "training"  # OUT/training/: distillation data, hidden-state cache, checkpoint, log
KINDS = trainable_kinds()
RECIPES = {kind: recipe_type(kind) for kind in KINDS}
# The flags' defaults: the shipped drafter's recipe, EAGLE's and DFlash's for their own flags
RNN, EAGLE, DFLASH = (RECIPES[kind]() for kind in ("redrafter", "eagle", "dflash"))
OPTIMISATION, EVALUATION = Optimisation(), Evaluation()


def recipe_field(param: str, kind: str, params: Collection[str]) -> str | None:
    """The field of `kind`'s recipe that the flag named `param` sets, if any: `{kind}_{field}`
    (EAGLE's `--eagle-seq` sets its `seq`), or a flag named as the field when the kind has no
    flag of its own for it (so `--layers` is not EAGLE's: `--eagle-layers` is)."""
    names = {f.name for f in fields(RECIPES[kind])}
    prefix = kind.replace("-", "_") + "_"
    if param.startswith(prefix) and param.removeprefix(prefix) in names:
        return param.removeprefix(prefix)
    return param if param in names and prefix + param not in params else None


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


def given_flags(ctx: typer.Context) -> set[str]:
    """The parameters the user set (command line or environment), not left at their defaults."""
    sources = {name: ctx.get_parameter_source(name) for name in ctx.params}
    # typer's own click: compare the enum by name
    return {
        name for name, source in sources.items() if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")
    }


def train_config(ctx: typer.Context, kind: str, decoding: DecodingOptions = DecodingOptions()) -> TrainConfig:
    """The TrainConfig that `redrafter train`'s parsed flags describe: the kind's recipe with its
    defaults but for the flags given; the evals decode with the tree every command uses for a
    drafter without calibration (explicit -w/-l/-s win). A recipe's refusal is a ValueError."""
    params = ctx.params
    settings = {}
    for name in given_flags(ctx):
        field = recipe_field(name, kind, params)
        if field is not None:
            settings[field] = params[name]
    tree = resolve_shape(None, decoding.beam_width, decoding.beam_length, decoding.search_width)
    evaluation = {f.name: params[f.name] for f in fields(Evaluation) if f.name in params}
    return TrainConfig(
        recipe=RECIPES[kind](**settings),
        optimisation=Optimisation(**{f.name: params[f.name] for f in fields(Optimisation) if f.name in params}),
        evaluation=Evaluation(**evaluation, checkpoint_every=params["eval_every"], tree=tree),
        seed=params["seed"],
    )


def resolve_kind(kind: str | None, out: Path, resume: bool, init_from: Path | None) -> str:
    """The kind to train: --kind, else that of the checkpoint a --resume continues, else that
    of the --init-from folder, else redrafter; a --kind that contradicts either is refused."""
    from redrafter_mlx.drafting.registry import drafter_kind
    from redrafter_mlx.training.checkpoint import CHECKPOINT_DIR

    if kind is not None and kind not in KINDS:
        raise UsageError(f"--kind: choose one of {', '.join(KINDS)}, got {kind!r}")
    model_types = {kind_named(k).model_types[0]: k for k in KINDS}
    sources = [(out / WORK / CHECKPOINT_DIR, "OUT's checkpoint")] if resume else []
    sources += [(init_from, "--init-from")] if init_from is not None else []
    for folder, name in sources:
        if not (folder / "config.json").is_file():
            continue
        model_type = drafter_kind(folder) or kind_named("redrafter").model_types[0]  # reference RNN configs may lack it
        found = model_types.get(model_type)
        if found is None:
            raise UsageError(f"{folder}: a {model_type} folder; train trains {', '.join(KINDS)} drafters")
        if kind is not None and kind != found:
            raise UsageError(f"--kind {kind}: {name} ({folder}) holds a {found} drafter")
        return found
    return kind or "redrafter"


def check_kind_flags(ctx: typer.Context, kind: str) -> None:
    """One line for a drafter flag given with a kind whose recipe has no field it sets."""
    params = ctx.params
    for name in sorted(given_flags(ctx)):
        users = [k for k in KINDS if recipe_field(name, k, params) is not None]
        if users and kind not in users:
            option = next(p for p in ctx.command.params if p.name == name)
            flag = "/".join(option.opts + option.secondary_opts)
            hint = (
                " (the MLP speculator's shared stages: --tie-weights)"
                if name == "tied" and kind == "mlp-speculator"
                else ""
            )
            kinds = " or ".join(filter(None, (", ".join(users[:-1]), users[-1])))
            raise UsageError(f"{flag} is for --kind {kinds}, not {kind}{hint}")


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


def distil_answers(
    loaded: LoadedModel,
    source: tuple[str, str | None],
    records: list[dict],
    data_file: Path,
    answering: Answering,
    workers: int,
    hidden_dir: Path,
) -> None:
    """Answer the prompts not yet in `data_file` (in `workers` processes, each loading the LLM
    from `source` = (model, dtype), or in this one with `loaded`) and say what was done."""
    from redrafter_mlx.training.distill import distill
    from redrafter_mlx.training.distill_workers import distill_in_workers

    if workers > 1:
        model, dtype = source
        stats = distill_in_workers(
            model, dtype, records, data_file, answering, workers=workers, hidden_dir=hidden_dir, progress=console
        )
    else:
        stats = distill(
            loaded.model, loaded.tokenizer, records, data_file, answering, hidden_dir=hidden_dir, progress=console
        )
    console.print(
        f"distillation: {stats.prompts_done} new answers, {stats.prompts_skipped} already done, "
        f"{stats.tokens} tokens in {stats.seconds:.0f}s ({stats.tokens_per_second:.1f} tok/s)"
    )


def training_data(loaded: LoadedModel, data_file: Path, hidden_dir: Path, cfg: TrainConfig) -> TrainingData:
    """The run's training and held-out data from `data_file`, with a one-line summary."""
    tic = time.perf_counter()
    holdout = cfg.evaluation.holdout_fraction
    data = prepare_data(loaded.model, data_file, hidden_dir, cfg.recipe, loaded.config, holdout, console=console)
    covered = data.token_ids is not None
    subset = f"; token subset covers {100 * data.coverage:.1f}% of held-out targets" if covered else ""
    console.print(
        f"data: {data.train_records} training / {data.heldout_records} held-out sequences, "
        f"{len(data.train[0])} positions{subset} ({time.perf_counter() - tic:.0f}s)"
    )
    return data


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

"""`redrafter train`: distil the LLM's own answers, then train a drafter on them."""

from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from redrafter_mlx import runtime
from redrafter_mlx.errors import InputError
from redrafter_mlx.formats.loading import DEFAULT_MODEL, load
from redrafter_mlx.formats.prompt_sets import TRAIN_SPLITS, follow_up_turns, load_prompts
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.training import TrainConfig
from redrafter_mlx.training.config import KINDS, MODEL_TYPES
from redrafter_mlx.tuning import resolve_shape

from .app import UsageError, app, console, friendly_errors
from .options import DTypeOpt, ModelOpt, decoding_options

WORK = "training"  # OUT/training/: distillation data, hidden-state cache, checkpoint, log
DEFAULTS = TrainConfig()  # the shipped drafter's recipe
KIND_PANEL, RNN_PANEL, MLP_PANEL = "Drafter", "Drafter: --kind redrafter only", "Drafter: --kind mlp-speculator only"
EAGLE_PANEL = "Drafter: --kind eagle only"
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


@app.command()
@friendly_errors
@decoding_options(None, "beam_width", "beam_length", "search_width")
def train(
    ctx: typer.Context,
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="Drafter folder to write (config.json + model.safetensors; work files in OUT/training/).",
        ),
    ],
    model: ModelOpt = DEFAULT_MODEL,
    prompts: Annotated[
        Path | None,
        typer.Option(
            "--prompts",
            help="Training prompts JSONL (default: every training split in the checkout's data/ folder, "
            "formats.prompt_sets.TRAIN_SPLITS). Follow-up turns are distilled alone, after all first turns.",
        ),
    ] = None,
    distill_data: Annotated[
        Path | None,
        typer.Option(
            "--distill-data",
            help="Distillation JSONL to use/extend (default OUT/training/distill.jsonl); a .jsonl.gz is read-only "
            "(with --skip-distill).",
        ),
    ] = None,
    max_prompts: Annotated[int, typer.Option("--max-prompts", min=1, help="Prompts to distil.")] = 600,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", min=1, help="Answer length cap.")] = 128,
    distill_batch: Annotated[int, typer.Option("--distill-batch", min=1, help="Sequences decoded together.")] = 64,
    distill_workers: Annotated[
        int,
        typer.Option(
            "--distill-workers", min=1, help="Distillation processes, each loading the LLM (CPU: one per core; GPU: 1)."
        ),
    ] = 1,
    sampled_fraction: Annotated[
        float, typer.Option("--sampled-fraction", min=0.0, max=1.0, help="Share of answers sampled (rest greedy).")
    ] = 0.5,
    distill_temp: Annotated[
        float, typer.Option("--distill-temp", min=0.0, help="Temperature of sampled answers.")
    ] = 0.7,
    skip_distill: Annotated[
        bool, typer.Option("--skip-distill", help="Train on the distillation data as it is.")
    ] = False,
    kind: Annotated[
        str | None,
        typer.Option(
            "--kind",
            metavar="|".join(KINDS),
            rich_help_panel=KIND_PANEL,
            show_default=False,
            help="Drafter to train: redrafter (ReDrafter's RNN), mlp-speculator (IBM's MLP speculator), medusa "
            "(Medusa heads) or eagle (EAGLE-1: decoder layers that draft the LLM's features, trained on whole "
            "answers with its own loss); all but the RNN score the whole vocabulary and ship no n-gram table. "
            "Default: redrafter, or the kind of --init-from, or with --resume of OUT's checkpoint.",
        ),
    ] = None,
    predict: Annotated[
        int,
        typer.Option(
            "--predict",
            min=1,
            rich_help_panel=KIND_PANEL,
            help="Tokens predicted per position (T); also the MLP speculator's stages and Medusa's heads (not "
            "EAGLE's: it trains at depth 1).",
        ),
    ] = DEFAULTS.predict,
    layers: Annotated[
        int | None,
        typer.Option(
            "--layers",
            min=0,
            rich_help_panel=KIND_PANEL,
            show_default=False,
            help=f"ResBlocks: the RNN's (default {DEFAULTS.num_draft_layers}) or each Medusa head's (default "
            f"{DEFAULTS.medusa_layers}).",
        ),
    ] = None,
    exit_dim: Annotated[
        int | None,
        typer.Option(
            "--exit-dim",
            rich_help_panel=RNN_PANEL,
            help="Drafter width (default: the LLM's hidden size; <=0: 2 x hidden, the paper's).",
        ),
    ] = DEFAULTS.exit_dim,
    rnn: Annotated[
        bool,
        typer.Option("--rnn/--no-rnn", rich_help_panel=RNN_PANEL, help="RNN state update (else sum of embeddings)."),
    ] = DEFAULTS.rnn,
    tied: Annotated[
        bool, typer.Option("--tied/--untied", rich_help_panel=RNN_PANEL, help="Tie the head to the LLM embedding.")
    ] = DEFAULTS.head_tied,
    token_subset: Annotated[
        int,
        typer.Option(
            "--token-subset", min=0, rich_help_panel=RNN_PANEL, help="Head vocabulary size K (0: full vocabulary)."
        ),
    ] = DEFAULTS.token_subset_size or 0,
    inner_dim: Annotated[
        int | None,
        typer.Option(
            "--inner-dim",
            min=1,
            rich_help_panel=MLP_PANEL,
            show_default=False,
            help="Width of the stages (default: the LLM's hidden size).",
        ),
    ] = DEFAULTS.inner_dim,
    tie_weights: Annotated[
        bool,
        typer.Option(
            "--tie-weights/--no-tie-weights",
            rich_help_panel=MLP_PANEL,
            help="One embedding, head and norm shared by all stages (upstream's tie_weights; needs --predict >= 2).",
        ),
    ] = DEFAULTS.tie_weights,
    scale_input: Annotated[
        bool,
        typer.Option(
            "--scale-input/--no-scale-input",
            rich_help_panel=MLP_PANEL,
            help="Start the stages from rms_norm(h) / sqrt(2) (upstream's scale_input).",
        ),
    ] = DEFAULTS.scale_input,
    eagle_layers: Annotated[
        int,
        typer.Option(
            "--eagle-layers",
            min=1,
            rich_help_panel=EAGLE_PANEL,
            help="Decoder layers, each of the LLM's own shape (upstream's: 1).",
        ),
    ] = DEFAULTS.eagle_layers,
    eagle_seq: Annotated[
        int,
        typer.Option(
            "--eagle-seq",
            min=2,
            rich_help_panel=EAGLE_PANEL,
            help="Tokens per training sequence (an answer, longer ones cropped at random); --batch-positions / "
            "--eagle-seq answers per step.",
        ),
    ] = DEFAULTS.eagle_seq,
    eagle_noise: Annotated[
        float,
        typer.Option(
            "--eagle-noise",
            min=0.0,
            rich_help_panel=EAGLE_PANEL,
            help="Width of the uniform noise added to the input features (0.2: U(-0.1, 0.1), the paper's).",
        ),
    ] = DEFAULTS.eagle_noise,
    eagle_reg_weight: Annotated[
        float,
        typer.Option(
            "--eagle-reg-weight",
            min=0.0,
            rich_help_panel=EAGLE_PANEL,
            help="Weight of the SmoothL1 loss on the next feature (upstream's v_w).",
        ),
    ] = DEFAULTS.eagle_reg_weight,
    eagle_cls_weight: Annotated[
        float,
        typer.Option(
            "--eagle-cls-weight",
            min=0.0,
            rich_help_panel=EAGLE_PANEL,
            help="Weight of the LLM head's cross-entropy on EAGLE's feature (upstream's p_w); --soft-targets 1 "
            "makes its target the LLM's distribution, as upstream.",
        ),
    ] = DEFAULTS.eagle_cls_weight,
    eagle_stage_prompt: Annotated[
        bool,
        typer.Option(
            "--eagle-stage-prompt/--no-eagle-stage-prompt",
            rich_help_panel=EAGLE_PANEL,
            help="Save the EAGLE to read the prompt's pairs before drafting (upstream's inference); off, it starts "
            "at the first answer token, as it was trained.",
        ),
    ] = DEFAULTS.eagle_stage_prompt,
    soft_targets: Annotated[
        float,
        typer.Option(
            "--soft-targets",
            min=0.0,
            max=1.0,
            help="Weight of the loss against the LLM's whole next-token distribution (0: its tokens only, paper Eq. "
            "2; EAGLE: of its cross-entropy term).",
        ),
    ] = DEFAULTS.soft_targets,
    lr: Annotated[
        float, typer.Option("--lr", min=0.0, help="Peak learning rate (cosine decay to a tenth of it).")
    ] = DEFAULTS.lr,
    warmup_steps: Annotated[
        int,
        typer.Option(
            "--warmup-steps", min=0, help="Linear warmup before the cosine decay (at most a fifth of the run)."
        ),
    ] = DEFAULTS.warmup_steps,
    batch_positions: Annotated[
        int, typer.Option("--batch-positions", min=1, help="Positions per micro-batch.")
    ] = DEFAULTS.batch_positions,
    grad_accum: Annotated[int, typer.Option("--grad-accum", min=1)] = DEFAULTS.grad_accum,
    steps: Annotated[
        int | None, typer.Option("--steps", min=1, help="Optimizer steps (overrides --epochs).")
    ] = DEFAULTS.steps,
    epochs: Annotated[float, typer.Option("--epochs", min=0.0)] = DEFAULTS.epochs,
    eval_every: Annotated[int, typer.Option("--eval-every", min=1)] = DEFAULTS.eval_every,
    eval_prompts: Annotated[
        int, typer.Option("--eval-prompts", min=0, help="Held-out prompts decoded at each eval.")
    ] = DEFAULTS.eval_prompts,
    eval_max_tokens: Annotated[
        int,
        typer.Option("--eval-max-tokens", min=1, help="Tokens per answer in the evals' held-out replay and decoding."),
    ] = DEFAULTS.eval_max_tokens,
    seed: Annotated[int, typer.Option("--seed")] = DEFAULTS.seed,
    dtype: DTypeOpt = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted run in OUT.")] = False,
    init_from: Annotated[
        Path | None,
        typer.Option(
            "--init-from",
            help="Start from this drafter folder (a redrafter, mlp-speculator, medusa or eagle one: its weights, "
            "architecture, token subset) with a fresh optimizer and schedule: fine-tuning.",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Delete a non-empty OUT and start over.")] = False,
    *,
    options: DecodingOptions,
) -> None:
    """Train a drafter for MODEL: distil its answers, then fit the drafter to them (Eq. 2).
    ReDrafter's RNN by default, or (--kind) an MLP speculator or Medusa heads, on the same
    data and loss, or an EAGLE on the same data with its own loss. The defaults are the recipe
    of the shipped SmolLM2-135M drafter (see its model card)."""
    from redrafter_mlx.training import prepare_data, train_drafter
    from redrafter_mlx.training.distill import check_extensible, distill
    from redrafter_mlx.training.distill_workers import distill_in_workers

    if distill_data is not None and not skip_distill:
        try:  # before the model loads and OUT is made: distillation would append to the file
            check_extensible(distill_data)
        except InputError as e:
            raise UsageError(f"{e} (--skip-distill)") from None
    if init_from is not None and not (init_from / "config.json").is_file():
        raise UsageError(f"{init_from}: not a drafter folder (no config.json)")
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} exists and is not a folder")
    params = dict(ctx.params, kind=resolve_kind(kind, out, resume, init_from))
    check_kind_flags(ctx, params["kind"])
    try:
        cfg = train_config(params, options)
    except ValueError as e:
        raise UsageError(str(e)) from None
    splits = [] if skip_distill else _prompt_splits(prompts)  # before anything is loaded or written
    if out.is_dir() and any(out.iterdir()) and not resume:
        if not force:
            raise UsageError(f"{out} is not empty: pass --resume to continue or --force to start over")
        shutil.rmtree(out)
    work = out / WORK
    work.mkdir(parents=True, exist_ok=True)
    data_file = distill_data or work / "distill.jsonl"
    loaded = load(model, runtime.parse_dtype(dtype))
    (work / "run.json").write_text(json.dumps({"model": model, "config": cfg.__dict__}, indent=1) + "\n")

    if not skip_distill:
        splits.append(follow_up_turns([r for split in splits for r in split]))
        records = []
        for split in splits:
            random.Random(seed).shuffle(split)
            records += split
        options = dict(
            max_new_tokens=max_new_tokens,
            batch_size=distill_batch,
            sampled_fraction=sampled_fraction,
            temp=distill_temp,
            seed=seed,
            progress=console,
            hidden_dir=work / "hidden",
        )
        if distill_workers > 1:
            stats = distill_in_workers(
                model, dtype, records[:max_prompts], data_file, workers=distill_workers, **options
            )
        else:
            stats = distill(loaded.model, loaded.tokenizer, records[:max_prompts], data_file, **options)
        console.print(
            f"distillation: {stats.prompts_done} new answers, {stats.prompts_skipped} already done, "
            f"{stats.tokens} tokens in {stats.seconds:.0f}s ({stats.tokens_per_second:.1f} tok/s)"
        )
    elif not Path(data_file).is_file():
        raise UsageError(f"{data_file}: no distillation data (drop --skip-distill to generate it)")

    tic = time.perf_counter()
    data = prepare_data(loaded.model, data_file, work / "hidden", cfg, loaded.config["vocab_size"], console=console)
    subset = (
        f"; token subset covers {100 * data.coverage:.1f}% of held-out targets" if data.token_ids is not None else ""
    )
    console.print(
        f"data: {data.train_records} training / {data.heldout_records} held-out sequences, "
        f"{len(data.train[0])} positions{subset} ({time.perf_counter() - tic:.0f}s)"
    )
    log_file = work / "log.jsonl"

    def log(entry: dict) -> None:
        with log_file.open("a") as f:
            f.write(json.dumps(entry) + "\n")

    eos = frozenset(loaded.tokenizer.eos_token_ids or [])
    result = train_drafter(
        loaded.model,
        loaded.config,
        data.train,
        data.heldout,
        work,
        cfg,
        token_ids=data.token_ids,
        heldout_answers=data.heldout_answers,
        eval_prompt_ids=eval_prompt_ids(loaded.tokenizer, eval_prompts),
        eos_ids=eos,
        resume=resume,
        init_from=init_from,
        out_dir=out,
        ngrams=data.ngrams,
        console=console,
        log=log,
    )
    best = result.best or {}
    parts = []
    if "replay_tokens_per_step" in best:
        parts.append(f"{best['replay_tokens_per_step']:.2f} tokens/step replayed on the held-out answers")
    if "tokens_per_step" in best:
        parts.append(f"{best['tokens_per_step']:.2f} tokens/step decoding eval prompts")
    if "top1" in best:
        parts.append("top-1 " + "/".join(f"{a:.2f}" for a in best["top1"]))
    summary = f"best at step {best.get('step')}: " + ", ".join(parts)
    console.print(f"{summary}\nwrote {out}")


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


def _prompt_splits(prompts: Path | None) -> list[list[dict]]:
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

"""`redrafter train`: distil the LLM's own answers, then train a drafter on them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Annotated

import typer

from redrafter_mlx import runtime
from redrafter_mlx.errors import InputError
from redrafter_mlx.formats.loading import DEFAULT_MODEL, load
from redrafter_mlx.options import DecodingOptions

from . import train_flags as flags
from . import train_setup as setup
from .app import UsageError, app, console, friendly_errors
from .options import DTypeOpt, ModelOpt, decoding_options

KIND_PANEL = "Drafter"


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
            metavar="|".join(setup.KINDS),
            rich_help_panel=KIND_PANEL,
            show_default=False,
            help="Drafter to train: redrafter (ReDrafter's RNN), mlp-speculator (IBM's MLP speculator), medusa "
            "(Medusa heads), eagle (EAGLE-1: decoder layers that draft the LLM's features, trained on whole "
            "answers with its own loss) or dflash (a block drafter over several layers' features, trained on "
            "blocks at random anchors); all but the RNN score the whole vocabulary and ship no n-gram table. "
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
            "EAGLE's: it trains at depth 1; DFlash predicts its block: --block-size).",
        ),
    ] = setup.RNN.predict,
    layers: Annotated[
        int | None,
        typer.Option(
            "--layers",
            min=0,
            rich_help_panel=KIND_PANEL,
            show_default=False,
            help=f"ResBlocks: the RNN's (default {setup.RNN.layers}) or each Medusa head's (default "
            f"{setup.RECIPES['medusa']().layers}); DFlash's decoder layers, each reading one LLM layer (default "
            f"{setup.DFLASH.layers}).",
        ),
    ] = None,
    exit_dim: flags.ExitDim = setup.RNN.exit_dim,
    rnn: flags.Rnn = setup.RNN.rnn,
    tied: flags.Tied = setup.RNN.tied,
    token_subset: flags.TokenSubset = setup.RNN.token_subset or 0,
    inner_dim: flags.InnerDim = None,
    tie_weights: flags.TieWeights = False,
    scale_input: flags.ScaleInput = False,
    eagle_layers: flags.EagleLayers = setup.EAGLE.layers,
    eagle_seq: flags.EagleSeq = setup.EAGLE.seq,
    eagle_noise: flags.EagleNoise = setup.EAGLE.noise,
    eagle_reg_weight: flags.EagleRegWeight = setup.EAGLE.reg_weight,
    eagle_cls_weight: flags.EagleClsWeight = setup.EAGLE.cls_weight,
    eagle_stage_prompt: flags.EagleStagePrompt = setup.EAGLE.stage_prompt,
    block_size: flags.BlockSize = setup.DFLASH.block_size,
    anchors: flags.Anchors = setup.DFLASH.anchors,
    loss_decay: flags.LossDecay = setup.DFLASH.loss_decay,
    mask_token_id: flags.MaskTokenId = None,
    soft_targets: Annotated[
        float,
        typer.Option(
            "--soft-targets",
            min=0.0,
            max=1.0,
            help="Weight of the loss against the LLM's whole next-token distribution (0: its tokens only, paper Eq. "
            "2; EAGLE: of its cross-entropy term).",
        ),
    ] = setup.RNN.soft_targets,
    lr: Annotated[
        float, typer.Option("--lr", min=0.0, help="Peak learning rate (cosine decay to a tenth of it).")
    ] = setup.OPTIMISATION.lr,
    warmup_steps: Annotated[
        int,
        typer.Option(
            "--warmup-steps", min=0, help="Linear warmup before the cosine decay (at most a fifth of the run)."
        ),
    ] = setup.OPTIMISATION.warmup_steps,
    batch_positions: Annotated[
        int, typer.Option("--batch-positions", min=1, help="Positions per micro-batch.")
    ] = setup.OPTIMISATION.batch_positions,
    grad_accum: Annotated[int, typer.Option("--grad-accum", min=1)] = setup.OPTIMISATION.grad_accum,
    steps: Annotated[
        int | None, typer.Option("--steps", min=1, help="Optimizer steps (overrides --epochs).")
    ] = setup.OPTIMISATION.steps,
    epochs: Annotated[float, typer.Option("--epochs", min=0.0)] = setup.OPTIMISATION.epochs,
    eval_every: Annotated[int, typer.Option("--eval-every", min=1)] = setup.EVALUATION.eval_every,
    eval_prompts: Annotated[
        int, typer.Option("--eval-prompts", min=0, help="Held-out prompts decoded at each eval.")
    ] = setup.EVALUATION.eval_prompts,
    eval_max_tokens: Annotated[
        int,
        typer.Option("--eval-max-tokens", min=1, help="Tokens per answer in the evals' held-out replay and decoding."),
    ] = setup.EVALUATION.eval_max_tokens,
    seed: Annotated[int, typer.Option("--seed")] = 0,
    dtype: DTypeOpt = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted run in OUT.")] = False,
    init_from: Annotated[
        Path | None,
        typer.Option(
            "--init-from",
            help="Start from this drafter folder (of a kind train builds: its weights, "
            "architecture, token subset) with a fresh optimizer and schedule: fine-tuning.",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Delete a non-empty OUT and start over.")] = False,
    *,
    options: DecodingOptions,
) -> None:
    """Train a drafter for MODEL: distil its answers, then fit the drafter to them (Eq. 2).
    ReDrafter's RNN by default, or (--kind) an MLP speculator or Medusa heads, on the same
    data and loss, or an EAGLE or a DFlash on the same data with its own loss. The defaults are the recipe
    of the shipped SmolLM2-135M drafter (see its model card)."""
    from redrafter_mlx.training import train_drafter
    from redrafter_mlx.training.distill import Answering
    from redrafter_mlx.training.distill_file import check_extensible

    if distill_data is not None and not skip_distill:
        try:  # before the model loads and OUT is made: distillation would append to the file
            check_extensible(distill_data)
        except InputError as e:
            raise UsageError(f"{e} (--skip-distill)") from None
    setup.check_folders(out, init_from)
    kind = setup.resolve_kind(kind, out, resume, init_from)
    setup.check_kind_flags(ctx, kind)
    try:
        cfg = setup.train_config(ctx, kind, options)
    except ValueError as e:
        raise UsageError(str(e)) from None
    splits = [] if skip_distill else setup.prompt_splits(prompts)  # before anything is loaded or written
    if out.is_dir() and any(out.iterdir()) and not resume and not force:
        raise UsageError(f"{out} is not empty: pass --resume to continue or --force to start over")
    loaded = load(model, runtime.parse_dtype(dtype))
    try:  # the drafter the recipe describes fits this LLM, before OUT is touched
        cfg.recipe.drafter_config(loaded.config)
    except InputError as e:
        raise UsageError(str(e)) from None
    if out.is_dir() and any(out.iterdir()) and not resume:
        shutil.rmtree(out)
    work = out / setup.WORK
    work.mkdir(parents=True, exist_ok=True)
    data_file = distill_data or work / "distill.jsonl"
    (work / "run.json").write_text(json.dumps({"model": model, "config": cfg.to_dict()}, indent=1) + "\n")

    if not skip_distill:
        answering = Answering(
            max_new_tokens=max_new_tokens,
            batch_size=distill_batch,
            sampled_fraction=sampled_fraction,
            temp=distill_temp,
            seed=seed,
        )
        records = setup.shuffled_records(splits, seed)[:max_prompts]
        setup.distil_answers(loaded, (model, dtype), records, data_file, answering, distill_workers, work / "hidden")
    elif not Path(data_file).is_file():
        raise UsageError(f"{data_file}: no distillation data (drop --skip-distill to generate it)")
    data = setup.training_data(loaded, data_file, work / "hidden", cfg)
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
        eval_prompt_ids=setup.eval_prompt_ids(loaded.tokenizer, eval_prompts),
        eos_ids=eos,
        resume=resume,
        init_from=init_from,
        out_dir=out,
        ngrams=data.ngrams,
        console=console,
        log=log,
    )
    console.print(f"{setup.best_summary(result.best or {})}\nwrote {out}")

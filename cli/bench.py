"""`redrafter bench`: mlx-lm AR vs our AR vs ReDrafter on the same prompt ids, one run."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from redrafter_mlx import runtime
from redrafter_mlx.api import Pipeline
from redrafter_mlx.formats.loading import DEFAULT_MODEL
from redrafter_mlx.formats.prompt_sets import balanced_subset, load_prompts
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.profiling import bench as runner
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.runtime import distributed
from redrafter_mlx.runtime.timers import PhaseTimer

from .app import app, console, friendly_errors, print_json
from .bench_modes import (
    compare_drafters,
    compare_trees,
    drafting,
    parse_list,
    parse_trees,
    show_replay,
    show_verify_cost,
    summarise,
)
from .generate import read_prompts
from .options import (
    TREE_FIELDS,
    DrafterOpt,
    DraftModelOpt,
    DTypeOpt,
    Mode,
    ModelOpt,
    NumPromptsOpt,
    PromptsFileOpt,
    decoding_options,
    load_pipeline,
    parse_sizes,
    plan,
)

BENCH_PROMPTS = 16  # the bench's largest default slice; `tune` replays other prompts


def eval_texts(num_prompts: int, for_tuning: bool = False) -> list[str]:
    """A category-balanced slice of the held-out eval set; for tuning, one that avoids the
    bench's first BENCH_PROMPTS prompts, so a tuned shape is not benched on its own data."""
    records = load_prompts("eval")
    if for_tuning:
        benched = {r["prompt"] for r in balanced_subset(records, BENCH_PROMPTS)}
        records = [r for r in records if r["prompt"] not in benched]
    return [r["prompt"] for r in balanced_subset(records, num_prompts)]


def setup(
    model: str,
    drafter: str | None,
    dtype: str | None,
    prompts_file: Path | None,
    num_prompts: int,
    for_tuning: bool = False,
    draft_model: str | None = None,
    mode: Mode = Mode.redrafter,
) -> tuple[Pipeline, list[list[int]]]:
    """Model, drafter and encoded prompts (default: a category-balanced slice of the eval set)."""
    texts = (read_prompts(None, prompts_file) if prompts_file else eval_texts(num_prompts, for_tuning))[:num_prompts]
    pipeline = load_pipeline(model, drafter, dtype, mode, draft_model)
    return pipeline, [encode_prompt(pipeline.tokenizer, t, vicuna=pipeline.loaded.is_vicuna) for t in texts]


@app.command()
@friendly_errors
@decoding_options(128, *TREE_FIELDS)
def bench(
    model: ModelOpt = DEFAULT_MODEL,
    drafter: DrafterOpt = None,
    draft_model: DraftModelOpt = None,
    prompts_file: PromptsFileOpt = None,
    num_prompts: NumPromptsOpt = 16,
    dtype: DTypeOpt = None,
    skip_mlx_lm: Annotated[bool, typer.Option("--skip-mlx-lm", help="Do not run the mlx-lm peer.")] = False,
    rounds: Annotated[
        int,
        typer.Option(
            "--rounds",
            min=1,
            help="Decode every prompt this many times with our AR and ReDrafter (or each --trees / --drafters "
            "entry), interleaved; per-prompt speeds are the medians.",
        ),
    ] = 1,
    profile: Annotated[bool, typer.Option("--profile", help="Per-phase ReDrafter timings (slower).")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the results as one JSON object.")] = False,
    verify_cost: Annotated[
        Optional[str],
        typer.Option(
            "--verify-cost",
            metavar="P,P,...",
            help="Instead: time one verify pass per packed length P (e.g. 1,4,8,12,16) on a 200-token cache.",
        ),
    ] = None,
    replay_only: Annotated[
        bool,
        typer.Option(
            "--replay",
            help="Instead: greedy tokens/step only, replayed on the LLM's batched answers "
            "(no timing; fast enough for the whole eval set, e.g. -n 106).",
        ),
    ] = False,
    drafters: Annotated[
        Optional[str],
        typer.Option(
            "--drafters",
            metavar="D,D,...",
            help="Instead: each drafter (a folder or hub id of any kind, 'shipped' for the model's own, or a "
            "model folder to draft with as a small LLM) on the same prompts and verifier, interleaved, "
            "beside mlx-lm (and mlx-lm's --draft-model decoding with each small LLM).",
        ),
    ] = None,
    trees: Annotated[
        Optional[str],
        typer.Option(
            "--trees",
            metavar="TREE,TREE,...",
            help="Instead: our AR and ReDrafter with each tree (WxLxS, 'auto' = the calibrated choice with "
            "step policy, 'static' = without), interleaved prompt by prompt in one run.",
        ),
    ] = None,
    *,
    options: DecodingOptions,
) -> None:
    """Throughput, tokens/step, compression, memory and output identity of all three decoders (greedy),
    and ReDrafter's speed-up prompt by prompt (our AR and ReDrafter interleaved)."""
    if verify_cost is not None:
        return show_verify_cost(model, runtime.parse_dtype(dtype), parse_sizes(verify_cost, "--verify-cost"), json_out)
    compared = parse_trees(trees) if trees is not None else None
    pipeline, prompts = setup(
        model,
        drafter,
        dtype,
        prompts_file,
        num_prompts,
        draft_model=draft_model,
        mode=Mode.ar if drafters is not None else Mode.redrafter,
    )
    about = runtime.describe(pipeline.dtype)
    if compared is not None:
        return compare_trees(pipeline, prompts, compared, options, json_out, rounds)
    if drafters is not None:
        return compare_drafters(
            pipeline, prompts, parse_list(drafters, "--drafters"), options, json_out, skip_mlx_lm, rounds
        )
    found = plan(pipeline, options)
    shape = found.shape
    if replay_only:
        return show_replay(pipeline, prompts, shape, options, json_out, {"model": model, "runtime": about})
    console.print(
        f"[dim]{about}; {len(prompts)} prompts, {options.max_tokens} max tokens, "
        f"{drafting(shape, options.lookup)}{'' if found.calibration else ' (not calibrated)'}[/dim]"
    )
    runner.warm_up(pipeline, options, found)
    results = []
    with runner.scratch_dir() as scratch:
        if not skip_mlx_lm and not pipeline.all_reduces:  # (mlx-lm's peer would run whole on every rank)
            folder = runner.mlx_lm_folder(pipeline.loaded, Path(scratch))
            results.append(runner.run_mlx_lm(folder, prompts, options.max_tokens))
    timer = PhaseTimer(profile)
    ours = {
        "AR (ours)": runner.ours(pipeline.autoregressive(), options),
        "ReDrafter": runner.ours(pipeline, options, found, timer),
    }
    results += runner.run_interleaved(prompts, ours, rounds)
    results[-1].phase_times = dict(timer.totals)
    report = summarise(results)
    for m in report["methods"][-2:]:  # ours: each forward pass all-reduces once per sharded block
        m["all_reduces_per_token"] = pipeline.all_reduces / m["tokens_per_step"]
    report |= {
        "model": model,
        "ranks": distributed.size(),
        "all_reduces_per_pass": pipeline.all_reduces,
        "beam_width": shape.beam_width,
        "beam_length": shape.beam_length,
        "search_width": shape.search_width,
        "node_budget": shape.node_budget,
        "lookup": options.lookup,
        "calibrated": found.calibration is not None,
        "adaptive": found.policy is not None,
        "prompts": len(prompts),
        "rounds": rounds,
        "max_tokens": options.max_tokens,
        "runtime": about,
    }
    if found.calibration is not None:
        report["expected_tokens_per_s"] = found.expected_tokens_per_s
    if json_out:
        print_json(report)
    else:
        show(report)


def show(report: dict) -> None:
    table = Table(
        title=f"redrafter bench ({report['prompts']} prompts, W={report['beam_width']} "
        f"L={report['beam_length']} S={report['search_width']}"
        + (f" N={report['node_budget']})" if report["node_budget"] else ")")
    )
    for column in (
        "method",
        "tokens/s",
        f"x {report['baseline']}",
        "tokens/step",
        "compression",
        "peak GB",
        "same as AR",
        *(["all-reduces/token"] if report["all_reduces_per_pass"] else []),
    ):
        table.add_column(column, justify="right" if column != "method" else "left")
    for m in report["methods"]:
        table.add_row(
            m["name"],
            f"{m['tokens_per_s']:.1f}",
            f"{m['speedup_vs_first']:.2f}",
            f"{m['tokens_per_step']:.2f}",
            f"{m['compression']:.2f}" if "compression" in m else "-",
            f"{m['peak_memory_gb']:.2f}",
            "yes" if m["identical_to_ar"] else "NO",
            *([f"{m['all_reduces_per_token']:.1f}"] if report["all_reduces_per_pass"] else []),
        )
    if report["ranks"] > 1:
        table.caption = f"{report['ranks']} ranks, {report['all_reduces_per_pass']} all-reduces per forward pass"
    Console().print(table)
    spread = report["methods"][-1]["per_prompt"]
    Console().print(
        f"ReDrafter / our AR, prompt by prompt ({report['prompts']} prompts, {report['rounds']} round(s), "
        f"medians): worst {spread['worst']:.2f}x, median {spread['median']:.2f}x, mean {spread['mean']:.2f}x; "
        f"{spread['losing']} below 1.00x, {spread['below_0.95']} below 0.95x"
    )
    redrafter = report["methods"][-1]
    if redrafter["phase_times"]:
        total = sum(redrafter["phase_times"].values())
        Console().print("phases: " + ", ".join(f"{k} {v / total:.0%}" for k, v in redrafter["phase_times"].items()))

"""`redrafter bench`: mlx-lm AR vs our AR vs ReDrafter on the same prompt ids, one run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer
from redrafter_mlx.profiling import bench as runner
from redrafter_mlx.profiling.verify_cost import verify_cost as measure_verify_cost
from rich.console import Console
from rich.table import Table

from redrafter_mlx import runtime
from redrafter_mlx.api import Pipeline
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.loading import load_drafter_for
from redrafter_mlx.formats.loading import DEFAULT_MODEL, load
from redrafter_mlx.formats.prompt_sets import balanced_subset, load_prompts
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.training.replay import record_answers, replay

from .app import UsageError, app, console, friendly_errors, print_json
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
            "adaptive length, 'static' = without), interleaved prompt by prompt in one run.",
        ),
    ] = None,
    *,
    options: DecodingOptions,
) -> None:
    """Throughput, tokens/step, compression, memory and output identity of all three decoders (greedy)."""
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
        return compare_trees(pipeline, prompts, compared, options, json_out)
    if drafters is not None:
        return compare_drafters(pipeline, prompts, parse_list(drafters, "--drafters"), options, json_out, skip_mlx_lm)
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
        if not skip_mlx_lm:
            folder = runner.mlx_lm_folder(pipeline.loaded, Path(scratch))
            results.append(runner.run_mlx_lm(folder, prompts, options.max_tokens))
    results.append(runner.run_ours(pipeline.autoregressive(), prompts, options))
    results.append(runner.run_ours(pipeline, prompts, options, found, profile=profile))
    report = summarise(results)
    report |= {
        "model": model,
        "beam_width": shape.beam_width,
        "beam_length": shape.beam_length,
        "search_width": shape.search_width,
        "lookup": options.lookup,
        "calibrated": found.calibration is not None,
        "adaptive": found.adapt is not None,
        "prompts": len(prompts),
        "max_tokens": options.max_tokens,
        "runtime": about,
    }
    if found.calibration is not None:
        report["expected_tokens_per_s"] = found.expected_tokens_per_s
    if json_out:
        print_json(report)
    else:
        show(report)


def parse_trees(text: str) -> list[str | tuple[int, int, int]]:
    """'auto', 'static' or (W, L, S) from 'WxLxS', for each comma-separated item."""
    trees = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        if item in ("auto", "static"):
            trees.append(item)
            continue
        try:
            width, length, search = (int(x) for x in item.lower().split("x"))
        except ValueError:
            raise UsageError(f"--trees: expected auto, static or WxLxS (e.g. 3x5x16), got {item!r}") from None
        if min(width, length, search) < 1:
            raise UsageError(f"--trees: W, L and S must be >= 1, got {item!r}")
        trees.append((width, length, search))
    if not trees:
        raise UsageError("--trees: give at least one tree")
    return trees


def compare_trees(
    pipeline: Pipeline, prompts: list[list[int]], trees: list, options: DecodingOptions, json_out: bool
) -> None:
    """Our AR and ReDrafter with each tree on the same prompts, interleaved, with the
    calibration's expected speed beside the measured one."""
    plans = {}
    for tree in trees:
        if isinstance(tree, str):
            tree_options = replace(
                options, beam_width=None, beam_length=None, search_width=None, adaptive=tree == "auto"
            )
        else:
            tree_options = replace(options, beam_width=tree[0], beam_length=tree[1], search_width=tree[2])
        found = plan(pipeline, tree_options, quiet=True)
        plans[f"{tree} ({found.shape})" if isinstance(tree, str) else str(found.shape)] = found
    runner.warm_up(pipeline, options, next(iter(plans.values())))
    decoders = {"AR (ours)": runner.ours(pipeline.autoregressive(), options)}
    decoders |= {label: runner.ours(pipeline, options, found) for label, found in plans.items()}
    max_tokens = options.max_tokens
    console.print(
        f"[dim]{runtime.describe(pipeline.dtype)}; {len(prompts)} prompts, {max_tokens} max tokens, interleaved[/dim]"
    )
    results = runner.run_interleaved(prompts, decoders)
    report = summarise(results) | {"prompts": len(prompts), "max_tokens": max_tokens}
    for entry in report["methods"][1:]:
        entry["expected_tokens_per_s"] = plans[entry["name"]].expected_tokens_per_s
    if json_out:
        return print_json(report)
    table = Table(title=f"trees, interleaved ({len(prompts)} prompts)")
    for column in ("method", "tokens/s", "x AR", "expected tok/s", "tokens/step", "steps", "same as AR"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for m in report["methods"]:
        expected = m.get("expected_tokens_per_s")
        table.add_row(
            m["name"],
            f"{m['tokens_per_s']:.2f}",
            f"{m['speedup_vs_first']:.2f}",
            f"{expected:.2f}" if expected else "-",
            f"{m['tokens_per_step']:.3f}",
            str(m["steps"]),
            "yes" if m["identical_to_ar"] else "NO",
        )
    Console().print(table)


def parse_list(text: str, flag: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise UsageError(f"{flag}: give at least one item")
    return items


def compare_drafters(
    pipeline: Pipeline,
    prompts: list[list[int]],
    specs: list[str],
    options: DecodingOptions,
    json_out: bool,
    skip_mlx_lm: bool,
) -> None:
    """Every drafter kind through the same verifier on the same prompts, interleaved; mlx-lm
    AR (and its speculative decoding with each draft LLM) as the peers."""
    loaded = pipeline.loaded
    entries = {}
    for spec in specs:
        drafter = load_drafter_for(loaded, None if spec == "shipped" else spec, pipeline.dtype)
        each = Pipeline(loaded, drafter, pipeline.dtype)
        found = plan(each, options, quiet=True)
        entries[f"{drafter.kind} {Path(spec).name} ({found.shape})"] = (each, found)
    for each, found in entries.values():
        runner.warm_up(each, options, found)
    results = []
    with runner.scratch_dir() as scratch:
        if not skip_mlx_lm:
            folder = runner.mlx_lm_folder(loaded, Path(scratch))
            results.append(runner.run_mlx_lm(folder, prompts, options.max_tokens))
            for each, found in entries.values():
                if each.drafter.kind == "draft-llm" and Path(str(each.drafter.source)).is_dir():
                    results.append(
                        runner.run_mlx_lm(
                            folder, prompts, options.max_tokens, Path(each.drafter.source), found.shape.beam_length - 1
                        )
                    )
    decoders = {"AR (ours)": runner.ours(pipeline.autoregressive(), options)}
    decoders |= {label: runner.ours(each, options, found) for label, (each, found) in entries.items()}
    console.print(
        f"[dim]{runtime.describe(pipeline.dtype)}; {len(prompts)} prompts, {options.max_tokens} max "
        f"tokens, drafters interleaved[/dim]"
    )
    results += runner.run_interleaved(prompts, decoders)
    report = summarise(results) | {"prompts": len(prompts), "max_tokens": options.max_tokens}
    if json_out:
        return print_json(report)
    table = Table(title=f"drafters, interleaved ({len(prompts)} prompts)")
    for column in ("method", "tokens/s", f"x {report['baseline']}", "tokens/step", "same as AR"):
        table.add_column(column, justify="left" if column == "method" else "right")
    for m in report["methods"]:
        table.add_row(
            m["name"],
            f"{m['tokens_per_s']:.2f}",
            f"{m['speedup_vs_first']:.2f}",
            f"{m['tokens_per_step']:.3f}",
            "yes" if m["identical_to_ar"] else "NO",
        )
    Console().print(table)


def drafting(shape: TreeShape, lookup: bool) -> str:
    """The drafting settings, as the bench's header line shows them."""
    return f"{shape}{'' if lookup else ', no lookup'}"


def show_verify_cost(model: str, dtype, sizes: list[int], json_out: bool) -> None:
    loaded = load(model, dtype)
    console.print(f"[dim]{runtime.describe(dtype)}; one verify pass on a 200-token cache[/dim]")
    times = measure_verify_cost(loaded.model, sizes)
    if json_out:
        return print_json({"model": model, "context": 200, "seconds": times})
    table = Table(title="verify cost by packed length P")
    for column in ("P", "ms", f"x P={sizes[0]}"):
        table.add_column(column, justify="right")
    for size, seconds in times.items():
        table.add_row(str(size), f"{seconds * 1e3:.0f}", f"{seconds / times[sizes[0]]:.2f}")
    Console().print(table)


def show_replay(
    pipeline: Pipeline,
    prompts: list[list[int]],
    shape: TreeShape,
    options: DecodingOptions,
    json_out: bool,
    about: dict,
) -> None:
    """Tokens/step of greedy ReDrafter from `replay.replay`: equal to decoding's count (up to
    near-ties), without the per-step verify passes, so whole prompt sets are affordable."""
    max_tokens, lookup = options.max_tokens, options.lookup
    console.print(
        f"[dim]{about['runtime']}; {len(prompts)} prompts, {max_tokens} max tokens, "
        f"{drafting(shape, lookup)}, replayed[/dim]"
    )
    model = pipeline.loaded.model
    eos = pipeline.tokenizer.eos_token_ids or []
    # beam_length - 1 tokens past the limit: the last step may accept drafts beyond it, as in decoding.
    answers = record_answers(model, prompts, max_tokens + shape.beam_length - 1, eos)
    result = replay(
        pipeline.drafter,
        model.embedding,
        answers,
        beam_width=shape.beam_width,
        beam_length=shape.beam_length,
        search_width=shape.search_width,
        max_tokens=max_tokens,
        prompts=prompts,
        lookup=lookup,
    )
    report = about | {
        "beam_width": shape.beam_width,
        "beam_length": shape.beam_length,
        "search_width": shape.search_width,
        "lookup": lookup,
        "prompts": len(prompts),
        "max_tokens": max_tokens,
        "tokens_per_step": result.tokens_per_step,
        "steps": result.steps,
        "tokens": result.tokens,
    }
    if json_out:
        return print_json(report)
    console.print(
        f"tokens/step {result.tokens_per_step:.3f} ({result.tokens} tokens in {result.steps} "
        f"steps, {len(prompts)} prompts, {drafting(shape, lookup)})"
    )


def summarise(results: list[runner.MethodResult]) -> dict:
    """Ratios against the first method and identity of outputs with our AR."""
    base = results[0].tokens_per_s
    ours_ar = next(r for r in results if r.name == "AR (ours)")
    methods = []
    for r in results:
        entry = r.summary() | {
            "speedup_vs_first": r.tokens_per_s / base if base else None,
            "identical_to_ar": r.tokens == ours_ar.tokens,
        }
        methods.append(entry)
    return {"baseline": results[0].name, "methods": methods}


def show(report: dict) -> None:
    table = Table(
        title=f"redrafter bench ({report['prompts']} prompts, W={report['beam_width']} "
        f"L={report['beam_length']} S={report['search_width']})"
    )
    for column in (
        "method",
        "tokens/s",
        f"x {report['baseline']}",
        "tokens/step",
        "compression",
        "peak GB",
        "same as AR",
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
        )
    Console().print(table)
    redrafter = report["methods"][-1]
    if redrafter["phase_times"]:
        total = sum(redrafter["phase_times"].values())
        Console().print("phases: " + ", ".join(f"{k} {v / total:.0%}" for k, v in redrafter["phase_times"].items()))

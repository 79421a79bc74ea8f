"""`redrafter bench`'s other modes: trees or drafters side by side, the verify cost curve,
and tokens/step replayed without timing."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from redrafter_mlx import runtime
from redrafter_mlx.api import Pipeline
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.drafting.loading import load_drafter_for
from redrafter_mlx.formats.loading import load
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.profiling import bench as runner
from redrafter_mlx.profiling.verify_cost import verify_cost as measure_verify_cost
from redrafter_mlx.training.replay import record_answers, replay

from .app import UsageError, console, print_json
from .options import plan


def parse_trees(text: str) -> list[str | tuple[int, int, int, int]]:
    """'auto', 'static' or (W, L, S, N) from 'WxLxS' (N = 0: no node budget) or 'WxLxSxN',
    for each comma-separated item."""
    trees = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        if item in ("auto", "static"):
            trees.append(item)
            continue
        try:
            sizes = [int(x) for x in item.lower().split("x")]
        except ValueError:
            sizes = []
        if len(sizes) not in (3, 4):
            raise UsageError(
                f"--trees: expected auto, static, WxLxS or WxLxSxN (e.g. 3x5x16 or 6x6x6x8), got {item!r}"
            ) from None
        width, length, search, budget = (*sizes, 0)[:4]
        if min(width, length, search) < 1 or budget == 1 or budget < 0:
            raise UsageError(f"--trees: W, L and S must be >= 1 and N >= 2, got {item!r}")
        trees.append((width, length, search, budget))
    if not trees:
        raise UsageError("--trees: give at least one tree")
    return trees


def compare_trees(
    pipeline: Pipeline, prompts: list[list[int]], trees: list, options: DecodingOptions, json_out: bool, rounds: int = 1
) -> None:
    """Our AR and ReDrafter with each tree on the same prompts, interleaved, with the
    calibration's expected speed beside the measured one."""
    plans = {}
    for tree in trees:
        if isinstance(tree, str):
            tree_options = replace(
                options,
                beam_width=None,
                beam_length=None,
                search_width=None,
                node_budget=None,
                adaptive=tree == "auto",
            )
        else:
            width, length, search, budget = tree
            tree_options = replace(
                options, beam_width=width, beam_length=length, search_width=search, node_budget=budget
            )
        found = plan(pipeline, tree_options, quiet=True)
        plans[f"{tree} ({found.shape})" if isinstance(tree, str) else str(found.shape)] = found
    for found in plans.values():
        runner.warm_up(pipeline, options, found)
    decoders = {"AR (ours)": runner.ours(pipeline.autoregressive(), options)}
    decoders |= {label: runner.ours(pipeline, options, found) for label, found in plans.items()}
    max_tokens = options.max_tokens
    console.print(
        f"[dim]{runtime.describe(pipeline.dtype)}; {len(prompts)} prompts, {max_tokens} max tokens, interleaved[/dim]"
    )
    results = runner.run_interleaved(prompts, decoders, rounds)
    report = summarise(results) | {"prompts": len(prompts), "rounds": rounds, "max_tokens": max_tokens}
    for entry in report["methods"][1:]:
        entry["expected_tokens_per_s"] = plans[entry["name"]].expected_tokens_per_s
    if json_out:
        return print_json(report)
    table = Table(title=f"trees, interleaved ({len(prompts)} prompts)")
    columns = ("method", "tokens/s", "x AR", "worst / median prompt", "expected tok/s", "tokens/step", "steps", "same")
    for column in columns:
        table.add_column(column, justify="left" if column == "method" else "right")
    for m in report["methods"]:
        expected = m.get("expected_tokens_per_s")
        spread = m.get("per_prompt")
        table.add_row(
            m["name"],
            f"{m['tokens_per_s']:.2f}",
            f"{m['speedup_vs_first']:.2f}",
            f"{spread['worst']:.2f} / {spread['median']:.2f}" if spread else "-",
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
    rounds: int = 1,
) -> None:
    """Every drafter kind through the same verifier on the same prompts, interleaved (`rounds`
    times); mlx-lm AR (and its speculative decoding with each draft LLM) as the peers."""
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
    results += runner.run_interleaved(prompts, decoders, rounds)
    report = summarise(results) | {"prompts": len(prompts), "rounds": rounds, "max_tokens": options.max_tokens}
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
        shape,
        max_tokens=max_tokens,
        prompts=prompts,
        lookup=lookup,
    )
    report = about | {
        "beam_width": shape.beam_width,
        "beam_length": shape.beam_length,
        "search_width": shape.search_width,
        "node_budget": shape.node_budget,
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


def drafting(shape: TreeShape, lookup: bool) -> str:
    """The drafting settings, as the bench's header line shows them."""
    return f"{shape}{'' if lookup else ', no lookup'}"


def summarise(results: list[runner.MethodResult]) -> dict:
    """Ratios against the first method, identity of outputs with our AR, and each other
    method's speed-up over our AR prompt by prompt (`per_prompt`: worst, median, mean, how
    many prompts lose)."""
    base = results[0].tokens_per_s
    ours_ar = next(r for r in results if r.name == "AR (ours)")
    methods = []
    for r in results:
        entry = r.summary() | {
            "speedup_vs_first": r.tokens_per_s / base if base else None,
            "identical_to_ar": r.same_answers(ours_ar),
        }
        if r is not ours_ar:
            entry["per_prompt"] = per_prompt_ratios(r, ours_ar)
        methods.append(entry)
    return {"baseline": results[0].name, "methods": methods}


def per_prompt_ratios(method: runner.MethodResult, baseline: runner.MethodResult) -> dict:
    """`method`'s tokens/s over `baseline`'s, prompt by prompt: the spread an average hides."""
    ratios = [m / b for m, b in zip(method.prompt_tokens_per_s(), baseline.prompt_tokens_per_s()) if b]
    return {
        "ratios": ratios,
        "worst": min(ratios),
        "median": statistics.median(ratios),
        "mean": statistics.fmean(ratios),
        "losing": sum(r < 1.0 for r in ratios),
        "below_0.95": sum(r < 0.95 for r in ratios),
    }

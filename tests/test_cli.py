"""The CLI contract, run as a user runs it: a subprocess of the installed `redrafter`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm import load as mlx_lm_load
from mlx_lm import stream_generate
from mlx_lm.sample_utils import make_sampler

from .helpers import REDRAFTER, assert_one_line_error, invoke_cli, random_drafter, run_redrafter

AR_PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about autumn leaves.",
    "Explain what a hash table is in one paragraph.",
    "List three prime numbers greater than 50.",
    "Translate 'good morning' into Spanish and German.",
    "Give me a tip for sleeping better.",
    "What is 12 times 13?",
    "Write a Python function that reverses a string.",
    "Summarise the plot of Romeo and Juliet in two sentences.",
    "Why is the sky blue?",
    "Name a famous painting by Vermeer.",
]


@pytest.mark.slow
def test_greedy_ar_matches_mlx_lm_on_the_exported_model(tmp_path):
    """`generate --mode ar --json` equals mlx-lm greedy generation on `redrafter export`."""
    folder = tmp_path / "exported"
    exported = run_redrafter("export", "--out", str(folder))
    assert exported.returncode == 0, exported.stderr
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in AR_PROMPTS))
    result = run_redrafter(
        "generate", "--mode", "ar", "--prompts-file", str(prompts), "-m", "24", "--json", "-M", str(folder)
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["prompt"] for r in records] == AR_PROMPTS
    model, tokenizer = mlx_lm_load(str(folder))
    for r in records:
        assert set(r) >= {
            "prompt",
            "prompt_tokens",
            "tokens",
            "text",
            "num_tokens",
            "steps",
            "tokens_per_step",
            "prompt_tps",
            "generation_tps",
            "peak_memory_gb",
        }
        expected = [
            response.token
            for response in stream_generate(
                model, tokenizer, mx.array(r["prompt_tokens"]), max_tokens=24, sampler=make_sampler(0.0)
            )
            if response.token not in tokenizer.eos_token_ids
        ]
        assert r["tokens"] == expected
        assert r["num_tokens"] == len(r["tokens"]) and r["tokens_per_step"] == 1.0


def test_prompt_from_stdin_and_plain_output_with_the_default_drafter():
    result = run_redrafter("generate", "-p", "-", "-m", "12", stdin="What is the capital of France?")
    assert result.returncode == 0, result.stderr
    assert "Paris" in result.stdout
    assert "tokens-per-sec" in result.stderr and "tokens/step" in result.stderr


def test_info_reports_fast_blas_after_reexec():
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    result = subprocess.run([REDRAFTER, "info"], capture_output=True, text=True, env={**env, "COLUMNS": "300"})
    assert result.returncode == 0, result.stderr
    from redrafter_mlx.runtime import find_openblas

    if sys.platform == "linux":  # OpenBLAS after the re-exec where it is installed, else the hint
        assert ("blas=OpenBLAS" if find_openblas() else "reference BLAS (slow") in result.stdout
    else:
        assert "blas=Accelerate" in result.stdout
    disabled = subprocess.run(
        [REDRAFTER, "info"], capture_output=True, text=True, env={**env, "COLUMNS": "300", "REDRAFTER_NO_OPENBLAS": "1"}
    )
    assert disabled.returncode == 0, disabled.stderr
    assert "blas=OpenBLAS" not in disabled.stdout


@pytest.mark.parametrize(
    "args, code, fragment",
    [
        (["generate", "-p", "hi", "-M", "./no/such/folder"], 1, "not found"),
        (["generate", "-p", "hi", "-M", "llama-99b"], 1, "alias"),
        (["generate", "-p", "hi", "--mode", "ar", "-M", "vicuna-7b"], 1, "lmsys/vicuna-7b-v1.3"),
        (["generate", "-p", "hi", "-w", "0"], 2, "--beam-width"),
        (["chat", "-s", "0"], 2, "--search-width"),
        (["generate", "-p", "hi", "-N", "1"], 1, "node budget must be 0 (none) or >= 2"),
        (["generate", "-p", "hi", "--mode", "fast"], 2, "--mode"),
        (["generate", "-p", "hi", "--dtype", "float64", "--mode", "ar"], 2, "--dtype"),
        (["generate", "-p", "hi", "-d", "./no/such/drafter"], 1, "not found"),
        (["generate"], 2, "--prompt"),
        # typer's own option checks, shown in one line too
        (["generate", "-p", "hi", "-m", "0"], 2, "--max-tokens"),
        (["convert", "src", "out", "-M", "smollm2-135m", "--head-tokens", "0"], 2, "--head-tokens"),
        (["generate", "-p", "hi", "--temp", "inf"], 2, "--temp"),
        (["generate", "-p", "hi", "--temp", "nan"], 2, "--temp"),
        (["generate", "-p", "hi", "--top-p", "nan"], 2, "--top-p"),
        (["train", "--steps", "0"], 2, "--steps"),
        (["bench", "--bogus"], 2, "--bogus"),
    ],
)
def test_bad_input_gives_one_line_error(tmp_path, args, code, fragment):
    offline = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    assert_one_line_error(run_redrafter(*args, env=offline), code, fragment)


def test_bad_prompts_file_and_existing_export_target(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "no prompt field"}\n')
    assert_one_line_error(run_redrafter("generate", "--prompts-file", str(bad), "--mode", "ar"), 2, "prompt")
    target = tmp_path / "taken"
    target.mkdir()
    (target / "keep.txt").write_text("user data")
    assert_one_line_error(run_redrafter("export", "--out", str(target)), 1)
    assert (target / "keep.txt").read_text() == "user data" and len(list(target.iterdir())) == 1


@pytest.mark.slow
def test_wheel_installs_cli_under_the_package_namespace(tmp_path):
    """`pip install .` puts cli/, quantize/, profiling/ under redrafter_mlx, nothing generic; it holds
    what runs (weights, calibration, eval prompts) and no training data; the API works from it."""
    root = Path(__file__).resolve().parents[1]
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(target),
            str(root),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    top_level = {p.name for p in target.iterdir() if not p.name.endswith((".dist-info", ".egg-info"))}
    assert top_level == {"redrafter_mlx", "bin"} or top_level == {"redrafter_mlx"}
    runtime = (
        "cli/main.py",
        "quantize/__init__.py",
        "profiling/bench.py",
        "models/llama.py",
        "training/loop.py",
        "decoding/loop.py",
        "drafting/kinds/rnn.py",
        "assets/token_corpus.txt.gz",
        "assets/eval_prompts.jsonl",
        *(
            f"assets/drafters/smollm2-135m/{name}"
            for name in ("model.safetensors", "config.json", "ngrams.safetensors", "calibration.json", "README.md")
        ),
    )
    for sub in runtime:
        assert (target / "redrafter_mlx" / sub).exists(), sub
    installed = {p.name for p in (target / "redrafter_mlx").rglob("*")}
    assert not installed & {"train_prompts.jsonl", "build_prompts.py", "distill.jsonl.gz", "handwritten_bulk.jsonl"}
    env = {**os.environ, "PYTHONPATH": str(target)}
    help_text = subprocess.run(
        [sys.executable, "-m", "redrafter_mlx.cli", "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert help_text.returncode == 0 and "generate" in help_text.stdout, help_text.stderr
    script = (
        "import redrafter_mlx; from redrafter_mlx import load, generate\n"
        "print(redrafter_mlx.__file__); print(generate(load(), 'What is the capital of France?', max_tokens=8))"
    )
    api = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
    )
    assert api.returncode == 0, api.stderr
    assert api.stdout.startswith(str(target)) and "Paris" in api.stdout  # the installed copy, not the checkout


def test_profile_writes_a_chrome_trace_with_every_phase(tmp_path, write_tiny_folder):
    from redrafter_mlx.drafting.kinds.rnn import save as save_drafter

    model = write_tiny_folder(tmp_path / "model")
    drafter = save_drafter(random_drafter(49152, 64, tied=True), tmp_path / "drafter")
    trace = tmp_path / "trace.json"
    result = invoke_cli(
        "generate", "-M", model, "-d", drafter, "-p", "Hello", "-m", "6", "--profile", "--json", "--trace", trace
    )
    assert result.exit_code == 0, result.output
    record = json.loads(result.stdout.splitlines()[0])
    phases = {"prefill", "draft", "pack", "verify", "accept", "cache"}  # and "plain" for plain steps
    assert phases <= set(record["phase_times"]) <= phases | {"plain"}
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["name"] for e in events} == set(record["phase_times"])
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in events)


def test_bench_runs_all_three_decoders_on_the_same_prompts(tmp_path, write_tiny_folder):
    """mlx-lm, our AR and greedy ReDrafter agree token for token; the report has every field."""
    from redrafter_mlx.drafting.kinds.rnn import save as save_drafter

    model = write_tiny_folder(tmp_path / "model")
    drafter = save_drafter(random_drafter(49152, 64, tied=True), tmp_path / "drafter")
    same = ("bench", "-M", str(model), "-d", str(drafter), "-w", "2", "-l", "3", "-s", "5", "-n", "3", "-m", "12")
    result = invoke_cli(*same, "--rounds", "2", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout.splitlines()[-1])
    names = [m["name"] for m in report["methods"]]
    assert names == ["mlx-lm AR", "AR (ours)", "ReDrafter"] and report["prompts"] == 3 and report["rounds"] == 2
    # ReDrafter over our AR, prompt by prompt, from each prompt's median tokens/s
    spread, ar = report["methods"][-1]["per_prompt"], report["methods"][1]["prompt_tokens_per_s"]
    ratios = [r / a for r, a in zip(report["methods"][-1]["prompt_tokens_per_s"], ar)]
    assert spread["ratios"] == pytest.approx(ratios) and len(ratios) == 3
    assert spread["worst"] == min(ratios) and spread["losing"] == sum(r < 1.0 for r in ratios)
    assert report["search_width"] == 5
    for m in report["methods"]:
        assert m["identical_to_ar"], m["name"]
        assert m["tokens_per_s"] > 0 and m["peak_memory_gb"] > 0 and m["num_tokens"] > 0
    redrafter = report["methods"][-1]
    assert 1.0 <= redrafter["tokens_per_step"] <= 3.0
    assert 0 < redrafter["compression"] <= 1.0
    assert report["methods"][0]["speedup_vs_first"] == 1.0
    replayed = invoke_cli(*same, "--json", "--replay")
    assert replayed.exit_code == 0, replayed.output
    counted = json.loads(replayed.stdout.splitlines()[-1])
    assert (counted["tokens_per_step"], 2 * counted["steps"]) == (redrafter["tokens_per_step"], redrafter["steps"])
    assert report["lookup"] is counted["lookup"] is True
    plain = invoke_cli(*same, "--json", "--replay", "--no-lookup")
    assert json.loads(plain.stdout.splitlines()[-1])["lookup"] is False


def test_bench_verify_cost_times_each_packed_length(tmp_path, write_tiny_folder):
    model = write_tiny_folder(tmp_path / "model")
    result = invoke_cli("bench", "-M", str(model), "--verify-cost", "1,4,9", "--json")
    assert result.exit_code == 0, result.output
    seconds = json.loads(result.stdout.splitlines()[-1])["seconds"]
    assert list(seconds) == ["1", "4", "9"] and all(s > 0 for s in seconds.values())
    assert_one_line_error(run_redrafter("bench", "--verify-cost", "0,x"), 2, "--verify-cost")


def test_blas_threads_is_set_inside_and_restored():
    import ctypes

    from redrafter_mlx.runtime.device import blas_threads, loaded_blas

    if not loaded_blas().startswith("OpenBLAS"):
        pytest.skip("OpenBLAS is not loaded in this process")
    lib = ctypes.CDLL("libopenblas.so.0")
    original = lib.openblas_get_num_threads()
    lib.openblas_set_num_threads(2)
    try:
        with blas_threads(1):
            assert lib.openblas_get_num_threads() == 1
        assert lib.openblas_get_num_threads() == 2
    finally:
        lib.openblas_set_num_threads(original)


def test_tune_stores_a_calibration_that_the_defaults_then_use(tmp_path, write_tiny_folder, monkeypatch):
    from redrafter_mlx.drafting.kinds.rnn import save as save_drafter

    monkeypatch.setenv("REDRAFTER_CACHE_DIR", str(tmp_path / "cache"))
    model = write_tiny_folder(tmp_path / "model")
    drafter = save_drafter(random_drafter(49152, 64, tied=True), tmp_path / "drafter")
    result = invoke_cli(
        "tune",
        "-M",
        str(model),
        "-d",
        str(drafter),
        "--beam-widths",
        "1,2",
        "--beam-lengths",
        "2,3",
        "--search-widths",
        "1,4",
        "--node-budgets",
        "3",
        "-n",
        "2",
        "-m",
        "12",
        "--json",
    )
    assert result.exit_code == 0, result.output
    tuned = json.loads(result.stdout.splitlines()[-1])
    assert tuned["path"].startswith(str(tmp_path / "cache"))
    shapes = {(s["beam_width"], s["beam_length"], s["search_width"], s.get("node_budget")) for s in tuned["shapes"]}
    # The budget applies to the widest W's trees that hold more than 3 tokens: L = 3 only.
    budgeted = {(2, 3, 2, 3), (2, 3, 4, 3)}
    assert shapes == {(w, length, s, None) for w in (1, 2) for length in (2, 3) for s in (w, 4)} | budgeted
    assert set(tuned["verify_ms"]) >= {str(p) for p in range(1, 1 + 2 * 2 + 1)}
    assert all(s["draft_ms"] > 0 and 1.0 <= s["tokens_per_step"] <= s["beam_length"] for s in tuned["shapes"])
    from redrafter_mlx.tuning.calibration import Calibration

    best = Calibration.from_dict(tuned).best()
    bench = invoke_cli("bench", "-M", str(model), "-d", str(drafter), "-n", "2", "-m", "8", "--json", "--skip-mlx-lm")
    assert bench.exit_code == 0, bench.output
    report = json.loads(bench.stdout.splitlines()[-1])
    assert report["calibrated"] is True
    assert (report["beam_width"], report["beam_length"], report["search_width"]) == (
        best.beam_width,
        best.beam_length,
        best.search_width,
    )
    assert all(m["identical_to_ar"] for m in report["methods"])
    explicit = invoke_cli(
        "bench",
        "-M",
        str(model),
        "-d",
        str(drafter),
        "-w",
        "1",
        "-l",
        "2",
        "-s",
        "1",
        "-n",
        "1",
        "-m",
        "4",
        "--json",
        "--skip-mlx-lm",
    )
    assert (json.loads(explicit.stdout.splitlines()[-1])["beam_width"]) == 1  # explicit values win
    compared = invoke_cli(
        "bench",
        "-M",
        str(model),
        "-d",
        str(drafter),
        "--trees",
        "auto,static,2x3x4,2x3x4x3",
        "-n",
        "3",
        "-m",
        "8",
        "--json",
    )
    assert compared.exit_code == 0, compared.output
    methods = json.loads(compared.stdout.splitlines()[-1])["methods"]
    names = ["AR (ours)", f"auto ({best})", f"static ({best})", "W=2 L=3 S=4", "W=2 L=3 S=4 N=3"]
    assert [m["name"] for m in methods] == names
    assert all(m["identical_to_ar"] and m["num_tokens"] > 0 for m in methods)
    assert methods[3]["expected_tokens_per_s"] > 0  # a calibrated shape: the model's prediction is shown
    assert methods[4]["expected_tokens_per_s"] > 0
    for bad in ("3x5", "2x3x4x1", "2x3x4x5x6"):
        assert_one_line_error(run_redrafter("bench", "--trees", bad), 2, "--trees")


def test_version_and_info_show_what_is_installed(tmp_path):
    from importlib.metadata import version

    assert invoke_cli("--version").stdout.strip() == f"redrafter-mlx {version('redrafter-mlx')}"
    result = run_redrafter("info", env={"COLUMNS": "400", "REDRAFTER_CACHE_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert "drafters/smollm2-135m" in result.stdout
    from redrafter_mlx import runtime

    device = f"{runtime.device_name()}/{runtime.dtype_name(runtime.default_dtype())}"
    shipped = "smollm2-135m" if device == "cpu/float32" else "none"  # the drafter ships a CPU calibration
    assert f"{device}: shipped for {shipped}; 0 tuned in" in result.stdout


def test_a_prompt_that_is_not_utf8_is_one_line_error():
    env = {**os.environ, "COLUMNS": "200"}
    for args, stdin in (([b"-p", b"caf\xe9 au lait"], b""), ([b"-p", b"-"], b"\xff\xfe not text")):
        result = subprocess.run([REDRAFTER, "generate", *args], input=stdin, capture_output=True, env=env, timeout=600)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.decode().strip().splitlines()
        assert len(lines) == 1 and "not valid UTF-8" in lines[0], lines


def test_a_bug_inside_decoding_shows_its_traceback_and_asks_for_a_report():
    """Bad input is one line; a bug (here an error raised inside the decoder) is not hidden."""
    script = (
        "import sys, redrafter_mlx.decoding.loop as d\n"
        "def broken(*args, **kwargs):\n    raise ValueError('internal shape mismatch')\n"
        "d.generate_redrafter = broken\n"
        "from redrafter_mlx.cli.main import main\n"
        "sys.argv = ['redrafter', 'generate', '-p', 'hi', '-m', '4']\nmain()\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "ValueError: internal shape mismatch" in result.stderr
    assert "bug in redrafter-mlx" in result.stderr.splitlines()[-1]


@pytest.mark.parametrize("command, max_tokens", [("generate", 256), ("chat", 512), ("bench", 128)])
def test_decoding_flags_are_the_options_type_with_its_defaults(command, max_tokens):
    """Every command's decoding flags come from `DecodingOptions` (one definition, one default)."""
    import typer.main

    from redrafter_mlx.cli.main import load_commands
    from redrafter_mlx.options import SAMPLING_FIELDS, TREE_FIELDS, DecodingOptions

    params = {p.name: p for p in typer.main.get_command(load_commands()).commands[command].params}
    defaults = DecodingOptions(max_tokens=max_tokens)
    fields = ("max_tokens", *TREE_FIELDS, *(SAMPLING_FIELDS if command != "bench" else ()))
    for field in fields:
        assert params[field].default == getattr(defaults, field), field
        assert params[field].rich_help_panel == "Decoding"
    assert (command == "bench") == ("temp" not in params)


def test_bench_compares_answers_prompt_by_prompt_across_rounds():
    """Rounds repeat prompts: each run is compared with the baseline's run of the same prompt."""
    from redrafter_mlx.profiling.bench import MethodResult

    once = MethodResult("a", tokens=[[1, 2], [3]], runs=[(0, 1, 0.1), (1, 0, 0.1)])
    twice = MethodResult(
        "b", tokens=[[1, 2], [3], [1, 2], [3]], runs=[(0, 1, 0.2), (1, 0, 0.1), (0, 1, 0.4), (1, 0, 0.1)]
    )
    assert twice.same_answers(once) and once.same_answers(twice)
    wrong = MethodResult("c", tokens=[[1, 2], [3], [1, 2], [4]], runs=twice.runs)
    assert not wrong.same_answers(once)
    assert twice.prompt_tokens_per_s() == pytest.approx([(1 / 0.2 + 1 / 0.4) / 2, 0.0])

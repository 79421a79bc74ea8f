"""Edges a new user meets: the context limit, answers cut at -m, several prompts, Ctrl-C with
--json, a chat line that is not text, an exported model that keeps its drafter."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from redrafter_mlx.drafting.kinds.rnn import save as save_drafter

from .helpers import REDRAFTER, assert_one_line_error, random_drafter, run_redrafter, tiny_config

CONTEXT = 64


@pytest.fixture
def tiny(tmp_path, write_tiny_folder):
    """A tiny random Llama with a 64-token context, and a random drafter for it."""
    model = write_tiny_folder(tmp_path / "model", tiny_config(max_position_embeddings=CONTEXT))
    drafter = save_drafter(random_drafter(49152, 64, tied=True), tmp_path / "drafter")
    return str(model), str(drafter)


def test_a_prompt_over_the_context_is_one_line_with_both_counts(tiny):
    model, drafter = tiny
    result = run_redrafter("generate", "-M", model, "-d", drafter, "-w", "2", "-l", "3", "-s", "2", "-p", "word " * 80)
    assert_one_line_error(result, 1, f"holds {CONTEXT}")
    assert "the prompt is " in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("mode", ["ar", "redrafter"])
def test_an_answer_stops_at_the_context_and_says_so(tiny, mode):
    model, drafter = tiny
    args = ["generate", "-M", model, "-d", drafter, "--mode", mode, "-p", "word " * 20, "-m", "500"]
    record = json.loads(run_redrafter(*args, "--json").stdout)
    assert record["finish_reason"] == "length"
    assert len(record["prompt_tokens"]) + record["num_tokens"] == CONTEXT
    plain = run_redrafter(*args)
    assert plain.returncode == 0 and "context is full" in plain.stderr


def test_cut_answers_are_marked_and_prompts_from_a_file_are_separated(tmp_path, tiny):
    model, _ = tiny
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "one"}\n{"prompt": "two"}\n')
    result = run_redrafter("generate", "-M", model, "--mode", "ar", "--prompts-file", str(prompts), "-m", "3")
    assert result.returncode == 0, result.stderr
    assert "prompt 1/2" in result.stderr and "prompt 2/2" in result.stderr
    assert result.stderr.count("cut at --max-tokens 3") == 2
    assert "\n\n" in result.stdout.strip("\n")  # a blank line between the two answers


def test_no_shipped_drafter_error_names_the_way_out(tiny):
    model, _ = tiny
    assert_one_line_error(run_redrafter("generate", "-M", model, "-p", "hi"), 1, "--mode ar")


def test_ctrl_c_with_json_still_prints_the_partial_answer(tmp_path, write_tiny_folder):
    model = write_tiny_folder(tmp_path / "model", tiny_config(max_position_embeddings=100_000))
    drafter = save_drafter(random_drafter(49152, 64, tied=True), tmp_path / "drafter")
    process = subprocess.Popen(
        [REDRAFTER, "generate", "-M", str(model), "-d", str(drafter), "-p", "hi", "-m", "50000", "--json", "-v"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A test run started in the background inherits SIGINT ignored; a terminal's user does not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    for line in process.stderr:  # "drafting ..." comes once everything is loaded
        if line.startswith("drafting"):
            break
    time.sleep(2)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    record = json.loads(out)
    assert record["finish_reason"] == "interrupted" and 0 < record["num_tokens"] < 50000
    assert len(record["tokens"]) == record["num_tokens"]


def test_a_chat_line_that_is_not_utf8_is_skipped_with_one_line(tiny):
    model, drafter = tiny
    result = subprocess.run(
        [REDRAFTER, "chat", "-M", model, "-d", drafter, "-m", "3"],
        input=b"hi\n\xff\xfe not text\nhello\n",
        capture_output=True,
        timeout=600,
    )
    assert result.returncode == 1
    errors = [line for line in result.stderr.decode().splitlines() if line.startswith("error:")]
    assert errors == ["error: the prompt is not valid UTF-8 text"]
    assert b"Traceback" not in result.stderr
    assert result.stderr.decode().count("tokens/step") == 2  # the lines around it were answered


def test_an_exported_model_keeps_its_shipped_drafter(tmp_path):
    folder = tmp_path / "exported"
    assert run_redrafter("export", "--out", str(folder)).returncode == 0
    result = run_redrafter("generate", "-M", str(folder), "-p", "Name a colour.", "-m", "8", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["steps"] < 8  # drafted: fewer verify passes than tokens
    again = run_redrafter("export", "--out", str(folder))
    assert_one_line_error(again, 1, "--force")
    assert "force=True" not in again.stderr

"""Tensor parallelism across ranks: two processes on localhost over MLX's ring backend
(`mlx.launch`, shipped with mlx), the embedded model split between them: greedy answers equal
one process's token for token, the server answers through rank 0, and bad launches end in one
line on their own, without hanging."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from redrafter_mlx.drafting.kinds.rnn import save as save_drafter
from redrafter_mlx.profiling.load_test import free_port

from .archs import arch_config, write_arch_folder
from .helpers import (
    MORE_PROMPTS,
    REDRAFTER,
    chi_square_p_value,
    exact_sequence_probabilities,
    random_drafter,
    wait_until_serving,
)

LAUNCH = shutil.which("mlx.launch") or str(Path(sys.executable).parent / "mlx.launch")
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")  # two ranks share this machine's cores
TREE = ["-w", "3", "-l", "4", "-s", "8"]  # given: every rank must draft the same tree

pytestmark = pytest.mark.slow


def ring(ranks: int = 2) -> list[str]:
    """`mlx.launch` on the ring backend, listening on ports of this launch's own: by default it
    takes the same consecutive ports every time, and two launches at once (one per test
    worker) would pair one's rank 0 with the other's rank 1."""
    while True:
        base = free_port()
        if all(port_is_free(base + r) for r in range(1, ranks)):
            return [LAUNCH, "-n", str(ranks), "--backend", "ring", "--starting-port", str(base), "--"]


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def launch(*command: str, ranks: int = 2, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*ring(ranks), *command],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
    )


def answers(result: subprocess.CompletedProcess) -> list[list[int]]:
    return [json.loads(line)["tokens"] for line in result.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def prompts_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in MORE_PROMPTS[:3]))
    return path


@pytest.mark.parametrize("mode", ["redrafter", "ar"])
def test_two_ranks_decode_greedily_what_one_process_does(prompts_file, embedded_folder, mode):
    """ReDrafter with the embedded (GGUF) model; plain decoding with its safetensors export,
    whose split layers each rank reads by slice (`formats/slices.py`)."""
    model = ["-M", str(embedded_folder)] if mode == "ar" else []
    command = [REDRAFTER, "generate", *model, "--prompts-file", str(prompts_file), "-m", "24", "--json", "--mode", mode]
    command += TREE
    alone = subprocess.run(command, capture_output=True, text=True, timeout=300)
    together = launch(*command)
    assert alone.returncode == 0, alone.stderr
    assert len(answers(alone)) == 3 and all(answers(alone))
    assert answers(together) == answers(alone), together.stderr  # only rank 0 prints them
    assert "Traceback" not in together.stderr


@pytest.mark.parametrize("mode", ["redrafter", "ar"])
def test_two_ranks_split_by_layers_decode_what_one_process_does(prompts_file, mode):
    """--pipeline: rank 0 runs the first 15 layers, rank 1 the last 15 and hands its output to
    both; the arithmetic is one process's, so the answers are too."""
    command = [REDRAFTER, "generate", "--prompts-file", str(prompts_file), "-m", "24", "--json", "--mode", mode, *TREE]
    alone = subprocess.run(command, capture_output=True, text=True, timeout=300)
    together = launch(REDRAFTER, "--pipeline", *command[1:])
    assert alone.returncode == 0 and len(answers(alone)) == 3, alone.stderr
    assert answers(together) == answers(alone), together.stderr


def test_an_mlx_lm_architecture_splits_with_mlx_lms_own_shard(tmp_path, embedded_folder, prompts_file):
    """Qwen3 runs behind the adapter: split by mlx-lm's `shard` (4 query / 2 key-value heads,
    attention and MLP both split), it decodes what one process does."""
    folder = write_arch_folder(tmp_path / "qwen3", arch_config("qwen3"), embedded_folder)
    command = [REDRAFTER, "generate", "-M", str(folder), "--mode", "ar", "--prompts-file", str(prompts_file)]
    alone = subprocess.run([*command, "-m", "8", "--json"], capture_output=True, text=True, timeout=300)
    together = launch(*command, "-m", "8", "--json")
    assert alone.returncode == 0, alone.stderr
    assert answers(together) == answers(alone) and len(answers(alone)) == 3, together.stderr


@pytest.mark.parametrize("split, all_reduces", [("tensor", 4), ("pipeline", 1)])
def test_sampling_across_two_ranks_has_the_llm_distribution(tmp_path, split, all_reduces):
    """The tiny model split in two (attention by heads and the MLP by units, or a layer per
    rank) samples with ReDrafter as one process's model would: chi-square against its exact
    distribution, computed here unsplit; both ranks drew the same answers."""
    n = 1200
    result = launch(sys.executable, "-m", "tests.sampling_across_ranks", str(tmp_path), str(n), split, timeout=600)
    assert result.returncode == 0, result.stderr
    drawn = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert drawn[0] == drawn[1]
    assert drawn[0]["all_reduces"] == all_reduces  # tensor: 2 layers x (attention, MLP); pipeline: the last stage's
    counts = Counter({tuple(k): v for k, v in drawn[0]["counts"]})
    assert sum(counts.values()) == n and drawn[0]["accepted"] > n // 4
    assert chi_square_p_value(counts, exact_sequence_probabilities(1.0), n) > 1e-3
    assert chi_square_p_value(counts, exact_sequence_probabilities(2.0), n) < 1e-6


@pytest.mark.parametrize("split", [[], ["--pipeline"]], ids=["tensor", "pipeline"])
def test_the_server_across_two_ranks_answers_through_rank_0(split):
    port = free_port()
    command = [*ring(), REDRAFTER, *split, "serve", "--port", str(port), *TREE]
    server = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV, start_new_session=True
    )
    try:
        wait_until_serving(port, server, 180)
        expected = [
            subprocess.run(
                [REDRAFTER, "generate", "-p", p, "-m", "16", *TREE], capture_output=True, text=True, timeout=300
            ).stdout.strip()
            for p in MORE_PROMPTS[:2]
        ]

        def ask(prompt: str) -> str:
            body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": prompt}], "max_tokens": 16}
            reply = httpx.post(
                f"http://127.0.0.1:{port}/v1/chat/completions", json=body | {"temperature": 0}, timeout=300
            )
            return reply.json()["choices"][0]["message"]["content"]

        assert [ask(p) for p in MORE_PROMPTS[:2]] == expected
        os.killpg(server.pid, signal.SIGINT)  # Ctrl-C in a terminal: every rank and the launcher
        server.wait(timeout=60)  # rank 0 drains and tells rank 1 to stop: nothing is left waiting
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def test_ranks_that_loaded_different_drafters_refuse_in_one_line(tmp_path):
    other = save_drafter(random_drafter(49152, 576, tied=True), tmp_path / "random")
    script = tmp_path / "per_rank.sh"  # rank 0: the shipped drafter; rank 1: another one
    script.write_text(
        f'#!/bin/sh\nif [ "$MLX_RANK" = 1 ]; then set -- -d {other}; fi\n'
        f'exec {REDRAFTER} generate -p "Hi" -m 4 {" ".join(TREE)} "$@"\n'
    )
    script.chmod(0o755)
    result = launch(str(script), timeout=200)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    refused = [line for line in errors if "rank 1 loaded a different drafter than rank 0" in line]
    stopped = [line for line in errors if "stopped: the launcher ended the group" in line]  # if it ended first
    assert refused and len(refused) + len(stopped) == len(errors), result.stderr
    assert "Traceback" not in result.stderr and not answers(result) and "Hi" not in result.stdout


def test_a_rank_that_fails_ends_the_others_without_a_hang(tmp_path):
    script = tmp_path / "per_rank.sh"  # rank 1 asks for a model that is not there
    script.write_text(
        f'#!/bin/sh\nif [ "$MLX_RANK" = 1 ]; then set -- -M {tmp_path / "missing"}; fi\n'
        f'exec {REDRAFTER} generate -p "Hi" -m 4 "$@"\n'
    )
    script.chmod(0o755)
    started = time.time()
    result = launch(str(script), timeout=200)
    assert time.time() - started < 120
    assert "missing" in result.stderr and "Traceback" not in result.stderr, result.stderr
    # rank 0 was ended by the launcher, which says so; rank 0's own line ("rank 0 stopped: the
    # launcher ended the group") is often lost (docs/distributed.md), so it is not required here
    assert "Node with rank 0 exited with code" in result.stderr


def test_a_hostfile_that_does_not_parse_is_one_line(tmp_path):
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text("{not json")
    env = dict(ENV, MLX_RANK="0", MLX_WORLD_SIZE="2", MLX_HOSTFILE=str(hostfile))
    result = subprocess.run([REDRAFTER, "info"], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot join the distributed group" in lines[0] and str(hostfile) in lines[0]

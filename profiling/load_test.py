"""Load test of OpenAI-compatible servers: `redrafter serve` against `mlx_lm.server`, or
against its own plain batching (`--against plain`: `redrafter serve --mode ar`), or both.

    python -m redrafter_mlx.profiling.load_test --requests 32 --concurrency 1,4,8 -m 128
    python -m redrafter_mlx.profiling.load_test --requests 16 --concurrency 1,4,8,16 --against mlx-lm,plain
    python -m redrafter_mlx.profiling.load_test --requests 16 --concurrency 8,16 --against plain --rounds 4

Starts each server on a free localhost port (same model, same prompts: the held-out eval
set's first N; greedy), sends N streamed chat requests at each concurrency, and reports
requests/s, tokens/s, p50/p95 latency and time to first token. It stops by itself: every
request has max_tokens, and the servers are shut down after the runs. All run at once, idle
while another is measured, and each concurrency runs on one after the other, so that a
shared machine's drift (a 2-core VM's speed moved by a third within the hour) falls on all.
With `--rounds R`, each concurrency runs R times on every server, the order reversed from one
round to the next (A B, B A, ...), and the comparison gives each round's tokens/s ratio and
their median: on such a machine one burst per side can differ by 20% with nothing changed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from redrafter_mlx.cli.bench import eval_texts
from redrafter_mlx.formats.loading import load as load_model
from redrafter_mlx.profiling.bench import mlx_lm_folder, scratch_dir
from redrafter_mlx.runtime.fastblas import find_openblas

RETRIES = 5  # per request, for connections dropped before any answer


def installed_redrafter() -> str:
    """The `redrafter` command beside this Python (its virtual environment's, when not on PATH)."""
    return shutil.which("redrafter") or str(Path(sys.executable).parent / "redrafter")


def fast_blas_env() -> dict[str, str]:
    """This environment with Debian's OpenBLAS preloaded (where installed), for a subprocess."""
    return {**os.environ, "LD_PRELOAD": find_openblas() or ""}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def started(command: list[str], port: int, log: Path):
    """A server subprocess, once it answers /v1/models: its /v1 URL and process; stopped
    (SIGTERM) afterwards."""
    with log.open("w") as out:  # mlx-lm on the same BLAS as ours
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=fast_blas_env())
    try:
        deadline = time.time() + 300
        while True:
            if server.poll() is not None or time.time() > deadline:
                raise SystemExit(f"{command[0]} did not start: see {log}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1", server
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


async def one_request(client: httpx.AsyncClient, url: str, model: str, prompt: str, max_tokens: int) -> dict:
    """One streamed greedy chat answer, timed from the first attempt. A connection the server
    drops before answering (mlx_lm.server's listen backlog overflows when 16 connect at once)
    is retried, as a client would, and counted."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    tic = time.perf_counter()
    for retries in range(RETRIES + 1):
        first, text, usage = None, "", None
        try:
            async with client.stream("POST", f"{url}/chat/completions", json=body) as reply:
                reply.raise_for_status()
                async for line in reply.aiter_lines():
                    if not line.startswith("data:") or line.strip() == "data: [DONE]":
                        continue
                    chunk = json.loads(line[5:])
                    for choice in chunk.get("choices", []):
                        piece = (choice.get("delta") or {}).get("content") or ""
                        if piece and first is None:
                            first = time.perf_counter() - tic
                        text += piece
                    usage = chunk.get("usage") or usage
            break
        except (httpx.ReadError, httpx.ConnectError, httpx.RemoteProtocolError):
            if text or retries == RETRIES:
                raise
            await asyncio.sleep(0.05 * (retries + 1))
    return {
        "latency": time.perf_counter() - tic,
        "ttft": first or 0.0,
        "text": text,
        "tokens": (usage or {}).get("completion_tokens", 0),
        "retries": retries,
    }


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of `values`, the sample of rank floor(q x n) (0-based): the upper of
    two middle samples for the median, the largest of 16 for p95."""
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


async def load(url: str, model: str, prompts: list[str], concurrency: int, max_tokens: int) -> dict:
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=600) as client:

        async def limited(prompt: str) -> dict:
            async with gate:
                return await one_request(client, url, model, prompt, max_tokens)

        tic = time.perf_counter()
        results = await asyncio.gather(*(limited(p) for p in prompts))
        wall = time.perf_counter() - tic
    latencies = [r["latency"] for r in results]
    ttfts = [r["ttft"] for r in results]

    return {
        "concurrency": concurrency,
        "requests": len(prompts),
        "wall_s": wall,
        "requests_per_s": len(prompts) / wall,
        "tokens_per_s": sum(r["tokens"] for r in results) / wall,
        "latency_p50": quantile(latencies, 0.5),
        "latency_p95": quantile(latencies, 0.95),
        "ttft_p50": quantile(ttfts, 0.5),
        "ttft_p95": quantile(ttfts, 0.95),
        "retries": sum(r["retries"] for r in results),
        "texts": [r["text"] for r in results],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--concurrency", default="1,4,8")
    parser.add_argument("-m", "--max-tokens", type=int, default=128)
    parser.add_argument("--serve-args", default="", help="extra `redrafter serve` flags, e.g. '-w 3 -l 4'")
    parser.add_argument("--against", default="mlx-lm", help="mlx-lm, plain (redrafter serve --mode ar) or both")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each concurrency per server, order alternated")
    parser.add_argument("--out", default="load_test.json")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    against = args.against.split(",")
    if not against or set(against) - {"mlx-lm", "plain"}:
        parser.error("--against: mlx-lm, plain or mlx-lm,plain")
    levels = [int(c) for c in args.concurrency.split(",")]
    prompts = eval_texts(args.requests)
    scratch = scratch_dir()
    redrafter = installed_redrafter()

    def ours(*flags: str):
        return lambda port: [
            redrafter,
            "serve",
            "--model",
            args.model,
            "--port",
            str(port),
            "--max-batch",
            str(max(levels)),
            "--model-id",
            "m",
            *args.serve_args.split(),
            *flags,
        ]

    servers = {"redrafter serve": ours()}
    if "plain" in against:
        servers["redrafter serve --mode ar"] = ours("--mode", "ar")
    if "mlx-lm" in against:
        # the same weights, as mlx-lm loads them
        folder = str(mlx_lm_folder(load_model(args.model), Path(scratch.name)))
        servers["mlx_lm.server"] = lambda port: [
            sys.executable,
            "-m",
            "mlx_lm.server",
            "--model",
            folder,
            "--port",
            str(port),
            "--decode-concurrency",
            str(max(levels)),
        ]
    model_ids = {name: "default_model" if name == "mlx_lm.server" else "m" for name in servers}
    rows = []
    with ExitStack() as running:  # all servers up at once, idle while another is measured
        urls = {}
        for name, command in servers.items():
            port = free_port()
            urls[name], _ = running.enter_context(
                started(command(port), port, Path(f"{args.out}.{name.replace(' ', '_')}.log"))
            )
            warm = max(levels)  # traces, first allocations, the batch policy's first timings
            asyncio.run(load(urls[name], model_ids[name], (prompts * warm)[:warm], warm, 16))
        for level in levels:  # each level on every server back to back, so drift falls on all
            for round_ in range(args.rounds):
                for name in list(urls) if round_ % 2 == 0 else reversed(urls):
                    measured = asyncio.run(load(urls[name], model_ids[name], prompts, level, args.max_tokens))
                    rows.append({"server": name, "round": round_, **measured})
                    print(json.dumps({k: v for k, v in rows[-1].items() if k != "texts"}), flush=True)
    rows.sort(key=lambda r: (list(servers).index(r["server"]), r["concurrency"], r["round"]))
    print(
        "\n| server | concurrency | round | requests/s | tokens/s | latency p50 / p95 (s) | first token p50 / p95 (s) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['server']} | {r['concurrency']} | {r['round'] + 1} | {r['requests_per_s']:.2f} | "
            f"{r['tokens_per_s']:.1f} | {r['latency_p50']:.1f} / {r['latency_p95']:.1f} | "
            f"{r['ttft_p50']:.2f} / {r['ttft_p95']:.2f} |"
        )
    for line in comparison(rows, list(servers)):
        print(line)
    Path(args.out).write_text(json.dumps(rows, indent=1))


def comparison(rows: list[dict], servers: list[str]) -> list[str]:
    """Per peer and concurrency: `redrafter serve`'s tokens/s over the peer's, round by round
    (a round measured both back to back) and their median, and how many answers were identical."""
    by = {(r["server"], r["concurrency"], r["round"]): r for r in rows}
    lines = []
    for peer in servers[1:]:
        for level in sorted({r["concurrency"] for r in rows}):
            rounds = sorted(k for s, c, k in by if s == peer and c == level)
            pairs = [(by["redrafter serve", level, k], by[peer, level, k]) for k in rounds]
            ratios = [ours["tokens_per_s"] / theirs["tokens_per_s"] for ours, theirs in pairs]
            same = sum(a == b for ours, theirs in pairs for a, b in zip(ours["texts"], theirs["texts"]))
            each = ", ".join(f"{x:.2f}x" for x in ratios)
            lines.append(
                f"concurrency {level}: {each} (median {statistics.median(ratios):.2f}x) {peer}'s tokens/s; "
                f"{same}/{sum(len(o['texts']) for o, _ in pairs)} answers identical"
            )
    return lines


if __name__ == "__main__":
    main()

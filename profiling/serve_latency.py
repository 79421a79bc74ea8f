"""Two latencies of `redrafter serve` that averages hide, measured over HTTP:

    python -m redrafter_mlx.profiling.serve_latency --history 1000 --join 2000

- **Second turn**: a chat whose first turn holds a `--history`-token text is continued with
  a short question; the second turn's time to first token with the prompt cache (the first
  turn's keys/values reused) against a server started with `--prompt-cache-bytes 0`.
- **Join**: four streamed answers run; then a `--join`-token prompt arrives. Their
  inter-token gaps (between stream chunks, each one verify step) while it is prefilled,
  against their gaps before it arrived; `--prefill-budget` bounds what a step spends on it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import httpx

from redrafter_mlx.cli.bench import eval_texts
from redrafter_mlx.profiling.load_test import free_port, installed_redrafter, quantile, started


def long_text(tokens: int) -> str:
    """Held-out prompts joined until about `tokens` tokens (4 characters a token, roughly)."""
    texts = eval_texts(64)
    text = ""
    while len(text) < 4 * tokens:
        text += " ".join(texts) + " "
    return text[: 4 * tokens]


async def stream_chat(client: httpx.AsyncClient, url: str, messages: list[dict], max_tokens: int) -> dict:
    """Times of every content chunk of one streamed greedy answer (from sending it)."""
    body = {"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    tic, times, text = time.perf_counter(), [], ""
    async with client.stream("POST", f"{url}/chat/completions", json=body) as reply:
        reply.raise_for_status()
        async for line in reply.aiter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:]).get("choices", []):
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        times.append(time.perf_counter())
                        text += piece
    return {"sent": tic, "times": times, "text": text}


async def second_turn(url: str, history: str) -> tuple[float, str]:
    """(time to first token of the second turn, its answer)."""
    async with httpx.AsyncClient(timeout=600) as client:
        first = [{"role": "user", "content": f"{history}\n\nSummarise the text above in one sentence."}]
        one = await stream_chat(client, url, first, 32)
        turn = [*first, {"role": "assistant", "content": one["text"]}, {"role": "user", "content": "Shorter, please."}]
        two = await stream_chat(client, url, turn, 32)
    return two["times"][0] - two["sent"], two["text"]


async def join_gaps(url: str, joiner: str, running: int = 4) -> dict:
    """Chunk gaps of `running` answers before and while a long prompt joins."""
    async with httpx.AsyncClient(timeout=600) as client:
        prompts = eval_texts(running)
        tasks = [asyncio.create_task(stream_chat(client, url, [{"role": "user", "content": p}], 200)) for p in prompts]
        await asyncio.sleep(8)  # the rows run steadily
        joined = await stream_chat(client, url, [{"role": "user", "content": joiner}], 8)
        rows = await asyncio.gather(*tasks)
    arrived, first = joined["sent"], joined["times"][0]

    def gaps(lo: float, hi: float) -> list[float]:
        return [b - a for r in rows for a, b in zip(r["times"], r["times"][1:]) if lo <= a and b <= hi]

    before = gaps(arrived - 6, arrived)
    during = gaps(arrived, first)
    return {
        "join_ttft_s": first - arrived,
        "gap_before_p50_s": statistics.median(before),
        "gap_before_p95_s": quantile(before, 0.95),
        "gap_during_p50_s": statistics.median(during) if during else None,
        "gap_during_p95_s": quantile(during, 0.95) if during else None,
        "gap_during_max_s": max(during) if during else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--history", type=int, default=1000, help="tokens of the first turn")
    parser.add_argument("--join", type=int, default=2000, help="tokens of the joining prompt")
    parser.add_argument("--serve-args", default="")
    parser.add_argument("--out", default="serve_latency.json")
    args = parser.parse_args()
    redrafter = installed_redrafter()

    def command(port: int, *extra: str) -> list[str]:
        return [redrafter, "serve", "--model", args.model, "--port", str(port), "--model-id", "m", *extra]

    results = {}
    for name, extra in (("with prompt cache", ()), ("without", ("--prompt-cache-bytes", "0"))):
        port = free_port()
        with started(command(port, *extra, *args.serve_args.split()), port, Path(f"{args.out}.{port}.log")) as (url, _):
            asyncio.run(second_turn(url, long_text(200)))  # warm up
            results[name] = asyncio.run(second_turn(url, long_text(args.history)))
            if name == "with prompt cache":
                results["join"] = asyncio.run(join_gaps(url, long_text(args.join)))
    hit, miss = results["with prompt cache"], results["without"]
    report = {
        "second_turn_ttft_cached_s": hit[0],
        "second_turn_ttft_uncached_s": miss[0],
        "speedup": miss[0] / hit[0],
        "same_answer": hit[1] == miss[1],
        **results["join"],
    }
    print(json.dumps(report, indent=1))
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

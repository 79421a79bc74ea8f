"""Soak test of `redrafter serve`: minutes of mixed traffic, then what went wrong and what grew.

    python -m redrafter_mlx.profiling.soak --minutes 20 --concurrency 8

Starts the server on a free localhost port (or soaks `--url`) and keeps `--concurrency`
clients busy with a seeded mix: short and long answers, chat and token-id completions,
greedy and seeded samples, streams read whole and streams dropped midway, clients that give
up on a whole answer, repeated prompts and second turns (prompt-cache hits), and bad bodies
(which must get a 4xx). It reports every 5xx (none may happen), 4xx to valid bodies, the
server's resident memory every minute, latency p50/p95 of the answers read whole by kind,
and `/health` once the traffic stops, and exits non-zero if anything failed.

Under traffic a reading of memory lands anywhere in the band the running rows' keys and values
span, so what grew is judged at rest: after the first minute the clients pause until the server
is idle, and its memory then is compared with its memory idle at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import time
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from redrafter_mlx.cli.bench import eval_texts
from redrafter_mlx.profiling.load_test import free_port, installed_redrafter, quantile, started

KINDS = {  # traffic kind -> its share of requests
    "short": 4,
    "long": 1,
    "stream": 2,
    "dropped stream": 1,
    "gives up": 1,
    "repeat": 2,
    "second turn": 1,
    "token ids": 1,
    "bad body": 1,
}
RSS_EVERY = 60.0  # seconds between memory readings
SETTLE = 60.0  # seconds of traffic before the first reading at rest


@dataclass
class Memory:
    """The server's resident bytes: (seconds, bytes) every minute, and at rest (idle)."""

    by_minute: list[tuple[float, int]] = field(default_factory=list)
    idle: list[tuple[float, int]] = field(default_factory=list)


@dataclass
class Tally:
    """What the clients saw."""

    statuses: Counter = field(default_factory=Counter)  # (kind, status)
    latencies: dict[str, list[float]] = field(default_factory=dict)  # kind -> seconds, answers read whole
    failures: list[str] = field(default_factory=list)  # what went wrong, first ones in full
    answered: list[tuple[str, str]] = field(default_factory=list)  # (prompt, answer) of chats read whole


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (`ps`, on Linux and macOS alike)."""
    return 1024 * int(subprocess.run(["ps", "-o", "rss=", "-p", str(pid)], capture_output=True, text=True).stdout)


def body(kind: str, rng: random.Random, prompts: list[str], tally: Tally, model: str) -> dict:
    """A request of `kind` for `model`."""
    sampled = rng.random() < 0.5
    base = {"model": model, "max_tokens": rng.randint(1, 8)}
    base |= {"temperature": 1.0, "seed": rng.randint(0, 10**6)} if sampled else {"temperature": 0}
    prompt = rng.choice(prompts)
    messages = [{"role": "user", "content": prompt}]
    if kind == "long":
        base["max_tokens"] = rng.randint(64, 256)
    elif kind in ("stream", "dropped stream"):
        base |= {"stream": True, "max_tokens": rng.randint(8, 128)}
    elif kind == "gives up":
        base["max_tokens"] = 256
    elif kind == "repeat":
        messages = [{"role": "user", "content": prompts[rng.randrange(4)]}]  # a few prompts, over and over
    elif kind == "second turn" and tally.answered:
        first, answer = rng.choice(tally.answered)
        messages = [
            {"role": "user", "content": first},
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "Say that again, shorter."},
        ]
        base["max_tokens"] = rng.randint(8, 64)
    elif kind == "token ids":
        return base | {"prompt": [rng.randrange(1, 40000) for _ in range(rng.randint(1, 60))]}
    elif kind == "bad body":
        return base | {"messages": messages, "max_tokens": -rng.randint(1, 9)}
    return base | {"messages": messages}


async def one(
    client: httpx.AsyncClient, url: str, model: str, kind: str, rng: random.Random, prompts: list[str], tally: Tally
):
    request = body(kind, rng, prompts, tally, model)
    path = "/completions" if "prompt" in request else "/chat/completions"
    tic = time.perf_counter()
    status = None
    try:
        if request.get("stream"):
            leave_after = rng.randint(1, 6) if kind == "dropped stream" else None
            async with client.stream("POST", url + path, json=request) as reply:
                status = reply.status_code
                if status != 200:
                    tally.failures.append(f"{kind}: HTTP {status}: {(await reply.aread())[:300]!r}")
                    tally.statuses[(kind, status)] += 1
                    return
                events = 0
                async for line in reply.aiter_lines():
                    if '"error"' in line:
                        tally.failures.append(f"{kind}: error in the stream: {line[:300]}")
                        status = 599
                        break
                    events += line.startswith("data: {")
                    if leave_after is not None and events >= leave_after:
                        break  # the client leaves: the connection closes with the block
                else:
                    tally.latencies.setdefault(kind, []).append(time.perf_counter() - tic)
        else:
            timeout = rng.uniform(0.05, 1.5) if kind == "gives up" else 600
            reply = await client.post(url + path, json=request, timeout=timeout)
            status = reply.status_code
            if status == 200:
                tally.latencies.setdefault(kind, []).append(time.perf_counter() - tic)
                if "messages" in request and len(tally.answered) < 64:
                    text = reply.json()["choices"][0]["message"]["content"]
                    tally.answered.append((request["messages"][0]["content"], text))
            elif status >= 500 or kind != "bad body":
                tally.failures.append(f"{kind}: HTTP {status}: {reply.text[:300]}")
    except httpx.TimeoutException:
        status = "gave up" if kind == "gives up" else "timeout"
    except httpx.TransportError as error:
        status = "transport error"
        tally.failures.append(f"{kind}: {error!r}")
    tally.statuses[(kind, status)] += 1


async def traffic(
    url: str, minutes: float, concurrency: int, seed: int, prompts: list[str], tally: Tally, going: asyncio.Event
) -> None:
    """`concurrency` clients send the mix until the deadline, each pausing while `going` is clear."""
    deadline = time.monotonic() + 60 * minutes
    kinds, weights = list(KINDS), list(KINDS.values())
    model = httpx.get(url + "/models").json()["data"][0]["id"]  # the served name

    async def client_loop(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        async with httpx.AsyncClient(timeout=600) as client:
            while time.monotonic() < deadline:
                await going.wait()
                await one(client, url, model, rng.choices(kinds, weights)[0], rng, prompts, tally)

    await asyncio.gather(*(client_loop(i) for i in range(concurrency)))


async def watch_memory(pid: int, stop: asyncio.Event, readings: list[tuple[float, int]]) -> None:
    start = time.monotonic()
    while True:
        readings.append((round(time.monotonic() - start), rss_bytes(pid)))
        try:
            await asyncio.wait_for(stop.wait(), RSS_EVERY)
            readings.append((round(time.monotonic() - start), rss_bytes(pid)))
            return
        except asyncio.TimeoutError:
            continue


async def at_rest(url: str, pid: int, going: asyncio.Event, after: float, readings: list[tuple[float, int]]) -> None:
    """After `after` seconds, pause the clients until the server is idle, read its memory, resume."""
    await asyncio.sleep(after)
    going.clear()
    await asyncio.to_thread(idle_health, url, 600)
    readings.append((after, rss_bytes(pid)))
    going.set()


async def soak(url: str, pid: int | None, args: argparse.Namespace, prompts: list[str], tally: Tally) -> Memory:
    """The traffic, and the server's memory when its process is known (`pid`)."""
    memory, stop, going = Memory(), asyncio.Event(), asyncio.Event()
    going.set()
    watchers = []
    if pid is not None:
        watchers = [watch_memory(pid, stop, memory.by_minute), at_rest(url, pid, going, SETTLE, memory.idle)]
    tasks = [asyncio.create_task(w) for w in watchers]
    await traffic(url, args.minutes, args.concurrency, args.seed, prompts, tally, going)
    stop.set()
    for task in tasks:
        await task
    return memory


def idle_health(url: str, seconds: float = 30) -> dict:
    """`/health` once nothing runs or waits (or after `seconds`)."""
    deadline = time.time() + seconds
    while True:
        health = httpx.get(url.removesuffix("/v1") + "/health").json()
        if (health["running"], health["queued"]) == (0, 0) or time.time() > deadline:
            return health
        time.sleep(0.2)


def report(tally: Tally, memory: Memory, health: dict, log: Path | None, args: argparse.Namespace) -> dict:
    server_errors = sum(n for (_, status), n in tally.statuses.items() if isinstance(status, int) and status >= 500)
    readings, idle = memory.by_minute, memory.idle
    after_first = [rss for t, rss in readings if t >= 60] or [rss for _, rss in readings]
    growth = (after_first[-1] - after_first[0]) / after_first[0] if after_first else None
    rest_growth = (idle[-1][1] - idle[0][1]) / idle[0][1] if len(idle) > 1 else None
    logged = log.read_text().count("redrafter.errors") if log is not None and log.exists() else None
    return {
        "minutes": args.minutes,
        "concurrency": args.concurrency,
        "serve_args": args.serve_args,
        "requests": sum(tally.statuses.values()),
        "by_kind": {
            kind: dict(sorted((str(s), n) for (k, s), n in tally.statuses.items() if k == kind)) for kind in KINDS
        },
        "server_errors_5xx": server_errors,
        "failures": tally.failures[:20],
        "failure_count": len(tally.failures),
        "errors_logged": logged,
        "rss_mib_by_minute": [(t, round(rss / 2**20, 1)) for t, rss in readings],
        "rss_growth_after_first_minute": None if growth is None else round(growth, 4),
        "rss_mib_at_rest": [(t, round(rss / 2**20, 1)) for t, rss in idle],
        "rss_growth_at_rest": None if rest_growth is None else round(rest_growth, 4),
        "latency_s": {
            kind: {"n": len(s), "p50": round(quantile(s, 0.5), 3), "p95": round(quantile(s, 0.95), 3)}
            for kind, s in tally.latencies.items()
        },
        "health_at_end": health,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--serve-args", default="", help="extra `redrafter serve` flags")
    parser.add_argument("--url", help="soak a server already running here (its /v1 URL) instead of starting one")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="soak.json")
    args = parser.parse_args()
    prompts = eval_texts(48)
    tally = Tally()
    log = None if args.url else Path(f"{args.out}.server.log")
    if args.url:
        server = nullcontext((args.url, None))
    else:
        port = free_port()
        redrafter = installed_redrafter()
        command = [redrafter, "serve", "--model", args.model, "--port", str(port)]
        server = started([*command, "--max-batch", str(args.concurrency), *args.serve_args.split()], port, log)
    with server as (url, process):
        pid = process.pid if process is not None else None
        memory = asyncio.run(soak(url, pid, args, prompts, tally))
        health = idle_health(url)
        if pid is not None:
            memory.idle.append((60 * args.minutes, rss_bytes(pid)))
        result = report(tally, memory, health, log, args)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    healthy = (health["running"], health["queued"]) == (0, 0)
    sys.exit(0 if result["server_errors_5xx"] == 0 and not tally.failures and healthy else 1)


if __name__ == "__main__":
    main()

"""Distillation spread over several processes (`redrafter train --distill-workers N`).

Why: MLX's CPU element-wise kernels run on one thread, so one distillation process keeps
about one core busy. N processes, each answering every N-th prompt with a single-threaded
BLAS, keep N cores busy (two workers on a 2-core x86 CPU: 57 tok/s against 25 for one
process). On a GPU, one process is the right choice.

Each worker runs `distill.distill` into its own part file beside the output, so no two
processes append to one file. The parent shows one progress bar read from those files, and
it merges them into the output when the workers end, also after Ctrl-C or a failure. So the
output stays one resumable JSONL file, as with a single process. Hidden states go to one
shared `HiddenStore` (safe with several writers).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..runtime.progress import start_progress
from .distill import Answering, DistillStats, distill
from .distill_file import check_extensible, prompt_id, read_distill_file, repair_tail

POLL_SECONDS = 1.0


class WorkerFailed(RuntimeError):
    """A worker process exited with an error (the message is its last stderr line)."""


def part_files(out: Path) -> list[Path]:
    """The workers' part files of output `out` (left behind only by a killed parent)."""
    return sorted(out.parent.glob(f"{out.name}.part*"))


def merge_parts(out: Path) -> None:
    """Append the complete lines of every part file to `out`, then delete the part file."""
    repair_tail(out)
    for part in part_files(out):
        repair_tail(part)
        with out.open("ab") as f:
            f.write(part.read_bytes())
        part.unlink()


def distill_in_workers(
    model: str,
    dtype: str | None,
    prompts: list[dict[str, Any]],
    out_path: str | Path,
    answering: Answering = Answering(),
    *,
    workers: int,
    hidden_dir: str | Path | None = None,
    progress: Any = None,
) -> DistillStats:
    """Like `distill.distill`, with the LLM loaded by each of `workers` processes.

    model/dtype: what `loading.load` takes (a worker cannot share the parent's arrays).
    Worker k samples with seed `answering.seed + k`.
    """
    if workers < 1:
        raise InputError(f"workers must be >= 1, got {workers}")
    out = Path(out_path)
    check_extensible(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    merge_parts(out)  # a previous run's leftovers count as done
    done = {r.id for r in read_distill_file(out)}
    # Ids are fixed before sharding: a default id depends on the prompt's position.
    keyed = [{**p, "id": prompt_id(p, i)} for i, p in enumerate(prompts)]
    todo = [p for p in keyed if p["id"] not in done]
    stats = DistillStats(prompts_skipped=len(keyed) - len(todo))
    shards = [todo[k::workers] for k in range(workers)]
    shards = [s for s in shards if s]
    if not shards:
        return stats

    bar, task = start_progress(
        progress,
        "distilling",
        len(keyed),
        completed=stats.prompts_skipped,
        extra="{task.fields[tps]:.0f} tok/s",
        tps=0.0,
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    procs: list[tuple[subprocess.Popen, Any]] = []
    tic = time.perf_counter()
    try:
        for k, shard in enumerate(shards):
            job = {
                "model": model,
                "dtype": dtype,
                "prompts": shard,
                "out": f"{out}.part{k}",
                "hidden_dir": None if hidden_dir is None else str(hidden_dir),
                "answering": asdict(replace(answering, seed=answering.seed + k)),
            }
            log = tempfile.TemporaryFile()
            proc = subprocess.Popen(
                [sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log, env=env
            )
            procs.append((proc, log))
            try:
                proc.stdin.write(json.dumps(job).encode())
                proc.stdin.close()
            except BrokenPipeError:
                pass  # it died before reading its job: reported below with its own error
        tally = _PartTally(out)
        while True:
            running = any(proc.poll() is None for proc, _ in procs)
            tally.update(stats, time.perf_counter() - tic)
            if bar is not None:
                bar.update(task, completed=stats.prompts_skipped + stats.prompts_done, tps=stats.tokens_per_second)
            if not running:
                break
            time.sleep(POLL_SECONDS)
        for k, (proc, log) in enumerate(procs):
            if proc.returncode != 0:
                raise WorkerFailed(f"distillation worker {k} failed: {_last_line(log)}")
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()
            log.close()
        if bar is not None:
            bar.stop()
        merge_parts(out)
    return stats


class _PartTally:
    """Answers and tokens written to the part files so far. Each poll parses only the
    complete lines added since the last one: re-reading whole part files every second
    costs the parent more CPU the longer the run (several MB of JSON per poll by the end)."""

    def __init__(self, out: Path):
        self.out = out
        self.offsets: dict[Path, int] = {}

    def update(self, stats: DistillStats, seconds: float) -> None:
        for part in part_files(self.out):
            start = self.offsets.get(part, 0)
            with part.open("rb") as f:
                f.seek(start)
                new = f.read()
            complete = new[: new.rfind(b"\n") + 1]  # a line being written is read next time
            for line in complete.splitlines():
                if line.strip():
                    stats.prompts_done += 1
                    stats.tokens += len(json.loads(line)["response_ids"])
            self.offsets[part] = start + len(complete)
        stats.seconds = seconds


def _last_line(log: Any) -> str:
    log.seek(0)
    lines = [line for line in log.read().decode(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"


def _worker_main() -> None:
    """One worker: read the job (JSON) from stdin and distil its prompts."""
    from .. import runtime
    from ..formats.loading import load

    job = json.load(sys.stdin)
    loaded = load(job["model"], runtime.parse_dtype(job["dtype"]))
    answering = Answering(**job["answering"])
    distill(loaded.model, loaded.tokenizer, job["prompts"], job["out"], answering, hidden_dir=job["hidden_dir"])


if __name__ == "__main__":
    _worker_main()

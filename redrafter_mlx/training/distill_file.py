"""The distillation file: one JSON line per prompt, appended as answers finish (`distill.py`).

    {"id": ..., "prompt_ids": [...], "response_ids": [...], "temp": 0.0, "finish": "stop"}

Reading tolerates a torn last line (a killed run) and keeps the later of two records with one
id; a gzip-compressed file (`.jsonl.gz`) is read-only.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError


@dataclass
class DistillRecord:
    id: str
    prompt_ids: list[int]
    response_ids: list[int]
    temp: float
    finish: str

    def to_json(self) -> str:
        return json.dumps(
            {
                "id": self.id,
                "prompt_ids": self.prompt_ids,
                "response_ids": self.response_ids,
                "temp": self.temp,
                "finish": self.finish,
            },
            separators=(",", ":"),
        )


def prompt_id(record: dict[str, Any], index: int) -> str:
    return str(record.get("id", f"prompt-{index}"))


def first_user_message(record: dict[str, Any]) -> str:
    """Multi-turn records are distilled as their first turn only: later turns refer to an
    earlier assistant answer, which would have to be this LLM's own answer first."""
    turns = record.get("turns")
    return turns[0] if turns else record["prompt"]


def read_distill_file(path: str | Path) -> list[DistillRecord]:
    """All complete records of a distillation file (a torn last line is ignored). If an id
    occurs twice (two writers, or a re-run), the later record wins."""
    records: dict[str, DistillRecord] = {}
    path = Path(path)
    if not path.exists():
        return []
    with (gzip.open if is_compressed(path) else open)(path, "rt", encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break  # torn write from a killed run
            line = line.strip()
            if line:
                d = json.loads(line)
                records.pop(d["id"], None)
                records[d["id"]] = DistillRecord(
                    d["id"], d["prompt_ids"], d["response_ids"], d.get("temp", 0.0), d.get("finish", "length")
                )
    return list(records.values())


def is_compressed(path: str | Path) -> bool:
    return Path(path).suffix == ".gz"


def check_extensible(path: str | Path) -> None:
    """Raise ValueError before anything appends to a compressed file (it would corrupt it)."""
    if is_compressed(path):
        raise InputError(f"{path}: a compressed distillation file is read-only; train on it without distilling")


def repair_tail(path: Path) -> None:
    """Cut a partially written last line so appended records start on a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    cut = data.rfind(b"\n") + 1
    with path.open("r+b") as f:
        f.truncate(cut)

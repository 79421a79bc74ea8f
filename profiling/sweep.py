"""Beam width x beam length sweeps: a CSV row per cell and annotated heatmaps.

AR is measured once on the prompts; every (W, L) cell runs ReDrafter on the same prompts.
Rows are appended as cells finish, so an interrupted sweep resumes where it stopped; the
folder records what its cells were measured with (`sweep.json`), so a resumed sweep never
mixes cells of other settings (another -s, -N, model or prompts).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display needed
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from redrafter_mlx.errors import InputError  # noqa: E402

FIELDS = ["beam_width", "beam_length", "tokens_per_s", "speedup", "tokens_per_step", "compression"]
METRICS = {
    "speedup": "speedup vs AR (x)",
    "tokens_per_s": "tokens / s",
    "tokens_per_step": "tokens / step",
}


SETTINGS_FILE = "sweep.json"


def claim_folder(out: Path, settings: dict) -> None:
    """Record in `out` the settings its cells are measured with; raise InputError (before
    anything is measured) when `out` already holds cells measured with other settings."""
    path = out / SETTINGS_FILE
    if path.exists() and (out / "sweep.csv").exists():
        kept = json.loads(path.read_text())
        changed = [f"{k} {kept.get(k)!r} -> {settings.get(k)!r}" for k in settings if kept.get(k) != settings[k]]
        if changed:
            raise InputError(f"{out} holds a sweep measured otherwise ({', '.join(changed)}): pass another --out")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=1) + "\n")


def read_rows(csv_path: Path) -> list[dict]:
    if not csv_path.exists():
        return []
    with csv_path.open() as f:
        return [
            {k: float(v) if k not in ("beam_width", "beam_length") else int(v) for k, v in row.items()}
            for row in csv.DictReader(f)
        ]


def append_row(csv_path: Path, row: dict) -> None:
    new = not csv_path.exists()
    with csv_path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            writer.writeheader()
        writer.writerow({k: row[k] for k in FIELDS})


def run_sweep(
    widths: list[int],
    lengths: list[int],
    out: Path,
    measure_cell: Callable[[int, int], dict],
    on_cell: Callable[[int, int], None] = lambda w, length: None,
) -> list[dict]:
    """Measure every missing (W, L) cell with `measure_cell` and append it to sweep.csv."""
    csv_path = out / "sweep.csv"
    done = {(r["beam_width"], r["beam_length"]) for r in read_rows(csv_path)}
    for width in widths:
        for length in lengths:
            if (width, length) not in done:
                append_row(csv_path, {"beam_width": width, "beam_length": length, **measure_cell(width, length)})
            on_cell(width, length)
    wanted = {(w, length) for w in widths for length in lengths}
    return [r for r in read_rows(csv_path) if (r["beam_width"], r["beam_length"]) in wanted]


def grid(rows: list[dict], metric: str) -> tuple[list[int], list[int], np.ndarray]:
    widths = sorted({r["beam_width"] for r in rows})
    lengths = sorted({r["beam_length"] for r in rows})
    values = np.full((len(widths), len(lengths)), np.nan)
    for r in rows:
        values[widths.index(r["beam_width"]), lengths.index(r["beam_length"])] = r[metric]
    return widths, lengths, values


def plot_heatmap(rows: list[dict], metric: str, path: Path, title: str) -> Path:
    """One annotated heatmap; the best cell is outlined."""
    widths, lengths, values = grid(rows, metric)
    fig, ax = plt.subplots(figsize=(1.4 * len(lengths) + 2.5, 1.1 * len(widths) + 1.8), dpi=120)
    image = ax.imshow(values, cmap="viridis", origin="lower", aspect="auto")
    ax.set_xticks(range(len(lengths)), [str(length) for length in lengths])
    ax.set_yticks(range(len(widths)), [str(w) for w in widths])
    ax.set_xlabel("beam length L (incl. guaranteed token)")
    ax.set_ylabel("beam width W")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label=METRICS[metric])
    finite = np.where(np.isnan(values), -np.inf, values)
    best = np.unravel_index(np.argmax(finite), values.shape)
    middle = np.nanmin(values) + (np.nanmax(values) - np.nanmin(values)) / 2
    for (i, j), value in np.ndenumerate(values):
        if not np.isnan(value):
            ax.text(
                j,
                i,
                f"{value:.2f}",
                ha="center",
                va="center",
                fontsize=11,
                color="black" if value > middle else "white",
                fontweight="bold" if (i, j) == best else None,
            )
    ax.add_patch(plt.Rectangle((best[1] - 0.5, best[0] - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=3))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_all(rows: list[dict], out: Path, subtitle: str) -> list[Path]:
    return [
        plot_heatmap(rows, metric, out / f"{metric}.png", f"{label}\n{subtitle}") for metric, label in METRICS.items()
    ]

"""Draw the headline ratios as a PNG: ``python chart.py SUMMARY.json OUT.png``.

Runs in the benchmark's own virtualenv (matplotlib lives there, not in the project's).
"""

from __future__ import annotations

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after matplotlib.use()


def _step_over_floor(summary):
    # A PostgreSQL target: SQLite's floor does not sync, so its ratio measures Python.
    if summary["backend"] != "postgres":
        raise KeyError("postgres only")
    return summary["step"]["p50_over_floor_p50"]["median"]


# (label, how to read it, target, higher is better)
HEADLINES = [
    ("step p50 / INSERT floor p50", _step_over_floor, 2, False),
    ("DBOS step cost / ours", lambda s: 1 / s["step"]["marginal_vs_dbos"]["median"], None, True),
    ("throughput / DBOS", lambda s: s["throughput"]["vs_dbos"]["median"], 2, True),
    ("throughput / Celery chain", lambda s: s["throughput"]["vs_chain"]["median"], 1, True),
    ("1-step latency / chain, defaults", lambda s: s["latency"]["1"]["vs_chain_p50"]["median"], 1.5, False),
]


def main() -> None:
    summaries = json.loads(open(sys.argv[1]).read())["summaries"]
    fig, axes = plt.subplots(1, len(HEADLINES), figsize=(3.2 * len(HEADLINES), 3.6))
    colors = {"postgres": "#336791", "embedded": "#a0a0a0"}
    for ax, (label, read, target, higher) in zip(axes, HEADLINES, strict=True):
        names, values = [], []
        for summary in summaries:
            try:
                values.append(read(summary))
                names.append(summary["backend"])
            except (KeyError, ZeroDivisionError):
                continue
        bars = ax.bar(names, values, color=[colors.get(n, "#888") for n in names])
        ax.bar_label(bars, fmt="%.2f")
        if target is not None:
            ax.axhline(target, color="#c0392b", linestyle="--", linewidth=1)
            ax.text(
                0.98,
                target,
                f"target {'≥' if higher else '≤'} {target} ",
                color="#c0392b",
                ha="right",
                va="bottom",
                fontsize=8,
                transform=ax.get_yaxis_transform(),
            )
        ax.set_title(label + (" (higher is better)" if higher else " (lower is better)"), fontsize=9)
        ax.set_ylim(0, max(values + [target or 0]) * 1.3 if values else 1)
    fig.suptitle("durableflow benchmark: ratios measured in one run (medians of alternating rounds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()

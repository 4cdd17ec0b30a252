"""``chaos-report.json`` and ``chaos-report.md``: every scenario run, by invariant, with its drain time.

Rewritten after each scenario, so that a run cut short still reports what it saw. The folder is
``CHAOS_RESULTS_DIR`` or ``tests/chaos/results/`` (git-ignored).
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

from tests.chaos.driver import LEASE, MARGIN, R, SWEEP
from tests.chaos.invariants import NAMES

SHORT = {
    "no lost execution": "lost",
    "no expired running lease": "stuck",
    "one record per step": "dup records",
    "no body after its record": "body after record",
    "effects at most once": "dup effects",
    "compensations at most once": "dup compensations",
    "store counter exact": "counter",
    "no run failed by a fault": "failed by fault",
}


class Report:
    def __init__(self, tier: str, broker: str, folder: Path | None = None):
        self.folder = folder or Path(os.environ.get("CHAOS_RESULTS_DIR", Path(__file__).parent / "results"))
        self.data = {
            "tier": tier,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "stack": f"PostgreSQL (private cluster) + {broker}, 2 workers x 2 pool processes + beat",
            "lease_seconds": LEASE,
            "sweep_seconds": SWEEP,
            "drain_bound_seconds": R,
            "margin_seconds": MARGIN,
            "scenarios": [],
        }

    def add(self, entry: dict) -> None:
        self.data["scenarios"].append(entry)
        self.write()

    def write(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.data["passed"] = all(entry["passed"] for entry in self.data["scenarios"])
        (self.folder / "chaos-report.json").write_text(json.dumps(self.data, indent=2, default=str) + "\n")
        (self.folder / "chaos-report.md").write_text(self.markdown())

    def markdown(self) -> str:
        d = self.data
        lines = [
            f"Chaos suite, {d['tier']} tier, {d['started_at']}: {d['stack']}; lease {d['lease_seconds']:g} s, "
            f"sweep {d['sweep_seconds']:g} s, drain bound R = {d['drain_bound_seconds']:g} s.",
            "",
            "| scenario | seed | runs | faults | drain (s) | " + " | ".join(SHORT[n] for n in NAMES) + " |",
            "|---|---|---|---|---|" + "---|" * len(NAMES),
        ]
        for entry in d["scenarios"]:
            faults = "; ".join(f"{k}: {n}" for k, n in entry["faults"].items()) or "-"
            drain = "not drained" if entry["drain_seconds"] is None else f"{entry['drain_seconds']:.1f}"
            cells = ["0" if entry["invariants"][n]["ok"] else "**FAIL**" for n in NAMES]
            lines.append(f"| {entry['scenario']} | {entry['seed']} | {entry['runs']} | {faults} | {drain} | "
                         + " | ".join(cells) + " |")  # fmt: skip
        lines += ["", f"All invariants held: {'yes' if d['passed'] else 'NO'}.", ""]
        return "\n".join(lines)

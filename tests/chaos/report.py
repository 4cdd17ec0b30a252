"""``chaos-report.json`` and ``chaos-report.md``: every scenario run, by invariant, with its drain time.

Rewritten after each scenario, so that a run cut short still reports what it saw. The folder is
``CHAOS_RESULTS_DIR`` or ``tests/chaos/results/<backend>/`` (git-ignored). A scenario that does
not apply to the stack is listed with the reason, once.

``python -m tests.chaos.report README.md`` writes the README's summary (between its
``<!-- chaos:start -->`` and ``<!-- chaos:end -->`` lines) from the latest report of each stack
in ``tests/chaos/results/``: one row per scenario, one column per stack.
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import time
from pathlib import Path

from tests.chaos.backends import BACKENDS, Backend
from tests.chaos.driver import LEASE, MARGIN, R, SWEEP
from tests.chaos.invariants import NAMES
from tests.chaos.scenarios import SCENARIOS

RESULTS = Path(__file__).parent / "results"
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
    def __init__(self, tier: str, backend: Backend, folder: Path | None = None):
        self.folder = folder or Path(os.environ.get("CHAOS_RESULTS_DIR", RESULTS / backend.name))
        self._began = time.monotonic()
        self.data = {
            "tier": tier,
            "backend": backend.name,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "stack": f"{backend.stack}, 2 workers x 2 pool processes + beat",
            "lease_seconds": LEASE,
            "sweep_seconds": SWEEP,
            "drain_bound_seconds": R,
            "margin_seconds": MARGIN,
            "scenarios": [],
            "not_applicable": {},
        }

    def add(self, entry: dict) -> None:
        self.data["scenarios"].append(entry)
        self.write()

    def not_applicable(self, scenario: str, reason: str) -> None:
        self.data["not_applicable"][scenario] = reason
        self.write()

    def write(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.data["passed"] = all(entry["passed"] for entry in self.data["scenarios"])
        self.data["executions"] = sum(entry["runs"] for entry in self.data["scenarios"])
        self.data["seconds"] = round(time.monotonic() - self._began)
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
        lines += [f"| {scenario} | - | - | not applicable: {reason} |" + " |" * (len(NAMES) + 1)
                  for scenario, reason in d["not_applicable"].items()]  # fmt: skip
        lines += ["", f"All invariants held: {'yes' if d['passed'] else 'NO'}.", ""]
        return "\n".join(lines)


def _cell(entries: list[dict]) -> str:
    """One stack's runs of one scenario: broken promises and the longest drain, over its seeds."""
    broken = sum(not result["ok"] for entry in entries for result in entry["invariants"].values())
    drains = [entry["drain_seconds"] for entry in entries]
    drain = "not drained" if None in drains else f"≤ {max(drains):.1f} s"
    return f"{'0' if not broken else f'**{broken}**'} broken, {drain}"


def summary(reports: list[dict]) -> str:
    """The README's table: a row per scenario, a column per stack (its latest report)."""
    seen = {name for data in reports for name in [e["scenario"] for e in data["scenarios"]] + [*data["not_applicable"]]}
    order = [name for name in SCENARIOS if name in seen]
    head = [BACKENDS[data["backend"]].stack.split(" (")[0] for data in reports]
    lines = ["| scenario | " + " | ".join(head) + " |", "|---|" + "---|" * len(reports)]
    for name in order:
        cells = []
        for data in reports:
            entries = [entry for entry in data["scenarios"] if entry["scenario"] == name]
            cells.append(_cell(entries) if entries else "not applicable" if name in data["not_applicable"] else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines.append("")
    for data in reports:
        seeds = sorted({entry["seed"] for entry in data["scenarios"]})
        lines.append(
            f"- {BACKENDS[data['backend']].stack}: {data['tier']} tier, {data['started_at'][:10]}, seeds "
            f"{', '.join(map(str, seeds))}, {data['executions']} executions, {data['seconds'] / 60:.0f} min; "
            f"every promise held: {'yes' if data['passed'] else 'NO'}."
        )
    return "\n".join(lines)


def write_readme(readme: Path, folder: Path = RESULTS) -> None:
    paths = [folder / name / "chaos-report.json" for name in BACKENDS]
    reports = [json.loads(path.read_text()) for path in paths if path.exists()]
    if not reports:
        raise SystemExit(f"no chaos-report.json under {folder}/<backend>/: run ./run chaos first")
    text = readme.read_text()
    block = f"<!-- chaos:start -->\n{summary(reports)}\n<!-- chaos:end -->"
    new, count = re.subn(r"<!-- chaos:start -->.*?<!-- chaos:end -->", lambda _: block, text, flags=re.S)
    if count != 1:
        raise SystemExit(f"{readme}: no <!-- chaos:start --> ... <!-- chaos:end --> block")
    readme.write_text(new)


if __name__ == "__main__":
    write_readme(Path(sys.argv[1] if len(sys.argv) > 1 else "README.md"))

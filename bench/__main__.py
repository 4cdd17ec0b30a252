"""``./run bench``: measure durableflow against the database floor and its peers, side by side.

    python -m bench [--smoke] [--backends postgres,embedded] [--rounds N] [--no-peer] [--out DIR]

Each backend runs in a child process (its own databases, broker and workers); the peers run
in the same child, round by round, in rotating order. The summary is printed as a table and
written as JSON, with a PNG chart of the headline ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench import report

ROOT = Path(__file__).resolve().parent.parent
PEER_VENV = ROOT / "bench" / ".venv-peer"

FULL = {
    "rounds": 3,
    "floor_n": 100,
    "steps": [1, 10, 100],
    "step_repeats": 5,
    "latency_steps": [1, 10],
    "latency_n": 30,
    "start_n": 200,
    "start_many": 1000,
    "commit_rate_seconds": 3,
    "commit_rate_concurrency": [4, 8],
    "throughput_workflows": 1000,
    "throughput_steps": 10,
    "replay_lengths": [10, 1000, 10000],
    "replay_repeats": 5,
    "effect_steps": [1, 50],
    "effect_repeats": 5,
    "document_compile_states": 10000,
    "document_steps": [1, 50],
    "document_repeats": 5,
    "timers": 200,
    "timer_range": [1, 3],
    "memory_total": 10000,
    "memory_batch": 500,
    "list_sizes": [1000, 1000000],
    "list_repeats": 30,
    "store_executions": 50,
    "store_increments": 20,
    "when_n": 30,
    "waits_n": 30,
    "map_items": 100,
    "map_repeats": 3,
}
SMOKE = {
    "rounds": 1,
    "floor_n": 10,
    "steps": [1, 10],
    "step_repeats": 2,
    "latency_steps": [1, 10],
    "latency_n": 3,
    "start_n": 5,
    "start_many": 10,
    "commit_rate_seconds": 0.2,
    "commit_rate_concurrency": [],
    "throughput_workflows": 10,
    "throughput_steps": 3,
    "replay_lengths": [5, 20],
    "replay_repeats": 2,
    "effect_steps": [1, 5],
    "effect_repeats": 2,
    "document_compile_states": 200,
    "document_steps": [1, 5],
    "document_repeats": 2,
    "timers": 3,
    "timer_range": [1, 1.5],
    "memory_total": 20,
    "memory_batch": 10,
    "list_sizes": [300, 1000],
    "list_repeats": 3,
    "store_executions": 5,
    "store_increments": 4,
    "when_n": 3,
    "waits_n": 3,
    "map_items": 10,
    "map_repeats": 1,
}
PG = "postgresql://postgres@127.0.0.1:5432"


def peer_python() -> str:
    """The benchmark's own virtualenv, with DBOS Transact and matplotlib (created on first use)."""
    python = PEER_VENV / "bin" / "python"
    requirements = ROOT / "bench" / "requirements-peer.txt"
    stamp = PEER_VENV / ".requirements"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(PEER_VENV)], check=True)
    if not stamp.exists() or stamp.read_text() != requirements.read_text():
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", str(requirements)],
            check=True,
        )
        stamp.write_text(requirements.read_text())
    return str(python)


def backend_setup(backend: str, var: Path, tag: str) -> tuple[dict[str, str], dict[str, str], dict]:
    """Environment of the run, environment of the list-query run, and backend config."""
    if backend == "postgres":
        # Overridable so that runs from different checkouts do not share databases or Redis dbs.
        prefix = os.environ.get("BENCH_DB_PREFIX", "durableflow_bench")
        names = [f"{prefix}{tag}", f"{prefix}{tag}_dbos", f"{prefix}{tag}_list"]
        results_db, broker_db = (int(db) for db in os.environ.get("BENCH_REDIS_DBS", "12,13").split(","))
        import redis

        for db in (results_db, broker_db):
            redis.Redis(port=6379, db=db).flushdb()
        env = {
            "DATABASE_URL": f"{PG}/{names[0]}",
            "CELERY_BROKER_URL": f"redis://127.0.0.1:6379/{broker_db}",
            "CELERY_RESULT_BACKEND": f"redis://127.0.0.1:6379/{results_db}",
            "DURABLEFLOW_VAR_DIR": str(var / "postgres"),
        }
        list_env = {**env, "DATABASE_URL": f"{PG}/{names[2]}"}
        config = {
            "admin_url": f"{PG}/postgres",
            "pg_databases": names[:2],
            "dbos_url": f"{PG}/{names[1]}",
            "list_database": names[2],
        }
    else:
        home, list_home = var / "embedded", var / "embedded-list"
        env = {
            "DATABASE_URL": f"sqlite:///{home / 'bench.sqlite3'}",
            "CELERY_BROKER_URL": "filesystem://",
            "CELERY_FILESYSTEM_DIR": str(home / "broker"),
            "CELERY_RESULT_BACKEND": f"file://{home / 'results'}",
            "DURABLEFLOW_VAR_DIR": str(home),
        }
        list_home.mkdir(parents=True, exist_ok=True)
        list_env = {
            **env,
            "DATABASE_URL": f"sqlite:///{list_home / 'list.sqlite3'}",
            "DURABLEFLOW_VAR_DIR": str(list_home),
            "CELERY_FILESYSTEM_DIR": str(list_home / "broker"),
        }
        config = {"dbos_url": f"sqlite:///{home / 'dbos.sqlite3'}"}
    return env, list_env, {"backend": backend, **config}


def run_child(module: str, env: dict[str, str], config: dict, out: Path) -> dict:
    config_path = out.with_suffix(".config.json")
    config_path.write_text(json.dumps(config))
    subprocess.run(
        [sys.executable, "-m", module, str(config_path), str(out)],
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="./run bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: checks that the benchmark works")
    parser.add_argument("--backends", default="postgres,embedded")
    parser.add_argument("--rounds", type=int, help="rounds of the compared workloads (default 3, smoke 1)")
    parser.add_argument("--no-peer", action="store_true", help="skip DBOS (and the chart, which needs its venv)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--dbos-worker-concurrency", type=int, default=8)
    parser.add_argument("--dbos-polling", type=float, default=0.05)
    args = parser.parse_args(argv)

    sizes = dict(SMOKE if args.smoke else FULL)
    if args.rounds:
        sizes["rounds"] = args.rounds
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    peer = None if args.no_peer else peer_python()
    tag = "_smoke" if args.smoke else ""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    raws, summaries = [], []
    for backend in args.backends.split(","):
        print(f"benchmark on the {backend} backend ({'smoke' if args.smoke else 'full'} sizes)", flush=True)
        env, list_env, config = backend_setup(backend, out_dir / "var", tag)
        config.update(
            sizes=sizes,
            peer_python=peer,
            dbos_worker_concurrency=args.dbos_worker_concurrency,
            dbos_polling=args.dbos_polling,
        )
        raw = run_child("bench.backend", env, config, out_dir / f"raw-{backend}.json")
        print(f"  [{backend}] list queries", flush=True)
        raw["listing"] = run_child("bench.listing_run", list_env, config, out_dir / f"list-{backend}.json")
        raws.append(raw)
        summaries.append(report.summarize(raw))
        print(report.table(summaries[-1]), flush=True)
    result = {"when": stamp, "sizes": sizes, "summaries": summaries, "raw": raws}
    path = out_dir / f"bench-{stamp}.json"
    path.write_text(json.dumps(result, indent=1))
    (out_dir / "latest.json").write_text(json.dumps(result, indent=1))
    print(f"results: {path}")
    if peer is None:
        # matplotlib lives in the peer's virtualenv, not in the project's.
        print("chart: skipped (--no-peer: the chart is drawn with the peer's virtualenv)")
    else:
        chart = out_dir / "chart.png"
        subprocess.run([peer, str(ROOT / "bench" / "chart.py"), str(path), str(chart)], check=True)
        print(f"chart: {chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

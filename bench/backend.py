"""One backend's benchmark run, in its own process: ``python -m bench.backend CONFIG OUT``.

The parent (``python -m bench``) sets the environment (database, broker) and passes the
sizes as JSON; this process resets its databases, runs every measurement and writes JSON.
Workloads that are compared run in alternating order, round by round.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORKER_PROCESSES = 2  # the pool processes of the bench's worker (and the floor's concurrency)


def reset_databases(config: dict[str, Any]) -> None:
    """Fresh databases before Django connects: the bench never reuses a previous run's rows."""
    if config["backend"] == "postgres":
        import psycopg

        with psycopg.connect(config["admin_url"], autocommit=True) as admin:
            for name in config["pg_databases"]:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                admin.execute(f'CREATE DATABASE "{name}"')
    else:
        var = Path(os.environ["DURABLEFLOW_VAR_DIR"])
        shutil.rmtree(var, ignore_errors=True)
        (var / "broker").mkdir(parents=True)
        (var / "results").mkdir()


def run_dbos(config: dict[str, Any]) -> dict[str, Any]:
    sizes = config["sizes"]
    script = str(ROOT / "bench" / "peers" / "dbos_peer.py")
    base = [config["peer_python"], script]
    steps = subprocess.run(
        [
            *base,
            "steps",
            "--url",
            config["dbos_url"],
            "--sizes",
            *map(str, sizes["steps"]),
            "--repeats",
            str(sizes["step_repeats"]),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    queue = subprocess.run(
        [
            *base,
            "queue",
            "--url",
            config["dbos_url"],
            "--latency-sizes",
            *map(str, sizes["latency_steps"]),
            "--latency-n",
            str(sizes["latency_n"]),
            "--throughput-n",
            str(sizes["throughput_workflows"]),
            "--throughput-steps",
            str(sizes["throughput_steps"]),
            "--workers",
            "2",
            "--worker-concurrency",
            str(config["dbos_worker_concurrency"]),
            "--polling",
            str(config["dbos_polling"]),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    for done in (steps, queue):
        if done.returncode != 0:
            raise RuntimeError(f"the DBOS peer failed:\n{done.stderr[-4000:]}")
    return {
        "steps": json.loads(steps.stdout.strip().splitlines()[-1]),
        "queue": json.loads(queue.stdout.strip().splitlines()[-1]),
    }


def main() -> None:
    config = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    reset_databases(config)

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)

    from bench import documents, effects, inprocess, live, ratelimits, sagas, stores, streams, traces, waits
    from bench.apps import READY_LINE
    from tests.cluster import Cluster

    sizes = config["sizes"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    logs = Path(tempfile.mkdtemp(prefix="bench-logs-"))
    cluster = Cluster(env, logs)
    results: dict[str, Any] = {
        "backend": config["backend"],
        "config": config,
        "worker_processes": WORKER_PROCESSES,
        "rounds": [],
    }
    try:
        cluster.worker("durableflow,bench-chain", concurrency=WORKER_PROCESSES, loglevel="warning", ready=READY_LINE)
        for number in range(sizes["rounds"]):
            print(f"  [{config['backend']}] round {number + 1}/{sizes['rounds']}", flush=True)
            results["rounds"].append(_round(number, config, inprocess, live))
            results["rounds"][-1]["waits"] = waits.measure(sizes["waits_n"], sizes["map_items"], sizes["map_repeats"])
        # The throughput leg once more on a worker with one pool process (bench/SCALING.md).
        print(f"  [{config['backend']}] throughput on one worker process", flush=True)
        one = cluster.worker("bench-one", concurrency=1, loglevel="warning", ready=READY_LINE)
        results["throughput_one_process"] = live.durableflow_throughput(
            sizes["throughput_workflows"], sizes["throughput_steps"], queue="bench-one"
        )
        cluster.stop(one)
        print(f"  [{config['backend']}] replay, stores, timers, memory", flush=True)
        results["replay"] = inprocess.replay(sizes["replay_lengths"], sizes["replay_repeats"])
        results["effects"] = effects.overhead(sizes["effect_steps"], sizes["effect_repeats"])
        results["sagas"] = sagas.overhead(sizes["effect_steps"], sizes["effect_repeats"])  # the same sizes
        results["ratelimits"] = ratelimits.overhead(sizes["effect_steps"], sizes["effect_repeats"])  # the same
        traced = traces.overhead(sizes["effect_steps"], sizes["effect_repeats"])  # the same; None without the SDK
        if traced is not None:
            results["traces"] = traced
        results["streams"] = streams.overhead(sizes["effect_steps"], sizes["effect_repeats"])  # the same
        results["documents"] = {
            "compile": documents.compile_time(sizes["document_compile_states"], sizes["document_repeats"]),
            "overhead": documents.overhead(sizes["document_steps"], sizes["document_repeats"]),
        }
        results["stores"] = {
            "counter": stores.contended_counter(sizes["store_executions"], sizes["store_increments"]),
            "when": stores.when_latency(sizes["when_n"]),
        }
        beat = cluster.beat(loglevel="warning")
        results["timers"] = live.timers(sizes["timers"], *sizes["timer_range"])
        beat.stop()
        memory_worker = cluster.worker("bench-memory", concurrency=1, loglevel="warning", ready=READY_LINE)
        results["memory"] = live.memory(
            memory_worker, "bench-memory", sizes["memory_total"], sizes["memory_batch"], steps=1
        )
    finally:
        cluster.stop_all()
    out.write_text(json.dumps(results, indent=1))
    shutil.rmtree(logs, ignore_errors=True)


def _round(number: int, config: dict[str, Any], inprocess, live) -> dict[str, Any]:
    """One round: every system once; the order of the systems rotates from round to round."""
    from bench import ceiling, transactions

    sizes = config["sizes"]
    blocks = {
        "durableflow": lambda: {
            "steps": inprocess.step_overhead(sizes["steps"], sizes["step_repeats"], sizes["floor_n"]),
            "transactions": transactions.step_cost(sizes["steps"], sizes["step_repeats"], sizes["floor_n"]),
            "throughput": live.durableflow_throughput(sizes["throughput_workflows"], sizes["throughput_steps"]),
        },
        "chain": lambda: {
            "throughput": live.chain_throughput(sizes["throughput_workflows"], sizes["throughput_steps"]),
        },
    }
    if config.get("peer_python"):
        blocks["dbos"] = lambda: run_dbos(config)
    names = list(blocks)
    shift = number % len(names)
    result: dict[str, Any] = {"order": names[shift:] + names[:shift]}
    for name in result["order"]:
        result[name] = blocks[name]()
    # Latency pairs and start pairs alternate sample by sample inside.
    result["latency"] = live.latency(sizes["latency_steps"], sizes["latency_n"])
    result["starts"] = live.starts(sizes["start_n"], sizes["start_many"])
    result["starts"]["ticks"] = live.scheduled_ticks(sizes["start_n"])
    # The database's commit rate with as many connections as the worker has pool processes (the
    # ceiling of the throughput leg), and at other concurrencies for bench/SCALING.md.
    result["commit_rate"] = {
        str(c): ceiling.commit_rate(c, sizes["commit_rate_seconds"])
        for c in sorted({1, WORKER_PROCESSES, *sizes["commit_rate_concurrency"]})
    }
    return result


if __name__ == "__main__":
    main()

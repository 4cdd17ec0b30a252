"""The DBOS Transact side of the benchmark.

Runs in the benchmark's own virtualenv (bench/requirements-peer.txt), never in the
project's: ``python dbos_peer.py steps|queue|worker --url URL ...``; prints one JSON object.
The workload is the one durableflow runs: a workflow of S trivial steps.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from dbos import DBOS, DBOSClient

APP = "durableflow-bench"
QUEUE = "bench"


@DBOS.step()
def trivial(i: int) -> int:
    return i


@DBOS.workflow()
def steps(n: int) -> int:
    total = 0
    for i in range(n):
        total += trivial(i)
    return total


def launch(url: str, executor_id: str) -> None:
    DBOS(
        config={
            "name": APP,
            "system_database_url": url,
            "log_level": "WARNING",
            "executor_id": executor_id,
            "application_version": "bench",
        }
    )
    DBOS.launch()


def cmd_worker(args) -> None:
    launch(args.url, args.executor_id)
    DBOS.register_queue(
        QUEUE,
        worker_concurrency=args.worker_concurrency,
        polling_interval_sec=args.polling,
        on_conflict="always_update",
    )
    print("ready", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    DBOS.destroy(workflow_completion_timeout_sec=0)


def cmd_steps(args) -> dict:
    """In-process: one workflow of S steps, timed, for each size."""
    launch(args.url, "bench-steps")
    steps(1)  # warm up connections and registrations
    timings = {}
    for size in args.sizes:
        runs = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            steps(size)
            runs.append((time.perf_counter() - started) * 1000)
        timings[str(size)] = runs
    DBOS.destroy(workflow_completion_timeout_sec=0)
    return {"delivery_ms": timings}


def _start_workers(args) -> list[subprocess.Popen]:
    workers = []
    for n in range(args.workers):
        worker = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "worker",
                "--url",
                args.url,
                "--executor-id",
                f"bench-worker-{n}",
                "--worker-concurrency",
                str(args.worker_concurrency),
                "--polling",
                str(args.polling),
            ],
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        workers.append(worker)
    for worker in workers:
        line = worker.stdout.readline()
        if b"ready" not in line:
            raise RuntimeError(f"DBOS worker did not start: {line!r}")
    return workers


def cmd_queue(args) -> dict:
    """Real worker processes: start -> result latency, then throughput of a batch."""
    launch(args.url, "bench-setup")  # creates and migrates the system database
    DBOS.destroy(workflow_completion_timeout_sec=0)
    workers = _start_workers(args)
    client = DBOSClient(system_database_url=args.url, application_name=APP)
    options = {"workflow_name": "steps", "queue_name": QUEUE}
    try:
        latency = {}
        for size in args.latency_sizes:
            runs = []
            for _ in range(args.latency_n):
                started = time.perf_counter()
                client.enqueue(options, size).get_result(polling_interval_sec=0.001)
                runs.append((time.perf_counter() - started) * 1000)
            latency[str(size)] = runs
        started = time.perf_counter()
        handles = [client.enqueue(options, args.throughput_steps) for _ in range(args.throughput_n)]
        for handle in handles:
            handle.get_result(polling_interval_sec=0.01)
        elapsed = time.perf_counter() - started
    finally:
        client.destroy()
        for worker in workers:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    return {
        "latency_ms": latency,
        "throughput": {"workflows": args.throughput_n, "steps_each": args.throughput_steps, "seconds": elapsed},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["steps", "queue", "worker"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--sizes", type=int, nargs="*", default=[1, 10, 100])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--latency-sizes", type=int, nargs="*", default=[1, 10])
    parser.add_argument("--latency-n", type=int, default=30)
    parser.add_argument("--throughput-n", type=int, default=1000)
    parser.add_argument("--throughput-steps", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--worker-concurrency", type=int, default=4)
    parser.add_argument("--polling", type=float, default=0.05)
    parser.add_argument("--executor-id", default="bench")
    args = parser.parse_args()
    if args.command == "worker":
        cmd_worker(args)
        return
    result = cmd_steps(args) if args.command == "steps" else cmd_queue(args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

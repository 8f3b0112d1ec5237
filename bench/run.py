"""``python -m bench``: every system and every baseline on one PostgreSQL, in one run.

Repetitions are interleaved (repetition 1 of every measurement of every
system, then repetition 2, ...) so that a slow minute on a shared machine
hurts all systems alike instead of one; the reported figure is the median.
Each system gets its own fresh database on the same server.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable, Coroutine
from contextlib import ExitStack
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # ``python bench/run.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import adapters, baselines, databases, measure, report
from bench.adapters import base

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
ALL_SYSTEMS = ("jobwarden", "procrastinate", "pgqueuer")
GROUPS = ("enqueue", "e2e", "latency", "update", "advisory", "lease")
RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclasses.dataclass
class Sizes:
    """How much work each measurement does (all overridable on the command line)."""

    reps: int = 3
    enqueue_jobs: int = 2000
    batch_jobs: int = 20000
    batch_size: int = 1000
    e2e_jobs: int = 2000
    best_jobs: int = 5000
    trickle_jobs: int = 200
    trickle_interval: float = 0.020
    trickle_warmup: int = 5
    settle_seconds: float = 1.0
    baseline_seconds: float = 2.0
    timeout: float = 300.0

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            reps=1,
            enqueue_jobs=100,
            batch_jobs=2000,
            e2e_jobs=100,
            best_jobs=500,
            trickle_jobs=10,
            trickle_warmup=2,
            settle_seconds=0.5,
            baseline_seconds=0.3,
            timeout=60.0,
        )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark Jobwarden and its peers on one PostgreSQL.",
    )
    p.add_argument(
        "--dsn",
        default=os.environ.get("JOBWARDEN_BENCH_DSN", DEFAULT_DSN),
        help="server to use (a maintenance database; the harness creates its own)",
    )
    p.add_argument(
        "--systems",
        default=",".join(ALL_SYSTEMS),
        help="comma-separated systems, or 'none' (default: all)",
    )
    p.add_argument(
        "--measure",
        default=",".join(GROUPS),
        help=f"comma-separated groups out of {','.join(GROUPS)} (default: all)",
    )
    p.add_argument(
        "--primary",
        default=None,
        help="system the ratio columns are about (default: jobwarden if measured)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny sizes and one repetition: a smoke test, not a measurement",
    )
    p.add_argument(
        "--json",
        dest="json_path",
        default=None,
        help="where to write the JSON record (default: bench/results/<date>.json;"
        " with --quick none unless given); '-' for none",
    )
    p.add_argument(
        "--db-prefix",
        default="bench_",
        help="prefix of the databases created and dropped (default: bench_)",
    )
    p.add_argument("--keep-databases", action="store_true")
    p.add_argument(
        "--allow-missing",
        action="store_true",
        help="skip systems that cannot be loaded instead of failing",
    )
    for field in dataclasses.fields(Sizes):
        p.add_argument(
            "--" + field.name.replace("_", "-"),
            type=type(field.default),
            default=None,
            dest=field.name,
        )
    return p


def _sizes(args: argparse.Namespace) -> Sizes:
    sizes = Sizes.quick() if args.quick else Sizes()
    for field in dataclasses.fields(Sizes):
        value = getattr(args, field.name)
        if value is not None:
            setattr(sizes, field.name, value)
    return sizes


@dataclasses.dataclass
class Run:
    sizes: Sizes
    groups: set[str]
    system_runs: report.Runs = dataclasses.field(default_factory=dict)
    baseline_runs: report.Runs = dataclasses.field(default_factory=dict)
    errors: list[str] = dataclasses.field(default_factory=list)
    # 1-minute load average when each repetition started: on a shared machine
    # it tells which repetitions ran beside someone else's work.
    rep_loads: list[float] = dataclasses.field(default_factory=list)

    def add(self, system: str, metric: str, value: float) -> None:
        self.system_runs.setdefault(system, {}).setdefault(metric, []).append(value)

    def add_baseline(self, kind: str, clients: int, value: float) -> None:
        self.baseline_runs.setdefault(kind, {}).setdefault(str(clients), []).append(value)

    async def attempt(self, what: str, step: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """One measurement; a failure is recorded and the run goes on."""
        print(f"  {what} ...", end="", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            await step()
            print(f" {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)
        except Exception as exc:
            print(file=sys.stderr)
            message = f"{what}: {type(exc).__name__}: {exc}"
            self.errors.append(message)
            print(f"  FAILED {message}", file=sys.stderr, flush=True)
            if os.environ.get("BENCH_TRACEBACK"):
                traceback.print_exc()


async def _measure_system(run: Run, system: base.System, dsn: str) -> None:
    s = run.sizes
    name = system.name
    async with system.client(dsn) as client:
        if "enqueue" in run.groups:

            async def single() -> None:
                await client.reset()
                run.add(
                    name,
                    "enqueue_single",
                    await measure.enqueue_single(client, jobs=s.enqueue_jobs),
                )

            async def batch() -> None:
                await client.reset()
                rate, cpu_ms = await measure.enqueue_batch(client, jobs=s.batch_jobs,
                                                           batch=s.batch_size)
                run.add(name, "enqueue_batch", rate)
                run.add(name, "enqueue_batch_cpu", cpu_ms)

            await run.attempt(f"{name} enqueue single", single)
            await run.attempt(f"{name} enqueue batch", batch)
        if "e2e" in run.groups:
            for setting, jobs in (
                (base.WorkerSetting("c1", 1), s.e2e_jobs),
                (base.WorkerSetting("c4", 4), s.e2e_jobs),
                (base.WorkerSetting("best", None), s.best_jobs),
            ):

                async def e2e(setting: base.WorkerSetting = setting, jobs: int = jobs) -> None:
                    run.add(
                        name,
                        f"e2e_{setting.label}",
                        await measure.drain(
                            name, dsn, client, jobs=jobs, setting=setting, timeout=s.timeout
                        ),
                    )

                await run.attempt(f"{name} end-to-end {setting.label} ({jobs} jobs)", e2e)
        if "latency" in run.groups:

            async def latency() -> None:
                p50, p99, rss = await measure.trickle(
                    name,
                    dsn,
                    client,
                    jobs=s.trickle_jobs,
                    interval=s.trickle_interval,
                    warmup=s.trickle_warmup,
                    settle=s.settle_seconds,
                )
                run.add(name, "latency_p50", p50)
                run.add(name, "latency_p99", p99)
                run.add(name, "rss_idle", rss)

            await run.attempt(f"{name} trickle latency + idle RSS", latency)
        await client.reset()


async def _measure_baselines(run: Run, dsn: str) -> None:
    for kind in ("update", "advisory"):
        if kind not in run.groups:
            continue
        for clients in (1, 4):

            async def step(kind: baselines.Kind = kind, clients: int = clients) -> None:
                rate = await asyncio.to_thread(
                    baselines.rate, kind, dsn, clients=clients, seconds=run.sizes.baseline_seconds
                )
                run.add_baseline(kind, clients, rate)

            await run.attempt(f"{kind} x{clients}", step)


async def _measure_leases(run: Run, system: base.System, dsn: str) -> None:
    for clients in (1, 4):

        async def step(clients: int = clients) -> None:
            rate = await asyncio.to_thread(
                baselines.rate,
                "lease",
                dsn,
                clients=clients,
                seconds=run.sizes.baseline_seconds,
                system=system.name,
            )
            run.add_baseline(f"lease:{system.name}", clients, rate)

        await run.attempt(f"{system.name} lease x{clients}", step)


def _json_path(args: argparse.Namespace, started: datetime.datetime) -> Path | None:
    if args.json_path == "-" or (args.json_path is None and args.quick):
        return None
    if args.json_path:
        return Path(args.json_path)
    path = RESULTS_DIR / f"{started:%Y-%m-%d}.json"
    n = 2
    while path.exists():
        path = RESULTS_DIR / f"{started:%Y-%m-%d}-{n}.json"
        n += 1
    return path


async def _main(args: argparse.Namespace) -> int:
    started = datetime.datetime.now(datetime.UTC)
    sizes = _sizes(args)
    groups = {g.strip() for g in args.measure.split(",") if g.strip()}
    unknown = groups - set(GROUPS)
    if unknown:
        print(f"unknown --measure group(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    names = [] if args.systems == "none" else [n.strip() for n in args.systems.split(",")]
    loaded = adapters.load_all(names, allow_missing=args.allow_missing, verb="benchmark")
    if loaded is None:
        return 2
    systems: list[base.System] = loaded
    measured = [s.name for s in systems]
    primary = args.primary or (
        "jobwarden" if "jobwarden" in measured else (measured[0] if measured else None)
    )
    run = Run(sizes=sizes, groups=groups)
    facts = databases.server_facts(args.dsn)
    load_before = os.getloadavg()
    with ExitStack() as stack:
        baseline_dsn = stack.enter_context(
            databases.fresh_database(
                args.dsn, f"{args.db_prefix}baseline", keep=args.keep_databases
            )
        )
        baselines.prepare_update_table(baseline_dsn)
        system_dsns: dict[str, str] = {}
        for system in systems:
            dsn = stack.enter_context(
                databases.fresh_database(
                    args.dsn, f"{args.db_prefix}{system.name}", keep=args.keep_databases
                )
            )
            await system.install(dsn)
            system_dsns[system.name] = dsn
        for rep in range(1, sizes.reps + 1):
            run.rep_loads.append(os.getloadavg()[0])
            print(
                f"repetition {rep}/{sizes.reps} (load {run.rep_loads[-1]:.2f})",
                file=sys.stderr,
                flush=True,
            )
            await _measure_baselines(run, baseline_dsn)
            for system in systems:
                await _measure_system(run, system, system_dsns[system.name])
                if "lease" in groups and system.supports_leases:
                    await _measure_leases(run, system, system_dsns[system.name])
    finished = datetime.datetime.now(datetime.UTC)
    table = report.render(
        systems=measured,
        primary=primary,
        system_runs=run.system_runs,
        baseline_runs=run.baseline_runs,
    )
    print(table)
    if run.errors:
        print("\nfailed measurements:\n  " + "\n  ".join(run.errors))
    record = {
        "started": started.isoformat(timespec="seconds"),
        "finished": finished.isoformat(timespec="seconds"),
        "command": "python -m bench " + " ".join(sys.argv[1:]),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
            "loadavg_1min_per_repetition": run.rep_loads,
        },
        "server": facts,
        "sizes": dataclasses.asdict(sizes),
        "systems": {s.name: s.describe() for s in systems},
        "results": {
            name: {k: {"runs": v, "median": measure.median(v)} for k, v in metrics.items()}
            for name, metrics in run.system_runs.items()
        },
        "baselines": {
            kind: {c: {"runs": v, "median": measure.median(v)} for c, v in per.items()}
            for kind, per in run.baseline_runs.items()
        },
        "errors": run.errors,
        "table": table,
    }
    path = _json_path(args, started)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(record, indent=2) + "\n")
        print(f"\nresults written to {path}")
    return 1 if run.errors else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    started = time.monotonic()
    code = asyncio.run(_main(args))
    print(f"(took {time.monotonic() - started:.0f}s)", file=sys.stderr)
    return code


if __name__ == "__main__":
    raise SystemExit(main())

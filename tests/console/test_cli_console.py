"""`jobwarden console` as users start it: refuses to listen unprotected, serves otherwise."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parent.parent.parent


def _env(dsn: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBWARDEN_")}
    return {**env, "JOBWARDEN_DSN": dsn, "PYTHONPATH": str(REPO), **extra}


def test_beyond_loopback_without_a_token_it_refuses_to_start(dsn: str) -> None:
    out = subprocess.run([sys.executable, "-m", "jobwarden", "console", "--host", "0.0.0.0"],
                         env=_env(dsn), capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 9
    assert out.stderr.count("\n") == 1 and "without authentication" in out.stderr


@pytest.mark.parametrize("how", ["flags", "environment"])
def test_it_serves_with_a_token_from_a_file(dsn: str, tmp_path: Path, how: str) -> None:
    token = "console-token-for-tests-0123"
    (tmp_path / "token").write_text(token + "\n")
    port = free_port()
    if how == "flags":
        command = ["--port", str(port), "--token-file", str(tmp_path / "token")]
        env = _env(dsn)
    else:  # as the chart starts it: the port and the token file as variables
        command = ["--host", "0.0.0.0"]
        env = _env(dsn, JOBWARDEN_HTTP_PORT=str(port),
                   JOBWARDEN_CONSOLE_TOKEN_FILE=str(tmp_path / "token"))
    proc = subprocess.Popen([sys.executable, "-m", "jobwarden", "console", *command], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def answer(auth: str | None) -> int:
            request = urllib.request.Request(f"http://127.0.0.1:{port}/healthz")
            if auth:
                request.add_header("Authorization", auth)
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    return int(response.status)
            except urllib.error.HTTPError as exc:
                return exc.code
            except OSError:
                return 0

        basic = "Basic " + base64.b64encode(f"ops:{token}".encode()).decode()
        wait_for(lambda: answer(basic) == 200, timeout=30, interval=0.1,
                 message="the console to answer")
        assert answer(None) == 401
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_an_unreadable_token_file_is_one_line_and_its_exit_code(dsn: str, tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "jobwarden", "console", "--host", "0.0.0.0"],
                         env=_env(dsn, JOBWARDEN_CONSOLE_TOKEN_FILE=str(tmp_path / "missing")),
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 9, out.stderr
    assert out.stderr.count("\n") == 1 and "cannot read the token file" in out.stderr

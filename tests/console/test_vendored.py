"""The vendored htmx is the pinned npm release, intact, with its licence beside it.

``scripts/vendor-htmx`` fetches it with ``npm pack``, checks the tarball against
the registry's published integrity and records each file's sha384 in
VENDORED.json; this test checks the files still match that record, and that
the console serves the script with the same hash as its Subresource Integrity
(so a browser refuses a modified file too).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
from pathlib import Path

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient

REPO = Path(__file__).resolve().parents[2]
VENDOR = REPO / "operator" / "jobwarden" / "console" / "static" / "vendor" / "htmx"


def _sri(path: Path) -> str:
    return "sha384-" + base64.b64encode(hashlib.sha384(path.read_bytes()).digest()).decode()


def test_the_vendored_files_match_their_recorded_integrity() -> None:
    manifest = json.loads((VENDOR / "VENDORED.json").read_text())
    assert manifest["package"] == "htmx.org"
    assert re.fullmatch(r"\d+\.\d+\.\d+", manifest["version"])  # pinned, no range
    assert manifest["tarball_integrity"].startswith("sha512-")
    assert set(manifest["files"]) == {"htmx.min.js", "LICENSE"}
    for name, recorded in manifest["files"].items():
        assert _sri(VENDOR / name) == recorded, name
    assert "Zero-Clause BSD" in (VENDOR / "LICENSE").read_text()
    assert f'version:"{manifest["version"]}"' in (VENDOR / "htmx.min.js").read_text()


def test_the_refresh_script_is_there_and_names_no_registry_host() -> None:
    script = REPO / "scripts" / "vendor-htmx"
    assert os.access(script, os.X_OK)
    text = script.read_text()
    assert "npm pack" in text and "dist.integrity" in text
    assert "http" not in text  # npm's own configuration decides where it fetches from


def test_the_console_serves_htmx_with_its_integrity(console: TestClient) -> None:
    manifest = json.loads((VENDOR / "VENDORED.json").read_text())
    page = console.get("/")
    tag = re.search(r'<script src="(/static/vendor/htmx/htmx\.min\.js)" integrity="([^"]+)"',
                    page.text)
    assert tag is not None and tag.group(2) == manifest["files"]["htmx.min.js"]
    served = console.get(tag.group(1))
    assert served.status_code == 200 and "javascript" in served.headers["content-type"]
    digest = base64.b64encode(hashlib.sha384(served.content).digest()).decode()
    assert f"sha384-{digest}" == tag.group(2)
    assert console.get("/static/live.js").status_code == 404  # the hand-written poller is gone

"""The layering is checked, not hoped for.

The contracts live in ``.importlinter`` at the repository root (as kopf keeps
them): the layers ``cli > controller/assembly/console > client/schedules/tick/
podruns > worker extensions > worker > onbusy/reaper/retention > gauges >
health/looping > leases > db > settings > structs``, the worker independent of
its extensions, the worker's parts independent of the worker that composes
them, the status decisions of the operator pure (no kopf, no database), ``db``
the only psycopg importer, ``controller`` the only kopf / Kubernetes importer,
and no import cycle among the package's modules. This test runs them, so every
test command checks them; ``lint-imports`` runs the same contracts by hand.
The plain data structures are checked here too: they import nothing of
Jobwarden's but each other.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "operator" / "jobwarden"


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def _modules() -> dict[str, set[str]]:
    return {str(p.relative_to(PACKAGE)): _imports(p) for p in PACKAGE.rglob("*.py")}


def test_the_import_contracts_hold() -> None:
    # A declared test dependency (pyproject's test extra); a venv made before it was
    # added skips this with the reason instead of failing.
    pytest.importorskip("importlinter", reason="import-linter is not installed: "
                                               "pip install -e '.[test]'")
    # In a child process: import-linter configures logging with dictConfig, which
    # would disable every logger of this test process (and the log tests after it).
    script = ("import sys; from importlinter import cli; "
              "sys.exit(cli.lint_imports(config_filename=sys.argv[1], no_cache=True, "
              "no_logo=True))")
    done = subprocess.run([sys.executable, "-c", script, str(REPO / ".importlinter")],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_structs_are_plain_data() -> None:
    for module, imports in _modules().items():
        if module.startswith("structs/"):
            inner = {i for i in imports if i.startswith("jobwarden")}
            assert inner <= {"jobwarden.structs", *{i for i in inner
                                                   if i.startswith("jobwarden.structs.")}}, module


def test_the_layering_check_sees_the_package() -> None:
    # Guards the structs check against silently scanning nothing.
    modules = _modules()
    assert "db/database.py" in modules
    assert "psycopg" in modules["db/database.py"]

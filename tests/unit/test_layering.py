"""The layering is checked, not hoped for.

The contracts live in ``.importlinter`` at the repository root (as kopf keeps
them): the layers ``cli > controller/assembly/console > api/schedules/tick/
podruns > extensions > worker > jobs/maintenance > coordination > db >
observability > settings > textrules > errors > structs``, each worker extension
independent of the others, the worker's parts independent of the worker that
composes them, the status decisions of the operator pure (no kopf, no
database), ``db`` the only psycopg importer, ``controller`` the only kopf /
Kubernetes importer, and no import cycle among the package's modules. This test
runs them, so every test command checks them; ``lint-imports`` runs the same
contracts by hand.

The contracts cannot be bypassed by adding a module: the psycopg and kopf
contracts start from the package root with their exceptions listed, every
module must be in a layer, and a scratch copy of the package with a forbidden
import added shows each contract failing. The plain data structures are checked
here too: they import nothing of Jobwarden's but each other.
"""

from __future__ import annotations

import ast
import configparser
import re
import shutil
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


def _lint(config: Path, root: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    """Run import-linter on the package found under ``root`` (``root/jobwarden``)."""
    # A declared test dependency (pyproject's test extra); a venv made before it was
    # added skips this with the reason instead of failing.
    pytest.importorskip("importlinter", reason="import-linter is not installed: "
                                               "pip install -e '.[test]'")
    # In a child process: import-linter configures logging with dictConfig, which
    # would disable every logger of this test process (and the log tests after it).
    # The package is found first on sys.path, so a scratch copy is linted, not this one.
    script = ("import sys; sys.path.insert(0, sys.argv[2]); from importlinter import cli; "
              "sys.exit(cli.lint_imports(config_filename=sys.argv[1], no_cache=True, "
              "no_logo=True, limit_to_contracts=tuple(sys.argv[3:])))")
    return subprocess.run([sys.executable, "-c", script, str(config), str(root), *contracts],
                          cwd=config.parent, capture_output=True, text=True, timeout=120,
                          check=False)


def test_the_import_contracts_hold() -> None:
    done = _lint(REPO / ".importlinter", PACKAGE.parent)
    assert done.returncode == 0, done.stdout + done.stderr


def _layers() -> list[str]:
    config = configparser.ConfigParser()
    config.read(REPO / ".importlinter", encoding="utf-8")
    text = config["importlinter:contract:layers"]["layers"]
    return [name for name in re.split(r"[\s|:]+", text) if name]


def _unlayered(modules: list[str], layers: list[str]) -> list[str]:
    """The modules neither named as a layer nor inside one."""
    return [m for m in modules
            if not any(m == layer or m.startswith(layer + ".") for layer in layers)]


def _module_names() -> list[str]:
    names = []
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    # The package itself: its public names are imported on first access
    # (importlib, PEP 562), never by an import statement a layer could rule on.
    return sorted(n for n in names if n != "jobwarden")


def test_every_module_is_in_a_layer() -> None:
    assert _unlayered(_module_names(), _layers()) == []


def test_a_module_outside_the_layers_is_found() -> None:
    # Guards the check above against passing by matching everything.
    layers = _layers()
    assert "jobwarden.db" in layers
    assert _unlayered(["jobwarden.db.jobs", "jobwarden.dbx", "jobwarden.scratch"],
                      layers) == ["jobwarden.dbx", "jobwarden.scratch"]


@pytest.fixture
def scratch(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the package and of ``.importlinter``: (its config, its sys.path root)."""
    root = tmp_path / "operator"
    shutil.copytree(PACKAGE, root / "jobwarden",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "static", "templates"))
    shutil.copy(REPO / ".importlinter", tmp_path / ".importlinter")
    return tmp_path / ".importlinter", root


def test_the_scratch_copy_keeps_every_contract(scratch: tuple[Path, Path]) -> None:
    # The control for the test below: the copy as it is breaks nothing.
    config, root = scratch
    done = _lint(config, root)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("module", "line", "contract"), [
    # The imports the issue found kept every contract KEPT before the contracts
    # started from the package root (issue 29).
    ("api/operations.py", "import psycopg", "psycopg"),
    ("observability/tracing.py", "import kopf", "kubernetes"),
    # A module added later is covered the day it is added.
    ("scratch.py", "import psycopg_pool", "psycopg"),
    ("scratch.py", "from kubernetes import client", "kubernetes"),
    # An arrow up the layers: the worker importing the composition root.
    ("worker/worker.py", "from jobwarden import assembly", "layers"),
    # One extension importing another.
    ("extensions/gauges.py", "from jobwarden.extensions import hosts", "extensions-independent"),
])
def test_a_forbidden_import_breaks_its_contract(scratch: tuple[Path, Path], module: str,
                                                line: str, contract: str) -> None:
    config, root = scratch
    path = root / "jobwarden" / module
    before = path.read_text(encoding="utf-8") if path.exists() else ""
    path.write_text(before + f"\n{line}\n", encoding="utf-8")
    done = _lint(config, root, contract)
    assert done.returncode != 0, done.stdout + done.stderr
    assert "BROKEN" in done.stdout and "1 broken" in done.stdout, done.stdout + done.stderr


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

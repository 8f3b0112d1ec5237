"""The layering is checked, not hoped for: only the db layer imports psycopg, only the
controller imports kopf or the Kubernetes client, and the plain data structures import
nothing of Jobwarden's machinery."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "jobwarden"


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


def _importers(prefixes: tuple[str, ...]) -> set[str]:
    return {
        module for module, imports in _modules().items()
        if any(name == p or name.startswith(p + ".") for name in imports for p in prefixes)
    }


def test_only_the_db_layer_imports_psycopg() -> None:
    offenders = {m for m in _importers(("psycopg", "psycopg_pool")) if not m.startswith("db/")}
    assert offenders == set()


def test_only_the_controller_imports_kopf_or_kubernetes() -> None:
    offenders = {m for m in _importers(("kopf", "kubernetes"))
                 if not m.startswith("controller/")}
    assert offenders == set()


def test_structs_are_plain_data() -> None:
    for module, imports in _modules().items():
        if module.startswith("structs/"):
            inner = {i for i in imports if i.startswith("jobwarden")}
            assert inner <= {"jobwarden.structs", *{i for i in inner
                                                   if i.startswith("jobwarden.structs.")}}, module


def test_the_layering_check_sees_the_package() -> None:
    # Guards the checks above against silently scanning nothing.
    modules = _modules()
    assert "db/database.py" in modules
    assert "psycopg" in modules["db/database.py"]

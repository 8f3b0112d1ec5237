"""Every relative link in the docs points to a file that exists (and a heading, if it names one).

Why: docs/architecture.md walks a job and a JobSchedule through the code with a
link per step, and modules move; a link that still names the old path would
send a newcomer nowhere. A link to a moved file fails here, with the file and
line of the link. The same holds for a path in a code span (`` `db/jobs.py` ``):
a span that is a file's path (or name) must name a file of the repository, unless
it says the path is history ("then `jobwarden/meters.py`": where a round found it).
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: An inline link or image, ``[text](target)`` / ``![alt](target "title")``.
INLINE = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
#: A reference definition, ``[name]: target``.
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto: ...


def documents() -> list[Path]:
    return sorted([*(REPO / "docs").glob("*.md"), REPO / "CONTRIBUTING.md", REPO / "README.md"])


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", _prose(path.read_text()), re.M):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def _prose(text: str) -> str:
    """The text with fenced code blocks blanked (line numbers kept): no links in code."""
    return re.sub(r"^(```|~~~).*?^\1[^\n]*$",
                  lambda m: "\n" * m.group(0).count("\n"), text, flags=re.M | re.S)


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link in ``path`` outside code blocks and code spans."""
    found = []
    for number, line in enumerate(_prose(path.read_text()).splitlines(), start=1):
        line = re.sub(r"`[^`]*`", "", line)
        targets = [m.group(1) for m in INLINE.finditer(line)]
        reference = REFERENCE.match(line)
        if reference:
            targets.append(reference.group(1))
        found.extend((number, target) for target in targets)
    return found


#: A code span that is a path to a file (or a file's name) of one of these kinds.
FILE_SPAN = re.compile(r"`([A-Za-z_][\w.-]*(?:/[\w.-]+)*\.(?:py|sql|md|toml|ya?ml|json|sh|txt"
                       r"|js|css|html|go))`")
#: Spans that name files on purpose not in the repository, with why.
NOT_IN_REPOSITORY = {
    "dist/htmx.min.js": "the file scripts copy out of the htmx package",
    "operator/jobwarden/db/migrations/NNNN_name.sql": "a pattern, for a new migration",
}


@cache
def repository_files() -> tuple[frozenset[str], frozenset[str]]:
    """The repository's files (paths from its root; hidden folders, caches and
    virtual environments left out) and their names."""
    found: set[str] = set()
    for folder, subfolders, names in os.walk(REPO):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")
                         and name not in ("__pycache__", "node_modules")
                         and not name.endswith(".egg-info")]
        base = Path(folder).relative_to(REPO).as_posix()
        found.update(name if base == "." else f"{base}/{name}" for name in names)
    return frozenset(found), frozenset(name.rsplit("/", 1)[-1] for name in found)


def names_a_file(span: str, files: frozenset[str], names: frozenset[str]) -> bool:
    """A path names a file whose path is it or ends in it (``db/jobs.py`` is
    ``operator/jobwarden/db/jobs.py``); a bare name, a file of that name."""
    if "/" not in span:
        return span in names
    span = span.removeprefix("./")
    return span in files or any(name.endswith("/" + span) for name in files)


def missing_files(path: Path, files: frozenset[str] | None = None,
                  names: frozenset[str] | None = None) -> list[str]:
    """``file:line: span (no such file)`` for every code span of ``path`` that is the
    path of a file the repository does not have (a module moved or gone)."""
    if files is None or names is None:
        files, names = repository_files()
    missing = []
    previous = ""
    for number, line in enumerate(_prose(path.read_text()).splitlines(), start=1):
        for span in FILE_SPAN.finditer(line):
            target = span.group(1)
            history = re.search(r"\bthen\s*$", f"{previous} {line[:span.start()]}")
            if target in NOT_IN_REPOSITORY or history:
                continue
            if not names_a_file(target, files, names):
                where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
                missing.append(f"{where}:{number}: {target} (no such file)")
        previous = line
    return missing


def broken_links(path: Path) -> list[str]:
    """``file:line: target (why)`` for every relative link of ``path`` that leads nowhere."""
    broken = []
    for number, target in links(path):
        if EXTERNAL.match(target):
            continue
        name, _, anchor = target.partition("#")
        destination = (path.parent / name).resolve() if name else path
        where = f"{path.relative_to(REPO) if path.is_relative_to(REPO) else path}:{number}"
        if not destination.exists():
            broken.append(f"{where}: {target} (no such file)")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{where}: {target} (no heading #{anchor})")
    return broken


def test_every_relative_link_in_the_docs_leads_to_a_file_that_exists() -> None:
    checked = [path for path in documents() if path.exists()]
    assert REPO / "docs" / "architecture.md" in checked
    broken = [line for path in checked for line in broken_links(path)]
    assert broken == [], "links to nothing (a file moved? update the link):\n" + "\n".join(broken)


def test_a_link_to_a_moved_file_or_a_missing_heading_is_reported(tmp_path: Path) -> None:
    (tmp_path / "here.py").write_text("")
    (tmp_path / "other.md").write_text("# Life of a job\n\n## Claim: who wins\n")
    page = tmp_path / "page.md"
    page.write_text(
        "See [the code](here.py), [the walk](other.md#claim-who-wins) and\n"
        "[the site](https://example.org/gone.py).\n"
        "```\n[not a link](gone.py)\n```\n"
        "A `[code span](gone.py)` is not one either.\n"
        "Moved: [claiming](worker/claiming.py), [a section](other.md#reaping).\n"
        "[ref]: ../nowhere.md\n")
    assert broken_links(page) == [
        f"{page}:7: worker/claiming.py (no such file)",
        f"{page}:7: other.md#reaping (no heading #reaping)",
        f"{page}:8: ../nowhere.md (no such file)",
    ]


def test_every_file_path_in_a_code_span_names_a_file_that_exists() -> None:
    missing = [line for path in documents() if path.exists() for line in missing_files(path)]
    assert missing == [], ("paths of files that do not exist (moved? update the path, or "
                           "write 'then `old/path.py`' for history):\n" + "\n".join(missing))


def test_a_moved_module_s_old_path_in_a_code_span_is_reported(tmp_path: Path) -> None:
    files = frozenset({"operator/jobwarden/controller/workerpools/reconciler.py",
                       "operator/jobwarden/structs/digests.py"})
    page = tmp_path / "page.md"
    page.write_text(
        "The pools (`controller/workerpools/reconciler.py`, `workerpools/reconciler.py`,\n"
        "`controller/pools.py`), `digests.py` and `jobleases.py`.\n"
        "A round of its time: (then `jobwarden/digests.py`), not `jobwarden/digests.py`;\n"
        "its lease moved, then\n`jobleases.py`, and `jobleases.py`.\n"
        "```\n`gone.py`\n```\n"
        "Prose: a `Worker.run()` call, `db.jobs`, `schedule-<name>.json`, `-2.json`.\n")
    assert missing_files(page, files, frozenset(name.rsplit("/", 1)[-1] for name in files)) == [
        f"{page}:2: controller/pools.py (no such file)",
        f"{page}:2: jobleases.py (no such file)",
        f"{page}:3: jobwarden/digests.py (no such file)",
        f"{page}:5: jobleases.py (no such file)",
    ]


@pytest.mark.parametrize(("heading", "anchor"), [
    ("Life of a job", "life-of-a-job"),
    ("Life of a `JobSchedule`", "life-of-a-jobschedule"),
    ("Claim, heartbeat and outcome (fenced)", "claim-heartbeat-and-outcome-fenced"),
    ("kubectl apply -> operator", "kubectl-apply---operator"),
])
def test_anchors_are_github_s(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor

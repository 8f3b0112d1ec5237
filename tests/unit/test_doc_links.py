"""Every relative link in the docs points to a file that exists (and a heading, if it names one).

Why: docs/architecture.md walks a job and a JobSchedule through the code with a
link per step, and modules move; a link that still names the old path would
send a newcomer nowhere. A link to a moved file fails here, with the file and
line of the link.
"""

from __future__ import annotations

import re
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


@pytest.mark.parametrize(("heading", "anchor"), [
    ("Life of a job", "life-of-a-job"),
    ("Life of a `JobSchedule`", "life-of-a-jobschedule"),
    ("Claim, heartbeat and outcome (fenced)", "claim-heartbeat-and-outcome-fenced"),
    ("kubectl apply -> operator", "kubectl-apply---operator"),
])
def test_anchors_are_github_s(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor

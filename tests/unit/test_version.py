"""The release is one number, said the same way everywhere (docs/upgrades.md).

pyproject.toml, ``jobwarden --version``, the ``jobwarden_build_info`` gauge and
CHANGELOG.md all name the release this code is; releases.toml names the
commits of the released ones, which the upgrade tests build from git history.
"""

from __future__ import annotations

import re
import subprocess
import tomllib

import pytest

from jobwarden import cli, version
from jobwarden.observability import metrics
from tests.support import releases

REPO = releases.REPO


def test_pyproject_and_the_code_name_the_same_release() -> None:
    with open(REPO / "pyproject.toml", "rb") as handle:
        project = tomllib.load(handle)["project"]
    assert project["version"] == version.VERSION


def test_version_flag_prints_the_release_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--version"])
    assert stopped.value.code == 0
    assert capsys.readouterr().out == f"jobwarden {version.VERSION}\n"


def test_build_info_is_1_for_this_release_and_no_other() -> None:
    samples = [sample for family in metrics.REGISTRY.collect()
               if family.name == "jobwarden_build_info" for sample in family.samples]
    assert [(s.labels, s.value) for s in samples] == [({"version": version.VERSION}, 1.0)]


def test_releases_are_named_in_order_and_their_commits_are_in_history() -> None:
    named = releases.all_releases()
    assert named, "releases.toml names no release"
    numbers = [version.parse(r.version) for r in named]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)
    # The code is the newest release or the next one, never an older one.
    assert version.parse(version.VERSION) >= numbers[-1]
    for found in named:
        assert re.fullmatch(r"[0-9a-f]{40}", found.commit), found
        reachable = subprocess.run(
            ["git", "-C", str(REPO), "merge-base", "--is-ancestor", found.commit, "HEAD"],
            check=False)
        assert reachable.returncode == 0, f"{found.version}'s commit is not in HEAD's history"


def test_changelog_has_a_section_with_an_upgrading_note_per_release() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    titles = {re.match(r"\[(\d+\.\d+\.\d+)\]", s).group(1): s  # type: ignore[union-attr]
              for s in sections}
    wanted = {r.version for r in releases.all_releases()} | {version.VERSION}
    assert wanted <= set(titles), f"CHANGELOG.md lacks {sorted(wanted - set(titles))}"
    for number in wanted:
        assert "### Upgrading" in titles[number], f"{number} has no Upgrading note"
    released = {r.version for r in releases.all_releases()}
    if version.VERSION not in released:
        assert "Unreleased" in titles[version.VERSION].splitlines()[0]


@pytest.mark.parametrize("text", ["0.1", "v0.1.0", "0.1.0-rc1", "", "0..1"])
def test_a_release_number_is_major_minor_patch(text: str) -> None:
    with pytest.raises(ValueError):
        version.parse(text)


def test_release_numbers_compare_as_numbers() -> None:
    assert version.parse("0.10.0") > version.parse("0.9.1") > version.parse("0.9.0")

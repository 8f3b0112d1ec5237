"""Which command modules a command line loads (jobwarden.cli.main): ``run-job`` only its
own (a pod run's start-up is on the path from its slot to the job's code); any other
command, and ``--help`` before the command, every one."""

from __future__ import annotations

import pytest

from jobwarden import cli


@pytest.mark.parametrize(("argv", "command"), [
    (["run-job"], "run-job"),
    (["--dsn", "postgresql://h/db", "--log-level", "DEBUG", "run-job", "--job-id", "1"],
     "run-job"),
    (["--dsn=postgresql://h/db", "--json", "jobs", "list"], "jobs"),
    (["--schema", "run-job", "worker"], "worker"),  # a global flag's value is no command
    (["--help", "run-job"], None),
    (["--version"], None),
    ([], None),
])
def test_the_command_word_is_found_past_the_global_flags(argv: list[str],
                                                         command: str | None) -> None:
    assert cli.command_of(argv) == command


def test_help_before_the_command_lists_every_command(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["--help"])
    assert exited.value.code == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in ("worker", "operator", "console", "run-job"))


def test_run_job_help_and_usage_errors_are_those_of_the_full_parser(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["run-job", "--job-id", "0"])
    light = (exited.value.code, capsys.readouterr().err)
    full = cli.build_parser()
    with pytest.raises(SystemExit) as exited:
        full.parse_args(["run-job", "--job-id", "0"])
    assert light == (exited.value.code, capsys.readouterr().err)
    assert light[0] == cli.EXIT_USAGE


@pytest.mark.parametrize(("command", "module"), sorted(cli.LIGHT_COMMANDS.items()))
def test_a_light_command_is_registered_by_its_module_alone(command: str, module: str) -> None:
    assert module in cli.COMMAND_MODULES
    parser = cli.build_parser([module])
    assert parser.parse_args([command]).command == command

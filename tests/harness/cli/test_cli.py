"""The posgen command line: every subcommand is wired, and --help stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest

from posgen.harness.cli import COMMANDS, build_parser

HEAVY = ("torch", "transformers", "lm_eval", "datasets", "matplotlib", "scipy", "pandas")


def test_every_subcommand_is_listed_in_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_subcommand_help_exits_zero(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser(command).parse_args([command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: posgen " + command in capsys.readouterr().out


@pytest.mark.parametrize("command", [None, *sorted(COMMANDS)])
def test_building_a_parser_imports_no_heavy_library_and_no_other_subcommand(command):
    code = (
        "import sys; from posgen.harness.cli import COMMANDS, build_parser; "
        f"build_parser({command!r}); "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules)); "
        "print(','.join(n for n, (m, _) in COMMANDS.items() if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    heavy, imported = out.stdout.splitlines()
    assert heavy == "", f"posgen {command or ''} --help imports {heavy}"
    assert imported == (command or ""), f"posgen {command or ''} --help imports {imported}"


def test_the_chosen_command_is_the_first_word_that_is_not_an_option():
    from posgen.harness.cli import chosen_command

    assert chosen_command(["--version"]) is None
    assert chosen_command(["run", "--model", "check"]) == "run"
    assert chosen_command(["nosuch", "run"]) is None

"""The posgen command line: every subcommand is wired, and --help stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest

from posgen.harness.cli import COMMANDS, build_parser

HEAVY = ("torch", "transformers", "lm_eval", "datasets", "matplotlib")


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
        build_parser().parse_args([command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: posgen " + command in capsys.readouterr().out


def test_building_the_parser_imports_no_heavy_library():
    code = (
        "import sys; from posgen.harness.cli import build_parser; build_parser(); "
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"posgen --help imports {out.stdout.strip()}"

"""A command is one module: ``cl-graft`` finds every module of ``cl_graft/cli`` that defines a click command of its
own name (no table to edit), and its ``AVALANCHE`` flag says whether it needs Avalanche."""
from __future__ import annotations

import sys

from click.testing import CliRunner

import cl_graft.cli
from cl_graft.cli import command_modules, main

DUMMY = '''"""``cl-graft dummy``: a command added as one file."""
import click

AVALANCHE = True


@click.command()
@click.option("--times", type=int, default=1)
def dummy(times):
    """Say hello (a command found without being listed anywhere)."""
    click.echo("hello " * times)
'''


def test_a_new_command_module_is_a_command(tmp_path, monkeypatch):
    (tmp_path / "dummy.py").write_text(DUMMY)
    (tmp_path / "helper.py").write_text('"""Shared code, no command."""\nVALUE = 1\n')
    monkeypatch.setattr(cl_graft.cli, "__path__", [*cl_graft.cli.__path__, str(tmp_path)])
    try:
        help_text = CliRunner().invoke(main, ["--help"]).output
        assert "dummy" in help_text and "Say hello" in help_text and "helper" not in help_text
        result = CliRunner().invoke(main, ["dummy", "--times", "2"])
        assert result.exit_code == 0 and result.output == "hello hello \n", result.output
        assert command_modules()["dummy"].AVALANCHE is True
    finally:
        monkeypatch.undo()
        for name in ("cl_graft.cli.dummy", "cl_graft.cli.helper"):
            sys.modules.pop(name, None)
    assert "dummy" not in CliRunner().invoke(main, ["--help"]).output


def test_the_commands_and_their_avalanche_flags():
    modules = command_modules()
    assert sorted(modules) == ["analyze", "export", "finetune", "localize", "multitask", "plot", "run", "surgical"]
    assert sorted(m for m, module in modules.items() if getattr(module, "AVALANCHE", False)) == ["export", "run"]

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


BARS = '''"""``cl-graft bars``: what the Hugging Face libraries' progress bars are set to while a command runs."""
import os

import click
from transformers.utils import logging


@click.command()
@click.option("--verbose", is_flag=True)
def bars(verbose):
    """Print the switches."""
    click.echo(f"{os.environ.get('HF_HUB_DISABLE_PROGRESS_BARS')} {logging.is_progress_bar_enabled()}")
'''


def test_library_progress_bars_only_with_verbose(tmp_path, monkeypatch):
    from transformers.utils import logging

    (tmp_path / "bars.py").write_text(BARS)
    monkeypatch.setattr(cl_graft.cli, "__path__", [*cl_graft.cli.__path__, str(tmp_path)])
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    try:
        assert CliRunner().invoke(main, ["bars"]).output == "1 False\n"             # the console shows progress
        assert CliRunner().invoke(main, ["bars", "--verbose"]).output == "None True\n"
        assert logging.is_progress_bar_enabled()                                        # put back
    finally:
        monkeypatch.undo()
        sys.modules.pop("cl_graft.cli.bars", None)


def test_every_commands_help_shows_readable_defaults():
    """No option's shown default is a Python repr (a settings field with a default factory showed
    ``<dataclasses._MISSING_TYPE object at 0x...>``)."""
    for name in command_modules():
        out = CliRunner().invoke(main, [name, "--help"], terminal_width=200).output
        assert "object at 0x" not in out and "MISSING" not in out, name
    run_help = CliRunner().invoke(main, ["run", "--help"], terminal_width=200).output
    assert "[default: auto]" in run_help

"""The ``cl-graft`` command line: the one place that wires the core, ``benchmarks`` and ``strategies``.

Each command lives in its own module and imports heavy things (torch models, Avalanche) only when run.
A :class:`~cl_graft.errors.UserError` (or an ``OSError``: an unwritable folder, a full disk) becomes a one-line
``error: ...`` on stderr and exit code 2; a :class:`~cl_graft.errors.DataWarning` a one-line ``warning: ...``.
"""
from __future__ import annotations

import shlex
import sys
import warnings

import click

from ..errors import DataWarning, UserError
from ..provenance import COMMAND_LINE


class _Group(click.Group):
    def main(self, args=None, prog_name=None, **extra):
        """Records the full command line (for run records) while the command runs."""
        argv = sys.argv[1:] if args is None else list(args)
        token = COMMAND_LINE.set(shlex.join(["cl-graft", *argv]))
        try:
            return super().main(args, prog_name, **extra)
        finally:
            COMMAND_LINE.reset(token)

    def invoke(self, ctx: click.Context):
        try:
            with warnings.catch_warnings():
                warnings.showwarning = _show_warning
                return super().invoke(ctx)
        except UserError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)
        except OSError as e:                                       # the machine's, not a bug: unwritable, disk full
            click.echo(f"error: {e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}", err=True)
            sys.exit(2)


_default_show = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    if issubclass(category, DataWarning):
        click.echo(f"warning: {message}", err=True)
    else:
        _default_show(message, category, filename, lineno, file, line)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="cl-graft")
def main() -> None:
    """Find where a fine-tuned language model keeps each task's skill, and learn tasks without forgetting."""


def _register() -> None:
    from . import analyze, export, finetune, localize, multitask, plot, run, surgical

    main.add_command(analyze.analyze)
    main.add_command(export.export)
    main.add_command(finetune.finetune)
    main.add_command(localize.localize)
    main.add_command(multitask.multitask)
    main.add_command(plot.plot)
    main.add_command(run.run)
    main.add_command(surgical.surgical)


_register()

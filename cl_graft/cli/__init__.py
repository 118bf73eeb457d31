"""The ``cl-graft`` command line: the one place that wires the core, ``benchmarks`` and ``strategies``.

Each command lives in its own module and imports heavy things (torch models, Avalanche) only when run.
A :class:`~cl_graft.errors.UserError` becomes a one-line ``error: ...`` on stderr and exit code 2.
"""
from __future__ import annotations

import sys

import click

from ..errors import UserError


class _Group(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="cl-graft")
def main() -> None:
    """Find where a fine-tuned language model keeps each task's skill, and learn tasks without forgetting."""


def _register() -> None:
    from . import analyze, finetune, localize, multitask, plot, run, surgical

    main.add_command(analyze.analyze)
    main.add_command(finetune.finetune)
    main.add_command(localize.localize)
    main.add_command(multitask.multitask)
    main.add_command(plot.plot)
    main.add_command(run.run)
    main.add_command(surgical.surgical)


_register()

"""The ``cl-graft`` command line: the one place that wires the core, ``benchmarks`` and ``strategies``.

A command is one module of this package, found when the command line runs (:func:`command_modules`): module
``cl_graft/cli/<name>.py`` defines the click command ``<name>`` (and ``AVALANCHE = True`` when the command uses
Avalanche); nothing else lists it. Modules without such a command (``common``) are helpers. Each command imports
heavy things (torch models, Avalanche) only when run.
A :class:`~cl_graft.errors.UserError` (or an ``OSError``: an unwritable folder, a full disk) becomes a one-line
``error: ...`` on stderr and exit code 2; a :class:`~cl_graft.errors.DataWarning` a one-line ``warning: ...``.

Started by ``torchrun`` (``torchrun --nproc_per_node N -m cl_graft.cli <command> ...``), a command joins the
process group first (:mod:`cl_graft.distributed`) and runs data-parallel; ranks other than 0 print nothing and
exit with rank 0's code. ``cl-graft --distributed <command>`` insists on that environment.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil
import shlex
import sys
import warnings
from types import ModuleType

import click
from tqdm.auto import tqdm

from .. import distributed
from ..errors import DataWarning, UserError
from ..provenance import COMMAND_LINE

HF_BARS = "HF_HUB_DISABLE_PROGRESS_BARS"
"""huggingface_hub's switch for its and transformers' progress bars (read when they are imported)."""

def command_modules() -> dict[str, ModuleType]:
    """Command name → its module: every module of this package that defines a click command of its own name.

    A module's ``AVALANCHE = True`` says the command uses Avalanche: under torchrun it is imported before the
    process group exists, because importing it later on a rank other than 0 fails (a logger built at import time
    refuses non-main processes)."""
    found = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if isinstance(getattr(module, info.name, None), click.Command):
            found[info.name] = module
    return found


class _Group(click.Group):
    """The ``cl-graft`` group: its commands are those of :func:`command_modules` (and any added with
    ``add_command``, which take precedence); errors become one line and exit code 2."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *command_modules()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return self.commands[cmd_name]
        module = command_modules().get(cmd_name)
        return getattr(module, cmd_name) if module is not None else None

    def main(self, args=None, prog_name=None, **extra):
        """Records the full command line (for run records) while the command runs."""
        argv = sys.argv[1:] if args is None else list(args)
        token = COMMAND_LINE.set(shlex.join(["cl-graft", *argv]))
        try:
            return super().main(args, prog_name, **extra)
        except UserError as e:            # before a command runs: a command module that cannot load (--help)
            _fail(f"error: {e}", distributed.is_main())
        finally:
            COMMAND_LINE.reset(token)

    def invoke(self, ctx: click.Context):
        main_rank = True
        argv = shlex.split(COMMAND_LINE.get() or "")[1:]
        try:
            with warnings.catch_warnings(), contextlib.ExitStack() as stack:
                warnings.showwarning = _show_warning
                if ctx.params.get("require_distributed") or distributed.launched():
                    modules = command_modules()
                    if any(getattr(modules.get(a), "AVALANCHE", False) for a in argv):
                        importlib.import_module("avalanche.training")
                    distributed.init(_device_arg(argv))
                    stack.callback(distributed.shutdown)
                    main_rank = distributed.is_main()
                    if not main_rank:
                        stack.enter_context(_silenced())
                if "--verbose" not in argv:
                    stack.enter_context(_library_bars_off())
                return super().invoke(ctx)
        except UserError as e:
            _fail(f"error: {e}", main_rank)
        except OSError as e:                                       # the machine's, not a bug: unwritable, disk full
            _fail(f"error: {e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}", main_rank)


def _fail(message: str, main_rank: bool) -> None:
    """Exit 2 with a one-line message (printed by rank 0 alone under torchrun)."""
    if main_rank:
        click.echo(message, err=True)
    sys.exit(2)


_default_show = warnings.showwarning


def _device_arg(args: list[str]) -> str:
    """The subcommand's ``--device`` value (``auto`` when not given), to choose gloo or NCCL before it runs."""
    for i, a in enumerate(args):
        if a == "--device" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--device="):
            return a.split("=", 1)[1]
    return "auto"


@contextlib.contextmanager
def _library_bars_off():
    """The Hugging Face libraries' own progress bars (transformers' "Loading weights", "Writing model shards")
    off while a command runs without ``--verbose``: its console shows the progress. ``HF_HUB_DISABLE_PROGRESS_BARS``
    is read when they are imported; transformers' switch, when it already is (a command run in-process), is put
    back afterwards."""
    before = os.environ.get(HF_BARS)
    os.environ[HF_BARS] = "1"
    hf_logging = sys.modules.get("transformers.utils.logging")
    was_on = hf_logging is not None and hf_logging.is_progress_bar_enabled()
    if was_on:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(HF_BARS, None)
        else:
            os.environ[HF_BARS] = before
        if was_on:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def _silenced():
    """Standard output and error to /dev/null (ranks other than 0 under torchrun)."""
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
        yield


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """cl-graft's own warnings (bad data, a task short of its region target) as one line, above any live
    progress line; other libraries' warnings as Python shows them."""
    if issubclass(category, DataWarning) or category.__module__.startswith("cl_graft."):
        with tqdm.external_write_mode(file=sys.stderr):
            click.echo(f"warning: {message}", err=True)
    else:
        _default_show(message, category, filename, lineno, file, line)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="cl-graft")
@click.option("--distributed", "require_distributed", is_flag=True,
              help="Run data-parallel over torchrun's processes (automatic under torchrun; this flag makes a "
                   "missing torchrun environment an error).")
def main(require_distributed: bool) -> None:
    """Find where a fine-tuned language model keeps each task's skill, and learn tasks without forgetting."""


"""The output rule every experiment script follows: ``--out DIR`` is claimed as a command claims its folder.

:func:`claimed` makes ``DIR`` the script's output folder with :func:`cl_graft.outdir.claim_out_dir`: one writer at
a time (a lock), a new or empty folder or the script's own earlier output (``--overwrite`` removes the files that
run wrote and nothing else; ``--resume`` where a script continues an earlier run), and a failed run removes only
its own files. The script's scratch (the ``cl-graft`` commands it starts, their logs) is ``DIR/work``
(:func:`work_folder`), lent to those commands (:data:`cl_graft.outdir.SCRATCH_ENV`); its results are files in
``DIR``; its run record, ``DIR/config.json`` (:data:`cl_graft.artifacts.RUN_CONFIG`: command line, settings,
versions, what it cost, every file it wrote), is written last. A page the repository keeps elsewhere
(``BENCHMARKS.md``, ``benchmarks/results/<name>.md``) is written to ``--page FILE`` as well, when given.

Files are written with :mod:`cl_graft.files` (each noted as the run's); what another program wrote (a
``cl-graft`` subprocess, Avalanche's loggers) is taken in with :func:`adopt`.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import click

from cl_graft.errors import UserError
from cl_graft.files import read_json, write_text
from cl_graft.outdir import SCRATCH_ENV, OutDir, claim_out_dir
from cl_graft.provenance import run_record
from cl_graft.written import note

WORK = "work"
"""The scratch sub-folder of ``--out``."""
OUT_OPTIONS = ("out", "overwrite", "resume", "page")
"""The options of :func:`out_options`: where the results go, not what they are (not in the settings)."""


class ScriptError(click.ClickException):
    """A one-line error (``Error: ...``) and exit code 2: bad input, as the commands report it."""

    exit_code = 2


def load_results(spec: str | os.PathLike) -> dict:
    """The ``results.json`` of a finished ``cl-graft run``: ``spec`` is its folder or the file itself, read and
    checked as ``cl-graft`` reads it (:func:`cl_graft.strategies.comparison.results_file.read_results`: every
    field's kind and range, rows as long as the stream, summaries that are their matrices').

    Raises:
        ScriptError: no such file, not JSON, or a field that fails those checks (one line naming it).
    """
    from cl_graft.strategies.comparison.results_file import read_results

    try:
        return read_results(spec)
    except UserError as e:
        raise ScriptError(str(e)) from None


def out_options(*, resume: bool = False, page: bool = False) -> Callable:
    """Adds ``--out DIR`` and ``--overwrite`` to a script's click command; with ``resume``, ``--resume``; with
    ``page``, ``--page FILE``."""
    opts = [click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
                         help="Output folder (new, empty, or this script's earlier output): results, the run "
                              "record config.json, scratch in work/."),
            click.option("--overwrite", is_flag=True, help="Replace this script's earlier results in --out.")]
    if resume:
        opts.append(click.option("--resume", is_flag=True,
                                 help="Continue this script's earlier run in --out (same settings)."))
    if page:
        opts.append(click.option("--page", type=click.Path(dir_okay=False, path_type=Path), default=None,
                                 help="Also write the Markdown page here (the copy the repository keeps)."))

    def decorate(f: Callable) -> Callable:
        for opt in reversed(opts):
            f = opt(f)
        return f
    return decorate


def settings_of(params: dict) -> dict:
    """A script's options but :data:`OUT_OPTIONS`, as JSON values (paths as strings, tuples as lists)."""
    return {k: _json_value(v) for k, v in params.items() if k not in OUT_OPTIONS}


def _json_value(value):
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple | list):
        return [_json_value(v) for v in value]
    return value


@contextlib.contextmanager
def claimed(script: str, params: dict, *, settings: dict | None = None, **record) -> Iterator[OutDir]:
    """The script's ``--out`` (``params["out"]``), claimed as ``experiments.<script>`` for the ``with`` block; when
    the block ends without an error the run record taken as it began is written (``settings``, default
    :func:`settings_of` ``params``, plus ``record``; its revision is the checkout's before the block wrote a
    tracked page). ``--overwrite`` and ``--resume`` are read from ``params``; a resumed run keeps
    its files when it fails. A :class:`~cl_graft.errors.UserError` becomes a :class:`ScriptError`.

    ``settings`` are what ``--resume`` compares: a script whose runs each record their own settings passes
    only what must match."""
    settings = settings_of(params) if settings is None else settings
    resume = bool(params.get("resume"))
    started = run_record(command=f"experiments.{script}", **settings, **record)   # the checkout as it starts,
    try:                                                                          # before a --page it writes
        with claim_out_dir(params["out"], f"experiments.{script}", settings=settings,
                           overwrite=bool(params.get("overwrite")), resume=resume, keep_on_error=resume) as run_dir:
            with _lent(run_dir.path / WORK):
                yield run_dir
            run_dir.finish(started)
    except UserError as e:
        raise ScriptError(str(e)) from None


@contextlib.contextmanager
def _lent(folder: Path) -> Iterator[None]:
    """:data:`~cl_graft.outdir.SCRATCH_ENV` names ``folder`` while the block runs (the commands the script starts
    inherit it), then what it was before."""
    before = os.environ.get(SCRATCH_ENV)
    os.environ[SCRATCH_ENV] = str(folder.absolute())
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SCRATCH_ENV, None)
        else:
            os.environ[SCRATCH_ENV] = before


def work_folder(run_dir: OutDir, *parts: str) -> Path:
    """``<out>/work/<parts...>``, made if missing."""
    folder = run_dir.path.joinpath(WORK, *parts)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def adopt(run_dir: OutDir, folder: Path) -> None:
    """Notes every file under ``folder`` (inside ``run_dir``) as written by this run: the folder is one the script
    gave another program (a ``cl-graft`` command it started, Avalanche's loggers), so what is in it is the run's."""
    for path in Path(folder).rglob("*"):
        if path.is_file() or path.is_symlink():
            note(path)


def write_page(text: str, run_dir: OutDir, name: str, page: Path | None) -> None:
    """The Markdown page ``name`` in ``--out``, and at ``--page`` when given."""
    write_text(run_dir.path / name, text)
    if page is not None:
        page.parent.mkdir(parents=True, exist_ok=True)
        write_text(page, text)


def combine_seeds(script: str, params: dict, result: str, name: str, make_page: Callable[[list[dict]], str]) -> None:
    """A probe's ``--combine A,B,...``: the page ``name`` in ``--out``, made by ``make_page`` from the ``result``
    files (JSON) of earlier runs, one per seed. They are read before ``--out`` is claimed, so bad input writes
    nothing.

    Raises:
        click.UsageError: fewer than two files.
    """
    results = [read_json(Path(p)) for p in params["combine"].split(",")]
    if len(results) < 2:
        raise click.UsageError(f"--combine needs the {result} of at least two seeds")
    with claimed(script, params) as run_dir:
        write_page(make_page(results), run_dir, name, None)
    print(f"-> {params['out'] / name}")

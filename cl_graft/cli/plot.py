"""``cl-graft plot``: redraw the figures of a results folder from its JSON, without recomputing anything."""
from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("results_dir", type=click.Path(file_okay=False))
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Folder for the PNGs (default: RESULTS_DIR/figures).")
def plot(results_dir, out):
    """Redraw every figure of RESULTS_DIR (a `cl-graft multitask` folder) and print its summary.

    --out must be a new or empty folder, or one an earlier `cl-graft plot` wrote (its figures are replaced)."""
    from ..folder_lock import FolderLock
    from ..outdir import claim_out_dir
    from ..provenance import COMMAND_LINE, portable_path
    from ..skillmaps.report import draw_figures, summary
    from ..skillmaps.results import FIGURES_DIR, load_skillmap

    sm = load_skillmap(results_dir)
    if out is None:
        fig_dir = Path(results_dir) / FIGURES_DIR                      # the multitask run's own figures
        lock = FolderLock(Path(results_dir), COMMAND_LINE.get() or "cl-graft plot").acquire()   # one writer
        try:
            paths = draw_figures(sm, fig_dir)
        finally:
            lock.release()
    else:
        settings = {"results_dir": portable_path(results_dir)}
        with claim_out_dir(out, "plot", settings=settings, overwrite=True) as run_dir:
            fig_dir = run_dir.path
            paths = draw_figures(sm, fig_dir)
            run_dir.finish({"command": "plot", "results_dir": portable_path(results_dir)})
    click.echo(summary(sm))
    click.echo(f"{len(paths)} figures -> {fig_dir}")

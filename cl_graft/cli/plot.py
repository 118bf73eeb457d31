"""``cl-graft plot``: redraw the figures of a results folder from its JSON, without recomputing anything."""
from __future__ import annotations

from pathlib import Path

import click


@click.command()
@click.argument("results_dir", type=click.Path(file_okay=False))
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Folder for the PNGs (default: RESULTS_DIR/figures).")
def plot(results_dir, out):
    """Redraw every figure of RESULTS_DIR (a `cl-graft multitask` folder) and print its summary."""
    from ..skillmaps.report import draw_figures, summary
    from ..skillmaps.results import FIGURES_DIR, load_skillmap

    sm = load_skillmap(results_dir)
    fig_dir = Path(out) if out else Path(results_dir) / FIGURES_DIR
    paths = draw_figures(sm, fig_dir)
    click.echo(summary(sm))
    click.echo(f"{len(paths)} figures -> {fig_dir}")

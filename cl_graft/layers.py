"""The package's one dependency order, as data: which rooms (modules and packages) sit on which layer.

A module may import its own room and the rooms of lower layers; rooms of one layer do not import each other;
nothing imports upwards, nothing imports the CLI but the CLI, and only :data:`AVALANCHE_GLUE` imports Avalanche.
``tests/core/test_layout.py`` reads every import of every module and checks it against :data:`LAYERS`; README's
Layout section shows the same order. A new module inside a declared room (a command in ``cl_graft/cli/``, a
plugin in ``strategies/plugins/``) needs no change here; a new room does.
"""
from __future__ import annotations

PACKAGES = ("cl_graft", "cl_graft.strategies", "cl_graft.benchmarks")
"""The installed packages: ``cl_graft/`` and the two folders mapped into it (``strategies/``, ``benchmarks/``)."""

LAYERS: tuple[dict[str, tuple[str, ...]], ...] = (  # bottom first; room → its modules (and their submodules)
    {"files": ("cl_graft.errors", "cl_graft.files", "cl_graft.written", "cl_graft.schema", "cl_graft.folder_lock"),
     "layers": ("cl_graft.layers",)},
    {"basics": ("cl_graft.ops", "cl_graft.metrics", "cl_graft.task", "cl_graft.distributed", "cl_graft.console")},
    {"training": ("cl_graft.training",), "provenance": ("cl_graft.provenance",)},
    {"regions": ("cl_graft.regions",)},
    {"grafting": ("cl_graft.grafting",), "presets": ("cl_graft.presets",),
     "artifacts": ("cl_graft.artifacts",)},
    {"facade": ("cl_graft.__init__",)},             # `import cl_graft`: the public names of the layers below
    {"plotting": ("cl_graft.plotting",), "outdir": ("cl_graft.outdir",),
     "benchmarks": ("cl_graft.benchmarks.__init__", "cl_graft.benchmarks.data", "cl_graft.benchmarks.tasks",
                    "cl_graft.benchmarks.streams", "cl_graft.benchmarks.digits", "cl_graft.benchmarks.families")},
    # the command drivers (experiment.py, tables and figures in report.py) and the Avalanche glue's base
    {"localize": ("cl_graft.localize",), "surgical": ("cl_graft.surgical",), "analyze": ("cl_graft.analyze",),
     "skillmaps": ("cl_graft.skillmaps",),
     "strategies": ("cl_graft.strategies.__init__", "cl_graft.strategies.adapter")},
    # what a method's entry implements: StrategyEntry, its settings base, the settings every strategy shares
    {"strategies.interface": ("cl_graft.strategies.interface",)},
    {"strategies.graft": ("cl_graft.strategies.graft",)},          # the graft method
    {"strategies.plugins": ("cl_graft.strategies.plugins",)},      # other plugins (PackNet, training recipe)
    {"strategies.baselines": ("cl_graft.strategies.baselines",)},  # Avalanche's stock strategies' entries
    {"strategies.comparison": ("cl_graft.strategies.comparison",)},  # the harness behind `cl-graft run`
    {"experiments": ("cl_graft.benchmarks.experiments",)},
    {"cli": ("cl_graft.cli",)},                                    # one module per command
)
"""Layer → room → the dotted names it covers (``pkg.__init__``: the package module alone)."""

AVALANCHE_GLUE = ("cl_graft.strategies", "cl_graft.benchmarks")
"""The only packages whose modules import Avalanche; the core and the CLI reach it only through them."""

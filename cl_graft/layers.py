"""The package's one dependency order, as data: which rooms (modules and packages) sit on which layer.

A module may import its own room and the rooms of lower layers; rooms of one layer do not import each other;
nothing imports upwards, nothing imports the CLI but the CLI, and only :data:`AVALANCHE_GLUE` imports Avalanche.
``tests/core/test_layout.py`` reads every import of every module and checks it against :data:`LAYERS`; README's
Layout section shows the same order. A new module inside a declared room (a command in ``cl_graft/cli/``, a
baseline in ``strategies/baselines/``) needs no change here; a new room (a method's folder) does.
"""
from __future__ import annotations

PACKAGES = ("cl_graft", "cl_graft.strategies", "cl_graft.benchmarks")
"""The installed packages: ``cl_graft/`` and the two folders mapped into it (``strategies/``, ``benchmarks/``)."""

LAYERS: tuple[dict[str, tuple[str, ...]], ...] = (  # bottom first; room → its modules (and their submodules)
    {"files": ("cl_graft.errors", "cl_graft.files", "cl_graft.written", "cl_graft.schema", "cl_graft.folder_lock",
               "cl_graft.units"),
     "layers": ("cl_graft.layers",)},
    {"basics": ("cl_graft.ops", "cl_graft.metrics", "cl_graft.task", "cl_graft.distributed", "cl_graft.console",
                "cl_graft.machine"),
     "heads": ("cl_graft.heads",),                  # closed-form classifier heads on fixed features (pure torch)
     "plugin_points": ("cl_graft.plugin_points",)},     # entry-point plugins: stream families, strategies
    {"training": ("cl_graft.training",), "provenance": ("cl_graft.provenance",)},
    {"regions": ("cl_graft.regions",)},
    {"grafting": ("cl_graft.grafting",), "presets": ("cl_graft.presets",),
     "artifacts": ("cl_graft.artifacts",)},
    {"facade": ("cl_graft.__init__",)},             # `import cl_graft`: the public names of the layers below
    {"plotting": ("cl_graft.plotting",), "outdir": ("cl_graft.outdir",),
     "benchmarks": ("cl_graft.benchmarks.__init__", "cl_graft.benchmarks.data", "cl_graft.benchmarks.tasks",
                    "cl_graft.benchmarks.intent_labels",
                    "cl_graft.benchmarks.streams", "cl_graft.benchmarks.digits", "cl_graft.benchmarks.families")},
    # the command drivers (experiment.py, tables and figures in report.py) and the Avalanche glue's base
    {"localize": ("cl_graft.localize",), "surgical": ("cl_graft.surgical",), "analyze": ("cl_graft.analyze",),
     "skillmaps": ("cl_graft.skillmaps",),
     "strategies": ("cl_graft.strategies.__init__", "cl_graft.strategies.adapter",
                    "cl_graft.strategies.head_inputs", "cl_graft.strategies.eval_rows")},
    # what every method implements (StrategyEntry, its settings, the shared recipe, the scenario's model, how
    # a method registers), and the plugins any strategy may use (the training recipe, SI)
    {"strategies.interface": ("cl_graft.strategies.interface",),
     "strategies.plugins": ("cl_graft.strategies.plugins",)},
    # serving rows without task labels: model states switched in place, θ_pre features, the closed-form routers
    # and the rules; graft and PackNet use it
    {"strategies.routing": ("cl_graft.strategies.routing",)},
    # the methods (METHODS), each a folder declaring its entries; one built on another sits above it
    {"strategies.graft": ("cl_graft.strategies.graft",),
     "strategies.baselines": ("cl_graft.strategies.baselines",)},
    {"strategies.packnet": ("cl_graft.strategies.packnet",)},        # PackNet, on graft's owner map
    {"strategies.comparison": ("cl_graft.strategies.comparison",)},  # the harness (HARNESS): no method
    {"experiments": ("cl_graft.benchmarks.experiments",)},
    {"cli": ("cl_graft.cli",)},                                    # one module per command
)
"""Layer → room → the dotted names it covers (``pkg.__init__``: the package module alone)."""

METHODS = ("strategies.graft", "strategies.packnet", "strategies.baselines")
"""The methods' rooms: none imports the harness, and the harness imports none of them; it finds their entries
by discovery (``cl_graft.strategies.interface.registration``). A method built on another (PackNet on graft)
sits on a layer above it, so the import is declared here."""

HARNESS = "strategies.comparison"
"""The room of the harness behind ``cl-graft run`` (registry, runner, tuning, report)."""

AVALANCHE_GLUE = ("cl_graft.strategies", "cl_graft.benchmarks")
"""The only packages whose modules import Avalanche; the core and the CLI reach it only through them."""

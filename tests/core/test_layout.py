"""The package's one dependency order: every import of every module of the installed ``cl_graft`` (with
``cl_graft.strategies`` and ``cl_graft.benchmarks``) is read with ``ast`` and checked against ``LAYERS`` of
:mod:`cl_graft.layers`, the one place that declares the order.

A module may import its own room and the rooms of lower layers; rooms of one layer do not import each other;
nothing imports upwards, nothing imports the CLI but the CLI, nobody imports another module's private
(``_name``) names, there is no import cycle, and ``import cl_graft`` does not import Avalanche. The methods of
``cl-graft run`` (``METHODS``) never import the harness (``HARNESS``), the harness imports no method, and
neither the harness nor the interface below the methods names a strategy. Imports inside
functions count as much as those at the top: a lazy import running upwards is still a dependency upwards.
"""
from __future__ import annotations

import ast
import re

from cl_graft.layers import AVALANCHE_GLUE, HARNESS, LAYERS, METHODS

from helpers import package_modules


def _room_of(module: str) -> tuple[int, str]:
    """(layer index, room) of the longest declared name that is ``module`` or a package above it."""
    best: tuple[int, int, str] | None = None
    for layer, rooms in enumerate(LAYERS):
        for room, names in rooms.items():
            for name in names:
                package = name.removesuffix(".__init__")     # `<package>.__init__`: the package module only
                if package != name:
                    covers = module == package
                else:
                    covers = module == name or module.startswith(name + ".")
                if covers and (best is None or len(name) > best[0]):
                    best = (len(name), layer, room)
    if best is None:
        raise AssertionError(f"{module} is in no room of LAYERS: declare where it sits")
    return best[1], best[2]


MODULES = package_modules()


def _imports(module: str, source: str, *, is_package: bool) -> list[tuple[int, str, str | None]]:
    """``(line, module, name or None)`` of every cl_graft/avalanche import in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                is_module = sub in MODULES
                found.append((node.lineno, sub, None) if is_module else (node.lineno, target, alias.name))
    return [f for f in found if f[1].split(".")[0] in ("cl_graft", "avalanche")]


GRAPH = {m: _imports(m, p.read_text(encoding="utf-8"), is_package=p.name == "__init__.py")
         for m, p in MODULES.items()}


def test_every_module_is_found_and_declared():
    assert {"cl_graft.files", "cl_graft.training.finetune", "cl_graft.cli", "cl_graft.strategies",
            "cl_graft.benchmarks.data"} <= set(MODULES)
    for module in MODULES:
        _room_of(module)


def test_no_import_runs_up_or_sideways():
    bad: list[str] = []
    for module, imports in GRAPH.items():
        layer, room = _room_of(module)
        for line, target, _ in imports:
            if target.startswith("avalanche"):
                continue
            if target not in MODULES:
                bad.append(f"{MODULES[module]}:{line}: {module} imports {target}, not a module of cl_graft")
                continue
            t_layer, t_room = _room_of(target)
            if t_room != room and t_layer >= layer:
                where = "upwards" if t_layer > layer else "sideways"
                bad.append(f"{MODULES[module]}:{line}: {module} ({room}) imports {target} ({t_room}) {where}")
    assert not bad, "\n".join(dict.fromkeys(bad))


def test_only_the_cli_imports_the_cli():
    bad = [f"{MODULES[m]}:{line}: {m} imports {t}" for m, imports in GRAPH.items() for line, t, _ in imports
           if (t == "cl_graft.cli" or t.startswith("cl_graft.cli.")) and not m.startswith("cl_graft.cli")]
    assert not bad, "\n".join(bad)


def test_no_module_imports_another_modules_private_names():
    bad = []
    for module, path in MODULES.items():
        bound: dict[str, str] = {}                             # local name → cl_graft module it is bound to
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, target, name in GRAPH[module]:
            if name is not None and name.startswith("_") and target != module:
                bad.append(f"{path}:{line}: {module} imports {name} from {target}")
            if name is None and target.startswith("cl_graft"):
                bound[target.rsplit(".", 1)[-1]] = target
        for node in ast.walk(tree):
            private = isinstance(node, ast.Attribute) and node.attr[:1] == "_" and node.attr[:2] != "__"
            if private and isinstance(node.value, ast.Name) and node.value.id in bound:
                bad.append(f"{path}:{node.lineno}: {module} uses {bound[node.value.id]}.{node.attr}")
    assert not bad, "\n".join(bad)


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the directed graph ``edges`` (node → successors), or None."""
    state: dict[str, int] = {}                                 # 1: on the stack, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for succ in sorted(edges.get(node, ())):
            if state.get(succ) == 1:
                return stack[stack.index(succ):] + [succ]
            if succ not in state and (cycle := visit(succ)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    return next((c for node in sorted(edges) if node not in state and (c := visit(node))), None)


def test_no_import_cycle_between_modules_or_rooms():
    modules = {m: {t for _, t, _ in imports if t in MODULES and t != m} for m, imports in GRAPH.items()}
    rooms: dict[str, set[str]] = {}
    for m, targets in modules.items():
        rooms.setdefault(_room_of(m)[1], set()).update(_room_of(t)[1] for t in targets)
    for room, targets in rooms.items():
        targets.discard(room)
    for what, edges in (("modules", modules), ("rooms", rooms)):
        cycle = _cycle(edges)
        assert cycle is None, f"import cycle between {what}: " + " -> ".join(cycle)


def test_only_the_avalanche_glue_imports_avalanche():
    bad = [f"{MODULES[m]}:{line}: {m} imports {t}" for m, imports in GRAPH.items() for line, t, _ in imports
           if t.split(".")[0] == "avalanche" and not m.startswith(AVALANCHE_GLUE)]
    assert not bad, "\n".join(bad)


def test_importing_the_packages_does_not_import_avalanche(fresh_imports):
    loaded = fresh_imports["cl_graft.strategies"]              # cl_graft, its benchmarks and strategies (conftest)
    assert not [m for m in loaded if m.split(".")[0] == "avalanche"], loaded


def test_the_walker_sees_lazy_relative_and_module_imports():
    source = ("from .. import ops\nimport cl_graft.files\nfrom .evaluate import _length\n"
              "def f():\n    from ..localize.experiment import localize_table\n")
    assert _imports("cl_graft.training.finetune", source, is_package=False) == [
        (1, "cl_graft.ops", None), (2, "cl_graft.files", None), (3, "cl_graft.training.evaluate", "_length"),
        (5, "cl_graft.localize.experiment", "localize_table")]
    assert _room_of("cl_graft.localize.experiment")[0] > _room_of("cl_graft.training.finetune")[0]
    assert _room_of("cl_graft") == (5, "facade") and _room_of("cl_graft.strategies")[1] == "strategies"
    assert _room_of("cl_graft.strategies.graft.plugin")[1] == "strategies.graft"
    assert _room_of("cl_graft.benchmarks.experiments.region_sweep")[1] == "experiments"


def _crossings(sources: tuple[str, ...], targets: tuple[str, ...]) -> list[str]:
    """``file:line: module (room) imports target (room)`` for every import from a room of ``sources`` into a
    room of ``targets``."""
    return [f"{MODULES[m]}:{line}: {m} ({_room_of(m)[1]}) imports {t} ({_room_of(t)[1]})"
            for m, imports in GRAPH.items() if _room_of(m)[1] in sources
            for line, t, _ in imports if t in MODULES and _room_of(t)[1] in targets]


def test_no_method_imports_the_harness():
    assert {"strategies.graft", "strategies.baselines"} <= set(METHODS)
    bad = _crossings(METHODS, (HARNESS,))
    assert not bad, "\n".join(bad)


def test_the_harness_imports_no_method():
    """It finds the methods' entries by discovery (``cl_graft.strategies.interface.registration``)."""
    bad = _crossings((HARNESS,), METHODS)
    assert not bad, "\n".join(bad)


def test_the_walker_sees_an_import_of_a_method_by_the_harness():
    source = "from ..baselines import ENTRIES\ndef f():\n    from ..graft.sizing import size_line\n"
    found = _imports("cl_graft.strategies.comparison.report", source, is_package=False)
    rooms = [(line, _room_of(t)[1]) for line, t, _ in found]
    assert rooms == [(1, "strategies.baselines"), (3, "strategies.graft")]


NAMES_EXEMPT = {"cl_graft.strategies.comparison.metrics"}
"""Harness modules whose text may name a strategy: the sanity flags of
:mod:`~cl_graft.strategies.comparison.metrics` are defined against Naive (the flag ``equals_naive`` and its
message, kept in results files and read by pages); which result plays that reference the report reads from the
entries (their ``reference``)."""


def test_the_shared_harness_names_no_strategy():
    """The harness (its runner, registry, tuning, progress line, report...), the interface below the methods
    and the command read the strategies' entries (:mod:`cl_graft.strategies.interface.entry`): no strategy's
    name, settings class or plugin appears in them, docstrings and comments included."""
    from cl_graft.strategies.comparison.registry import STRATEGIES

    names = "|".join(re.escape(n) for n in STRATEGIES)
    word = re.compile(rf"(?<![\w-])({names})(?![\w-]| head)|Graft\w*|PackNet\w*|OwnerMap|owner_plugin|"
                      r"\bgraft\.|plugins\.packnet|Replay\w*|EWC\w*|LwF\w*|region_density|\bsizing\b")
    rooms = (HARNESS, "strategies.interface")
    modules = [m for m in MODULES if _room_of(m)[1] in rooms and m not in NAMES_EXEMPT] + ["cl_graft.cli.run"]
    assert {"cl_graft.strategies.comparison.report", "cl_graft.strategies.interface.entry"} <= set(modules)
    found = []
    for module in modules:
        text = MODULES[module].read_text(encoding="utf-8").replace("cl-graft", "").replace("cl_graft", "")
        found += [f"{MODULES[module]}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
                  for m in word.finditer(text)]
    assert not found, "\n".join(found)

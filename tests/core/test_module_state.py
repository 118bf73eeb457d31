"""No module of the installed package holds mutable state at module level (read with ``ast``, every module of
``cl_graft``, ``cl_graft.strategies`` and ``cl_graft.benchmarks``).

The rule, checkable and checked here:

1. A module-level name bound to a container (a list, dict or set display or comprehension, or a call of ``list``,
   ``dict``, ``set``, ``defaultdict``, ``OrderedDict``, ``Counter`` or ``deque``) is an ALL_CAPS constant (or a
   dunder such as ``__all__``): built at import, read afterwards.
2. No function changes a module-level name: no ``global`` statement; no mutating method (``append``, ``add``,
   ``update``, ...), item assignment or deletion, or attribute assignment on a module-level name that the function
   does not bind itself.

State that belongs to one command travels with the command: passed explicitly (the command's
:class:`~cl_graft.console.Console`), or in a :class:`contextvars.ContextVar` holding an immutable value, set and
reset around the command (the command line, :mod:`cl_graft.written`'s open ledgers).
"""
from __future__ import annotations

import ast

from helpers import package_modules

CONTAINER_CALLS = {"list", "dict", "set", "defaultdict", "OrderedDict", "Counter", "deque"}
MUTATORS = {"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem", "remove", "discard",
            "clear", "sort", "reverse", "appendleft", "extendleft", "__setitem__", "__delitem__"}


def _is_container(node: ast.expr) -> bool:
    if isinstance(node, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)):
        return True
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return name in CONTAINER_CALLS
    return False


def _targets(stmt: ast.stmt) -> list[tuple[ast.expr, ast.expr | None]]:
    """(target, value) of a module-level assignment."""
    if isinstance(stmt, ast.Assign):
        return [(t, stmt.value) for t in stmt.targets]
    if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        return [(stmt.target, stmt.value)]
    return []


def module_level_containers(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, name) of module-level names bound to containers that are not ALL_CAPS constants."""
    bad = []
    for stmt in tree.body:
        for target, value in _targets(stmt):
            dunder = target.id.startswith("__") if isinstance(target, ast.Name) else False   # __all__
            if isinstance(target, ast.Name) and value is not None and _is_container(value) \
                    and not target.id.lstrip("_").isupper() and not dunder:
                bad.append((stmt.lineno, target.id))
    return bad


def _module_names(tree: ast.Module) -> set[str]:
    names = set()
    for stmt in tree.body:
        for target, _ in _targets(stmt):
            names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _local_names(func: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """Names a function binds itself (parameters, assignments, loop and with targets, imports, nested defs)."""
    args = func.args
    names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg) if a}
    for node in ast.walk(func):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not func:
            names.add(node.name)
    return names


def functions_changing_module_names(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, what) of every change a function makes to a module-level name."""
    module, bad = _module_names(tree), []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        shared = module - _local_names(func)
        for node in ast.walk(func):
            if isinstance(node, ast.Global):
                bad.append((node.lineno, f"global {', '.join(node.names)}"))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in shared \
                    and node.func.attr in MUTATORS:
                bad.append((node.lineno, f"{node.func.value.id}.{node.func.attr}(...)"))
            elif isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, (ast.Store, ast.Del)) \
                    and isinstance(node.value, ast.Name) and node.value.id in shared:
                bad.append((node.lineno, f"{node.value.id}{'[...]' if isinstance(node, ast.Subscript) else '.'} ="))
    return bad


def test_no_module_holds_mutable_state():
    bad = []
    for module, path in package_modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bad += [f"{path}:{line}: module-level container {name!r} is not an ALL_CAPS constant"
                for line, name in module_level_containers(tree)]
        bad += [f"{path}:{line}: a function changes module state: {what}"
                for line, what in functions_changing_module_names(tree)]
    assert not bad, "\n".join(bad)


def test_the_checks_see_what_they_forbid():
    source = ("_open: list = []\nCACHE = {}\nseen = set()\nLIMIT = 3\n"
              "def note(x):\n    _open.append(x)\n    CACHE[x] = 1\n"
              "def bump():\n    global LIMIT\n    LIMIT += 1\n"
              "def fine(CACHE):\n    CACHE['a'] = 1\n    local = []\n    local.append(1)\n")
    tree = ast.parse(source)
    assert module_level_containers(tree) == [(1, "_open"), (3, "seen")]     # CACHE is a constant by its name ...
    assert functions_changing_module_names(tree) == [(6, "_open.append(...)"), (7, "CACHE[...] ="),
                                                     (9, "global LIMIT")]   # ... but changed in a function

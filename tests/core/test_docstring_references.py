"""Every name a docstring of the installed package points at exists: Sphinx roles (``:func:`~.files.atomic_write```,
``:class:``, ``:meth:``, ``:mod:``, ``:data:``, ``:attr:``, ``:exc:``) and literal dotted names that start with
``cl_graft.``. Docstrings (module, class, function) are read with ``ast``; names are resolved by importing.

A role's target resolves as Sphinx would find it from where it is written: ``.x.y`` and ``x.y`` relative to the
module's package or any package above it (``.x.y`` also as the suffix of any module's name), a bare name in the
module, the enclosing class or its bases; an attribute may be an instance attribute (``self.name = ...`` in the
class or a base) or a dataclass field.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import re

import pytest

from cl_graft.layers import PACKAGES

from helpers import package_modules

ROLE = re.compile(r":(?:func|class|meth|mod|data|attr|exc|obj):`(?:[^`<]*<)?~?([\w.]+)(?:\(\))?>?`")
LITERAL = re.compile(r"``(cl_graft(?:\.\w+)+)``")
MISSING = object()


def _resolve_absolute(dotted: str):
    """The object named ``dotted`` (a module, then attributes), or MISSING."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for i, part in enumerate(parts[cut:], start=cut):
            found = _member(obj, part)
            if found is MISSING:
                return MISSING
            obj = found
        return obj
    return MISSING


def _member(obj, name: str):
    """``obj.name``, an instance attribute a class sets (``self.name``) or a dataclass field, else MISSING."""
    if hasattr(obj, name):
        return getattr(obj, name)
    if inspect.isclass(obj):
        for cls in obj.__mro__:
            if name in getattr(cls, "__dataclass_fields__", {}) or name in getattr(cls, "__annotations__", {}):
                return name
            try:
                source = inspect.getsource(cls)
            except (OSError, TypeError):
                continue
            if re.search(rf"\bself\.{re.escape(name)}\b\s*(?::[^=\n]+)?=", source):
                return name
    return MISSING


def resolves(target: str, module: str, cls: str | None) -> bool:
    """Whether ``target`` (as written in a docstring of ``module``, inside class ``cls``) names something."""
    parts = module.split(".")
    scopes = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]          # the module, its packages
    name = target.lstrip(".")
    candidates = [f"{scope}.{name}" for scope in scopes]
    if cls is not None:
        candidates.insert(0, f"{module}.{cls}.{name}")
    if target.startswith("."):                 # Sphinx: else a suffix of any module's name (``.sizing``)
        pieces = name.split(".")
        candidates += [".".join([m, *pieces[k:]]) for m in package_modules() for k in range(1, len(pieces) + 1)
                       if m.endswith("." + ".".join(pieces[:k]))]
    else:
        candidates.append(name)
    return any(_resolve_absolute(c) is not MISSING for c in candidates)


def _docstrings(tree: ast.Module):
    """(line, enclosing class or None, docstring) of the module, every class and every function."""
    if (doc := ast.get_docstring(tree)) is not None:
        yield 1, None, doc

    def walk(node, cls):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(child)
                inner = child.name if isinstance(child, ast.ClassDef) else cls
                if doc is not None:
                    yield child.lineno, inner, doc
                yield from walk(child, inner)

    yield from walk(tree, None)


def references(source: str) -> list[tuple[int, str | None, str]]:
    """(line, enclosing class, target) of every role target and ``cl_graft.`` literal in the docstrings."""
    found = []
    for line, cls, doc in _docstrings(ast.parse(source)):
        found += [(line, cls, m.group(1)) for m in ROLE.finditer(doc)]
        found += [(line, cls, m.group(1)) for m in LITERAL.finditer(doc)]
    return found


@pytest.mark.parametrize("root", PACKAGES)
def test_every_docstring_reference_resolves(root):
    bad = []
    for module, path in package_modules().items():
        if max((p for p in PACKAGES if module == p or module.startswith(p + ".")), key=len) != root:
            continue
        for line, cls, target in references(path.read_text(encoding="utf-8")):
            if not resolves(target, module, cls):
                bad.append(f"{path}:{line}: {target}")
    assert not bad, "names no longer there:\n" + "\n".join(bad)


def test_the_reader_finds_roles_and_literals_and_misses_nothing_gone():
    source = ('"""See :func:`~cl_graft.regions.io.atomic_write` and ``cl_graft.files``."""\n'
              'class A:\n    """:meth:`run` and :attr:`B.x`."""\n')
    assert references(source) == [(1, None, "cl_graft.regions.io.atomic_write"), (1, None, "cl_graft.files"),
                                  (2, "A", "run"), (2, "A", "B.x")]
    assert not resolves("cl_graft.regions.io.atomic_write", "cl_graft.written", None)     # the stale reference
    assert resolves("~.files.atomic_write".lstrip("~"), "cl_graft.written", None)
    assert resolves(".sizing", "cl_graft.strategies.comparison.registry", None)   # a suffix: ...graft.sizing
    assert not resolves(".tuning.dev_stream", "cl_graft.strategies.comparison.runner", None)
    assert resolves("Console.verbose", "cl_graft.console", None) and resolves("save", "cl_graft.regions.region",
                                                                             "Region")

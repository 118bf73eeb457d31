"""The test suite's own layout: test files sit in folders that mirror the packages (only ``conftest.py`` and the
``helpers`` package at the top of ``tests/``; ``helpers`` holds no test file), their basenames are unique (pytest's
default import mode imports each as a top-level module), and no file imports a test module or ``conftest``: what
files share is in ``helpers``, fixtures are in ``conftest.py``. Every file's imports are read with ``ast``, lazy ones inside functions included."""
from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from helpers import REPO_ROOT

TESTS = REPO_ROOT / "tests"
TOP_LEVEL = {"conftest.py"}
HELPERS = TESTS / "helpers"


def _files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def _is_test_module(name: str) -> bool:
    """A dotted module name any part of which is a test module (``test_*``) or ``conftest``."""
    return any(part.startswith("test_") or part == "conftest" for part in name.split("."))


def _bad_imports(source: str) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in ``source`` of a test module or conftest: ``import``, ``from ...
    import``, relative imports, and ``__import__`` / ``importlib.import_module`` of a constant name."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            bad += [(node.lineno, a.name) for a in node.names if _is_test_module(a.name)]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            names = [f"{module}.{a.name}" if node.module else a.name for a in node.names]
            if node.level or _is_test_module(node.module or "") or any(map(_is_test_module, names)):
                bad.append((node.lineno, module))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            target = node.args[0].value
            if called in ("__import__", "import_module") and isinstance(target, str) and _is_test_module(target):
                bad.append((node.lineno, target))
    return sorted(bad)


def test_no_file_imports_a_test_module_or_conftest():
    bad = [f"{path.relative_to(REPO_ROOT)}:{line}: imports {module}"
           for path in _files() for line, module in _bad_imports(path.read_text(encoding="utf-8"))]
    assert not bad, "\n".join(bad) + "\n(shared helpers go in tests/helpers/, fixtures in tests/conftest.py)"


def test_only_conftest_and_helpers_at_the_top_of_tests():
    flat = {p.name for p in TESTS.glob("*.py")}
    assert flat == TOP_LEVEL, f"move {sorted(flat - TOP_LEVEL)} into the folder of the package they test"
    assert (HELPERS / "__init__.py").is_file()
    tests_there = sorted(p.name for p in HELPERS.rglob("test_*.py"))
    assert not tests_there, f"helpers holds no tests: move {tests_there} into the folder of the package they test"


def test_test_file_basenames_are_unique():
    names = Counter(p.name for p in _files() if p.name.startswith("test_"))
    assert len(names) > 30
    assert not [n for n, c in names.items() if c > 1], [n for n, c in names.items() if c > 1]


def test_the_walker_sees_every_kind_of_import():
    source = ("import test_cli_run\nfrom test_strategy import _rows\nfrom conftest import SENTIMENT\n"
              "import conftest as c\nfrom . import helpers\nimport tests.core.test_ops\n"
              "def f():\n    from test_multitask import tiny_splits\n    return __import__('conftest').PAIR\n"
              "importlib.import_module('test_graft')\n"
              "import helpers\nfrom helpers import SENTIMENT\nimport torch.testing\nfrom pytest import approx\n")
    assert _bad_imports(source) == [
        (1, "test_cli_run"), (2, "test_strategy"), (3, "conftest"), (4, "conftest"), (5, "."),
        (6, "tests.core.test_ops"), (8, "test_multitask"), (9, "conftest"), (10, "test_graft")]

"""The built wheel maps strategies/ and benchmarks/ to cl_graft.strategies / cl_graft.benchmarks and holds every
package the checkout has (setup.py derives the list); CI runs the README's test command."""
import re
import subprocess
import sys
import zipfile

from helpers import REPO_ROOT, package_modules

ROOT = REPO_ROOT


def test_wheel_contains_mapped_subpackages(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(ROOT),
                    "-w", str(tmp_path)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("cl_graft-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"cl_graft/strategies/__init__.py", "cl_graft/benchmarks/tasks.py", "cl_graft/cli/__init__.py",
            "cl_graft/strategies/graft/plugin.py", "cl_graft/strategies/packnet/plugin.py",
            "cl_graft/strategies/comparison/registry.py"} <= names
    assert not any(n.startswith(("strategies/", "benchmarks/", "tests/")) for n in names)
    folders = {m.replace(".", "/") + "/__init__.py" for m, path in package_modules().items() if path.name == "__init__.py"}
    assert folders <= names, f"setup.py's derived package list misses {sorted(folders - names)}"
    modules = {m.replace(".", "/") + ".py" for m, path in package_modules().items() if path.name != "__init__.py"}
    assert modules <= names                                  # every module of every package, e.g. cli/run.py
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "cl-graft = cl_graft.cli:main" in entry


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    command = re.search(r"^TEST_COMMAND='(.+)'$", ci, re.MULTILINE).group(1)
    assert command in (ROOT / "README.md").read_text()


def test_the_licence_is_an_spdx_string_the_build_takes_without_a_deprecation(tmp_path):
    """setuptools deprecates the ``project.license`` table (PEP 639); the SPDX string names the same licence."""
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
                            str(ROOT), "-w", str(tmp_path)], check=True, capture_output=True, text=True)
    assert "project.license" not in built.stdout + built.stderr
    (wheel,) = tmp_path.glob("cl_graft-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in metadata.splitlines()

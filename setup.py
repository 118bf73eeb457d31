"""The package list, derived: setuptools' ``find_packages`` over the three folders the installed ``cl_graft`` is made
of (``cl_graft/``, and ``strategies/`` and ``benchmarks/`` installed as ``cl_graft.strategies`` and
``cl_graft.benchmarks``); everything else about the project is in ``pyproject.toml``. A new package folder under
any of them (one with an ``__init__.py``) is installed without an edit here."""
from setuptools import find_packages, setup

MAPPED = {"cl_graft": "cl_graft", "cl_graft.strategies": "strategies", "cl_graft.benchmarks": "benchmarks"}
"""Installed package → the repository folder it comes from."""


def packages() -> list[str]:
    """Every package under the folders of :data:`MAPPED`, named as installed."""
    found = []
    for name, folder in MAPPED.items():
        found += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]
    return sorted(found)


if __name__ == "__main__":
    setup(packages=packages(), package_dir=MAPPED)

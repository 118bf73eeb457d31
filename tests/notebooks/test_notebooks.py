"""The notebooks execute without error on a small results folder made here by a tiny-model skill-map run, and on
the committed artifacts they read by default (a clone runs them as they are).

Self-sufficient on a fresh machine: the kernel is a kernelspec written into a temporary JUPYTER_PATH that runs
this very interpreter, so no `ipykernel install` is needed.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from cl_graft.skillmaps.experiment import run_skillmap

from helpers import REPO_ROOT, tiny_bert, tiny_skillmap_config, tiny_splits

NOTEBOOKS = REPO_ROOT / "notebooks"
NAMES = ("01_quickstart.ipynb", "02_region_overlap.ipynb")
KERNEL = "cl-graft-test"
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("skillmap")
    run_skillmap(tiny_bert(), tiny_splits(), tiny_skillmap_config(single=None), out=out, progress=False)
    return out


def _kernelspec(root: Path) -> Path:
    """A JUPYTER_PATH folder under ``root`` whose kernel ``KERNEL`` runs this very interpreter."""
    spec = root / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "cl-graft test", "language": "python"}))
    return root / "jupyter"


@pytest.fixture
def kernel_env(tmp_path, monkeypatch, results):
    monkeypatch.setenv("JUPYTER_PATH", str(_kernelspec(tmp_path)))
    monkeypatch.setenv("CL_GRAFT_RESULTS", str(results))
    monkeypatch.setenv("CL_GRAFT_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    return tmp_path


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """One kernel (started in notebooks/) for the executions of 01 and 02: :func:`_execute` empties its
    namespace (``%reset -f``) and hands it the test's ``CL_GRAFT_*`` variables before each notebook, so each runs as
    in a new kernel but for the modules already imported (a kernel start and the imports, seconds, paid once). The
    Avalanche notebook's timed run keeps a new kernel of its own."""
    from jupyter_client.manager import KernelManager

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(_kernelspec(tmp_path_factory.mktemp("kernel"))))
        mp.setenv("MPLBACKEND", "Agg")
        km = KernelManager(kernel_name=KERNEL)
        km.start_kernel(cwd=str(NOTEBOOKS))
    try:
        yield km
    finally:
        km.shutdown_kernel(now=True)


def _code_cells(name: str) -> list[str]:
    return [c.source for c in nbformat.read(NOTEBOOKS / name, as_version=4).cells if c.cell_type == "code"]


@pytest.mark.parametrize("name", NAMES)
def test_notebook_holds_no_library_logic(name):
    cells = _code_cells(name)
    assert cells
    for source in cells:
        for node in ast.walk(ast.parse(source)):
            assert not isinstance(node, DEFINITIONS), f"{name} defines logic: {ast.unparse(node)[:60]}"


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_committed_executed_without_machine_paths(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs for c in code), f"{name}: a code cell is committed without its outputs"
    text = (NOTEBOOKS / name).read_text(encoding="utf-8")
    for prefix in ("/work/", "/tmp/", "/home/", "/root/", "/Users/", str(NOTEBOOKS.parent)):  # machine-path: example
        assert prefix not in text, f"{name}: committed output names the machine path {prefix!r}"
    setup = code[0].source
    assert "FIGURES" in setup and 'RESULTS / "figures"' not in setup, f"{name} would draw over the results' figures"


def _execute(name: str, kernel=None) -> list[dict]:
    """Runs a notebook from notebooks/ (its working directory) in a new test kernel, or in the shared ``kernel``
    after emptying its namespace and setting its ``CL_GRAFT_RESULTS`` / ``CL_GRAFT_FIGURES`` as this process's
    (unset when unset here); returns its code outputs."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    where = {"metadata": {"path": str(NOTEBOOKS)}}
    if kernel is None:
        NotebookClient(nb, timeout=180, kernel_name=KERNEL, resources=where).execute()
    else:
        env = {k: os.environ.get(k) for k in ("CL_GRAFT_RESULTS", "CL_GRAFT_FIGURES")}
        setup = "%reset -f\nimport os as _os\n" + "".join(
            f"_os.environ[{k!r}] = {v!r}\n" if v is not None else f"_os.environ.pop({k!r}, None)\n"
            for k, v in env.items()) + "del _os\n"
        nb.cells.insert(0, nbformat.v4.new_code_cell(setup))
        NotebookClient(nb, timeout=180, km=kernel, resources=where).execute()
        nb.cells.pop(0)
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]


@pytest.mark.parametrize("name", NAMES)
def test_notebook_executes(name, kernel_env, kernel, results):
    outputs = _execute(name, kernel)
    text = "".join(o.get("text", "") for o in outputs)
    images = sum("image/png" in o.get("data", {}) for o in outputs)
    assert "most similar regions" in text and "toypair" in text
    assert images >= (1 if name.startswith("01") else 6)
    assert (kernel_env / "figures" / "overlap.png").is_file()


def _relative_paths(name: str) -> tuple[set[str], set[str]]:
    """Every path a notebook's code names relative to ``notebooks/`` (string constants starting ``../``), and
    those that are the default of ``CL_GRAFT_RESULTS`` (what it reads when nothing is set)."""
    named, read = set(), set()
    for source in _code_cells(name):
        source = "\n".join(line for line in source.splitlines() if not line.startswith("%"))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("../"):
                named.add(node.value)
            if (isinstance(node, ast.Call) and ast.unparse(node.func) == "os.environ.get" and len(node.args) == 2
                    and ast.unparse(node.args[0]) == "'CL_GRAFT_RESULTS'"):
                read.add(node.args[1].value)
    return named, read


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("name", [*NAMES, "03_graft_in_avalanche.ipynb"])
def test_every_path_a_notebook_names_is_committed_or_an_ignored_output(name):
    """A clone runs the notebooks as they are: what a notebook reads by default is committed (tracked by git),
    and every other folder it names is one it writes, which git ignores."""
    named, read = _relative_paths(name)
    assert read <= named and (read or not name.startswith(("01", "02")))
    if _git("rev-parse", "--git-dir").returncode != 0:                        # a copy without git
        assert all((NOTEBOOKS / p).exists() for p in read)
        return
    for rel in sorted(named):
        path = str((NOTEBOOKS / rel).resolve().relative_to(REPO_ROOT))
        tracked = bool(_git("ls-files", "--", path).stdout.strip())
        ignored = _git("check-ignore", "-q", "--no-index", path).returncode == 0
        if rel in read:
            assert tracked, f"{name} reads {rel} by default, which is not committed"
        else:
            assert tracked or ignored, f"{name} names {rel}: neither committed nor an ignored output folder"


def test_quickstart_notebook_runs_on_the_committed_4_task_map_by_default(kernel_env, kernel, monkeypatch):
    monkeypatch.delenv("CL_GRAFT_RESULTS")
    outputs = _execute("01_quickstart.ipynb", kernel)
    text = "".join(o.get("text", "") for o in outputs)
    assert "snli: 21537 of 10646784 graftable elements" in text and "share of the region by layer" in text
    assert "sst2~cr 0.157" in text                                        # the committed map's top IoU pair
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 1
    assert (kernel_env / "figures" / "accuracy.png").is_file()


def test_overlap_notebook_reads_the_committed_8_task_map_by_default(kernel_env, kernel, monkeypatch):
    monkeypatch.delenv("CL_GRAFT_RESULTS")
    text = "".join(o.get("text", "") for o in _execute("02_region_overlap.ipynb", kernel))
    assert "sst2 ~ cr" in text and "agnews" in text                     # the measured top IoU pair
    assert (kernel_env / "figures" / "iou.png").is_file()              # figures go to CL_GRAFT_FIGURES


AVALANCHE_NOTEBOOK = "03_graft_in_avalanche.ipynb"
ABSOLUTE = ("/work/", "/tmp/", "/home/", "/root/", "/usr/", "site-packages")  # machine-path: example


def test_avalanche_notebook_is_committed_executed_without_absolute_paths():
    nb = nbformat.read(NOTEBOOKS / AVALANCHE_NOTEBOOK, as_version=4)
    for cell in (c for c in nb.cells if c.cell_type == "code"):
        source = "\n".join(line for line in cell.source.splitlines() if not line.startswith("%"))
        for node in ast.walk(ast.parse(source)):
            assert not isinstance(node, DEFINITIONS), f"defines logic: {ast.unparse(node)[:60]}"
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 1
    assert "same accuracy on every task after loading: True" in "".join(o.get("text", "") for o in outputs)
    committed = (NOTEBOOKS / AVALANCHE_NOTEBOOK).read_text()
    assert not [p for p in ABSOLUTE if p in committed]


def test_avalanche_notebook_executes_in_under_a_minute(kernel_env):
    start = time.perf_counter()
    outputs = _execute(AVALANCHE_NOTEBOOK)
    assert time.perf_counter() - start < 60
    text = "".join(o.get("text", "") for o in outputs)
    assert "GraftStrategy  final accuracy" in text and "forgetting 0.000" in text
    assert "same accuracy on every task after loading: True" in text
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 1
    assert not [p for p in ABSOLUTE if p in text]

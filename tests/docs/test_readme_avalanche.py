"""README's Avalanche quick-start runs as it stands: the python block after the ``<!-- avalanche-quickstart -->``
marker is executed in a new process in an empty folder, and its output says nothing was forgotten."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers import REPO_ROOT

MARKER = "<!-- avalanche-quickstart -->"
README = REPO_ROOT / "README.md"


def python_block(path: Path, marker: str = MARKER) -> str:
    """The first fenced python block after ``marker`` in the markdown file ``path``.

    Raises:
        ValueError: no marker, or no python block after it.
    """
    text = path.read_text(encoding="utf-8")
    if marker not in text:
        raise ValueError(f"{path}: no {marker}")
    rest = text[text.index(marker):]
    start = rest.find("```python\n")
    if start < 0:
        raise ValueError(f"{path}: no python block after {marker}")
    body = rest[start + len("```python\n"):]
    return body[:body.index("\n```")] + "\n"


def section(path: Path, marker: str = MARKER) -> list[str]:
    """The lines of the section that starts at ``marker``: its heading, up to the next heading (code excluded)."""
    lines = path.read_text(encoding="utf-8").split(marker, 1)[1].strip("\n").splitlines()
    fenced, out = False, []
    for i, line in enumerate(lines):
        fenced ^= line.startswith("```")
        if i and not fenced and line.startswith("#"):
            break
        out.append(line)
    return out


def test_python_block_takes_the_block_after_the_marker(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(f"```python\nskip = 1\n```\n{MARKER}\ntext\n```python\nx = 1\ny = 2\n```\n```python\nz = 3\n```\n")
    assert python_block(page) == "x = 1\ny = 2\n"
    assert section(page)[0] == "text" and len(section(page)) == 8
    page.write_text("```python\nx = 1\n```\n")
    try:
        python_block(page)
    except ValueError as e:
        assert MARKER in str(e)
    else:
        raise AssertionError("a page without the marker was accepted")


def test_avalanche_quickstart_runs_as_it_stands(tmp_path):
    source = README
    code = python_block(source)
    assert len(section(source)) <= 40
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "0.0"                      # stream forgetting
    assert (tmp_path / "graft_run" / "graft_run.json").is_file()

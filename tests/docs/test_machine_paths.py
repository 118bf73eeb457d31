"""No committed file names an absolute path of the machine that made it: results, pages, notebooks and code read
the same in any clone.

The rule (:data:`MACHINE_PATH`): a ``/`` followed by one of the roots where a machine keeps its own files (``work``,
``tmp``, ``home``, ``root``, ``Users``, ``mnt``, ``scratch``, ``private``), then ``/`` or the end of the path, that
does not continue a word, a URL or a relative path (the character before the ``/`` is not a letter, digit, ``_``,
``.``, ``~``, ``/``, ``+`` or the end of a placeholder ``>``, ``}``, ``)``: ``https://host/home/x``,
``../shared/data``, ``~/x``, ``<out>/work``, ``${HOME}/x`` and base64 images pass). System
paths that read the same on every machine (``/usr/bin/env``, ``/dev/null``, ``/proc/...``) and documented
placeholders (``/path/to/...``, ``<tmp>/x``) are not machine paths. Every git-tracked file that is text (UTF-8, no
NUL byte) is read: JSON, JSONL, CSV, Markdown, notebooks, Python, TOML, YAML, scripts. A test that needs such a
path as its input marks the line with ``machine-path: example`` (honoured under ``tests/`` only).

Records are written path-free at the source (:func:`cl_graft.provenance.portable_path`); paths in results are
relative to the repository root, the shared data being ``../shared/data`` beside the clone.
"""
from __future__ import annotations

import re
import subprocess

from helpers import REPO_ROOT

ROOTS = ("work", "tmp", "home", "root", "Users", "mnt", "scratch", "private")
MACHINE_PATH = re.compile(r"(?<![\w.~/+>})])/(?:" + "|".join(ROOTS) + r")(?=/|[\s\"'`),;:\]]|$)")
EXAMPLE = "machine-path: example"
SKIPPED_DIRS = {".git", ".venv", "build", "runs", "__pycache__", ".pytest_cache", ".ipynb_checkpoints"}


def _tracked() -> list[str]:
    """The repository's files as git tracks them; in a copy without git, every file outside the build folders."""
    done = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=False)
    if done.returncode == 0 and done.stdout:
        return [p for p in done.stdout.decode().split("\0") if p]
    return [str(p.relative_to(REPO_ROOT)) for p in REPO_ROOT.rglob("*")
            if p.is_file() and not SKIPPED_DIRS & set(p.relative_to(REPO_ROOT).parts)
            and not p.parts[-2].endswith(".egg-info")]


def _text(rel: str) -> str | None:
    """The file's text, or None for a binary file (a NUL byte or not UTF-8) or one that is gone."""
    path = REPO_ROOT / rel
    if not path.is_file():
        return None
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def machine_paths(text: str, *, examples_allowed: bool = False) -> list[tuple[int, str]]:
    """``(line number, the path's start)`` of every machine path in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if examples_allowed and EXAMPLE in line:
            continue
        found += [(number, re.match(r"[^\s\"'`,;)]*", line[m.start():]).group())
                  for m in MACHINE_PATH.finditer(line)]
    return found


def test_the_rule_finds_machine_paths_and_passes_the_rest():
    flagged = ['"data": "/work/shared/data"', "--out=/tmp/x", "cd /home/me/clone",  # machine-path: example
               "/root", "a:/mnt/d/x", "`/Users/me/x`", "(/scratch/y)"]                # machine-path: example
    passed = ["https://example.org/home/x", "../shared/data", "~/x", "runs/tmp/x", "#!/usr/bin/env bash",
              "/dev/null", "/path/to/clone", "<tmp>/data", "<out>/work", "${TMPDIR}/x", "x+/tmpAB", "/tmpfile",
              "/working"]
    assert [t for t in flagged if not machine_paths(t)] == []
    assert [t for t in passed if machine_paths(t)] == []
    line = "cmd --out /tmp/x  # " + EXAMPLE                                           # machine-path: example
    assert machine_paths(line) and not machine_paths(line, examples_allowed=True)


def test_no_committed_file_names_a_machine_path():
    files = _tracked()
    assert len(files) > 100 and "README.md" in files
    hits = [f"{rel}:{number}: {path}" for rel in files if (text := _text(rel)) is not None
            for number, path in machine_paths(text, examples_allowed=rel.startswith("tests/"))]
    assert not hits, (f"{len(hits)} absolute machine paths in committed files (write them relative to the "
                      "repository root, ../shared/... for the shared data):\n" + "\n".join(hits[:50]))

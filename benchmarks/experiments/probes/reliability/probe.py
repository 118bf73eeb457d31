"""The reliability probe: every ``cl-graft`` command against bad data, bad options, foreign and earlier output
folders, a second writer, interruption, a full disk, hand-edited and tampered files, non-finite numbers and
unsupported devices, and the Python API's saves and loads, run as a new user would: as subprocesses (the Python
API's cases, and the few steps a user cannot make happen on demand, as the scripts of :mod:`.scripts`).

Real MiniLM, the smoke preset and the real task data (``$CL_GRAFT_DATA`` or ``--data-dir``); runs that train use
``--steps 2`` where the command has it; digits streams and a small MLP where the case needs no text. The cases are
grouped by what they protect (:data:`GROUPS`, one module each, in the order they run: later groups read the folders
of earlier ones). Writes a Markdown table per group (case, command, exit code, first error line, what was kept)
and the same rows as JSON, with the run record (command line, device, library versions, git revision, taken as the
probe starts)::

    python -m cl_graft.benchmarks.experiments.probes.reliability --data-dir ../shared/data --out DIR \\
        --page benchmarks/results/reliability.md
        # -> DIR/reliability.{md,json}, the run record DIR/config.json

``--out`` is claimed as a command's folder (:mod:`..script_out`); the cases run in a temporary folder inside
``DIR/work``, lent to the commands they start, and removed at the end. A case is as wanted when its exit code is
the one wanted, stderr has no traceback, and its check of the folders holds. The probe exits 1 otherwise.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import click

from cl_graft.files import write_json
from cl_graft.provenance import run_record

from ...run_records import record_note
from ...script_out import claimed, out_options, work_folder, write_page
from . import (
    input_validation,
    interrupted,
    messages,
    numerics,
    output_folders,
    pages,
    python_api,
    recorded_settings,
    references,
    resume,
    round5_checks,
    round5_drivers,
    round5_families,
    round5_saved,
    round5_strategy_plugins,
    saved_state,
    writers,
)
from .harness import BAD_WORDS, Probe, cli, first_error

GROUPS = (references, input_validation, recorded_settings, output_folders, writers, interrupted, python_api,
          resume, saved_state, numerics, pages, messages, round5_families, round5_drivers, round5_checks,
          round5_saved, round5_strategy_plugins)
"""The groups in the order they run; each module has ``TITLE`` (what it protects) and ``cases(probe)``."""
NAME = "reliability"


@click.command(help=__doc__.splitlines()[0])
@click.option("--data-dir", type=click.Path(path_type=Path), default=os.environ.get("CL_GRAFT_DATA"),
              show_default=True)
@out_options(page=True)
def main(data_dir, out, overwrite, page) -> None:
    if data_dir is None or not all((data_dir / task).is_dir() for task in ("sst2", "cr", "clinc150")):
        raise click.UsageError("needs the real data: --data-dir or $CL_GRAFT_DATA with sst2, cr and clinc150")
    with claimed("probes.reliability", click.get_current_context().params) as run_dir:
        record = run_record(command="benchmarks.experiments.probes.reliability", device="cpu")  # as it starts
        rows, failed = run_cases(data_dir, work_folder(run_dir))
        write_json(run_dir.path / f"{NAME}.json", {"run": record, "cases": rows, "failed": failed})
        write_page(page_text(rows, failed, record), run_dir, f"{NAME}.md", page)
    print(f"{len(rows) - failed}/{len(rows)} cases as wanted -> {out / NAME}.md")
    if failed:
        sys.exit(1)


def all_cases(probe: Probe) -> list:
    """Every case, in :data:`GROUPS` order, each with its group's title."""
    found = []
    for group in GROUPS:
        for case in group.cases(probe):
            case.group = group.TITLE
            found.append(case)
    return found


def run_cases(data_dir: Path, scratch: Path) -> tuple[list[dict], int]:
    """Runs every case in a temporary folder in ``scratch``; their rows and how many were not as wanted."""
    rows, failed = [], 0
    with tempfile.TemporaryDirectory(prefix="cl-graft-probe-", dir=scratch) as tmp:
        probe = Probe(Path(tmp), data_dir.resolve())

        def rel(text) -> str:
            return portable(str(text), Path(tmp), probe.data)

        for case in all_cases(probe):
            case.setup()
            if hasattr(case.check, "before"):
                case.check.before()
            t0 = time.perf_counter()
            code, err = cli(case.args, interrupt=case.interrupt, during=case.during, file_size=case.file_size,
                            script=case.script, env=case.env)
            case.result["stderr"] = err
            kept = case.check()
            ok = code == case.want and "Traceback" not in err and not any(w in kept for w in BAD_WORDS)
            failed += not ok
            rows.append({"group": case.group, "case": case.name,
                         "command": "python script" if case.script else rel(case.args[0]),
                         "args": [rel(a) for a in case.args[1:]], "exit": code, "want": case.want,
                         "first_line": rel(first_error(err)), "kept": rel(kept), "ok": ok,
                         "seconds": round(time.perf_counter() - t0, 1)})
            print(f"{'ok ' if ok else 'BAD'} {code:>4} {case.name}: {rows[-1]['first_line'][:100]} | {kept}",
                  flush=True)
    return rows, failed


def portable(text: str, tmp: Path, data: Path) -> str:
    """``text`` with the probe's temporary folder as ``$TMP``, the data folder as ``$DATA`` and the Python
    installation as ``$PYTHON`` (a library's file named in a message), however a message spells them (as given,
    resolved, or joined to the working folder): no machine path in the artifact."""
    spellings = {str(Path.cwd() / tmp): "$TMP", str(tmp.resolve()): "$TMP", str(tmp): "$TMP",
                 str(data): "$DATA", str(data.resolve()): "$DATA",
                 **{str(Path(prefix).resolve()): "$PYTHON" for prefix in {sys.base_prefix, sys.prefix}},
                 **{prefix: "$PYTHON" for prefix in {sys.base_prefix, sys.prefix}}}
    for path in sorted(spellings, key=len, reverse=True):                        # the longest spelling first
        text = text.replace(path, spellings[path])
    return text


def page_text(rows: list[dict], failed: int, record: dict) -> str:
    """The Markdown page: the run, then one table per group, one row per case."""
    minutes = sum(row["seconds"] for row in rows) / 60
    note = record_note(record)
    versions = ", ".join(f"{k} {record.get(k)}" for k in ("python", "torch", "transformers", "avalanche"))
    lines = [f"# Reliability probe ({len(rows)} cases, {failed} not as wanted, {minutes:.0f} minutes)", "",
             (f"`{record['command_line']}` at {record['git_revision'][:12]}{f' ({note})' if note else ''} on "
              f"{record['device_name']}: every `cl-graft` command as a subprocess, real MiniLM, smoke preset; the "
              f"Python API's cases as scripts. Exit 1 + `Aborted!` = stopped by SIGINT, -9 = killed by SIGKILL; full "
              f"disk = `ulimit -f` (files up to 20 MB, 1 MB for `run`). Versions: {versions}. Run record and rows: "
              f"`reliability.json`."), "",
             "Cases are grouped by what they protect; a case is as wanted when its exit code is the one wanted, "
             "stderr holds no traceback and the check of its folders (last column) holds."]
    group = None
    for row in rows:
        if row["group"] != group:
            group = row["group"]
            lines += ["", f"## {group}", "", "| case | command | exit | first error line | kept |",
                      "|---|---|---|---|---|"]
        cell = row["first_line"].replace("|", "\\|")
        lines.append(f"| {row['case']} | {row['command']} | {row['exit']} | {cell} | {row['kept']} |"
                     + ("" if row["ok"] else " **NOT AS WANTED**"))
    return "\n".join(lines) + "\n"

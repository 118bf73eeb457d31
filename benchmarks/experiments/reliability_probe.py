"""Reliability probe of the ``cl-graft`` command line: every command against bad data, bad options, foreign and
earlier output folders, interruption, two commands on one folder, a full disk, hand-edited files and unsupported
devices, run as a new user would, as subprocesses (and the Python API's failed and empty experiences, as scripts).

Real MiniLM, the smoke preset and the real task data (``$CL_GRAFT_DATA`` or ``--data-dir``); runs that train
use ``--steps 2`` where the command has it. Writes a Markdown table (case, command, exit code, first error line,
what was kept) and the same rows as JSON::

    python -m cl_graft.benchmarks.experiments.reliability_probe --data-dir ../shared/data --round 1-2 --out DIR \\
        --page benchmarks/results/reliability.md
        # -> DIR/reliability.{md,json} (--round 3: DIR/reliability_round3.{md,json}), the run record DIR/config.json

``--out`` is claimed as a command's folder (:mod:`.script_out`); the cases run in a temporary folder inside
``DIR/work``, lent to the commands they start, and removed at the end.

A case passes when its exit code is the expected one, stderr has no traceback, and its check of the folders
holds. The script exits 1 if any case fails.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import click

from cl_graft.files import write_json
from cl_graft.provenance import run_record

from .probe_harness import FT, LOC, RUN, USER_FILES, Case, cli, snapshot
from .reliability_round2 import RoundTwo
from .reliability_round3 import RoundThree
from .reliability_round4 import RoundFour
from .run_records import record_note
from .script_out import claimed, out_options, work_folder, write_page


class Probe:
    def __init__(self, root: Path, data: Path) -> None:
        self.root, self.data = root, data
        self.bad = root / "bad-data"
        self.user = root / "user"

    # ----- fixtures --------------------------------------------------------------------------------------------
    def task(self, name: str, train: bytes, *, test: bytes = b"") -> None:
        folder = self.bad / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "meta.json").write_text(json.dumps({"labels": ["negative", "positive"]}))
        (folder / "train.jsonl").write_bytes(train)
        (folder / "test.jsonl").write_bytes(self.rows(40) + test)

    def rows(self, n: int, *, skip_label: int | None = None) -> bytes:
        lines = (self.data / "sst2" / "train.jsonl").read_bytes().splitlines()
        keep = [line for line in lines if skip_label is None or json.loads(line)["label"] != skip_label]
        return b"\n".join(keep[:n]) + b"\n"

    def user_folder(self, name: str) -> Path:
        folder = self.root / name
        for rel, data in USER_FILES.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(data)
        return folder

    def user_kept(self, folder: Path) -> Callable[[], str]:
        return lambda: "user's files intact" if snapshot(folder) == USER_FILES else "USER FILES CHANGED"

    def absent(self, path: Path, what: str = "nothing written") -> Callable[[], str]:
        return lambda: what if not path.exists() else f"{path.name} EXISTS"

    def same(self, folder: Path, before: dict, what: str) -> Callable[[], str]:
        return lambda: what if snapshot(folder) == before else "FOLDER CHANGED"

    # ----- the cases -------------------------------------------------------------------------------------------
    def cases(self, *, third: bool = True) -> list[Case]:
        r, d, bad = self.root, ["--data-dir", self.data], ["--data-dir", self.bad]
        o = r / "o"
        rows = self.rows(200)
        self.task("malformed", rows.replace(b"}\n", b"\n", 1))
        self.task("badlabel", rows + b'{"text": "x", "label": 7}\n')
        self.task("latin1", b'{"text": "caf\xe9", "label": 0}\n' + rows)
        self.task("ctrlchar", rows + b'{"text": "a\tb", "label": 0}\n')
        self.task("empty", b"")
        self.task("my.task", rows)
        self.task("oneclass", self.rows(200, skip_label=1))
        self.task("huge", rows, test=json.dumps({"text": "word " * 4_000_000, "label": 1}).encode() + b"\n")
        (self.bad / "nolabels").mkdir(parents=True)
        (self.bad / "nolabels" / "meta.json").write_text("{}")
        shutil.copy(self.data / "sst2" / "train.jsonl", self.bad / "nolabels" / "train.jsonl")
        cases = [
            Case("malformed JSON line", ["finetune", "--task", "malformed", *bad, *FT, "--out", o], check=self.absent(o)),
            Case("label out of range", ["finetune", "--task", "badlabel", *bad, *FT, "--out", o], check=self.absent(o)),
            Case("non-UTF-8 first line", ["finetune", "--task", "latin1", *bad, *FT, "--out", o],
                 check=self.absent(o)),
            Case("control character in JSON", ["finetune", "--task", "ctrlchar", *bad, *FT, "--out", o],
                 check=self.absent(o)),
            Case("empty train.jsonl", ["finetune", "--task", "empty", *bad, *FT, "--out", o], check=self.absent(o)),
            Case("meta.json without labels", ["finetune", "--task", "nolabels", *bad, *FT, "--out", o],
                 check=self.absent(o)),
            Case("task folder my.task", ["finetune", "--task", "my.task", *bad, *FT, "--out", o],
                 check=self.absent(o)),
            Case("a class without rows (warning)", ["finetune", "--task", "oneclass", *bad, *FT, "--out", r / "one"],
                 want=0, check=lambda: "model written" if (r / "one" / "config.json").is_file() else "NO RECORD"),
            Case("20 MB line", ["finetune", "--task", "huge", *bad, *FT, "--out", r / "huge"], want=0,
                 check=lambda: "model written" if (r / "huge" / "config.json").is_file() else "NO RECORD"),
            Case("--lr nan", ["finetune", "--task", "sst2", *d, *FT, "--lr", "nan", "--out", o], check=self.absent(o)),
            Case("--lr inf", ["finetune", "--task", "sst2", *d, *FT, "--lr", "inf", "--out", o], check=self.absent(o)),
            Case("--lr 1e9 (diverges)", ["finetune", "--task", "sst2", *d, "--preset", "smoke", "--lr", "1e9",
                                         "--out", o], check=self.absent(o, "no model, no folder")),
            Case("--seed 2^63", ["finetune", "--task", "sst2", *d, *FT, "--seed", str(2**63), "--out", o],
                 check=self.absent(o)),
            Case('--out ""', ["finetune", "--task", "sst2", *d, *FT, "--out", ""],
                 check=lambda: "cwd untouched" if not Path(".cl-graft.json").exists() else "WROTE INTO CWD"),
            Case("unwritable --out", ["finetune", "--task", "sst2", *d, *FT, "--out", r / "a-file" / "out"],
                 setup=lambda: (r / "a-file").write_text("x"), check=lambda: "nothing written"),
            Case("--k 0", ["finetune", "--task", "sst2", *d, *FT, "--k", "0", "--out", o], check=self.absent(o)),
            Case("--head mlm on MiniLM", ["finetune", "--task", "sst2", *d, *FT, "--head", "mlm", "--out", o],
                 check=self.absent(o)),
            Case("--preset huge", ["finetune", "--task", "sst2", *d, "--preset", "huge", "--out", o],
                 check=self.absent(o)),
            Case("finetune (the folder later cases use)", ["finetune", "--task", "sst2", *d, *FT, "--out", r / "ft"],
                 want=0, check=self.recorded(r / "ft")),
            Case("finetune again, no --overwrite", ["finetune", "--task", "sst2", *d, *FT, "--out", r / "ft"],
                 check=self.kept_later(r / "ft", "earlier results intact")),
            Case("finetune again, --overwrite", ["finetune", "--task", "sst2", *d, *FT, "--out", r / "ft",
                                                 "--overwrite"], want=0, check=self.recorded(r / "ft")),
            Case("finetune killed (SIGKILL), then again", ["finetune", "--task", "sst2", *d, "--preset", "smoke",
                                                           "--out", r / "killed"],
                 want=-9, interrupt=("SIGKILL", lambda: (r / "killed" / ".cl-graft.json").exists()),
                 check=self.rerun_accepted(r / "killed", ["finetune", "--task", "sst2", *d, *FT])),
            Case("localize --sigmoid-bias nan", ["localize", "--task", "sst2", *d, *LOC, "--sigmoid-bias", "nan",
                                                 "--out", o], check=self.absent(o)),
            Case("localize --methods topk,,graft", ["localize", "--task", "sst2", *d, *LOC[:-4], "--methods",
                                                    "topk,,graft", "--out", o], check=self.absent(o)),
            Case("localize --finetuned truncated", ["localize", "--task", "sst2", *d, *LOC, "--finetuned",
                                                    r / "ft-truncated", "--out", o],
                 setup=lambda: self.broken_model("truncated"), check=self.absent(o)),
            Case("localize --finetuned edited", ["localize", "--task", "sst2", *d, *LOC, "--finetuned",
                                                 r / "ft-edited", "--out", o],
                 setup=lambda: self.broken_model("edited"), check=self.absent(o)),
            Case("localize --finetuned D --out D", ["localize", "--task", "sst2", *d, *LOC, "--finetuned", r / "ft",
                                                    "--out", r / "ft", "--overwrite"],
                 check=self.kept_later(r / "ft", "fine-tune's files intact")),
            Case("localize", ["localize", "--task", "sst2", *d, *LOC, "--finetuned", r / "ft", "--out", r / "loc"],
                 want=0, check=lambda: "regions: " + ", ".join(sorted(p.name for p in (r / "loc/regions").iterdir()))),
            Case("localize --overwrite, other sparsity", ["localize", "--task", "sst2", *d, *LOC[:-1], "0.02",
                                                          "--finetuned", r / "ft", "--out", r / "loc", "--overwrite"],
                 want=0, setup=lambda: (r / "loc" / "notes.txt").write_text("the user's notes"),
                 check=lambda: "regions: " + ", ".join(sorted(p.name for p in (r / "loc/regions").iterdir()))
                 + ("; user's notes.txt kept" if (r / "loc/notes.txt").is_file() else "; NOTES LOST")),
            Case("run --stream sst2,,cr", ["run", "--stream", "sst2,,cr", *d, *RUN, "--out", o], check=self.absent(o)),
            Case("run --strategies magic", ["run", "--stream", "sst2,cr", *d, *RUN, "--strategies", "magic",
                                            "--out", o], check=self.absent(o)),
            Case("run graft (reference)", ["run", "--stream", "sst2,cr", *d, *RUN, "--strategies", "graft",
                                                 "--out", r / "run"], want=0, check=lambda: "results written"),
            Case("run interrupted (SIGINT) after experience 1",
                 ["run", "--stream", "sst2,cr", *d, *RUN, "--strategies", "graft", "--out", r / "run-int"],
                 want=1, interrupt=("SIGINT", lambda: (r / "run-int/graft/state/progress.json").exists()),
                 check=lambda: "state kept for --resume"),
            Case("run --resume after SIGINT", ["run", "--stream", "sst2,cr", *d, *RUN, "--strategies", "graft",
                                               "--out", r / "run-int", "--resume"], want=0, check=self.same_results),
            Case("run --resume with --k 4", ["run", "--stream", "sst2,cr", *d, *RUN, "--strategies", "graft",
                                             "--k", "4", "--out", r / "run", "--resume"],
                 check=self.kept_later(r / "run", "earlier run intact")),
            Case("run --resume with --strategies graft,naive", ["run", "--stream", "sst2,cr", *d, *RUN,
                                                                "--strategies", "graft,naive", "--out", r / "run",
                                                                "--resume"],
                 check=self.kept_later(r / "run", "earlier run intact")),
            Case("run --resume with other data", ["run", "--stream", "sst2,cr", "--data-dir", r / "other-data", *RUN,
                                                  "--strategies", "graft", "--out", r / "run", "--resume"],
                 setup=self.other_data, check=self.kept_later(r / "run", "earlier run intact")),
            Case("multitask --tasks sst2", ["multitask", "--tasks", "sst2", *d, "--preset", "smoke", "--out", o],
                 check=self.absent(o)),
            Case("plot of a folder that is not a multitask run", ["plot", r / "ft"],
                 check=self.kept_later(r / "ft", "folder intact")),
            Case("multitask sst2,cr", ["multitask", "--tasks", "sst2,cr", "--no-single", *d, "--preset", "smoke",
                                       "--out", r / "mt"], want=0, check=self.recorded(r / "mt")),
            Case("multitask again, no --overwrite", ["multitask", "--tasks", "sst2,cr", "--no-single", *d,
                                                     "--preset", "smoke", "--out", r / "mt"],
                 check=self.kept_later(r / "mt", "earlier results intact")),
            Case("plot into the run's figures/", ["plot", r / "mt"], want=0,
                 check=lambda: f"{len(list((r / 'mt/figures').glob('*.png')))} figures redrawn"),
            Case("plot --out a new folder", ["plot", r / "mt", "--out", r / "figs"], want=0,
                 check=lambda: f"{len(list((r / 'figs').glob('*.png')))} figures + record"),
        ]
        for command, args in {"finetune": ["--task", "sst2", *FT], "localize": ["--task", "sst2", *LOC],
                              "multitask": ["--tasks", "sst2,cr", "--preset", "smoke"],
                              "run": ["--stream", "sst2,cr", *RUN, "--strategies", "naive"]}.items():
            for overwrite in ([], ["--overwrite"]):
                folder = self.user_folder(f"user-{command}{'-ow' if overwrite else ''}")
                cases.append(Case(f"user's folder{' + --overwrite' if overwrite else ''}",
                                  [command, *args, *d, "--out", folder, *overwrite], check=self.user_kept(folder)))
        plot_folder = self.user_folder("user-plot")
        cases.append(Case("user's folder", ["plot", r / "mt", "--out", plot_folder], check=self.user_kept(plot_folder)))
        return cases + RoundTwo(self).cases() + (RoundThree(self).cases() + RoundFour(self).cases() if third else [])

    def broken_model(self, how: str) -> None:
        folder = self.root / f"ft-{how}"
        shutil.copytree(self.root / "ft", folder)
        if how == "truncated":
            data = (folder / "model.safetensors").read_bytes()
            (folder / "model.safetensors").write_bytes(data[: len(data) // 3])
        else:
            config = json.loads((folder / "classifier_config.json").read_text())
            (folder / "classifier_config.json").write_text(json.dumps({**config, "head": "mystery"}))

    def other_data(self) -> None:
        other = self.root / "other-data"
        for t in ("sst2", "cr"):
            shutil.copytree(self.data / t, other / t)
        lines = (other / "cr" / "train.jsonl").read_bytes().splitlines()
        (other / "cr" / "train.jsonl").write_bytes(b"\n".join(lines[1:]) + b"\n")

    def kept_later(self, folder: Path, what: str) -> Callable[[], str]:
        before = {}

        def check() -> str:
            return what if snapshot(folder) == before["files"] else "FOLDER CHANGED"

        check.before = lambda: before.update(files=snapshot(folder))
        return check

    def recorded(self, folder: Path) -> Callable[[], str]:
        def check() -> str:
            files = json.loads((folder / "config.json").read_text())["files"]
            present = sorted(p for p in snapshot(folder) if p != ".cl-graft.json")
            return f"record lists all {len(files)} files" if files == present else "RECORD DIFFERS"
        return check

    def rerun_accepted(self, folder: Path, args: list) -> Callable[[], str]:
        def check() -> str:
            code, err = cli([*args, "--out", folder])
            return "rerun without --overwrite: exit 0" if code == 0 else f"RERUN FAILED ({code}: {err[-200:]})"
        return check

    def same_results(self) -> str:
        full = json.loads((self.root / "run" / "results.json").read_text())["strategies"]
        resumed = json.loads((self.root / "run-int" / "results.json").read_text())["strategies"]
        same = all(full[n]["matrix"] == resumed[n]["matrix"] for n in full)
        return "matrices equal the uninterrupted run's" if same else "MATRICES DIFFER"


def first_error(stderr: str) -> str:
    for line in stderr.splitlines():
        if line.startswith(("error:", "Error:", "Traceback", "warning:", "Aborted!")):
            return line
    return ""


@click.command(help=__doc__.splitlines()[0])
@click.option("--data-dir", type=click.Path(path_type=Path), default=os.environ.get("CL_GRAFT_DATA"),
              show_default=True)
@click.option("--round", "only", type=click.Choice(["all", "1-2", "3", "4"]), default="all", show_default=True,
              help="every case, the first two rounds', or the third or fourth round's alone")
@out_options(page=True)
def main(data_dir, only, out, overwrite, page) -> None:
    if data_dir is None or not (data_dir / "sst2").is_dir():
        raise click.UsageError("needs the real data: --data-dir or $CL_GRAFT_DATA with sst2 and cr")
    name = f"reliability_round{only}" if only in ("3", "4") else "reliability"
    with claimed("reliability_probe", click.get_current_context().params) as run_dir:
        rows, failed = run_cases(data_dir, only, work_folder(run_dir))
        record = run_record(command="benchmarks.reliability_probe", device="cpu", round=only)
        write_json(run_dir.path / f"{name}.json", {"run": record, "cases": rows, "failed": failed})
        write_page(page_text(rows, failed, record), run_dir, f"{name}.md", page)
    print(f"{len(rows) - failed}/{len(rows)} cases as wanted -> {out / name}.md")
    if failed:
        sys.exit(1)


def run_cases(data_dir: Path, only: str, scratch: Path) -> tuple[list[dict], int]:
    """Runs the cases of round ``only`` in a temporary folder in ``scratch``; their rows and how many failed."""
    rows, failed = [], 0
    with tempfile.TemporaryDirectory(prefix="cl-graft-probe-", dir=scratch) as tmp:
        probe = Probe(Path(tmp), data_dir.resolve())
        alone = {"3": RoundThree, "4": RoundFour}.get(only)
        for case in alone(probe).cases() if alone else probe.cases(third=only == "all"):
            case.setup()
            if hasattr(case.check, "before"):
                case.check.before()
            t0 = time.perf_counter()
            code, err = cli(case.args, interrupt=case.interrupt, during=case.during, file_size=case.file_size,
                            script=case.script)
            case.result["stderr"] = err
            kept = case.check()
            ok = code == case.want and "Traceback" not in err and not any(w in kept for w in
                                                                          ("CHANGED", "EXISTS", "LOST", "NO ", "DIFFER",
                                                                           "FAILED", "CWD"))
            failed += not ok

            def rel(text: str) -> str:                                # no absolute paths in the artifact
                return str(text).replace(tmp, "$TMP").replace(str(probe.data), "$DATA")

            command = "python script" if case.script else " ".join(rel(a) for a in case.args[:1])
            rows.append({"group": case.result.get("group", ""), "case": case.name, "command": command, "args": [rel(a) for a in case.args[1:]], "exit": code,
                         "want": case.want, "first_line": rel(first_error(err)), "kept": rel(kept),
                         "ok": ok, "seconds": round(time.perf_counter() - t0, 1)})
            print(f"{'ok ' if ok else 'BAD'} {code:>4} {case.name}: {rows[-1]['first_line'][:100]} | {kept}",
                  flush=True)
    return rows, failed


def page_text(rows: list[dict], failed: int, record: dict) -> str:
    """The Markdown page: one row per case."""
    minutes = sum(row["seconds"] for row in rows) / 60
    note = record_note(record)
    lines = [f"# Reliability probe ({len(rows)} cases, {failed} failed, {minutes:.0f} minutes)", "",
             (f"`{record['command_line']}` at {record['git_revision'][:12]}{f' ({note})' if note else ''} on "
              f"{record['device_name']}: every `cl-graft` command as a "
              "subprocess, real MiniLM, smoke preset. Exit 1 + `Aborted!` = stopped by SIGINT, -9 = killed by SIGKILL; "
              "full disk = `ulimit -f 20000` (files up to 20 MB). Versions: python {python}, torch {torch}, "
              "transformers {transformers}, avalanche {avalanche}.".format(**{k: record.get(k) for k in (
                  "python", "torch", "transformers", "avalanche")})), "",
             "Cases are grouped by what they protect where their round says so (round 4 on)."]
    group = None
    for row in rows:
        if group is None or row.get("group", "") != group:
            group = row.get("group", "")
            lines += ["", f"## {group}" if group else "## rounds 1-3", "",
                      "| case | command | exit | first error line | kept |", "|---|---|---|---|---|"]
        cell = row["first_line"].replace("|", "\\|")
        lines.append(f"| {row['case']} | {row['command']} | {row['exit']} | {cell} | {row['kept']} |"
                     + ("" if row["ok"] else " **FAILED**"))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()

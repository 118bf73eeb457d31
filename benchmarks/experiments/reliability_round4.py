"""The reliability probe's fourth round (:mod:`.reliability_probe` runs it after the third; ``--round 4`` alone),
its cases grouped by what they protect: what runs is what is recorded (an explicit setting against ``--tune`` and
``--settings-from``, the settings ``config.json`` records, errors naming options); resumed runs are checked like
saved ones (a hand-edited ``progress.json``, the earlier session's records, temporary folders); the Python API keeps
the folder rules (``GraftStrategy.save`` and links, stray files, a file as folder; a NaN test input); pages read
results as ``cl-graft`` does (tampered values, legitimate runs); and smaller ones (``export`` of a digits run, the
exported model's mode, warnings naming digit tasks). Digits streams (sklearn, offline) and a small MLP keep it short;
one text run (MiniLM, smoke preset) gives the export."""
from __future__ import annotations

import hashlib
import json
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

from .probe_harness import RUN, Case
from .reliability_round3 import MLP_RUN

DIGITS = ["--model", "mlp", "--preset", "smoke", "--quiet"]
RECORDED, RESUMED, API, PAGES, SMALLER = ("what runs is what is recorded", "resumed runs are checked like saved ones",
                                          "the Python API keeps the folder rules",
                                          "pages read results as cl-graft does", "smaller")

STOPPED = """
import sys
from cl_graft.cli import main
from cl_graft.strategies.comparison import runner

train = runner._train
def stopped(strategy, experience, seed):                # the user's Ctrl-C in the third experience's training
    if experience.current_experience == 2:
        raise KeyboardInterrupt
    train(strategy, experience, seed)
runner._train = stopped
main(sys.argv[1:], prog_name="cl-graft")
"""

PAGE = """
import runpy, sys
module = sys.argv[1]
sys.argv = [module, *sys.argv[2:]]
runpy.run_module(f"cl_graft.benchmarks.experiments.{module}", run_name="__main__")
"""

API_SAVE = MLP_RUN + """
import shutil, warnings
from pathlib import Path
warnings.simplefilter("ignore")

def trained(tasks):
    s = strategy_for(mlp())
    for exp in stream().train_stream[:tasks]:
        s.train(exp)
    return s

def save(root, how):
    folder, users = root / "save", root / "users-folder"
    if how == "NaN test input":
        trained(1).eval(stream(nan=True).train_stream)
    elif how == "save('a-file')":
        root.mkdir(parents=True, exist_ok=True)
        (root / "a-file").write_text("x")
        trained(1).save(root / "a-file")
    else:
        trained(2).save(folder)
        if how == "a stray task-05/x":
            (folder / "task-05").mkdir()
            (folder / "task-05" / "x").write_text("the user's")
        else:
            link = "task-01" if "task-01" in how else "task-00"
            shutil.move(folder / link, users)
            (folder / link).symlink_to(users.resolve(), target_is_directory=True)
        trained(1).save(folder)

one_line(lambda: save(Path(sys.argv[1]), sys.argv[2]))
"""


class RoundFour:
    """The cases; the first of a group makes what the others of it read."""

    def __init__(self, probe) -> None:
        self.probe, self.root, self.data = probe, probe.root, probe.data

    def cases(self) -> list[Case]:
        return [*self.recorded(), *self.resumed(), *self.api(), *self.pages(), *self.smaller()]

    # ----- what runs is what is recorded ------------------------------------------------------------------------
    def recorded(self) -> list[Case]:
        r, o = self.root / "r4", self.root / "r4" / "o"
        run = ["run", "--stream", "permuted-digits:2", *DIGITS, "--steps", "5"]
        tuned = [*run, "--strategies", "ewc,replay"]
        cases = [
            Case("run --tune --tune-budget 2 (ewc, replay): config.json records what ran",
                 [*tuned, "--tune", "--tune-budget", "2", "--out", r / "tuned"], want=0, check=self.tuned_recorded),
            Case("--settings-from T --ewc-lambda 5 (T chose another)",
                 [*run, "--strategies", "ewc", "--settings-from", r / "tuned", "--ewc-lambda", "5", "--out", o],
                 check=self.absent(o)),
            Case("--tune --tune-budget 2 --ewc-lambda 5", [*run, "--strategies", "ewc", "--tune", "--tune-budget",
                                                            "2", "--ewc-lambda", "5", "--out", o],
                 check=self.absent(o)),
            Case("--settings-from T: the settings T chose, recorded", [*tuned, "--settings-from", r / "tuned",
                                                                      "--out", r / "reused"], want=0,
                 check=self.same_settings(r / "reused")),
        ]
        for opts in (["--expected-tasks", "0"], ["--region-size", "0.1", "--tolerance", "0.01"],
                     ["--plan", "open", "--expected-tasks", "3"]):
            cases.append(Case(f"run graft {' '.join(opts)}: the error names options",
                              [*run, "--strategies", "graft", *opts, "--out", o], check=self.absent(o)))
        return [_grouped(c, RECORDED) for c in cases]

    def tuned_recorded(self) -> str:
        folder = self.root / "r4" / "tuned"
        results = json.loads((folder / "results.json").read_text())
        recorded = json.loads((folder / "config.json").read_text())["strategy_settings"]
        ran = {n: results["strategies"][n]["info"]["tuning"]["chosen"] for n in ("ewc", "replay")}
        same = all(recorded[n][k] == v for n, point in ran.items() for k, v in point.items())
        return f"config.json records the chosen {ran}" if same else f"FAILED: chose {ran}, recorded {recorded}"

    def same_settings(self, folder: Path) -> Callable[[], str]:
        def check() -> str:
            tuned = json.loads((self.root / "r4/tuned/config.json").read_text())["strategy_settings"]
            reused = json.loads((folder / "config.json").read_text())["strategy_settings"]
            return "strategy_settings equal the tuned run's" if reused == tuned else "FAILED: settings DIFFER"
        return check

    # ----- resumed runs are checked like saved ones -------------------------------------------------------------
    def resumed(self) -> list[Case]:
        r = self.root / "r4"
        stopped = r / "stopped"
        run = ["run", "--stream", "permuted-digits:4", "--scenario", "class", *DIGITS, "--steps", "5",
               "--strategies", "graft,der"]
        cases = [Case("run graft,der (class) stopped in experience 3 (Ctrl-C)", [*run, "--out", stopped], want=1,
                      script=STOPPED, check=self.committed(stopped))]
        edits = {"rows[0][0] = 5.0": lambda p: _set_row(p, 0, 0, 5.0), "rows[1][1] = -1": lambda p: _set_row(p, 1, 1, -1),
                 "rows[0] one short": lambda p: {**p, "rows": [p["rows"][0][:3], *p["rows"][1:]]},
                 "a row added": lambda p: {**p, "rows": [*p["rows"], p["rows"][-1]]},
                 "a row dropped": lambda p: {**p, "rows": p["rows"][:1]},
                 "state.pre_fingerprint changed": lambda p: {**p, "state": {**p["state"], "pre_fingerprint": "0" * 64}},
                 "rows[0][0] = 0.5 (valid, not what ran)": lambda p: _set_row(p, 0, 0, 0.5),
                 "settings.method changed": lambda p: {**p, "settings": {**p["settings"], "method": "topk"}}}
        for name, edit in edits.items():
            folder = r / ("edited-" + "".join(c for c in name if c.isalnum()))
            cases.append(Case(f"--resume, graft's progress.json {name}", [*run, "--out", folder, "--resume"],
                              setup=self.edited(stopped, folder, edit), check=self.progress_kept(folder)))
        resumed = r / "resumed"
        cases.append(Case("--resume unedited (an empty figures/.final.png.*.tmp/ left by a kill)",
                          [*run, "--out", resumed, "--resume"], want=0, setup=self.edited(stopped, resumed, None),
                          check=self.resumed_whole(resumed)))
        return [_grouped(c, RESUMED) for c in cases]

    def committed(self, folder: Path) -> Callable[[], str]:
        def check() -> str:
            rows = json.loads((folder / "graft/state/progress.json").read_text())["rows"]
            return f"graft's progress.json commits {len(rows)} experiences, no results" if len(rows) == 2 and \
                not (folder / "results.json").exists() else f"FAILED: {len(rows)} rows committed"
        return check

    def edited(self, stopped: Path, folder: Path, edit) -> Callable[[], None]:
        def setup() -> None:
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(stopped, folder)
            if edit is None:
                (folder / "figures/.final.png.k1ll3d.tmp").mkdir(parents=True)
                return
            path = folder / "graft/state/progress.json"
            path.write_text(json.dumps(edit(json.loads(path.read_text()))))
            self.before = path.read_bytes()
        return setup

    def progress_kept(self, folder: Path) -> Callable[[], str]:
        return lambda: "progress.json as it was, no results" if (folder / "graft/state/progress.json").read_bytes() \
            == self.before and not (folder / "results.json").exists() else "FAILED: CHANGED"

    def resumed_whole(self, folder: Path) -> Callable[[], str]:
        def check() -> str:
            results = json.loads((folder / "results.json").read_text())
            graft = results["strategies"]["graft"]
            seconds = {k: len(graft["info"][k]) for k in ("localize_seconds", "feature_seconds")}
            tmp = [p.name for p in folder.rglob("*.tmp")]
            ok = graft["summary"]["forgetting"] == 0 and set(seconds.values()) == {len(results["tasks"])} and not tmp
            return (f"graft forgetting 0; localize/feature seconds for all {len(results['tasks'])} tasks; no .tmp left"
                    if ok else f"FAILED: forgetting {graft['summary']['forgetting']}, {seconds}, {tmp}")
        return check

    # ----- the Python API keeps the folder rules ----------------------------------------------------------------
    def api(self) -> list[Case]:
        cases = []
        for how in ("task-01 linked out of the folder", "task-00 a link to the user's folder", "a stray task-05/x",
                    "save('a-file')", "NaN test input"):
            root = self.root / "r4" / ("api-" + "".join(c for c in how if c.isalnum()))
            verb = "evaluate" if how == "NaN test input" else "save a one-task run over a two-task save,"
            cases.append(Case(f"Python API: {verb} {how}" if "save(" not in how else f"Python API: {how}",
                              [root, how], script=API_SAVE, check=self.api_kept(root, how)))
        return [_grouped(c, API) for c in cases]

    def api_kept(self, root: Path, how: str) -> Callable[[], str]:
        def check() -> str:
            folder = root / "save"
            if "link" in how:                                    # every file of the earlier save as it wrote it
                files = json.loads((folder / "graft_run.json").read_text()).get("files", {})
                same = files and all(hashlib.sha256((folder / f).read_bytes()).hexdigest() == sha
                                     for f, sha in files.items())
                return "user's folder intact, the earlier save whole (sha256 of every file)" if same else \
                    "USER FILES CHANGED"
            if "stray" in how:
                return "the user's file kept, nothing saved over" if (folder / "task-05/x").read_text() == \
                    "the user's" and "unfinished" not in (folder / "graft_run.json").read_text() else "FAILED"
            if "a-file" in how:
                return "the file kept" if (root / "a-file").read_text() == "x" else "FAILED"
            return "refused, the experience named"
        return check

    # ----- pages read results as cl-graft does ------------------------------------------------------------------
    def pages(self) -> list[Case]:
        r, o = self.root / "r4", self.root / "r4" / "page"
        tuned = r / "tuned/results.json"
        cases = [Case("text_size_page of a run with summary.average 7.5", ["text_size_page", "--runs",
                                                                          r / "avg75.json", "--out", o],
                      script=PAGE, setup=self.tampered(tuned, r / "avg75.json", _average_75), check=self.absent(o)),
                 Case("retrain_page of a run with summary.average 7.5", ["retrain_page", "--runs", r / "avg75.json",
                                                                        "--out", o], script=PAGE,
                      check=self.absent(o)),
                 Case("text_size_page of a graft run without single", ["text_size_page", "--runs",
                                                                       r / "resumed", "--out", o], script=PAGE,
                      check=self.absent(o)),
                 Case("retrain_page of a run whose record names no scenario (a text run's)",
                      ["retrain_page", "--runs", r / "text-like.json", "--out", r / "retrain"], want=0, script=PAGE,
                      setup=self.tampered(r / "resumed/results.json", r / "text-like.json",
                                          lambda d: d["run"].pop("scenario")),
                      check=lambda: "page written" if (r / "retrain/retrain.md").is_file() else "FAILED"),
                 Case("digits --seeds a,b", ["digits", "--seeds", "a,b", "--out", o], script=PAGE,
                      check=self.absent(o)),
                 Case("digits --report-from a folder without runs/", ["digits", "--report-from", r / "tuned",
                                                                      "--out", o], script=PAGE, check=self.absent(o))]
        return [_grouped(c, PAGES) for c in cases]

    def tampered(self, source: Path, path: Path, change) -> Callable[[], None]:
        def setup() -> None:
            data = json.loads(source.read_text())
            change(data)
            path.write_text(json.dumps(data))
        return setup

    # ----- smaller ----------------------------------------------------------------------------------------------
    def smaller(self) -> list[Case]:
        r, d = self.root / "r4", ["--data-dir", self.data]
        warned = Case("run graft on split-digits, 5 steps: warnings name the tasks",
                      ["run", "--stream", "split-digits", *DIGITS, "--steps", "5", "--strategies", "graft", "--out",
                       r / "warned"], want=0)
        warned.check = lambda: self.named_warnings(warned, r / "warned")
        cases = [Case("export of a digits run", ["export", "--skills", r / "resumed/graft/state/skills", "--task",
                                                 "perm0", "--out", r / "o"], check=self.absent(r / "o")),
                 warned,
                 Case("run graft sst2,cr (round 4's text reference)", ["run", "--stream", "sst2,cr", *d, *RUN,
                                                                      "--strategies", "graft", "--out", r / "text"],
                      want=0, check=lambda: "results written"),
                 Case("export of its task sst2: every file one mode", ["export", "--skills",
                                                                      r / "text/graft/state/skills", "--task", "sst2",
                                                                      *d, "--out", r / "exported"], want=0,
                      check=self.one_mode(r / "exported"))]
        return [_grouped(c, SMALLER) for c in cases]

    def named_warnings(self, case: Case, folder: Path) -> str:
        tasks = json.loads((folder / "results.json").read_text())["tasks"]
        names = [line.split("'")[1] for line in case.result.get("stderr", "").splitlines()
                 if line.startswith("warning: task ")]
        return f"{len(names)} warnings, each naming its task ({', '.join(names)})" if names and \
            set(names) <= set(tasks) else f"FAILED: {names} not in {tasks}"

    def one_mode(self, folder: Path) -> Callable[[], str]:
        def check() -> str:
            modes = {oct(stat.S_IMODE(p.stat().st_mode)) for p in folder.rglob("*") if p.is_file()}
            return f"every file {modes.pop()}" if len(modes) == 1 else f"FAILED: modes {sorted(modes)}"
        return check

    def absent(self, path: Path) -> Callable[[], str]:
        return lambda: "nothing written" if not path.exists() else f"{path.name} EXISTS"


def _grouped(case: Case, group: str) -> Case:
    case.result["group"] = group
    return case


def _set_row(progress: dict, i: int, j: int, value: float) -> dict:
    progress["rows"][i][j] = value
    return progress


def _average_75(results: dict) -> None:
    for res in results["strategies"].values():
        res["summary"]["average"] = 7.5

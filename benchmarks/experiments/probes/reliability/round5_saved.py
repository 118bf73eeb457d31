"""A split text run kept and taken out (issue 56, items 1 and 7), on ``split-clinc150:3`` (4 training rows per class,
32 test rows per experience): a ``GraftStrategy`` of the class scenario saved after two experiences and loaded
into a fresh ``SharedHead`` answers with the logits it saved and trains on alike (its classes seen come back with
it); ``export_task`` writes the same folder from that model and from its classifier; ``cl-graft export`` writes a
task of either scenario as a transformers folder (the class scenario's head over every class seen up to the task,
stated) and refuses data other than the run's in one line. The Python API's cases run as scripts."""
from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from .harness import RUN, Case, Probe

TITLE = "a split text run saved, loaded and exported"
SPLIT = ["--stream", "split-clinc150:3", "--k", "4", "--eval-cap", "32", "--strategies", "graft"]
TASK = "clinc150-1"
"""The task exported: the second group (50 classes); the class scenario's head keeps the 100 of both groups."""

# ----- script: a class-scenario split stream on MiniLM, built as a user of the API would (argv: data dir, folder)
SPLIT_API = """
import json, sys, torch
from pathlib import Path
from avalanche.core import SupervisedPlugin
from avalanche.training.plugins import EvaluationPlugin
from cl_graft.benchmarks.families import StreamRequest, find_family
from cl_graft.strategies import GraftStrategy, LocalizeConfig, LocalizeFinder, export_task
from cl_graft.strategies.comparison.runner import fresh_model
from cl_graft.strategies.interface.config import continual_setup
from cl_graft.strategies.plugins.recipe import StepLimit

data, _ = continual_setup("smoke", seed=0, k=4, eval_cap=32)
setup = find_family("split-clinc150:3").setup(StreamRequest(spec="split-clinc150:3", scenario="class", data=data,
                                                            seed=0, data_dir=sys.argv[1]))
stream = setup.make()[0]
bm = stream.benchmark
folder = Path(sys.argv[2])

class Outputs(SupervisedPlugin):
    def __init__(self):
        super().__init__()
        self.out = {}
    def before_eval_exp(self, strategy, **kw):
        self.out[strategy.experience.current_experience] = []
    def after_eval_iteration(self, strategy, **kw):
        self.out[strategy.experience.current_experience].append(strategy.mb_output.detach().clone())

def strategy(saved=None):
    model, _ = fresh_model(setup.base, stream, 0)                   # a fresh SharedHead over the classifier
    probe = Outputs()
    kw = {"optimizer": torch.optim.SGD(model.parameters(), lr=0.05), "train_mb_size": 8, "train_epochs": 3,
          "plugins": [StepLimit(3), probe], "evaluator": EvaluationPlugin(loggers=[])}
    if saved is not None:
        return GraftStrategy.load(saved, model=model, **kw), model, probe
    return GraftStrategy(model=model, finder=LocalizeFinder("topk", LocalizeConfig(region_size=0.01)),
                         task_inference="features", **kw), model, probe

def logits(s, probe, experiences):
    s.eval(experiences)
    return [torch.cat(probe.out[e.current_experience]) for e in experiences]

def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
"""

SAVE_LOAD = SPLIT_API + """
s, model, probe = strategy()
for i in range(2):
    torch.manual_seed(i)
    s.train(bm.train_stream[i])
saved = logits(s, probe, bm.test_stream[:2])
s.save(folder)
loaded, loaded_model, loaded_probe = strategy(folder)
seen = int(loaded_model.seen.sum())
answers = same(logits(loaded, loaded_probe, bm.test_stream[:2]), saved)
for each in (s, loaded):
    torch.manual_seed(2)
    each.train(bm.train_stream[2])
trains_on = same(logits(loaded, loaded_probe, bm.test_stream), logits(s, probe, bm.test_stream))
json.dump({"same_logits": answers, "same_after_a_third_experience": trains_on,
           "seen": seen}, open(folder.with_suffix(".json"), "w"))
"""

EXPORT = SPLIT_API + """
loaded, model, _ = strategy(folder)
for name, given in (("model", model), ("classifier", model.clf)):
    export_task(loaded.graft.owners, given, sys.argv[3], folder.parent / f"export-{name}")
"""


def cases(p: Probe) -> list[Case]:
    r, d = p.root, ["--data-dir", p.data]
    api = r / "r5" / "api-run"
    cases = [Case("Python API: a class-scenario split run saved after 2 experiences, loaded into a fresh SharedHead",
                  [p.data, api], want=0, script=SAVE_LOAD, check=_answers_alike(api.with_suffix(".json"))),
             Case("Python API: export_task of a class-scenario split task, from the SharedHead and its classifier",
                  [p.data, api, TASK], want=0, script=EXPORT, check=_same_exports(api.parent))]
    for scenario in ("class", "task"):
        run = r / "r5" / f"run-{scenario}"
        cases += [
            Case(f"run graft {SPLIT[1]} --scenario {scenario}",
                 ["run", *SPLIT, "--scenario", scenario, *d, *RUN, "--out", run], want=0,
                 check=lambda run=run: "results written" if (run / "results.json").is_file() else "NO RESULTS"),
            Case(f"export {TASK} of the --scenario {scenario} run",
                 ["export", "--skills", run / "graft/state/skills", "--task", TASK, *d, "--out",
                  r / "r5" / f"exported-{scenario}"],
                 want=0, check=_exported(r / "r5" / f"exported-{scenario}", scenario))]
    other, o = r / "r5" / "other-data", r / "r5" / "exported-other"
    cases.append(Case(f"export {TASK} with clinc150 data other than the run's",
                      ["export", "--skills", r / "r5/run-class/graft/state/skills", "--task", TASK, "--data-dir",
                       other, "--out", o], setup=lambda: _other_data(p, other), check=p.absent(o)))
    return cases


def _answers_alike(result: Path) -> Callable[[], str]:
    def check() -> str:
        if not result.is_file():
            return "NO RESULTS"
        got = json.loads(result.read_text())
        if not (got["same_logits"] and got["same_after_a_third_experience"]):
            return f"LOGITS DIFFER ({got})"
        return f"the saved logits ({got['seen']} classes seen, loaded), and alike after a third experience"
    return check


def _same_exports(root: Path) -> Callable[[], str]:
    def check() -> str:
        model, clf = root / "export-model", root / "export-classifier"
        files = sorted(f.name for f in model.iterdir()) if model.is_dir() else []
        if not files or any((model / f).read_bytes() != (clf / f).read_bytes() for f in files):
            return "EXPORTS DIFFER"
        labels = json.loads((model / "cl_graft_task.json").read_text())["task"]["labels"]
        return f"the same {len(files)} files from both; {len(labels)} labels"
    return check


def _exported(out: Path, scenario: str) -> Callable[[], str]:
    """The export's labels: the 100 classes seen up to the task, stated (class scenario), or its group's 50."""
    def check() -> str:
        if not (out / "config.json").is_file():
            return "NO EXPORT"
        labels = json.loads((out / "config.json").read_text())["id2label"]
        stated = json.loads((out / "cl_graft_task.json").read_text()).get("head_classes")
        want = (100, True) if scenario == "class" else (50, False)
        if (len(labels), stated is not None) != want:
            return f"FAILED: {len(labels)} labels, head_classes {stated}"
        return f"{len(labels)} labels" + (f", head_classes stated ({stated['rule']})" if stated else ", its group's")
    return check


def _other_data(p: Probe, folder: Path) -> None:
    """A copy of the clinc150 data with one training row more."""
    shutil.copytree(p.data / "clinc150", folder / "clinc150")
    with open(folder / "clinc150" / "train.jsonl", "a") as f:
        f.write(json.dumps({"text": "one row more", "label": 0}) + "\n")

"""Input validation: bad data (malformed, mislabelled, non-UTF-8, empty, a class without rows, a 20 MB line), bad
options (NaN and infinite learning rates, a seed too large, ``--k 0``, an unknown head, preset, method list,
stream or strategy), devices cl-graft cannot run on, and, through the Python API, bad labels, NaN inputs and an
experience without examples: each refused in one line (exit 2) before anything is written, or run with a warning
where the input is legitimate."""
from __future__ import annotations

import json
import shutil

from . import scripts
from .harness import FT, LOC, RUN, Case, Probe

TITLE = "input validation"


def cases(p: Probe) -> list[Case]:
    r, d, bad = p.root, ["--data-dir", p.data], ["--data-dir", p.bad]
    o = r / "o"
    _bad_tasks(p)
    finetune = ["finetune", "--task", "sst2", *d]
    cases = [Case(name, ["finetune", "--task", task, *bad, *FT, "--out", o], check=p.absent(o))
             for name, task in (("malformed JSON line", "malformed"), ("label out of range", "badlabel"),
                                ("non-UTF-8 first line", "latin1"), ("control character in JSON", "ctrlchar"),
                                ("empty train.jsonl", "empty"), ("meta.json without labels", "nolabels"),
                                ("task folder my.task", "my.task"))]
    cases += [
        Case("a class without rows (warning)", ["finetune", "--task", "oneclass", *bad, *FT, "--out", r / "one"],
             want=0, check=lambda: "model written" if (r / "one" / "config.json").is_file() else "NO RECORD"),
        Case("20 MB line", ["finetune", "--task", "huge", *bad, *FT, "--out", r / "huge"], want=0,
             check=lambda: "model written" if (r / "huge" / "config.json").is_file() else "NO RECORD"),
        Case("--lr nan", [*finetune, *FT, "--lr", "nan", "--out", o], check=p.absent(o)),
        Case("--lr inf", [*finetune, *FT, "--lr", "inf", "--out", o], check=p.absent(o)),
        Case("--seed 2^63", [*finetune, *FT, "--seed", str(2**63), "--out", o], check=p.absent(o)),
        Case("--k 0", [*finetune, *FT, "--k", "0", "--out", o], check=p.absent(o)),
        Case("--head mlm on MiniLM", [*finetune, *FT, "--head", "mlm", "--out", o], check=p.absent(o)),
        Case("--preset huge", [*finetune, "--preset", "huge", "--out", o], check=p.absent(o)),
        Case("localize --sigmoid-bias nan", ["localize", "--task", "sst2", *d, *LOC, "--sigmoid-bias", "nan",
                                             "--out", o], check=p.absent(o)),
        Case("localize --methods topk,,graft", ["localize", "--task", "sst2", *d, *LOC[:-4], "--methods",
                                                "topk,,graft", "--out", o], check=p.absent(o)),
        Case("run --stream sst2,,cr", ["run", "--stream", "sst2,,cr", *d, *RUN, "--out", o], check=p.absent(o)),
        Case("run --strategies magic", ["run", "--stream", "sst2,cr", *d, *RUN, "--strategies", "magic",
                                        "--out", o], check=p.absent(o)),
        Case("multitask --tasks sst2", ["multitask", "--tasks", "sst2", *d, "--preset", "smoke", "--out", o],
             check=p.absent(o)),
        Case("plot of a folder that is not a multitask run", ["plot", r / "ft"],
             check=p.kept_later(r / "ft", "folder intact")),
    ]
    for device, commands in {"meta": ["finetune", "localize", "run", "multitask", "surgical", "analyze"],
                             "xpu": ["finetune", "run"]}.items():
        for command in commands:
            what = {"run": ["--stream", "sst2,cr"], "multitask": ["--tasks", "sst2,cr"]}.get(command,
                                                                                           ["--task", "sst2"])
            cases.append(Case(f"{command} --device {device}", [command, *what, *d, "--preset", "smoke",
                                                                "--device", device, "--out", o], check=p.absent(o)))
    cases.append(Case("Python API: an experience without examples", [p.data], script=scripts.EMPTY_SCRIPT,
                      check=lambda: "refused before training"))
    for how in ("training label 50", "valid_stream label 50", "NaN valid_stream inputs", "NaN training inputs"):
        cases.append(Case(f"Python API: {how}", [how], script=scripts.BAD_ROWS, check=lambda: "refused, named"))
    return cases


def _bad_tasks(p: Probe) -> None:
    """The task folders of the bad-data cases, under ``p.bad``."""
    rows = p.rows(200)
    p.task("malformed", rows.replace(b"}\n", b"\n", 1))
    p.task("badlabel", rows + b'{"text": "x", "label": 7}\n')
    p.task("latin1", b'{"text": "caf\xe9", "label": 0}\n' + rows)
    p.task("ctrlchar", rows + b'{"text": "a\tb", "label": 0}\n')
    p.task("empty", b"")
    p.task("my.task", rows)
    p.task("oneclass", p.rows(200, skip_label=1))
    p.task("huge", rows, test=json.dumps({"text": "word " * 4_000_000, "label": 1}).encode() + b"\n")
    (p.bad / "nolabels").mkdir(parents=True)
    (p.bad / "nolabels" / "meta.json").write_text("{}")
    shutil.copy(p.data / "sst2" / "train.jsonl", p.bad / "nolabels" / "train.jsonl")

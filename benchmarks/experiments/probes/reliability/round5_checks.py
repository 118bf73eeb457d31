"""Issue 56's checks: a strategy that cannot serve a stream is refused before any strategy of the run trains; a split
stream's classes without training or test rows, and its one-class experiences, are warnings naming them (a 100%
score is not "at chance"); a split stream's N in ASCII digits only, a digits model for a text stream and
``--fresh-head`` with a linear head refused in one line before anything is looked up. The split tasks are made of
real clinc150 rows: ``zerogroup`` (4 intents, two without training rows) and ``tiny4`` (4 intents, 40 training and
8 test rows each)."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from .harness import DIGITS, RUN, Case, Probe, error_line

TITLE = "refused up front, or warned of, in one line"
LABELS = 4


def cases(p: Probe) -> list[Case]:
    r, o = p.root / "r5", p.root / "r5" / "o"
    data = r / "data"
    d = ["--data-dir", data]

    def prepare() -> None:                                   # the task folders, made when a case first runs
        _split_tasks(p, data)

    cases = [_untrained(f"run naive,{late} on {stream}{' --scenario class' if scenario else ''}: refused before "
                        f"naive trains", ["run", "--stream", stream, *DIGITS, "--steps", "5", *scenario,
                                          "--strategies", f"naive,{late}", "--out", r / late], r / late)
             for stream, scenario, late in (("split-digits", [], "ncm"), ("permuted-digits:2", [], "linear-probe"),
                                            ("permuted-digits:2", ["--scenario", "class"], "icarl"))]
    zero = Case("split-zerogroup:2 --scenario class: classes without training or test rows (warnings)",
                ["run", "--stream", "split-zerogroup:2", "--scenario", "class", *d, *RUN, "--strategies", "naive",
                 "--class-order", "0,2,1,3", "--out", r / "zero"], want=0, setup=prepare)
    zero.check = _warned(zero, ["class 2 has 0 rows (experience zerogroup-0", "class 3 has 0 rows (experience "
                                "zerogroup-1", "class 1 has 0 rows (experience zerogroup-1 never scores it)"])
    single = Case("split-tiny4:4 --scenario class (ncm): one warning for the one-class experiences, no 'at chance'",
                  ["run", "--stream", "split-tiny4:4", "--scenario", "class", *d, *RUN, "--strategies", "ncm",
                   "--out", r / "single"], want=0, setup=prepare)
    single.check = _one_class(single, r / "single")
    cases += [zero, single]
    refused = [(f"--stream split-tiny4:{count}", ["--stream", f"split-tiny4:{count}", *d],
                f"error: --stream 'split-tiny4:{count}': write split-tiny4:N") for count in ("²", "３")]
    refused += [("--fresh-head with a linear head", ["--stream", "split-tiny4:2", *d, "--fresh-head"],
                 "error: --fresh-head lets a prompt head"),
                ("--model mlp on split-clinc150:15 (an empty data dir): refused before any lookup",
                 ["--stream", "split-clinc150:15", "--model", "mlp", "--data-dir", r / "empty"],
                 "error: --model mlp is a digits model")]
    for name, args, start in refused:
        case = Case(name, ["run", *args, *RUN, "--out", o], setup=prepare)
        case.check = _refused(case, start, o)
        cases.append(case)
    return cases


def _split_tasks(p: Probe, root: Path) -> None:
    """``root`` holding ``zerogroup`` and ``tiny4`` (see the module docstring) and an empty data dir beside it
    (made again each time: the same files)."""
    rows: dict[str, dict[int, list[bytes]]] = {}
    labels = json.loads((p.data / "clinc150" / "meta.json").read_text())["labels"][:LABELS]
    for split in ("train", "test"):
        rows[split] = {c: [] for c in range(LABELS)}
        for line in (p.data / "clinc150" / f"{split}.jsonl").read_bytes().splitlines():
            if line.strip() and json.loads(line)["label"] < LABELS:
                rows[split][json.loads(line)["label"]].append(line)

    def write(name: str, train: dict[int, int], test: dict[int, int]) -> None:
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "meta.json").write_text(json.dumps({"labels": labels}))
        for split, counts in (("train", train), ("test", test)):
            lines = [line for c, n in counts.items() for line in rows[split][c][:n]]
            (folder / f"{split}.jsonl").write_bytes(b"\n".join(lines) + b"\n")

    write("zerogroup", {0: 40, 1: 40}, {0: 8, 2: 8, 3: 8})
    write("tiny4", dict.fromkeys(range(LABELS), 40), dict.fromkeys(range(LABELS), 8))
    (root.parent / "empty").mkdir(parents=True, exist_ok=True)


def _untrained(name: str, args: list, folder: Path) -> Case:
    """A run refused (exit 2) before any strategy wrote a result."""
    def check() -> str:
        written = sorted(q.relative_to(folder).as_posix() for q in folder.rglob("result.json"))
        return "no strategy trained" if not written else f"{written[0]} EXISTS"
    return Case(name, args, check=check)


def _refused(case: Case, start: str, out: Path) -> Callable[[], str]:
    """Whether the case's error line starts with ``start`` (for ``--model mlp``, with an empty data dir: nothing
    was looked up before it) and ``out`` was not made."""
    def check() -> str:
        if out.exists():
            return f"{out.name} EXISTS"
        line = error_line(case)
        return "refused as wanted, nothing written" if line.startswith(start) else f"FAILED: {line[:80]}"
    return check


def _warned(case: Case, wanted: list[str]) -> Callable[[], str]:
    """Whether each of ``wanted`` is in one of the case's warning lines."""
    def check() -> str:
        warnings = [line for line in case.result.get("stderr", "").splitlines() if line.startswith("warning:")]
        missing = [w for w in wanted if not any(w in line for line in warnings)]
        return f"{len(wanted)} warnings, each naming its class and experience" if not missing else \
            f"FAILED: no warning {missing[0]!r}"
    return check


def _one_class(case: Case, folder: Path) -> Callable[[], str]:
    """Whether the case warned once of one-class experiences and its results do not flag ncm at chance."""
    def check() -> str:
        said = [line for line in case.result.get("stderr", "").splitlines() if "hold one class" in line]
        results = json.loads((folder / "results.json").read_text())
        final = results["strategies"]["ncm"]["summary"]["final"]
        flagged = [f["flag"] for f in results["sanity"].get("ncm", [])]
        if len(said) != 1 or "at_chance" in flagged:
            return f"FAILED: {len(said)} one-class warnings, ncm flags {flagged}"
        return f"one warning; ncm final {', '.join(f'{100 * v:.0f}%' for v in final)}, not flagged at chance"
    return check

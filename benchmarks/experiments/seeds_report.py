"""The tables of :mod:`.seeds` from ``cl-graft run`` results: mean ± sd over seeds, paired differences with Holm's
correction; the pages (:mod:`.digits_report`, :mod:`.class_text_report`) choose their columns.

:func:`benchmark_summary` reads the ``results.json`` of every invocation of one benchmark (one stream, model and
scenario; one folder per seed) and gives, per strategy: final average accuracy, forgetting, bytes kept and wall
time over seeds, the settings tuning chose, the seeds on which :func:`~cl_graft.strategies.comparison.metrics.
sanity_flags` flags it (its matrix equals Naive's of the same seed, or it sits at chance on most tasks), graft's
region sizes (per task, how many the size search chose below their cap, how many missed the target and raised a
``CapacityWarning``), a page's own fields (``row_fields``), and graft minus the strategy paired by seed with
Holm-corrected intervals (:func:`.verdicts.holm_intervals`). :func:`table_lines` writes one benchmark's Markdown
section with a page's :class:`Column` list.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from cl_graft.strategies.comparison.metrics import flag_text, sanity_flags
from cl_graft.units import human_bytes

from .script_out import load_results
from .verdicts import VERDICT, bonferroni_verdict, holm_intervals, mean_sd, pm

REFERENCE = "graft"
SEES = {"task": "task label given", "class": "no task label"}
"""What a strategy's test rows carry in each scenario (a table's column)."""
CEILINGS = {"cumulative": "keeps every row", "joint": "fine-tuning on every class at once",
            "joint-probe": "the frozen encoder with a classifier on every class at once"}
"""Strategies that see every training row (name → how): a reference a table is read against, not a peer (an upper
bound only where it scores above them: with task labels on permuted streams cumulative scores below naive) (they
stay in the Holm family, which only makes the peers' intervals wider)."""


def _read(folder: Path) -> dict:
    """The checked ``results.json`` in ``folder`` (:func:`.script_out.load_results`)."""
    return load_results(folder)


def _graft_sizes(infos: list[dict]) -> dict | None:
    """Region sizes of a graft row: the first seed's share per task, per seed the tasks whose size the search
    chose below their cap and those whose learned region beat the rung's top-|Δ| one (records that hold it), and
    the task runs that missed the size target (each a ``CapacityWarning``); None where no task's size was
    searched (a fixed size)."""
    sizing = [info.get("sizing") for info in infos]
    if not all(sizing) or not any("cap_share" in r for s in sizing for r in s):     # a fixed size searched nothing
        return None
    return {"first_seed_shares": [r["share"] for r in sizing[0]],
            "below_cap": [sum(bool(r.get("below_cap")) for r in s) for s in sizing],
            "below_target": sum(r.get("met") is False for s in sizing for r in s),
            "task_runs": sum(len(s) for s in sizing),
            "refined": [sum(r["refined_gain"] > 0 for r in s) for s in sizing] if all(
                "refined_gain" in r for s in sizing for r in s) else None}


def benchmark_summary(folders: dict[str, list[Path]], *, root: Path,
                      row_fields: Callable[[list[dict]], dict] | None = None) -> dict:
    """One benchmark's table, from its invocations' folders.

    Args:
        folders: ``"main"`` → one folder per seed holding the peers' ``results.json``; ``"graft[variant]"`` → graft
            alone at a fixed size, one folder per seed.
        root: artifact paths in the summary are relative to it.
        row_fields: ``row_fields(results) -> fields`` a page adds to each strategy's row, from its results (one
            ``results.json`` strategy entry per seed).
    """
    mains = [_read(f) for f in folders["main"]]
    first = mains[0]["run"]
    seeds = [r["run"]["seed"] for r in mains]
    naive = {r["run"]["seed"]: r["strategies"]["naive"]["matrix"] for r in mains if "naive" in r["strategies"]}
    runs: dict[str, dict[int, tuple[dict, dict]]] = {}        # row → seed → (strategy result, results.json)
    for label, paths in sorted(folders.items(), key=lambda item: item[0] != "main"):    # the peers first
        for results in (mains if label == "main" else [_read(f) for f in paths]):
            for name, res in results["strategies"].items():
                row = name if label == "main" else label
                runs.setdefault(row, {})[results["run"]["seed"]] = (res, results)
    rows = {}
    for row, by_seed in runs.items():
        flags: dict[str, list[int]] = {}
        for seed, (res, results) in by_seed.items():
            reference = None if row == "naive" else naive.get(seed)
            for flag in sanity_flags(res["matrix"], plain=reference, bands=results.get("chance")):
                flags.setdefault(flag_text(flag), []).append(seed)
        results = [res for res, _ in by_seed.values()]
        tuning = results[0]["info"].get("tuning") or {}
        rows[row] = {"seeds": list(by_seed), "average": [r["summary"]["average"] for r in results],
                     "forgetting": mean_sd([r["summary"]["forgetting"] for r in results]),
                     "bytes": float(np.mean([r["bytes"] for r in results])),
                     "seconds": mean_sd([r["seconds"] for r in results]),
                     "chosen": tuning.get("chosen"), "sanity": flags,
                     "sizes": _graft_sizes([r["info"] for r in results]) if row.startswith(REFERENCE) else None}
        rows[row].update(mean_sd(rows[row]["average"]))
        rows[row].update(row_fields(results) if row_fields is not None else {})
    ref = {seed: res["summary"]["average"] for seed, (res, _) in runs.get(REFERENCE, {}).items()}
    diffs = {row: [ref[s] - runs[row][s][0]["summary"]["average"] for s in seeds if s in ref and s in runs[row]]
             for row in rows if row != REFERENCE}
    sizes = {row: d for row, d in diffs.items() if row.startswith(f"{REFERENCE}[")}
    artifacts = [Path(f, "results.json") for paths in folders.values() for f in paths]
    return {"stream": first["stream"], "model": first["model"], "scenario": mains[0]["scenario"],
            "tasks": mains[0]["tasks"], "seeds": seeds, "preset": first.get("preset"),
            "artifacts": [Path(os.path.relpath(p, root)).as_posix() for p in artifacts],
            "records": [{k: r["run"].get(k) for k in ("command_line", "git_revision", "device_name", "seed", "tune",
                                                      "torch", "avalanche", "cl_graft_version")} for r in mains],
            "rows": rows, "graft_minus": holm_intervals({r: d for r, d in diffs.items() if r not in sizes}),
            "graft_minus_sizes": holm_intervals(sizes)}


def _setting(chosen: dict | None) -> str:
    return "–" if not chosen else ", ".join(f"{k.split('.')[-1]} {v}" for k, v in chosen.items())


def _title(s: dict) -> str:
    scenario = ("task-incremental: every strategy gets the task label at test" if s["scenario"] == "task" else
                "class-incremental: no strategy gets a task label at test")
    return f"## {s['stream']}, model {s['model']}, {scenario}"


def _tuning(s: dict) -> str:
    """How the seeds' settings were chosen (from the records' ``tune``)."""
    tuned = [r["seed"] for r in s["records"] if r.get("tune")]
    if len(tuned) == len(s["records"]):
        return ("Every seed chose every strategy's settings on its own dev rows (`--tune`, the same grid budget "
                "for each).")
    if tuned == s["seeds"][:1]:
        return (f"Seed {tuned[0]} chose every strategy's settings on dev rows (`--tune`, the same grid budget for "
                "each); the other seeds reuse them (`--settings-from`).")
    sources = {_option(r["command_line"], "--settings-from") for r in s["records"]}
    if not tuned and len(sources) == 1 and None not in sources:
        return (f"No seed tuned here: every seed reuses the settings chosen on the dev rows of `{sources.pop()}` "
                "(`--settings-from`, the same choice for every strategy).")
    return f"Seeds tuned on dev rows (`--tune`): {', '.join(map(str, tuned)) or 'none'}."


def _option(command_line: str, name: str) -> str | None:
    """The value of option ``name`` in a recorded command line, None if it is not there."""
    words = command_line.split()
    return words[words.index(name) + 1] if name in words[:-1] else None


@dataclass(frozen=True, kw_only=True)
class Column:
    """One column of a page's table: its header and ``cell(name, row, summary) -> text`` (``row``: the
    strategy's row of :func:`benchmark_summary`)."""

    header: str
    cell: Callable[[str, dict, dict], str]


STRATEGY = Column(header="strategy", cell=lambda name, row, s: f"{name}!" if row["sanity"] else name)
SETTING = Column(header="setting (dev-chosen)", cell=lambda name, row, s: _setting(row["chosen"]))
FORGETTING = Column(header="forgetting %", cell=lambda name, row, s: pm(row["forgetting"]))
STORED = Column(header="stored", cell=lambda name, row, s: human_bytes(row["bytes"]))
WALL = Column(header="wall s", cell=lambda name, row, s: pm(row["seconds"], 1.0, ".0f"))
COMPARISON = ("graft − it (points)", "Holm interval", "p (Holm)", "verdict")
"""The last columns of every table: graft minus the strategy, paired by seed, and its Holm verdict."""


def _comparison(d: dict | None) -> list[str]:
    if d is None:
        return ["", "", "", ""]
    return [f"{100 * d['mean']:+.1f}", f"[{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] at {d['level']:.3g}",
            f"{d['p_holm']:.2g}", VERDICT[d["ahead"]]]


def table_lines(s: dict, columns: list[Column], notes: Sequence[str] = ()) -> list[str]:
    """One benchmark's Markdown section: what ran, the table (``columns``, then :data:`COMPARISON`), the
    verdicts, the page's ``notes`` (a paragraph each), the sanity flags and graft's sizes."""
    seeds = s["seeds"]
    rec = s["records"][0]
    revisions = sorted({str(r["git_revision"])[:12] for r in s["records"]})
    headers = [c.header for c in columns] + list(COMPARISON)
    lines = [_title(s), "", (f"{len(s['tasks'])} tasks; seeds {', '.join(map(str, seeds))}; preset "
             f"{s['preset']}; {rec['device_name']}, git {', '.join(revisions)}. {_tuning(s)} "
             f"Seed {seeds[0]}'s command: `{rec['command_line']}`; every invocation's "
             "full record (command, revision, device, versions) is the `run` field of its artifact: "
             + ", ".join(f"`{a}`" for a in s["artifacts"]) + "."), "",
             "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for name, row in s["rows"].items():
        d = s["graft_minus"].get(name) or s["graft_minus_sizes"].get(name)
        lines.append("| " + " | ".join([c.cell(name, row, s) for c in columns] + _comparison(d)) + " |")
    lines += ["", verdict_line(s)]
    for note in notes:
        lines += ["", note]
    flags = [f"! {name} probably misconfigured on seeds {', '.join(map(str, sd))}: {text}"
             for name, row in s["rows"].items() for text, sd in row["sanity"].items()]
    lines += ["", *flags] if flags else []
    for name, row in s["rows"].items():
        z = row["sizes"]
        if z:
            lines += ["", (f"{name}: region per task, seed {seeds[0]} (% of graftable elements): "
                           + ", ".join(f"{100 * x:.2g}" for x in z["first_seed_shares"])
                           + f"; tasks whose size the search chose below their cap, per seed: "
                           f"{', '.join(map(str, z['below_cap']))} of {len(s['tasks'])}; {z['below_target']} of "
                           f"{z['task_runs']} task runs missed the size target (each raised a `CapacityWarning`)"
                           + (f"; tasks whose learned region scored above the chosen rung's top-|Δ| region on the "
                              f"dev rows, per seed: {', '.join(map(str, z['refined']))}" if z.get("refined") else "")
                           + ".")]
    return lines


def verdict_line(s: dict) -> str:
    """How many peers graft is ahead of, behind and not separable from (Holm), the ceiling apart, and the verdicts
    that Bonferroni's simultaneous intervals would change."""
    minus, m, k = s["graft_minus"], len(s["graft_minus"]), len(s["graft_minus_sizes"])
    if not m + k:
        return "No paired interval yet: each needs at least two seeds of both graft and the strategy."
    peers = [d["ahead"] for n, d in minus.items() if n not in CEILINGS]
    ahead, behind = peers.count(1), peers.count(-1)
    ceilings = "".join(f"; {n} ({CEILINGS[n]}: a reference, not a peer): {VERDICT[d['ahead']]}"
                       for n, d in minus.items() if n in CEILINGS)
    changed = [f"{n} ({VERDICT[d['ahead']]} → {VERDICT[b]})" for n, d in minus.items()
               if (b := bonferroni_verdict(d, m)) != d["ahead"]]
    return (f"Graft ahead of {ahead} of the {len(peers)} peers, behind {behind}, not separable from "
            f"{len(peers) - ahead - behind}{ceilings} (Holm, family-wise 95% over the table's {m} comparisons, "
            f"{len(s['seeds'])} seeds paired)"
            + (f"; the {k} `graft[variant]` rows are a family of their own (Holm over {k})" if k else "")
            + ". Under Bonferroni's simultaneous intervals (each at 0.05/" + str(m) + "): "
            + (", ".join(changed) if changed else "the same verdicts") + ".")


def page(title: str, intro: str, sections: Iterable[list[str]]) -> str:
    """A page's Markdown: ``# title``, the ``intro`` paragraph, then each section (e.g. :func:`table_lines`)
    followed by a blank line."""
    lines = [f"# {title}", "", intro, ""]
    for section in sections:
        lines += section + [""]
    return "\n".join(lines)


HOW_TO_READ = (
    "\"graft − it\": graft's average minus the strategy's, paired by seed, with its t-interval at Holm's step-down "
    "level (shown after \"at\"; one family per table for the peers, another for the `graft[variant]` rows); "
    "\"graft ahead\"/\"behind\" only where that interval excludes 0, else \"not separable\" (the interval holds "
    "0: no difference shown either way, however wide it is). Each interval is the one Holm's step tests at; they "
    "are not simultaneous confidence intervals (the verdicts are family-wise 95%, the intervals' coverage is not); "
    "the line under each table names the verdicts Bonferroni's simultaneous intervals would change. With 3 seeds "
    "the t quantiles are large (2 degrees of freedom): small gaps are not separable; a gap that is the same on "
    "every seed is decided by the exact sign test (it needs 6 seeds at 0.05). `!` marks a strategy the sanity "
    "checks flag (line under its table). `graft[variant]` rows: graft alone at a fixed region size (`graft[0.01]`: "
    "1% of the graftable elements), at `auto`, or `open` (the automatic size planned without the stream length, "
    "as the baselines are not told it), untuned, in invocations of their own with the same seeds.")
"""How every page's tables read: the comparison columns, the verdicts, the marks and the variant rows."""

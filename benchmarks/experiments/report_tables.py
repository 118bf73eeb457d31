"""The reproduction tables of ``BENCHMARKS.md``, read from committed run artifacts (nothing here trains).

- :func:`continual_summary`: the continual comparison over seeds (Panigrahi et al. 2023, Table 4 analogue): mean ±
  sample SD of each strategy's final average accuracy and graft minus each strategy, paired by seed, with a 95%
  t-interval and its Bonferroni-corrected form over the comparisons; "ahead" only where the corrected one
  excludes 0;
- :func:`localization_summary`: fine-tuned model vs θ_pre grafted with the learned region and with top-|Δ| at each
  size (Table 2 analogue): test accuracy, ECE and agreement with the fine-tuned model's predictions;
- :func:`sweep_lines`: the dev-chosen learned region vs top-|Δ| (``region_sweep``);
- :func:`digits_summary`: per digits benchmark of ``digits.json`` (``cl-graft run`` through ``digits.py``): graft,
  the best peer with bytes and Holm verdict, and graft against its fixed-size and open-plan variants;
- :func:`distributed_lines`: the data-parallel scaling run.

Every table names the artifacts it comes from; each ``*_lines`` function renders its summary as Markdown lines.
"""
from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from cl_graft.strategies.comparison.metrics import paired_interval
from cl_graft.units import human_bytes

from cl_graft.files import read_json
from cl_graft.regions.names import current_setting_names
from cl_graft.task import SCENARIOS

from .seeds_report import CEILINGS, SEES
from .run_records import record_note
from .script_out import load_results
from .verdicts import VERDICT, bonferroni_verdict, pct, verdicts


def _rel(path: Path, root: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def relative_command(command: str) -> tuple[str, bool]:
    """``command`` with the absolute paths of the machine that ran it made relative to that checkout's root (the
    part of a script path before ``/benchmarks/``, e.g. ``/path/to/clone/benchmarks/experiments/x.py --data-dir
    /path/to/shared/data`` → ``benchmarks/experiments/x.py --data-dir ../shared/data``), and whether anything changed.
    Commands without an absolute script path, or that do not parse, are returned as they are."""
    try:
        tokens = shlex.split(command)
    except ValueError:
        return command, False
    script = next((t for t in tokens if t.startswith("/") and "/benchmarks/" in t), None)
    if script is None:
        return command, False
    root = script[:script.index("/benchmarks/")]

    def rel(token: str) -> str:
        key, eq, value = token.rpartition("=") if token.startswith("--") and "=" in token else ("", "", token)
        return key + eq + (os.path.relpath(value, root) if value.startswith("/") else value)

    out = " ".join(rel(t) if t not in (";", "&&") else t for t in tokens)
    return out, out != command


def continual_summary(folders: Sequence[Path], *, root: Path, reference: str = "graft") -> dict:
    """Mean ± std over seeds of every strategy's final average accuracy, forgetting and storage, the setting each
    was run with, and ``reference`` minus each strategy paired by seed.

    Args:
        folders: one ``cl-graft run`` output per seed (``results.json``), the same stream and strategies.
        root: paths in the summary are relative to it.
    """
    runs = [load_results(f) for f in folders]
    names = list(runs[0]["strategies"])
    if any(list(r["strategies"]) != names or r["tasks"] != runs[0]["tasks"] for r in runs):
        raise ValueError("the runs differ in strategies or stream")
    first = runs[0]["run"]
    out = {"artifacts": [_rel(Path(f) / "results.json", root) for f in folders], "tasks": runs[0]["tasks"],
           "seeds": [r["run"]["seed"] for r in runs], "reference": reference,
           "setting": {k: first.get(k) for k in ("preset", "k", "command_line", "device_name", "git_revision")},
           "rows": {}}
    ref = [r["strategies"][reference]["summary"]["average"] for r in runs] if reference in names else None
    for name in names:
        results = [r["strategies"][name] for r in runs]
        avg = [s["summary"]["average"] for s in results]
        tuning = results[0].get("info", {}).get("tuning") or {}
        row = {"average": avg, "mean": float(np.mean(avg)), "std": float(np.std(avg, ddof=1)),
               "final_mean": np.mean([s["summary"]["final"] for s in results], axis=0).tolist(),
               "forgetting_mean": float(np.mean([s["summary"]["forgetting"] for s in results])),
               "bytes": float(np.mean([s["summary"]["bytes"] for s in results])),
               "seconds_mean": float(np.mean([s["summary"]["seconds"] for s in results])),
               "chosen": tuning.get("chosen"), "dev_average": tuning.get("dev_average"), "grid": tuning.get("grid")}
        if ref is not None and name != reference:
            row["reference_minus"] = paired_interval(ref, avg)
        out["rows"][name] = row
    out["comparisons"] = sum("reference_minus" in r for r in out["rows"].values())
    if out["comparisons"]:
        from scipy.stats import t

        n = len(runs)
        out["t_single"], out["t_bonferroni"] = (float(t.ppf(q, n - 1)) for q in
                                                (0.975, 1 - 0.05 / (2 * out["comparisons"])))
        for row in out["rows"].values():
            d = row.get("reference_minus")
            if d is not None:
                half = out["t_bonferroni"] * d["std"] / np.sqrt(d["n"])
                low, high = d["mean"] - half, d["mean"] + half
                row["bonferroni"] = {"low": low, "high": high, "ahead": 1 if low > 0 else -1 if high < 0 else 0}
    return out


def _setting(row: dict) -> str:
    if not row.get("chosen"):
        return "–"
    return ", ".join(f"{k.split('.')[-1]} {v}" for k, v in row["chosen"].items())


_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")


def _count(n: int) -> str:
    return _WORDS[n] if n < len(_WORDS) else str(n)


def _interval(d: dict) -> str:
    return f"[{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def _corrected_verdict(d: dict, corrected: dict) -> str:
    """``VERDICT`` of the Bonferroni-corrected interval; "ahead/behind per comparison only" where only the
    uncorrected one excludes 0."""
    if corrected["ahead"] or not d["ahead"]:
        return VERDICT[corrected["ahead"]]
    return f"{'ahead' if d['ahead'] > 0 else 'behind'} per comparison only"


def continual_lines(summary: dict) -> list[str]:
    """The continual table (Markdown lines)."""
    ref, tasks, seeds = summary["reference"], summary["tasks"], summary["seeds"]
    s, m = summary["setting"], summary.get("comparisons", 0)
    lines = [(f"Continual learning, {' → '.join(tasks)}, preset {s['preset']} with {s['k']} training rows per class, "
              f"seeds {', '.join(map(str, seeds))}; settings chosen on dev rows of seed {seeds[0]} (`--tune`, the "
              f"same 3-point grid budget for every strategy that has settings) and reused for the other seeds "
              f"(`--settings-from`). Final accuracy (%) after the stream, mean over seeds; {ref} minus each strategy "
              "paired by seed with a 95% t-interval and its Bonferroni-corrected form, \"ahead\" only where the "
              f"corrected one excludes 0. Seed {seeds[0]}'s command: `{s['command_line']}` ({s['device_name']}, git "
              f"{s['git_revision']}). Artifacts: " + ", ".join(f"`{a}`" for a in summary["artifacts"])), "",
             "| strategy | setting (dev-chosen) | " + " | ".join(tasks) + " | average ± SD | forgetting | stored | "
             f"{ref} − strategy | 95% interval | Bonferroni 95% ({m} comparisons) | verdict |",
             "|---|---|" + "---|" * len(tasks) + "---|---|---|---|---|---|---|"]
    for name, row in summary["rows"].items():
        d = row.get("reference_minus")
        diff = ["", "", "", ""] if d is None else [f"{100 * d['mean']:+.1f}", _interval(d),
                                                   _interval(row["bonferroni"]),
                                                   _corrected_verdict(d, row["bonferroni"])]
        lines.append(f"| {name} | {_setting(row)} | " + " | ".join(pct(v) for v in row["final_mean"]) +
                     f" | {pct(row['mean'])} ± {pct(row['std'])} | {pct(row['forgetting_mean'])} | "
                     f"{human_bytes(row['bytes'])} | " + " | ".join(diff) + " |")
    if m:
        lines += ["", (f"The intervals are per comparison; {_count(m)} comparisons share the {_count(len(seeds))} "
                       "seeds, so the Bonferroni column widens each to a family-wise 95% level (t quantile at 1 − "
                       f"0.05/{2 * m}, {len(seeds) - 1} degrees of freedom: {summary['t_bonferroni']:.2f} instead of "
                       f"{summary['t_single']:.2f}; computed from the per-seed averages in the artifacts above). "
                       f"\"{ref} ahead\" is claimed only where the corrected interval excludes 0. \"± SD\" is the "
                       "sample standard deviation over seeds (n − 1).")]
    tuned = [(n, r) for n, r in summary["rows"].items() if r.get("dev_average")]
    if tuned:
        lines += ["", f"Dev averages of every grid point (seed {seeds[0]}; the chosen point in bold):", "",
                  "| strategy | grid point: dev average (%) |", "|---|---|"]
        for name, row in tuned:
            cells = [(f"**{_setting({'chosen': p})}: {pct(v)}**" if p == row["chosen"] else
                      f"{_setting({'chosen': p})}: {pct(v)}") for p, v in zip(row["grid"], row["dev_average"])]
            lines.append(f"| {name} | " + "; ".join(cells) + " |")
    return lines


def localization_summary(paths: Sequence[Path], *, root: Path, sizes: Sequence[float] = (1e-4, 1e-3),
                         page: Path | None = None) -> dict:
    """Per task: the fine-tuned model and, at each size, the learned (graft) and top-|Δ| regions — accuracy,
    ECE and agreement with FT — from ``localization`` benchmark JSONs (a task in several: the last wins); each
    artifact's :func:`record_note`, and ``page`` (the hand-written results page) when given and present."""
    tasks: dict[str, dict] = {}
    notes: dict[str, str | None] = {}
    for path in paths:
        data = read_json(path)
        notes[_rel(path, root)] = record_note(data["config"])
        for task, q in data["quality"].items():
            rows = {r["name"]: r for r in q["rows"]}
            cells = {"FT": rows["FT"]}
            for size in sizes:
                for method in ("graft", "topk"):
                    cells[f"{method}-{size:g}"] = rows.get(f"{method}-{size}") or rows.get(f"{method}-{size:g}")
            tasks[task] = {"n_test": q["n_test"], "artifact": _rel(path, root),
                           "revision": data["config"].get("git_revision"), "cells": {
                               k: None if r is None else {m: r[m] for m in ("accuracy", "ece", "agreement")}
                               for k, r in cells.items()}}
    return {"sizes": list(sizes), "tasks": tasks, "notes": notes,
            "page": _rel(page, root) if page is not None and Path(page).exists() else None}


def localization_lines(summary: dict) -> list[str]:
    """The Table 2 analogue (Markdown lines)."""
    sizes = summary["sizes"]
    head = ["FT acc / ECE"] + [f"{m} {100 * s:g}%: acc / ECE / agree" for s in sizes for m in ("graft", "top-k")]
    artifacts = sorted({t["artifact"] for t in summary["tasks"].values()})
    notes = summary.get("notes", {})
    page = summary.get("page")
    lines = [("Fine-tuned model (FT) vs θ_pre grafted with the learned region (Eq. 3) and with the top-|Δ| region, "
              "MiniLM, quick preset, seed 0; test accuracy, ECE and agreement with FT's predictions (%). "
              "Artifacts: " + ", ".join(f"`{a}`" + (f" ({notes[a]})" if notes.get(a) else "") for a in artifacts)
              + (f". Gaps and calibration counts: [`{page}`]({page})" if page else "")), "",
             "| task (test rows) | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
    for task, t in summary["tasks"].items():
        c = t["cells"]
        cells = [f"{pct(c['FT']['accuracy'])} / {pct(c['FT']['ece'])}"]
        for s in sizes:
            for m in ("graft", "topk"):
                r = c[f"{m}-{s:g}"]
                cells.append("–" if r is None else " / ".join(pct(r[k]) for k in ("accuracy", "ece", "agreement")))
        lines.append(f"| {task} ({t['n_test']}) | " + " | ".join(cells) + " |")
    return lines


def load_artifact(path: Path, *, root: Path) -> dict | None:
    """A committed JSON artifact with its path (``"artifact"``, relative to ``root``), or None when absent."""
    return {**read_json(path), "artifact": _rel(path, root)} if Path(path).exists() else None


def sweep_lines(data: dict) -> list[str]:
    """Learned region (settings chosen on dev) vs top-|Δ| from a ``region_sweep`` artifact (Markdown lines)."""
    lines = [("Learned region vs top-|Δ| with the learned region's settings chosen on a held-out half of dev before "
              f"test rows are scored (grid: {'; '.join(_setting({'chosen': p}) for p in data['grid'])}; one seed; "
              f"`{data['artifact']}`): test accuracy (%), the "
              "difference, its paired standard error over test rows and the declared 2-SE verdict."), "",
             "| task | size | learned (chosen) | top-k | difference | paired SE | verdict |",
             "|---|---|---|---|---|---|---|"]
    for task, cells in data["cells"].items():
        for size, cell in cells.items():
            by = {c["name"]: c for c in cell["candidates"]}
            learned, topk = by[cell["chosen"]]["test"]["accuracy"], by["topk"]["test"]["accuracy"]
            lines.append(f"| {task} | {100 * float(size):g}% | {pct(learned)} ({cell['chosen']}) | {pct(topk)} | "
                         f"{100 * cell['diff_test']:+.1f} | {100 * cell['se_paired']:.1f} | {cell['verdict']} |")
    return lines


def distributed_lines(dist: dict) -> list[str]:
    """The data-parallel scaling table from a ``distributed_scaling`` artifact (Markdown lines)."""
    rec = dist["config"]
    lines = [(f"Data-parallel scaling under torchrun (`{dist['artifact']}`, made by "
              f"`{relative_command(rec['command_line'])[0]}` on "
              f"{rec['started']}, {rec['device_name']}, load average {rec.get('load_average')} at its end), "
              "same global batch and steps; the stream's time includes evaluation, which every process runs "
              "whole:"), "",
             "| workload | processes × threads | s / step | examples / s | speed-up vs the first row |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['workload']} | {r['processes']} × {r['threads_per_process']} | {r['seconds_per_step']:.2f} | "
              f"{r['examples_per_second']:.1f} | {r['speedup_vs_first']:.2f} |" for r in dist["rows"]]
    return lines


DEFAULT_VERDICT = verdicts("default")


def _digits_row(row: dict) -> dict:
    """A digits table row's figures: mean ± sd of the final average accuracy, bytes kept, settings chosen, and
    whether the sanity checks flag it."""
    return {"mean": row["mean"], "sd": row["sd"], "bytes": row["bytes"], "chosen": row.get("chosen"),
            "flagged": bool(row.get("sanity"))}


def _own_variant(graft: dict | None) -> str:
    """The ``graft[...]`` row label of the size graft's own row ran with (tuning's choice, else ``auto``)."""
    size = current_setting_names((graft or {}).get("chosen") or {}).get("region_size", "auto")
    return f"graft[{size}]"


def _revision(rev: str | None) -> str:
    rev = str(rev)
    return rev[:7] + ("+dirty" if rev.endswith("+dirty") else "")


def digits_benchmark(b: dict) -> dict:
    """One benchmark of ``digits.json`` (:func:`.seeds_report.benchmark_summary`): graft's row; the best peer
    (highest mean among the other strategies, graft's variants and :data:`CEILINGS` left out) with graft minus it
    at Holm's level; the verdicts against every peer; graft minus each ``graft[...]`` variant other than graft's
    own size."""
    rows, minus = b["rows"], b["graft_minus"]
    peers = {n: r for n, r in rows.items() if not n.startswith("graft") and n not in CEILINGS}
    best = max(peers, key=lambda n: -np.inf if peers[n]["mean"] is None else peers[n]["mean"], default=None)
    own = _own_variant(rows.get("graft"))
    return {"name": f"{b['stream']}, {b['model']}", "scenario": b["scenario"], "tasks": len(b["tasks"]),
            "seeds": b["seeds"], "graft": _digits_row(rows["graft"]) if "graft" in rows else None,
            "best": None if best is None else {"name": best, **_digits_row(rows[best]), "minus": minus.get(best)},
            "verdicts": [d["ahead"] for n, d in minus.items() if n not in CEILINGS],
            "ceilings": {n: d["ahead"] for n, d in minus.items() if n in CEILINGS},
            "bonferroni_changes": [n for n, d in minus.items() if bonferroni_verdict(d, len(minus)) != d["ahead"]],
            "variants": {n: {"mean": rows[n]["mean"], "minus": d} for n, d in b["graft_minus_sizes"].items()
                         if n != own and n in rows},
            "records": sorted({(_revision(r.get("git_revision")), str(r.get("device_name"))) for r in b["records"]}),
            "invocations": len(b["artifacts"])}


def digits_summary(data: dict) -> dict:
    """The digits section's summary of a ``digits.json`` artifact (:func:`load_artifact`): per benchmark
    :func:`digits_benchmark`, and the page the artifact belongs to (``digits.md`` beside it)."""
    return {"artifact": data["artifact"], "page": Path(data["artifact"]).with_suffix(".md").as_posix(),
            "benchmarks": [digits_benchmark(b) for b in data["benchmarks"]]}


def _accuracy(row: dict, name: str = "") -> str:
    """``name`` (``!`` when flagged) and mean ± sd (%)."""
    label = (name + ("!" if row["flagged"] else "") + " ").lstrip()
    return label + ("–" if row["mean"] is None else pct(row["mean"]) + ("" if row["sd"] is None else
                                                                         f" ± {pct(row['sd'])}"))


def _holm(d: dict | None) -> str:
    return "–" if d is None else f"{100 * d['mean']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"


def _verdict_counts(b: dict) -> str:
    """Graft's Holm verdicts against the peers (the ceiling apart) and the peers whose verdict Bonferroni's
    simultaneous intervals would change."""
    verdicts = b["verdicts"]
    ahead, behind, m = verdicts.count(1), verdicts.count(-1), len(verdicts)
    ceilings = "".join(f"; {n} (reference): {VERDICT[v]}" for n, v in b["ceilings"].items())
    changed = b["bonferroni_changes"]
    return (f"ahead on {ahead}, behind on {behind}, not separable on {m - ahead - behind} of {m} peers{ceilings}"
            + (f"; Bonferroni would change {', '.join(changed)}" if changed else ""))


def _variant_cell(variants: dict) -> str:
    return "; ".join(f"{n} {'–' if v['mean'] is None else pct(v['mean'])}: {_holm(v['minus'])} "
                     f"{'–' if v['minus'] is None else DEFAULT_VERDICT[v['minus']['ahead']]}"
                     for n, v in variants.items()) or "–"


def digits_lines(summary: dict) -> list[str]:
    """The digits section (Markdown lines): one row per benchmark."""
    records = sorted({rec for b in summary["benchmarks"] for rec in b["records"]})
    page = summary["page"]
    lines = [("Every digits benchmark through `cl-graft run` (made by `benchmarks/experiments/digits.py`, tables by "
              "`digits_report.py`). Final average accuracy over the tasks (%), mean ± sample SD over seeds; "
              "stored: bytes each strategy keeps beyond the model it starts from, as its entry counts them. Graft "
              "runs at the region size its tuning chose on dev rows; the best peer is the highest mean among the "
              "scenario's other strategies (each tuned on dev rows with the same grid budget), cumulative (it keeps "
              "every training row) being a reference, not a peer (a ceiling only where it scores above them; with task "
              "labels on the permuted streams it scores below naive). \"graft − best peer\": paired by seed, points, "
              "with the t-interval at Holm's step-down level over the table's peers (the level, every peer and "
              "its setting in the page); verdicts only where it excludes 0 (\"not separable\": it holds 0, however "
              "wide). These per-step intervals are not simultaneous confidence intervals (the verdicts are "
              "family-wise 95%); where Bonferroni's simultaneous intervals would give another verdict the row says "
              "so. \"graft − its variants\": graft alone "
              "at a fixed size (`graft[0.01]`: 1% of the graftable elements), at `auto`, or `open` (the automatic "
              "size planned without the stream length), paired the same way, a Holm family of their own. `!`: "
              "the sanity checks flag the row. Artifact: `" + summary["artifact"] + "` (invocations: "
              + ", ".join(f"git {rev} on {device}" for rev, device in records) + f"); page: [`{page}`]({page})."),
             "", ("| benchmark | test rows | graft | stored | best peer | stored | graft − best peer [Holm] | "
                  "verdict | graft against every peer | graft − its variants [Holm] |"),
             "|---|---|---|---|---|---|---|---|---|---|"]
    return lines + [_digits_table_row(b) for b in summary["benchmarks"]]


def _digits_table_row(b: dict) -> str:
    """One benchmark's row of the digits section (:func:`digits_benchmark`)."""
    g, best = b["graft"], b["best"]
    size = "" if g is None or not g["chosen"] else f" ({_setting({'chosen': g['chosen']})})"
    d = best and best["minus"]
    scenario = b["scenario"]
    cells = [f"{b['name']} ({b['tasks']} tasks, {len(b['seeds'])} seeds)", f"{SCENARIOS[scenario]} ({SEES[scenario]})",
             "–" if g is None else _accuracy(g) + size, "–" if g is None else human_bytes(g["bytes"]),
             "–" if best is None else _accuracy(best, best["name"]),
             "–" if best is None else human_bytes(best["bytes"]),
             _holm(d), "–" if not d else VERDICT[d["ahead"]], _verdict_counts(b),
             _variant_cell(b["variants"])]
    return "| " + " | ".join(cells) + " |"

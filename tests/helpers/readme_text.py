"""README.md's quotes of the text streams, localization, the continual text comparison, the closed-form heads,
the class-incremental text page and the reliability probe, each rebuilt from its committed artifact
(``tests/docs/test_readme_figures.py`` compares them with README)."""
from __future__ import annotations

import math
import statistics

from scipy import stats

from cl_graft.benchmarks.experiments.run_records import record_note
from cl_graft.benchmarks.experiments.verdicts import holm_intervals

from helpers.readme_art import MB, RESULTS, WORDS, art, count, interval, pct, signed, span

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


def text_heads() -> str:
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
    return (f"with task labels on qnli → agnews → sst2 ({count(len(seeds), 'seed')}) graft "
            f"{pct(statistics.mean(g['summary']['average'] for g in graft))}% against slda {pct(mean['slda'])}%, "
            f"ranpac {pct(mean['ranpac'])}%, ncm {pct(mean['ncm'])}% (ahead of ncm by Holm-corrected intervals, not "
            f"separable from slda and ranpac: on qnli the frozen features sit near chance); without task labels "
            f"(`--task-inference features`, a row right only in its own task and class) graft "
            f"{pct(statistics.mean(strict))}% ({pct(routed)}% as Avalanche counts it; {pct(task_id)}% of rows routed "
            f"to their task) against slda {pct(statistics.mean(unlabelled['slda']))}%, ranpac "
            f"{pct(statistics.mean(unlabelled['ranpac']))}%, ncm {pct(statistics.mean(unlabelled['ncm']))}%, each "
            "head answering over every task's columns (ahead of ranpac and ncm, not separable from slda)")


def verdict_groups(verdict: dict, names) -> str:
    """``names`` grouped by their Holm verdict (:func:`holm_intervals`): "ahead of a and b, not separable from c"."""
    words = {1: "ahead of", 0: "not separable from", -1: "behind"}
    which = {v: [n for n in names if verdict[n]["ahead"] == v] for v in (1, 0, -1)}
    return ", ".join(f"{words[v]} {', '.join(ns[:-1]) + ' and ' if len(ns) > 1 else ''}{ns[-1]}"
                     for v, ns in which.items() if ns)


def reliability() -> str:
    cases = art("reliability.json")["cases"]
    return f"reliability.md) ({sum(c['ok'] for c in cases)} of {len(cases)} cases as wanted"


CLASS_STREAMS = (("split-clinc150:15", "split-clinc150-15-class"), ("split-banking77:7", "split-banking77-7-class"))
"""The class_text page's streams: the name README writes, the folder of its seeds under ``class_text/runs``."""
CLASS_SEEDS = 3
"""The seeds the page runs per stream (`class_text.py --seeds 0,1,2`): fewer committed reads "so far"."""
CLASS_PEERS = ("ranpac", "slda", "ncm", "replay-matched", "der", "naive")
"""The page's strategies README names beside graft: the closed-form heads, the best row-keeping peers, naive."""


def class_runs(folder: str) -> list[dict]:
    """The committed seeds of one class_text stream (``results.json``), by seed."""
    found = sorted((RESULTS / "class_text" / "runs" / folder).glob("seed*/results.json"),
                   key=lambda f: int(f.parent.name.removeprefix("seed")))
    return [art(f.relative_to(RESULTS).as_posix()) for f in found]


def _class_stream(name: str, runs: list[dict]) -> str:
    if not runs:
        return f"`{name}`: not finished yet"
    avg = {n: [r["strategies"][n]["summary"]["average"] for r in runs] for n in runs[0]["strategies"]}
    routed = statistics.mean(statistics.mean(r["strategies"]["graft"]["info"]["task_id"]) for r in runs)
    cpu = {n: statistics.mean(r["strategies"][n]["info"]["cpu_seconds"] for r in runs) for n in ("graft", "ranpac")}
    verdicts = ""
    if len(runs) > 1:                                   # the page's family: graft minus every other strategy
        holm = holm_intervals({n: [g - o for g, o in zip(avg["graft"], v)] for n, v in avg.items() if n != "graft"})
        verdicts = "; " + verdict_groups(holm, CLASS_PEERS)
    interval = {1: ", no interval", 2: ", Holm-corrected, one degree of freedom"}.get(len(runs), ", Holm-corrected")
    seeds = count(len(runs), "seed") + (" so far" if len(runs) < CLASS_SEEDS else "") + interval
    same = all(r["strategies"]["graft"]["summary"]["final"] == r["strategies"]["ranpac"]["summary"]["final"]
               for r in runs)
    return (f"`{name}` ({seeds}) graft {pct(statistics.mean(avg['graft']))}% (rows routed to their experience "
            f"{pct(routed)}%" + ("; on every experience ranpac's accuracy" if same else "") + ") against "
            + ", ".join(f"{n} {pct(statistics.mean(avg[n]))}%" for n in CLASS_PEERS)
            + f"{verdicts}; graft at {cpu['graft'] / cpu['ranpac']:.1f}× ranpac's CPU seconds")


def class_text() -> str:
    runs = {name: class_runs(folder) for name, folder in CLASS_STREAMS}
    done = [r for rs in runs.values() for r in rs]
    revisions = sorted({r["run"]["git_revision"][:7] for r in done})
    answers = sorted({r["strategies"]["graft"]["info"]["router"]["answer"] for r in done})
    assert answers == ["head"], answers                                   # "it answers with its router's head"
    return (f"runs at {' and '.join(f'`{v}`' for v in revisions)}; after the last experience "
            + "; ".join(_class_stream(name, rs) for name, rs in runs.items())
            + ". On every run graft's dev rows chose to answer with its router's closed-form head (`--answer auto`)")


def text_heads_held_out() -> str:
    seeds, names = (0, 1, 2), ("slda", "ranpac", "ncm")
    graft = [art(f"text_heads/heldout/graft/seed{s}/results.json")["strategies"]["graft"] for s in seeds]
    heads = [art(f"text_heads/heldout/heads/seed{s}/results.json")["strategies"] for s in seeds]

    def sentence(score) -> str:
        verdict = holm_intervals({n: [score(g) - score(h[n]) for g, h in zip(graft, heads)] for n in names})
        return (f"graft {pct(statistics.mean(score(g) for g in graft))}% against "
                + ", ".join(f"{n} {pct(statistics.mean(score(h[n]) for h in heads))}%" for n in names)
                + f" ({verdict_groups(verdict, names)})")

    return (f"On a held-out list, mnli → qqp → mpqa ({count(len(seeds), 'seed')}, "
            "[page](benchmarks/results/text_heads/heldout/text_heads.md)), with task labels "
            + sentence(lambda r: r["summary"]["average"]) + "; without them "
            + sentence(lambda r: statistics.mean(r["info"]["task_inference"]["accuracy"])) + ".")

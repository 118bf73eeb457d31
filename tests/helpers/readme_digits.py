"""README.md's quotes of the digit streams, retraining and the small-regions probe, each rebuilt from its committed
artifact (``tests/docs/test_readme_figures.py`` compares them with README)."""
from __future__ import annotations

import math
import statistics

from scipy import stats

from helpers.readme_art import KB, MB, RESULTS, art, interval, pct, signed, span

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

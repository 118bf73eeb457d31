"""How the pages read a run's times: where each strategy's wall time went (:data:`PARTS`), the size search's share
of graft's training (one definition, :data:`SEARCH_SHARE_MEANS`, on every page), the order the strategies ran in,
and the conditions the run record kept beside the times (:func:`cl_graft.machine.conditions`; "not recorded" for
runs made before records kept them).
"""
from __future__ import annotations

PARTS = ("training", "size search", "finder at the chosen size", "feature statistics", "trained model's test score",
         "evaluation", "the rest (building, saving)")
SEARCH_SHARE_MEANS = ("the size search's seconds over graft's training seconds (its `train` calls less the size "
                      "search, the finder at the chosen size, feature statistics and the trained model's test score)")
"""What every page's "size search, % of graft's training" is."""
NOT_RECORDED = "conditions not recorded"


def parts(result: dict) -> dict[str, float]:
    """Seconds per part (:data:`PARTS`) of one strategy's wall time (``result``: its entry in ``results.json``'s
    ``strategies``); training excludes what graft runs inside its ``train`` calls (the size search, the finder,
    feature statistics, the trained model's test score)."""
    info, sizing = result["info"], result["info"].get("sizing", [])
    search = sum(s.get("search_seconds", 0.0) for s in sizing)
    finder = sum(s.get("seconds", 0.0) - s.get("search_seconds", 0.0) for s in sizing)
    features = sum(v or 0.0 for v in info.get("feature_seconds", []))
    tested = sum(s.get("trained_test_seconds") or 0.0 for s in sizing)
    return {"training": info["train_seconds"] - search - finder - features - tested, "size search": search,
            "finder at the chosen size": finder, "feature statistics": features,
            "trained model's test score": tested, "evaluation": info["eval_seconds"],
            "the rest (building, saving)": result["seconds"] - info["train_seconds"] - info["eval_seconds"]}


def search_share(graft_parts: dict[str, float]) -> float:
    """The size search's share of graft's training (:data:`SEARCH_SHARE_MEANS`), from :func:`parts`."""
    return graft_parts["size search"] / graft_parts["training"]


def run_order(record: dict) -> str:
    """The order the strategies of a ``cl-graft run`` ran in (its ``strategies``, run one after the other), e.g.
    "graft, then naive"."""
    return ", then ".join(record.get("strategies") or ["not recorded"])


def _load(values: list[float] | None) -> str:
    return "not recorded" if not values else f"{values[0]:.2f}"


def conditions_text(record: dict) -> str:
    """The conditions a run record kept beside its times, in words: torch threads, ``OMP_NUM_THREADS``, the
    1-minute load average at start and end, native bfloat16; :data:`NOT_RECORDED` for older records."""
    c = record.get("conditions")
    if not c:
        return NOT_RECORDED
    return (f"{c['torch_threads']} torch threads, OMP_NUM_THREADS {c.get('omp_num_threads') or 'unset'}, load "
            f"average {_load(c.get('load_average_start'))} at start and {_load(c.get('load_average_end'))} at end, "
            + ("bfloat16 native" if c.get("bfloat16_native") else "no native bfloat16"))

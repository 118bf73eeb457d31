"""The strategy registry: a new baseline is one entry; the runner and the CLI read only the registry."""
from __future__ import annotations

import pytest

from cl_graft.errors import UserError

avalanche = pytest.importorskip("avalanche")

from avalanche.training import Naive
from cl_graft.benchmarks.streams import Stream
from cl_graft.strategies.comparison.registry import (
    DEFAULT_STRATEGIES,
    STRATEGIES,
    StrategyEntry,
    collect,
    parse_strategies,
)
from cl_graft.strategies.comparison.runner import run_strategy
from cl_graft.strategies.interface.config import continual_setup

from helpers.toy_streams import TASKS, build_model, stream_rows


def test_a_new_baseline_is_one_registry_entry(monkeypatch):
    built = []

    def build(ctx):
        built.append(ctx.template["train_epochs"])
        return Naive(**ctx.template, plugins=ctx.plugins)

    entry = StrategyEntry(name="mine", help="plain fine-tuning, registered by a test", stores="nothing",
                          build=build, kept_bytes=lambda s, a: (123, {"x": 1}))
    monkeypatch.setitem(STRATEGIES, "mine", entry)
    assert parse_strategies("graft,mine") == ["graft", "mine"]
    cfg = continual_setup("smoke", seed=0)[1]
    result = run_strategy("mine", build_model(), Stream.make(stream_rows(), build_model()), cfg)
    assert built == [cfg.recipe.steps] and len(result.matrix) == len(TASKS)
    assert result.bytes == 123 and result.info["x"] == 1
    train, evaluation = result.info["train_seconds"], result.info["eval_seconds"]     # where the time went
    assert train > 0 and evaluation > 0 and train + evaluation <= result.seconds + 0.1
    cpu = result.info["train_cpu_seconds"], result.info["eval_cpu_seconds"]           # their CPU time
    assert all(c > 0 for c in cpu) and sum(cpu) <= result.info["cpu_seconds"] + 0.1


def test_storage_matched_replay_holds_the_bytes_its_peer_kept():
    from cl_graft.strategies.baselines.replay_matched import MATCHED
    from cl_graft.strategies.comparison.runner import StrategyResult

    model, stream = build_model(), Stream.make(stream_rows(), build_model())
    cfg = continual_setup("smoke", seed=0)[1]
    rows = [r for exp in stream.benchmark.train_stream for r in exp.dataset]
    tokens = sum(len(r["input_ids"]) for r in rows) / len(rows)
    peer = StrategyResult(MATCHED, stream.tasks, [[1.0, 1.0]], 1.0, 1_000, {})
    result = run_strategy("replay-matched", model, stream, cfg, peers={MATCHED: peer})
    assert result.info["memory_rows"] == int(1_000 / (4 * tokens)) > 0          # fewer than the stream's rows
    with pytest.raises(UserError, match=f"reads the result of {MATCHED}"):
        run_strategy("replay-matched", model, stream, cfg)


def test_every_entry_is_consistent():
    from cl_graft.strategies.routing.states import TASK_INFERENCE
    from cl_graft.strategies.interface.entry import FITS

    for name, entry in STRATEGIES.items():
        assert entry.name == name and entry.help and entry.stores and entry.fit in FITS
        assert all(p in STRATEGIES for p in entry.peers)
        assert entry.routes is None or set(entry.routes.rules) <= set(TASK_INFERENCE)
    assert [n for n, e in STRATEGIES.items() if e.state is not None] == ["graft", "ranpac", "slda"]
    assert {n for n, e in STRATEGIES.items() if e.routes is not None} == {"graft", "graft-paper", "packnet",
                                                                       "packnet-zero", "slda", "ranpac", "ncm"}
    assert DEFAULT_STRATEGIES == ("graft", "naive", "ewc", "lwf", "replay", "joint")    # as before discovery
    roles = {e.reference: n for n, e in STRATEGIES.items() if e.reference}
    assert roles == {"plain": "naive", "alone": "single"}
    with pytest.raises(ValueError, match="reference must be one of"):
        StrategyEntry(name="x", help="y", stores="z", build=print, kept_bytes=print, reference="best")
    twin = StrategyEntry(name="twin", help="y", stores="z", build=print, kept_bytes=print, reference="plain")
    with pytest.raises(ValueError, match="share one reference"):
        collect([*STRATEGIES.values(), twin])
    with pytest.raises(ValueError, match="fit must be"):
        StrategyEntry(name="x", help="y", stores="z", build=print, kept_bytes=print, fit="sometimes")
    with pytest.raises(ValueError, match="cannot read its own result"):
        StrategyEntry(name="x", help="y", stores="z", build=print, kept_bytes=print, peers=("x",))


@pytest.mark.parametrize("text,message", [("", "empty"), ("graft,nope", "unknown strategy 'nope'"),
                                          ("naive,naive", "appears twice"),
                                          ("replay-matched,graft", "put graft before it")])
def test_parse_strategies_errors(text, message):
    with pytest.raises(UserError, match=message):
        parse_strategies(text)


def test_the_progress_line_shows_what_an_entry_does_after_training():
    from types import SimpleNamespace

    from cl_graft.strategies.comparison.progress import Report

    phases = []
    console = SimpleNamespace(phase=lambda text, *a: phases.append(text), advance=lambda *a: None)
    strategy = SimpleNamespace(experience=SimpleNamespace(current_experience=1))
    plugin = Report(console, "mine").plugin(["a", "b"], 2,
                                            phase_after_training=lambda s: f"search {s is strategy}")
    plugin.before_training_exp(strategy)
    for _ in range(2):
        plugin.after_training_iteration(strategy)
    assert phases == ["mine · task 2/2 b · train", "mine · task 2/2 b · search True"]
    assert STRATEGIES["graft"].phase_after_training is not None and STRATEGIES["naive"].phase_after_training is None


def test_a_head_without_optimizer_steps_shows_its_features_pass_not_its_steps():
    from types import SimpleNamespace

    from cl_graft.strategies.comparison.progress import Report

    phases = []
    console = SimpleNamespace(phase=lambda text, *a: phases.append(text), advance=lambda *a: None)
    strategy = SimpleNamespace(experience=SimpleNamespace(current_experience=0))
    for name in ("slda", "ranpac", "ncm", "naive"):
        phases.clear()
        plugin = Report(console, name).plugin(["a"], 200, phase_after_training=STRATEGIES[name].phase_after_training)
        plugin.before_training_exp(strategy)
        plugin.after_training_epoch(strategy)                    # the epoch took no step
        want = [] if name == "naive" else [f"{name} · task 1/1 a · θ_pre features"]
        assert phases == [f"{name} · task 1/1 a · train", *want], name
    phases.clear()
    plugin = Report(console, "graft").plugin(["a"], 1, phase_after_training=lambda s: "size search")
    plugin.before_training_exp(strategy)
    plugin.after_training_iteration(strategy)
    plugin.after_training_epoch(strategy)                        # steps were taken: announced once, after the last
    assert phases == ["graft · task 1/1 a · train", "graft · task 1/1 a · size search"]

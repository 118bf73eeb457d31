"""The strategy registry: a new baseline is one entry; the runner and the CLI read only the registry."""
from __future__ import annotations

import pytest

from cl_graft.errors import UserError

avalanche = pytest.importorskip("avalanche")

from avalanche.training import Naive
from cl_graft.benchmarks.streams import Stream
from cl_graft.strategies.comparison.config import continual_setup
from cl_graft.strategies.comparison.registry import STRATEGIES, StrategyEntry, parse_strategies, strategy_settings
from cl_graft.strategies.comparison.runner import run_strategy

from helpers import TASKS, build_model, stream_rows


def test_a_new_baseline_is_one_registry_entry(monkeypatch):
    built = []

    def build(ctx):
        built.append(ctx.template["train_epochs"])
        return Naive(**ctx.template, plugins=ctx.plugins)

    entry = StrategyEntry("mine", "plain fine-tuning, registered by a test", build, lambda s, a: (123, {"x": 1}))
    monkeypatch.setitem(STRATEGIES, "mine", entry)
    assert parse_strategies("graft,mine") == ["graft", "mine"]
    cfg = continual_setup("smoke", seed=0)[1]
    result = run_strategy("mine", build_model(), Stream.make(stream_rows(), build_model()), cfg)
    assert built == [cfg.recipe.steps] and len(result.matrix) == len(TASKS)
    assert result.bytes == 123 and result.info["x"] == 1


def test_storage_matched_replay_holds_grafts_bytes():
    model, stream = build_model(), Stream.make(stream_rows(), build_model())
    data, cfg = continual_setup("smoke", seed=0)
    settings = strategy_settings("replay-matched", data, seed=0)   # auto size: the preset's sparsity estimates it
    result = run_strategy("replay-matched", model, stream, cfg, settings)
    params = dict(model.named_parameters())
    numel = sum(p.numel() for n, p in params.items() if ".layer." in n)
    heads = sum(p.numel() for n, p in params.items() if n.startswith("heads."))
    graft_bytes = 2 * int(settings.localize.sparsity * numel) * 8 + 4 * heads   # index + value per element, heads
    rows = [r for exp in stream.benchmark.train_stream for r in exp.dataset]
    tokens = sum(len(r["input_ids"]) for r in rows) / len(rows)
    assert result.info["memory_rows"] == int(graft_bytes / (4 * tokens)) > 0


def test_every_entry_is_consistent():
    for name, entry in STRATEGIES.items():
        assert entry.name == name and entry.help and entry.fit in ("stream", "joint", "separate")
    assert [n for n, e in STRATEGIES.items() if e.resumable] == ["graft"]
    with pytest.raises(ValueError, match="fit must be"):
        StrategyEntry("x", "y", print, print, fit="sometimes")


@pytest.mark.parametrize("text,message", [("", "empty"), ("graft,nope", "unknown strategy 'nope'"),
                                          ("naive,naive", "appears twice")])
def test_parse_strategies_errors(text, message):
    with pytest.raises(UserError, match=message):
        parse_strategies(text)

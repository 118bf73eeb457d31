"""What ``cl-graft run`` shows while a strategy runs: Avalanche's callbacks on the command's live progress line
(:class:`~cl_graft.console.Console`), and one result line per task as it ends.

The progress line reads ``<strategy> · task 2/3 agnews · train`` (steps done of the experience's optimizer
steps, with an ETA), then what the strategy does after training when its entry names it (``… · size search``:
a region search, :attr:`~..interface.entry.StrategyEntry.phase_after_training`), then ``… · eval`` (test rows
done of the stream's). A task's result line gives its test accuracy just after training it, the average over
the tasks seen so far, the fields its entry adds (:attr:`~..interface.entry.StrategyEntry.progress_fields`,
e.g. a region's share of the graftable weights) and what the strategy stores by then
(:attr:`.runner.StrategyResult.bytes`).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from avalanche.core import SupervisedPlugin

from cl_graft.console import Console
from cl_graft.units import human_bytes


@dataclass(frozen=True)
class Report:
    """Where one strategy run reports: the command's console, the run's label on the progress line (the strategy,
    ``<strategy> · tune 2/3``) and whether it prints a result line per task (not while tuning)."""

    console: Console
    label: str
    lines: bool = True

    def plugin(self, tasks: list[str], steps: int, *, whole_stream: bool = False,
               phase_after_training: Callable[[Any], str | None] | None = None) -> ConsolePlugin:
        """The Avalanche plugin that moves the progress line (``steps``: optimizer steps of one ``train``;
        ``whole_stream``: that ``train`` is on the whole stream; ``phase_after_training``: the entry's label for
        what follows the last step)."""
        return ConsolePlugin(self.console, self.label, tasks, steps, whole_stream=whole_stream,
                             phase_after_training=phase_after_training)

    def task_line(self, i: int, tasks: list[str], row: list[float], stored: int, fields: list[str],
                  seconds: float) -> None:
        """The result line of task ``i`` (``row``: every task's accuracy just after it; ``stored``: bytes;
        ``fields``: what the strategy's entry adds, its ``progress_fields``)."""
        if not self.lines:
            return
        seen = row[: i + 1]
        parts = [f"{self.label:<14}task {i + 1}/{len(tasks)} {tasks[i]:<12}", f"acc {100 * row[i]:5.1f}",
                 f"avg {100 * sum(seen) / len(seen):5.1f}", *fields]
        parts += [f"stored {human_bytes(stored)}", f"{seconds:.0f}s"]
        self.console.echo("  ".join(parts))

    def stream_line(self, tasks: list[str], row: list[float], stored: int, seconds: float) -> None:
        """The one result line of a strategy trained on the whole stream at once (its entry's ``fit`` is
        ``whole-stream``)."""
        if self.lines:
            self.console.echo(f"{self.label:<14}tasks 1-{len(tasks)} at once  avg {100 * sum(row) / len(row):5.1f}  "
                              f"stored {human_bytes(stored)}  {seconds:.0f}s")


class ConsolePlugin(SupervisedPlugin, supports_distributed=True):
    """Moves the console's progress line on Avalanche's callbacks (training steps, the search after training,
    evaluation rows); prints nothing itself."""

    def __init__(self, console: Console, label: str, tasks: list[str], steps: int, *, whole_stream: bool = False,
                 phase_after_training: Callable[[Any], str | None] | None = None) -> None:
        super().__init__()
        self.console, self.label, self.tasks, self.steps = console, label, tasks, steps
        self.whole_stream, self.phase_after_training = whole_stream, phase_after_training
        self.where, self.done = "", 0

    def before_training_exp(self, strategy, **kwargs) -> None:
        i, n = strategy.experience.current_experience, len(self.tasks)
        self.where = f"tasks 1-{n} at once" if self.whole_stream else f"task {i + 1}/{n} {self.tasks[i]}"
        self.done = 0
        self.console.phase(f"{self.label} · {self.where} · train", self.steps)

    def after_training_iteration(self, strategy, **kwargs) -> None:
        self.done += 1
        self.console.advance()
        last = self.done == self.steps and self.phase_after_training is not None
        after = self.phase_after_training(strategy) if last else None
        if after:
            self.console.phase(f"{self.label} · {self.where} · {after}")

    def after_training_epoch(self, strategy, **kwargs) -> None:
        """A strategy that takes no optimizer step (a closed-form head) goes straight to its pass after training."""
        after = self.phase_after_training(strategy) if self.done == 0 and self.phase_after_training else None
        if after:
            self.console.phase(f"{self.label} · {self.where} · {after}")

    def before_eval(self, strategy, **kwargs) -> None:
        rows = sum(len(e.dataset) for e in strategy.current_eval_stream)
        self.console.phase(f"{self.label} · {self.where + ' · ' if self.where else ''}eval", rows, "rows")

    def after_eval_iteration(self, strategy, **kwargs) -> None:
        self.console.advance(len(strategy.mb_y))

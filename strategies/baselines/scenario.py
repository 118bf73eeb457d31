"""What a baseline needs of the stream's scenario (``cl-graft run --scenario task|class``).

The model of each scenario is the harness's (:func:`~..interface.scenario.scenario_model`: in the
task-incremental one a single-head model runs as its multi-head copy, for every strategy alike). Methods built
for one scenario declare it (their entry's ``scenarios``; a run in the other is refused before any strategy
trains): ER-ACE, DER, iCaRL and BiC are class-incremental methods (one output layer shared by every class;
Avalanche's BiC asserts a single head), ``single`` a task-incremental one; iCaRL and BiC also need each
experience to bring classes not seen before (split digits), and a model whose last layer is a linear classifier
(:func:`~..interface.scenario.last_linear`).
"""
from __future__ import annotations

from cl_graft.errors import UserError


def check_new_classes(name: str, stream) -> None:
    """Refuses a stream whose experiences share classes (``permuted-digits``): iCaRL's exemplar sets and BiC's
    old/new split of the output layer count on each experience bringing classes not seen before.

    Raises:
        UserError: two experiences with a class in common.
    """
    seen: set[int] = set()
    for exp in stream.benchmark.train_stream:
        classes = {int(c) for c in exp.classes_in_this_experience}
        if classes & seen:
            raise UserError(f"{name} needs new classes in every experience (split-digits); {stream.name} "
                            f"repeats classes")
        seen |= classes

"""How :class:`~.plugin.GraftPlugin` serves the experiences it evaluates: each learned task's grafted model.

:class:`EvalRouting` holds one evaluation's :class:`~..routing.states.TaskRouter` (made at ``before_eval``,
closed at ``after_eval``) and, for the experience under evaluation, how its mini-batches are served: the model
switched once to the experience's task (``route`` None), each mini-batch split by task label (``"aware"``), or
every row routed to a learned task by a rule (``"infer"``), with the routed rows' task identifications counted
in ``task_id``.
"""
from __future__ import annotations

from torch import Tensor

from ..head_inputs import SeenRows
from ..routing.states import TaskRouter


class EvalRouting:
    """The routing state of one evaluation (see the module docstring).

    Attributes:
        router: the evaluation's :class:`~..routing.states.TaskRouter` (None outside an evaluation or before any
            task is learned).
        route: how the current experience's mini-batches are served: None (the model as switched), ``"aware"``
            (per task part of each mini-batch) or ``"infer"`` (routed by a rule).
        routed: whether the current mini-batch's output came from :meth:`forward`.
        task_id: experience → ``[correct, total]`` task identifications of the last task-agnostic evaluation.
        seen: θ_pre features of routed rows, kept across evaluations (:class:`~..head_inputs.SeenRows`).
    """

    def __init__(self) -> None:
        self.router: TaskRouter | None = None
        self.route: str | None = None
        self.routed = False
        self.task_id: dict[int, list[int]] = {}
        self.seen = SeenRows()

    def begin(self, target, owners, *, training: bool) -> None:
        """An evaluation starts: a router over ``owners``' tasks (none before the first experience)."""
        self.task_id = {}
        if owners is not None:
            self.router = TaskRouter(target, owners, training=training, seen=self.seen)

    def experience(self, experience, *, infer: str | None, reconstruct: str) -> None:
        """Sets how ``experience``'s mini-batches are served: routed by rule ``infer`` when given, else by their
        task labels (``reconstruct``: once per experience, per mini-batch, or ``"all"`` regions at once)."""
        self.route = None
        if infer is not None:
            self.route = "infer"
            self.router.check(infer)
            return
        if self.router is None:
            return
        labels = [int(t) for t in getattr(experience, "task_labels", [])]
        for label in labels:
            self.router.target.task(label)                        # a TaskAdapter refuses labels out of range
        if not labels or reconstruct == "all":
            return
        if reconstruct == "minibatch" or len(labels) > 1:
            self.route = "aware"
        else:
            self.router.switch_(self.router.order(labels[0]))

    def forward(self, strategy, how: str) -> Tensor | None:
        """The current eval mini-batch's logits when this experience is routed (``how``: the rule of an
        ``"infer"`` route), else None (the model's own forward)."""
        if self.route is None:
            return None
        self.routed = True
        if self.route == "aware":
            return self.router.forward(strategy.mb_x, strategy.mb_task_id)
        out, chosen = self.router.infer(strategy.mb_x, how)
        if hasattr(strategy.experience, "task_labels"):
            own = strategy.mb_task_id.to(chosen.device)
            counts = self.task_id.setdefault(strategy.experience.current_experience, [0, 0])
            counts[0] += int((chosen == own).sum())
            counts[1] += len(chosen)
            out = self.router.foreign_answers(out, chosen, own)
        return out

    def experience_done(self) -> None:
        """The experience's evaluation ended: the model back to the state it had."""
        if self.router is not None:
            self.router.switch_(None)

    def end(self) -> None:
        """The evaluation ended: the router closes (the model as it was before :meth:`begin`)."""
        if self.router is not None:
            self.router.close_()
            self.router = None

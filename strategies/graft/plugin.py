"""GraftPlugin: forget-free continual learning by grafting, for any Avalanche ``SupervisedTemplate`` and any model.

Panigrahi, Saunshi, Zhao, Arora, "Task-Specific Skill Localization in Fine-tuned Language Models", ICML 2023
(https://arxiv.org/abs/2302.06600), §5.2. Each task ends up owning a small region γ_t of the graftable
parameters; regions are disjoint; task ``i`` is served by the regions of tasks learned up to ``i`` with every
other graftable element at θ_pre. Earlier regions are frozen bit-exactly, so forgetting is exactly zero.

The model is any ``torch.nn.Module`` an Avalanche template trains (a ``MultiTaskModule`` such as ``MTSimpleMLP``,
a single-head module, a wrapped Hugging Face model, cl-graft's :class:`~cl_graft.strategies.adapter.TaskAdapter`); what is graftable
and what is a per-task head (stored whole per task) is decided by :mod:`.targets`.

Two modes:

- ``"stream"`` (default): experience t trains every free element (outside earlier regions) and its task's
  head; afterwards the finder localizes γ_t among the free elements (θ_pre := the model at the start of the
  experience, θ_ft := the trained model) on the experience's data with the strategy's criterion and forward
  (:class:`~.experience_data.ExperienceData`; text rows for a ``TaskAdapter``), selecting on
  ``valid_stream`` when given; trained values are kept inside γ_t, every other free element is reset to θ_pre.
- ``"paper"``: regions are given up front (e.g. by :func:`~.finders.independent_regions`);
  experience t trains only γ_t minus earlier regions, which becomes task t's region.

Evaluation works on any experience at any time, as in Avalanche's own strategies (so ``eval(test_stream)`` after
every experience, ``eval_every``, ``EarlyStoppingPlugin`` and Avalanche's accuracy matrix, forgetting and forward
transfer metrics work unchanged). It rebuilds a learned task's model in place (:class:`~..routing.states.TaskRouter`,
patch switching): ``"experience"`` switches once per experience; experiences that mix tasks fall back to
``"minibatch"``, which switches per task part of each batch; ``"all"`` uses every region for every input. A task
not learned yet — not trained, or the one training now — is scored on the model as it is: the current shared
weights and its own head (untrained, or in its current training state), exactly what Naive scores; a learned
task evaluated while another trains gets θ_pre back on the free elements, so it is its own grafted model. With
``task_inference`` (or test experiences without task labels) each input goes to the most confident learned task
(T forward passes per input), or with ``task_inference="features"`` to the task whose head-input statistics score
its θ_pre features highest (2 forward passes per input); the chosen tasks are counted in
:attr:`GraftPlugin.task_id` (see :class:`~.task_identification.TaskInferenceAccuracy`). Routed test data skips Avalanche's
head adaptation in :class:`~.strategy.GraftStrategy` (unlabelled data on a ``MultiTaskModule``), which a
plain template cannot do.

Feature statistics of each task's head input (:mod:`.feature_fit`) are collected at the end of its experience
(never from test rows) when routing will read them: ``task_inference="features"`` at that time, or
``feature_stats=True`` (always, so a run can be served by any routing rule later); ``feature_stats=False`` never.
They cost one forward pass over up to 1,024 rows per task (about 10 s of MiniLM per task on one core), which a run
scored with the task label does not need.

Avalanche's distributed mode (torchrun; ``supports_distributed``): the model in ``DistributedDataParallel``,
each rank trains on its shard of every mini-batch, the region search averages its gradient over the ranks
(:mod:`cl_graft.distributed`), and the owner map is checked identical on every rank after each experience.

Reads ``strategy.model``, ``strategy.experience``, ``strategy.optimizer``, ``strategy._criterion`` and, in
evaluation, ``strategy.mb_x``/``mb_task_id``; writes only the model's parameters (freezing, reset, task
states, always put back after each evaluated experience) and ``strategy.mb_output`` of routed batches. Put
this plugin before plugins that read gradients in ``before_update`` (e.g. gradient clipping) so they see
masked gradients; :class:`~.strategy.GraftStrategy` does, and routes batches in its
``forward`` (with a plain template the plugin recomputes a routed batch's output in ``after_eval_forward``).
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from avalanche.core import SupervisedPlugin
from torch import Tensor

from cl_graft import distributed
from cl_graft.errors import UserError
from cl_graft.regions.region import Region
from cl_graft.training.freeze import ElementFreeze

from ..head_inputs import SeenRows
from ..routing.class_heads import candidates, check_answer
from ..routing.features import DEFAULT_FORM, parse_form
from ..routing.states import TASK_INFERENCE
from .adaptations import adaptation_record
from .eval_routing import EvalRouting
from .experience_undo import ExperienceUndo
from .feature_fit import record_task_features_
from .finders import RegionFinder
from .owner_map import OwnerMap
from .sizing import RegionSize, SizeSearch
from .targets import Graftable, GraftTarget, HeadNames, graft_target

MODES = ("stream", "paper")
RECONSTRUCT = ("experience", "minibatch", "all")


class GraftPlugin(SupervisedPlugin, supports_distributed=True):
    """Trains each task outside earlier regions, localizes its region, and rebuilds task models at eval.

    Forget-free continual learning by grafting (Panigrahi et al. 2023, §5.2) for any Avalanche template:
    ``Naive(model=..., optimizer=..., plugins=[GraftPlugin()])``. Every argument is keyword-only.

    Args:
        mode (str, default ``"stream"``): ``"stream"`` trains each task on every free element and then finds its
            region with ``finder``; ``"paper"`` trains each task only inside a region given up front in
            ``regions``.
        region_size (RegionSize, float or None, default None): how big each task's region is. None without a
            ``finder``: chosen per task (:class:`~.sizing.RegionSize`'s defaults: the smallest of 0.1% … 20% of
            the graftable elements that held-out rows vouch loses at most 2 points of the trained model's accuracy
            with 95% confidence, inside the task's allowance of every tensor's free elements; one setting for
            pre-trained and from-scratch models, see the size search, :mod:`.sizing`; ``RegionSize(retrain=0.25)``
            retrains a smaller region in the last quarter of the steps, :mod:`.sizing.retrain`); a
            :class:`~.sizing.RegionSize` sets those rules; a float is a fixed share of the graftable elements
            (``LocalizeConfig(region_size=region_size)``).
        finder (RegionFinder, default ``LocalizeFinder()``: the learned region of the paper, method ``graft``,
            with :class:`~cl_graft.regions.config.LocalizeConfig`'s defaults, sized by ``region_size``): finds a task's
            region among the free elements after the task trains (stream mode); ``LocalizeFinder("topk",
            LocalizeConfig(...))`` etc., or any callable of :class:`~.finders.RegionFinder`'s signature. Given
            without ``region_size``, its own fixed size is used (no size search).
        regions (dict task name → Region, default None): the tasks' regions, required in paper mode (e.g.
            from :func:`~.finders.experience_regions`); task names are ``str(task_label)``.
        reconstruct (str, default ``"experience"``): how evaluation rebuilds a task's model: once per
            experience (``"experience"``), per task part of each mini-batch (``"minibatch"``), or not at all
            (``"all"``: every region for every input).
        valid_stream (sequence of experiences, default None): held-out experiences (``benchmark.valid_stream``)
            matched to training experiences by task label; regions are selected on them, and their examples join
            the feature statistics. None: selection on a sample of the training examples.
        graftable (regex str or ``(name, parameter) -> bool``, default None): which parameters are graftable;
            None: every trainable parameter except per-task heads (a ``TaskAdapter``: the transformer layers).
        heads (``(model, task_label or None) -> [parameter names]``, default None): a task's head tensors
            (stored whole per task); None: Avalanche's ``MultiHeadClassifier`` heads, or the model's
            ``graft_head_names(task_label)`` method.
        task_inference (str or None, default None): None evaluates task-aware (each input with its task label);
            ``"entropy"``, ``"max-softmax"`` (route each input to the most confident learned task) or
            ``"features"`` (to the task whose head-input statistics fit it best) evaluate task-agnostically.
            Test experiences without task labels are always routed (``"entropy"`` unless set).
        owners (OwnerMap, default None): an owner map to continue from (a resumed run); None: created at the
            first experience from the model's values then (θ_pre).
        guard (bool, default True): also restore frozen elements from a snapshot after each optimizer step
            (a bit-exact belt for optimizers that move parameters without gradients).
        feature_form (str, default :data:`~..routing.features.DEFAULT_FORM`): what each task's feature statistics
            keep (:data:`~..routing.features.FORMS`: ``full``, ``lowrank:R``, ``diagonal``, ``mean``).
        feature_stats (bool or None, default None): collect each task's feature statistics after its experience:
            True always, False never, None when ``task_inference`` is ``"features"`` then.
        router (str, default ``"auto"``): with ``task_inference="features"`` while training (the class scenario),
            which closed-form head over θ_pre's features routes rows (:mod:`~..routing.class_heads`): ``"auto"``
            the candidate that sends the most dev rows to their task, ``"lda"`` the class-level linear discriminant
            of the feature statistics, ``"ranpac"`` RanPAC's head (its ridge chosen on dev rows).
        answer (str, default ``"auto"``): who answers a routed row: the chosen task's grafted model (``"routed"``),
            the router's head (``"head"``), or whichever answered more dev rows right (``"auto"``).

    Attributes:
        owners: the :class:`OwnerMap` (None before the first experience).
        search: the size search (:class:`~.sizing.SizeSearch`): each task's region in stream mode, its size
            searched or fixed; ``finder`` is its finder.
        localize_seconds: wall time of each region search (stream mode).
        feature_seconds: wall time of each task's feature statistics (0.0 where none were collected).
        evaluation: the evaluation's routing (:class:`~.eval_routing.EvalRouting`); ``task_id`` (experience →
            ``[correct, total]`` task identifications of the last task-agnostic evaluation) and ``seen`` (θ_pre
            features of routed rows, kept across evaluations) are its.
    """

    def __init__(self, *, mode: str = "stream", finder: RegionFinder | None = None,
                 regions: Mapping[str, Region] | None = None, reconstruct: str = "experience",
                 valid_stream: Sequence | None = None, graftable: Graftable = None, heads: HeadNames | None = None,
                 task_inference: str | None = None, owners: OwnerMap | None = None, guard: bool = True,
                 region_size: RegionSize | float | None = None, feature_form: str = DEFAULT_FORM,
                 feature_stats: bool | None = None, router: str = "auto", answer: str = "auto") -> None:
        """A grafting plugin; every argument is keyword-only and listed, with its default, in the class docstring."""
        super().__init__()
        if mode not in MODES:
            raise UserError(f"mode must be one of {MODES}, got {mode!r}")
        if reconstruct not in RECONSTRUCT:
            raise UserError(f"reconstruct must be one of {RECONSTRUCT}, got {reconstruct!r}")
        if mode == "paper" and not regions:
            raise UserError("paper mode needs the tasks' regions (regions={task: Region})")
        self.mode, self.reconstruct, self.guard = mode, reconstruct, guard
        parse_form(feature_form)
        self.feature_form = feature_form
        if feature_stats not in (True, False, None):
            raise UserError(f"feature_stats must be True, False or None, got {feature_stats!r}")
        self.feature_stats = feature_stats
        candidates(router), check_answer(answer)
        self.router, self.answer = router, answer
        self.graftable, self.heads = graftable, heads
        self.task_inference = task_inference
        self.search = SizeSearch(finder=finder, region_size=region_size)
        self.regions = dict(regions or {})
        self.valid = {int(e.task_labels[0]): e.dataset for e in (valid_stream or []) if len(e.task_labels) == 1}
        self.owners = owners
        self.localize_seconds: list[float] = []
        self.feature_seconds: list[float] = []
        self._freeze: ElementFreeze | None = None
        self._target: GraftTarget | None = None
        self.evaluation = EvalRouting()
        self._adaptations: list[dict] = []                # head adaptations seen before the owner map exists
        self.undo: ExperienceUndo | None = None             # the running experience's snapshot

    @property
    def finder(self) -> RegionFinder:
        """The region finder (a :class:`~.sizing.SizedFinder` when each task's size is searched)."""
        return self.search.finder

    @finder.setter
    def finder(self, finder: RegionFinder) -> None:
        self.search.finder = finder

    @property
    def task_inference(self) -> str | None:
        return self._task_inference

    @task_inference.setter
    def task_inference(self, how: str | None) -> None:
        if how is not None and how not in TASK_INFERENCE:
            raise UserError(f"task_inference must be one of {TASK_INFERENCE} or None, got {how!r}")
        self._task_inference = how

    def target(self, strategy) -> GraftTarget:
        """The strategy model's :class:`~.targets.GraftTarget` (built once per model)."""
        if self._target is None or self._target.model is not strategy.model:
            self._target = graft_target(strategy.model, graftable=self.graftable, heads=self.heads)
        return self._target

    # ----- training ------------------------------------------------------------------------------
    def undo_failed_experience_(self) -> None:
        """Puts the model, the optimizer and the owner map back to what they were before an experience that
        failed (:mod:`.experience_undo`); a no-op when none failed. :class:`GraftStrategy` calls it when ``train``
        raises; a plain template gets it at its next ``train``."""
        if self.undo is not None:
            self.undo.restore_(self.owners)
            self.undo, self._freeze = None, None
            self.search.end()

    def before_training(self, strategy, **kwargs) -> None:
        self.undo_failed_experience_()

    def after_training(self, strategy, **kwargs) -> None:
        self.undo = None

    def before_train_dataset_adaptation(self, strategy, **kwargs) -> None:
        """Checks the experience before anything adapts or trains (first callback of an experience)."""
        self.undo = None                                    # the previous experience finished
        target = self.target(strategy)
        if self.owners is None:
            params = dict(target.root.named_parameters())
            self.owners = OwnerMap({n: params[n] for n in target.names()})
            self.owners.adaptations.extend(self._adaptations)
        _, task = self._task(target, strategy.experience)
        if task in self.owners.tasks:
            raise UserError(f"task {task!r} was already learned; grafting trains each task once (a benchmark "
                            f"without task labels gives every experience task 0: build it with task labels)")
        if self.mode == "paper":
            self._paper_region(task)
        else:
            self.search.check(self.owners)

    def after_train_dataset_adaptation(self, strategy, **kwargs) -> None:
        """With a searched region size and no ``valid_stream`` experience for the task, holds out rows for the size
        search (:meth:`~.sizing.SizeSearch.hold_out_`): the strategy trains on the rest."""
        if self.mode == "stream":
            label, _ = self._task(self.target(strategy), strategy.experience)
            self.search.hold_out_(strategy, label, self.valid)

    def before_training_exp(self, strategy, **kwargs) -> None:
        self._record_adaptation(strategy, training=True)
        self.undo = ExperienceUndo(strategy.model, strategy.optimizer, self.owners)
        target = self.target(strategy)
        params = dict(target.root.named_parameters())
        label, task = self._task(target, strategy.experience)
        changed = [n for n in self.owners.names if n not in params or params[n].shape != self.owners.pre[n].shape]
        if changed:
            raise UserError(f"graftable tensor {changed[0]!r} changed or disappeared since the first experience; "
                            f"leave growing layers out with graftable=")
        free = self.owners.free()
        if self.mode == "paper":
            free = free & self._paper_region(task)
        self._train_only_(strategy, target, label, free)
        if self.mode == "stream":
            self.search.begin(strategy, done=len(self.owners.tasks))

    def after_training_iteration(self, strategy, **kwargs) -> None:
        """At the retraining switch (:mod:`.sizing.retrain`), grafts the model and trains only the retrained
        region and the task's head from the next step on."""
        if not self.search.tick():
            return
        target = self.target(strategy)
        label, task = self._task(target, strategy.experience)
        self._train_only_(strategy, target, label, self.search.switch_(strategy, target, self.owners, label, task,
                                                                       self.valid))

    def _train_only_(self, strategy, target: GraftTarget, label: int, region: Region) -> None:
        """From now on only ``region``'s elements and task ``label``'s head train (the previous freeze ends)."""
        if self._freeze is not None:
            self._freeze.end_(strategy.optimizer)
        trainable: dict = {n: m for n, m in region.masks.items()}
        trainable.update({n: None for n in target.heads(label)})
        self._freeze = ElementFreeze(dict(target.root.named_parameters()), trainable, guard=self.guard)
        self._freeze.begin_(strategy.optimizer)

    def before_update(self, strategy, **kwargs) -> None:
        if self._freeze is not None:
            self._freeze.before_update_()

    def after_update(self, strategy, **kwargs) -> None:
        if self._freeze is not None:
            self._freeze.after_update_()

    def after_training_exp(self, strategy, **kwargs) -> None:
        self._freeze.end_(strategy.optimizer)
        self._freeze = None
        target = self.target(strategy)
        label, task = self._task(target, strategy.experience)
        rows = self.experience_rows(strategy, label)
        if self.mode == "paper":
            region = self.owners.free() & self._paper_region(task)
        else:
            region, seconds = self.search.region_(strategy, target, self.owners, label, task, self.valid)
            self.localize_seconds.append(seconds)
        self.owners.add_(target.root, task, region, head_names=target.heads(label))
        distributed.check_same(self.owners.owner, f"the owner map after task {task!r}")
        if self.feature_stats or (self.feature_stats is None and self.task_inference == "features"):
            self._fit_features(strategy, target, label, task, *rows)
        else:
            self.feature_seconds.append(0.0)
        strategy.model.zero_grad(set_to_none=True)

    def experience_rows(self, strategy, label: int) -> tuple:
        """``(training rows, dev rows or None)`` of the experience of task ``label``: the size search's split
        while it holds one, else the experience's dataset and its ``valid_stream`` rows."""
        return self.search.rows() or (strategy.experience.dataset, self.valid.get(label))

    def _fit_features(self, strategy, target: GraftTarget, label: int, task: str, train, dev) -> None:
        """Records the task's head-input statistics and, when it routes while training (the class scenario), the
        closed-form router's sums and dev tallies in the owner map (:func:`~.feature_fit.record_task_features_`)."""
        t0 = time.perf_counter()
        record_task_features_(target, self.owners, label, task, train, dev, device=strategy.device,
                              batch=getattr(strategy, "eval_mb_size", None), form=self.feature_form,
                              router=(self.router, self.answer) if self.task_inference == "features" else None)
        self.feature_seconds.append(round(time.perf_counter() - t0, 3))

    def _paper_region(self, task: str) -> Region:
        if task not in self.regions:
            raise UserError(f"paper mode has no region for task {task!r}")
        return self.regions[task].restrict(self.owners.names)

    # ----- evaluation (:mod:`.eval_routing`) -------------------------------------------------------
    @property
    def task_id(self) -> dict[int, list[int]]:
        return self.evaluation.task_id

    @property
    def seen(self) -> SeenRows:
        return self.evaluation.seen

    def before_eval(self, strategy, **kwargs) -> None:
        target = self.target(strategy) if self.owners is not None else None
        self.evaluation.begin(target, self.owners, training=self._freeze is not None)

    def routes_by_inference(self, strategy) -> bool:
        """Whether the experience under evaluation is routed task-agnostically (``task_inference`` set or no
        task labels, and some task learned); Avalanche's head adaptation is then skipped by GraftStrategy."""
        labelled = bool(getattr(strategy.experience, "task_labels", []))
        return (not strategy.is_training and self.owners is not None and bool(self.owners.tasks)
                and (self.task_inference is not None or not labelled))

    def before_eval_exp(self, strategy, **kwargs) -> None:
        infer = self.routes_by_inference(strategy)
        if not infer:
            self._record_adaptation(strategy, training=False)
        self.evaluation.experience(strategy.experience, infer=self._rule() if infer else None,
                                   reconstruct=self.reconstruct)

    def eval_forward(self, strategy) -> Tensor | None:
        """The current eval mini-batch's logits when this plugin routes it, else None (the model's own forward)."""
        return self.evaluation.forward(strategy, self._rule())

    def before_eval_forward(self, strategy, **kwargs) -> None:
        self.evaluation.routed = False

    def after_eval_forward(self, strategy, **kwargs) -> None:
        if self.evaluation.route is not None and not self.evaluation.routed:   # a plain template: route here
            strategy.mb_output = self.eval_forward(strategy)

    def after_eval_exp(self, strategy, **kwargs) -> None:
        self.evaluation.experience_done()

    def after_eval(self, strategy, **kwargs) -> None:
        self.evaluation.end()

    # ----- helpers -------------------------------------------------------------------------------
    def _record_adaptation(self, strategy, *, training: bool) -> None:
        """Keeps the Avalanche head adaptation the model just went through (replayed on load)."""
        record = adaptation_record(strategy.model, strategy.experience, training=training)
        done = self.owners.adaptations if self.owners is not None else self._adaptations
        if record is not None and record not in done:
            done.append(record)

    def _rule(self) -> str:
        """The rule that routes rows without task labels (``task_inference``, else the first of the rules)."""
        return self.task_inference or TASK_INFERENCE[0]

    @staticmethod
    def _task(target: GraftTarget, experience) -> tuple[int, str]:
        """The one task label (and task name) an experience trains."""
        labels = list(getattr(experience, "task_labels", [0]))
        if len(labels) != 1:
            raise UserError(f"grafting trains one task per experience, this one has task labels {labels}")
        return int(labels[0]), target.task(int(labels[0]))


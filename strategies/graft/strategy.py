"""GraftStrategy: a ``SupervisedTemplate`` with a :class:`~.plugin.GraftPlugin` in front.

Panigrahi et al. 2023 (§5.2, https://arxiv.org/abs/2302.06600): forget-free continual learning by grafting.
The strategy is a thin composition, like Avalanche's stock wrappers; all behaviour lives in the plugin, so
``SupervisedTemplate(plugins=[GraftPlugin(...), ...])`` gives the same results. Two additions: evaluation
batches the plugin routes (mixed tasks, task inference, test data without task labels) are computed by the
plugin in :meth:`GraftStrategy.forward` instead of after the model's own forward (one forward pass saved, and
models that need task labels are never called without them), and routed test data skips Avalanche's head
adaptation (so unlabelled data works on a ``MultiTaskModule`` such as ``MTSimpleMLP``).

Any model an Avalanche template trains works; swap ``Naive(model=..., ...)`` for ``GraftStrategy(model=..., ...)``.

Keeping a run: :meth:`GraftStrategy.save` / :meth:`GraftStrategy.load` (safetensors + JSON, no pickle; a new process
needs only the model's constructor). Avalanche's own checkpointing (``avalanche.checkpointing.save_checkpoint`` /
``maybe_load_checkpoint``, a dill pickle of the whole strategy) works with ``exclude=["optimizer"]``: Avalanche 0.6.0
cannot pickle a torch optimizer (``PicklingError``, for ``Naive`` as well; the failed save leaves a torn file), and
nothing is lost by leaving it out, because the graft plugin clears the optimizer state at the start of every
experience and Avalanche points the strategy's own optimizer at the loaded model's parameters at the next
experience. Seed each experience (``torch.manual_seed``) and a run killed after any experience resumes
bit-identical (tested).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch
from avalanche.core import SupervisedPlugin
from avalanche.training.plugins import EvaluationPlugin
from avalanche.training.plugins.evaluation import default_evaluator
from avalanche.training.templates import SupervisedTemplate

from cl_graft.errors import UserError
from cl_graft.regions.region import Region

from ..routing.features import DEFAULT_FORM
from .experience_checks import (
    check_eval_batch,
    check_experiences,
    check_held_out,
    check_labels,
    experience_name,
    failed_experience,
)
from .finders import LocalizeFinder, RegionFinder
from .owner_map import OwnerMap
from .plugin import GraftPlugin
from .saved_run import load_run_, save_run, saved_arguments
from .sizing import RegionSize, SizedFinder
from .targets import Graftable, HeadNames, graft_target

_ARGS = """Args:
    model (torch.nn.Module): any module an Avalanche template trains: an Avalanche ``MultiTaskModule`` (e.g.
        ``MTSimpleMLP``), a single-head module, a wrapped Hugging Face model, cl-graft's ``TaskAdapter``.
    optimizer (torch.optim.Optimizer): any optimizer over ``model``'s parameters (weight decay, momentum and Adam
        state are handled so that earlier regions stay bit-exact).
    criterion (callable, default ``torch.nn.CrossEntropyLoss()``): the loss.
    train_mb_size (int, default 1), train_epochs (int, default 1), eval_mb_size (int, default None: as
        ``train_mb_size``), device (default ``"cpu"``), evaluator (default: Avalanche's default evaluator),
        eval_every (int, default -1), plugins (list, default None), **base_kwargs: exactly as Avalanche's
        ``Naive`` / ``SupervisedTemplate`` (user plugins run after the graft plugin, so they see masked
        gradients).
    mode (str, default ``"stream"``): ``"stream"`` trains each task on every free element and then finds its
        region with ``finder``; ``"paper"`` trains each task only inside its region from ``regions``.
    region_size (RegionSize, float or None, default None): each task's region size. None: chosen per task as the
        smallest region (0.1% … 20% of the graftable elements) that held-out rows vouch loses at most 2 points
        of the trained model's accuracy with 95% confidence (``valid_stream`` when given, else 10% of the
        experience's training examples held out from training), else the largest the task may take (its
        allowance of every tensor's free elements), see :class:`~.sizing.RegionSize`; a float: a fixed share of
        the graftable elements.
    finder (RegionFinder, default ``LocalizeFinder()``): finds a task's region among the free elements after it
        trains; the default is the paper's learned region (method ``graft``) with ``LocalizeConfig()``'s defaults,
        sized by ``region_size``. ``LocalizeFinder("topk", LocalizeConfig(region_size=0.01))`` etc. (both exported
        here); a finder given without ``region_size`` keeps its own fixed size.
    regions (dict task name -> Region, default None): paper mode's regions (e.g. ``experience_regions(...)``);
        a task's name is ``str(task_label)``.
    reconstruct (str, default ``"experience"``): how evaluation rebuilds a learned task's model: once per
        experience, per task part of each mini-batch (``"minibatch"``), or not at all (``"all"``).
    valid_stream (experiences, default None): ``benchmark.valid_stream``; regions are selected on it (matched
        by task label), else on a sample of the training examples. Test data is never used.
    graftable (regex or ``(name, param) -> bool``, default None): the graftable parameters; None: every
        trainable parameter except per-task heads (a ``TaskAdapter``: the transformer layers).
    heads (``(model, task_label or None) -> [names]``, default None): a task's head tensors, stored whole per
        task; None: ``MultiHeadClassifier`` heads or the model's ``graft_head_names(task_label)``.
    task_inference (str, default None): None evaluates task-aware; ``"entropy"`` / ``"max-softmax"`` (most
        confident learned task) or ``"features"`` (head-input statistics) evaluate task-agnostically. Test
        experiences without task labels are always routed (``"entropy"`` unless set).
    owners (OwnerMap, default None): an owner map to continue from; None: made at the first experience from
        the model's values then (θ_pre). :meth:`GraftStrategy.load` resumes a saved run.
    guard (bool, default True): also restore frozen elements from a snapshot after each optimizer step.
    feature_form (str, default ``"lowrank:32"``): what each task's feature statistics keep (``full``,
        ``lowrank:R``, ``diagonal`` or ``mean``; see :mod:`..routing.features`).
    feature_stats (bool, default None): collect each task's feature statistics after its experience: True always
        (a run any routing rule can serve later), False never, None when ``task_inference`` is ``"features"``.
    router (str, default ``"auto"``): with ``task_inference="features"`` while training, the closed-form head that
        routes rows (``"auto"``: chosen on dev rows among ``"lda"`` and ``"ranpac"``; :mod:`..routing.class_heads`).
    answer (str, default ``"auto"``): who answers a routed row: ``"routed"`` (the task's grafted model),
        ``"head"`` (the router's head) or ``"auto"`` (whichever answered more dev rows right).
"""


class GraftStrategy(SupervisedTemplate):
    __doc__ = f"""Continual learning by grafting (Panigrahi et al. 2023, §5.2): each task trains only elements no
earlier task owns, keeps a small region of them, and is served by the regions learned up to it; earlier tasks are
never forgotten (bit-exact). A drop-in for Avalanche's ``Naive``; every argument is keyword-only.

Evaluation works on any experience at any time (``strategy.eval(bm.test_stream)`` after every experience,
``eval_every``, ``EarlyStoppingPlugin``): a task not learned yet is scored on the model as it is, like Naive.
:meth:`save` / :meth:`load` keep a run in safetensors + JSON.

{_ARGS}
Attributes:
    graft: the :class:`GraftPlugin` (its ``owners`` is the owner map of the run).
"""

    def __init__(self, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 criterion: Callable | None = None, train_mb_size: int = 1, train_epochs: int = 1,
                 eval_mb_size: int | None = None, device: str | torch.device = "cpu",
                 plugins: Sequence[SupervisedPlugin] | None = None,
                 evaluator: EvaluationPlugin | Callable[[], EvaluationPlugin] = default_evaluator,
                 eval_every: int = -1, mode: str = "stream", finder: RegionFinder | None = None,
                 regions: Mapping[str, Region] | None = None, reconstruct: str = "experience",
                 valid_stream: Sequence | None = None, graftable: Graftable = None, heads: HeadNames | None = None,
                 task_inference: str | None = None, owners: OwnerMap | None = None, guard: bool = True,
                 region_size: RegionSize | float | None = None, feature_form: str = DEFAULT_FORM,
                 feature_stats: bool | None = None, router: str = "auto", answer: str = "auto",
                 **base_kwargs) -> None:
        self._held_out_checked = None                   # the experience whose valid_stream rows were checked
        self.graft = GraftPlugin(mode=mode, finder=finder, regions=regions, reconstruct=reconstruct,
                                 valid_stream=valid_stream, graftable=graftable, heads=heads,
                                 task_inference=task_inference, owners=owners, guard=guard,
                                 region_size=region_size, feature_form=feature_form,
                                 feature_stats=feature_stats, router=router, answer=answer)
        super().__init__(model=model, optimizer=optimizer, criterion=criterion or torch.nn.CrossEntropyLoss(),
                         train_mb_size=train_mb_size,
                         train_epochs=train_epochs, eval_mb_size=eval_mb_size, device=device,
                         plugins=[self.graft, *(plugins or [])], evaluator=evaluator, eval_every=eval_every,
                         **base_kwargs)

    __init__.__doc__ = f"A grafting strategy (see the class docstring).\n\n{_ARGS}"

    def train(self, experiences, eval_streams=None, **kwargs):
        """As ``SupervisedTemplate.train``; an experience without examples is refused first, and one that fails is
        undone (model, optimizer and owner map as before it) before the error goes on (a :class:`UserError` as
        one line naming the experience, see :func:`~.experience_checks.failed_experience`)."""
        check_experiences(experiences)
        try:
            return super().train(experiences, eval_streams, **kwargs)
        except UserError as e:
            self.graft.undo_failed_experience_()
            raise failed_experience(e, self.experience) from None
        except BaseException:
            self.graft.undo_failed_experience_()
            raise

    def criterion(self):
        """The loss. In training, each mini-batch's labels must be classes of the model's output, and at an
        experience's first mini-batch, before any update, so must its task's ``valid_stream`` rows, whose inputs
        must be finite; in evaluation, each mini-batch's output must be finite (:mod:`.experience_checks`)."""
        if self.is_training:
            classes, where = self.mb_output.shape[-1], experience_name(self.experience)
            check_labels(self.mb_y, classes, where)
            if self._held_out_checked is not self.experience:
                self._held_out_checked = self.experience
                labels = list(getattr(self.experience, "task_labels", []))
                if len(labels) == 1 and int(labels[0]) in self.graft.valid:
                    check_held_out(self.graft.valid[int(labels[0])], classes,
                                   f"{where}: its valid_stream experience")
        else:
            check_eval_batch(self.mb_x, self.mb_output, f"evaluation, {experience_name(self.experience)}")
        return super().criterion()

    def forward(self):
        """The model's output; in evaluation, the graft plugin's routed output when it routes the batch."""
        routed = None if self.is_training else self.graft.eval_forward(self)
        return super().forward() if routed is None else routed

    def model_adaptation(self, model=None):
        """Avalanche's model adaptation, skipped for test data the graft plugin routes task-agnostically (the
        learned tasks' heads exist; unlabelled data would break a ``MultiTaskModule``'s head adaptation)."""
        if self.graft.routes_by_inference(self):
            return (model or self.model).to(self.device)
        return super().model_adaptation(model)

    def save(self, directory: str | os.PathLike, *, pre: bool = True) -> Path:
        """Saves the run (owner map, heads, feature statistics, per-task metadata, the model's other state and,
        unless ``pre=False``, θ_pre) into ``directory`` in safetensors + JSON; see :mod:`.saved_run`. Call it
        between experiences."""
        target = self.graft.target(self)
        if self.graft.owners is None:
            params = dict(target.root.named_parameters())
            owners = OwnerMap({n: params[n] for n in target.names()})
        else:
            owners = self.graft.owners
        finder, region_size = self.graft.finder, None
        if isinstance(finder, SizedFinder):
            finder, region_size = finder.finder, finder.region_size.to_json()
        settings = {"mode": self.graft.mode, "reconstruct": self.graft.reconstruct,
                    "task_inference": self.graft.task_inference, "guard": self.graft.guard,
                    "feature_form": self.graft.feature_form, "feature_stats": self.graft.feature_stats,
                    "router": self.graft.router, "answer": self.graft.answer,
                    "finder": finder.to_json() if isinstance(finder, LocalizeFinder) else None,
                    "region_size": region_size}
        return save_run(directory, owners, target.root, heads=target.heads(None), pre=pre, settings=settings)

    @classmethod
    def load(cls, directory: str | os.PathLike, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
             **kwargs) -> GraftStrategy:
        """A strategy holding the run saved in ``directory``, put IN PLACE into ``model``.

        Args:
            model: the model as its constructor makes it (for a run saved with ``pre=False``: at θ_pre); its
                Avalanche heads are rebuilt by replaying the run's head adaptations.
            optimizer: an optimizer over ``model``'s parameters (optimizer state is not saved: each experience
                starts it afresh; heads the replay adds join it at the next experience, as in Avalanche).
            **kwargs: any other :class:`GraftStrategy` argument; ``mode``, ``reconstruct``, ``task_inference``,
                ``guard``, ``feature_form``, ``feature_stats``, ``router``, ``answer``, a ``LocalizeFinder`` and the automatic
                ``region_size`` rules default to the saved ones.

        Raises:
            UserError: a missing or malformed folder, or a model that does not match the run.
        """
        saved = saved_arguments(directory)
        root = graft_target(model, graftable=kwargs.get("graftable"), heads=kwargs.get("heads")).root
        owners = load_run_(directory, root, wrapper=model)
        for key in ("mode", "reconstruct", "task_inference", "guard", "feature_form", "feature_stats", "router",
                    "answer"):
            if key in saved:
                kwargs.setdefault(key, saved[key])
        if "finder" not in kwargs and "region_size" not in kwargs:
            kwargs.update({k: saved[k] for k in ("finder", "region_size") if k in saved})
        return cls(model=model, optimizer=optimizer, owners=owners, **kwargs)

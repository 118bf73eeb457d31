"""The owner map of a continual-grafting run: which task owns each parameter element, θ_pre, and the skills.

Panigrahi et al. 2023 (§5.2, https://arxiv.org/abs/2302.06600): after a stream of tasks, one model holds
every task's region γ_t (disjoint), all other graftable elements stay at θ_pre, and task ``i`` is served by
the union of the regions of tasks ``≤ i``. Memory grows with N + Σ_t |γ_t| rather than T·N.

In memory a :class:`OwnerMap` keeps θ_pre (CPU copy of the graftable tensors), one ``uint8`` owner code per
element (0 = free, k + 1 = the k-th task learned; at most 254 tasks) and one
:class:`~cl_graft.grafting.graft.SkillPatch` per task (its region's trained values and its head, stored whole).
On disk (:meth:`OwnerMap.save`): ``skills.json`` plus one patch folder per task (values + their gap-coded flat
indices, i.e. the owner map in sparse form, :mod:`cl_graft.grafting.patch_io`), ``features.safetensors`` with each task's head-input statistics
(:mod:`..routing.features`, for task-agnostic routing by features) when there are any, and with ``pre=True``
``pre.safetensors``, θ_pre itself (then :meth:`OwnerMap.load` needs the model's tensors only, not their values);
safetensors and JSON only. ``skills.json`` also carries each task's metadata (:attr:`OwnerMap.task_meta`, any JSON)
and the Avalanche head adaptations of the model (:attr:`OwnerMap.adaptations`, replayed by
:func:`~.adaptations.replay_adaptation_`).
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import torch
from torch import Tensor

from cl_graft.errors import UserError
from cl_graft.files import read_safetensors, version, write_json, write_safetensors
from cl_graft.grafting.graft import SkillPatch, patch_
from cl_graft.regions.region import Region, fingerprint, graftable_names
from cl_graft.schema import ListOf, MapOf, Nullable, Obj, read_checked
from cl_graft.training.models import TextClassifier

from ..routing.class_heads import ClassHeads
from ..routing.feature_store import load_stats, save_stats
from ..routing.features import FeatureStats

MAP_CONFIG = "skills.json"
PRE_FILE = "pre.safetensors"
ROUTER_FILES = "router-{:02d}.safetensors"
"""The closed-form router's sums after that many tasks (the name ``skills.json`` gives; a torn save leaves the
previous one, still named)."""
FORMAT_VERSION = 1
MAX_TASKS = 254
MAP_SCHEMA = Obj({"format_version": int, "tasks": ListOf(str), "names": ListOf(str), "shapes": MapOf(ListOf(int)),
                  "pre_fingerprint": str}, {"features": Nullable(ListOf(Nullable(int))),
                                               "class_heads": Nullable(dict)})


class OwnerMap:
    """Owner codes, θ_pre and one skill patch per learned task.

    Attributes:
        pre: name → θ_pre tensor (CPU) for every graftable tensor.
        owner: name → uint8 tensor of the same shape; 0 = free, ``k + 1`` = owned by ``tasks[k]``.
        tasks: task names in the order they were learned.
        patches: ``patches[k]`` holds task ``k``'s region, its values and its head tensors.
        pre_fingerprint: sha256 of θ_pre (see :func:`cl_graft.regions.region.fingerprint`).
        features: task name → :class:`~..routing.features.FeatureStats` of its head inputs (tasks without: none;
            the tensors of its form, by default a mean, a diagonal and 32 leading directions, counted in
            :meth:`bytes`).
        class_heads: the closed-form router over every task's θ_pre features and its dev tallies
            (:class:`~..routing.class_heads.ClassHeads`; None unless the class scenario's routing collected it).
        task_meta: task name → a JSON-serialisable dict of what the run records about the task (saved as is).
        adaptations: the Avalanche head adaptations the model went through, in order (see
            :mod:`.saved_run`; empty for models without dynamic modules).
    """

    def __init__(self, pre: Mapping[str, Tensor]) -> None:
        if not pre:
            raise UserError("a owner map needs at least one graftable tensor")
        self.pre = {n: t.detach().cpu().clone() for n, t in pre.items()}
        self.owner = {n: torch.zeros(t.shape, dtype=torch.uint8) for n, t in self.pre.items()}
        self.tasks: list[str] = []
        self.patches: list[SkillPatch] = []
        self.pre_fingerprint = fingerprint(self.pre)
        self.features: dict[str, FeatureStats] = {}
        self.class_heads: ClassHeads | None = None
        self.task_meta: dict[str, dict] = {}
        self.adaptations: list[dict] = []
        self.carried_seconds: dict[str, list] = {}      # a resumed run's earlier timings (not saved with the map)

    @classmethod
    def from_model(cls, model: TextClassifier, names: Iterable[str] | None = None) -> OwnerMap:
        """θ_pre := the model's current values of ``names`` (default: the tensors inside the layers)."""
        params = dict(model.named_parameters())
        names = graftable_names(params.items()) if names is None else list(names)
        return cls({n: params[n] for n in names})

    # ----- queries -------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self.pre)

    def index(self, task: str) -> int | None:
        """Position of ``task`` in the learning order, or None if it has no skill yet."""
        return self.tasks.index(task) if task in self.tasks else None

    def free(self) -> Region:
        """Elements no task owns yet."""
        return Region.adopt({n: o == 0 for n, o in self.owner.items()}, {"method": "free elements"})

    def owned_after(self, k: int, *, free: bool = False) -> dict[str, Tensor]:
        """name → bool mask of elements owned by tasks learned after the ``k``-th, and with ``free`` the free
        elements too (only non-empty tensors)."""
        out = {n: (o > k + 1) | (o == 0) if free else o > k + 1 for n, o in self.owner.items()}
        return {n: m for n, m in out.items() if bool(m.any())}

    def view(self, params: Mapping[str, Tensor], k: int) -> dict[str, Tensor]:
        """The task-``k`` values of the tensors that differ from ``params``: θ_pre where a later task owns the
        element, the current value elsewhere (``where(owner > k + 1, θ_pre, p)``, bit-exact)."""
        return {n: torch.where(m.to(params[n].device), self.pre[n].to(params[n].device), params[n])
                for n, m in self.owned_after(k).items()}

    def rollback_patch(self, k: int, *, free: bool = False) -> SkillPatch | None:
        """A patch that puts θ_pre back on elements owned after task ``k`` (None if there are none); with
        ``free``, on the free elements too (task ``k``'s model while another task trains them)."""
        later = self.owned_after(k, free=free)
        if not later:
            return None
        masks = {n: later.get(n, torch.zeros_like(o, dtype=torch.bool)) for n, o in self.owner.items()}
        values = {n: self.pre[n].reshape(-1)[m.reshape(-1)] for n, m in masks.items()}
        return SkillPatch(Region.adopt(masks, {"method": "rollback"}), values)

    def task_bytes(self) -> list[dict[str, int]]:
        """What each learned task adds to the run, in the order learned: its region (a value and a gap-coded
        index per element, the sparse form the skills are saved in), its head tensors, its feature statistics (the
        float32 tensors their form keeps, :meth:`~..routing.features.FeatureStats.nbytes`) and their ``total``."""
        out = []
        for task, patch in zip(self.tasks, self.patches):
            region, head = patch.bytes(extra=False), patch.extra_bytes()
            stats = self.features.get(task)
            features = stats.nbytes() if stats is not None else 0
            out.append({"region": region, "head": head, "features": features, "total": region + head + features})
        return out

    def bytes(self) -> dict[str, int]:
        """Stored bytes beyond the base model: owned elements (their values, plus the cheaper of the gap-coded
        indices, the form saved, and one owner byte per graftable element), task heads, feature statistics, and
        their sum."""
        per_task = self.task_bytes()
        numel = sum(o.numel() for o in self.owner.values())
        values = sum(v.numel() * v.element_size() for p in self.patches for v in p.values.values())
        indices = sum(t["region"] for t in per_task) - values                # gap-coded, as saved
        regions = values + min(indices, numel)                               # or: one owner byte per element
        heads, features = sum(t["head"] for t in per_task), sum(t["features"] for t in per_task)
        router = self.class_heads.nbytes() if self.class_heads is not None else 0
        return {"regions": regions, "heads": heads, "features": features, "router": router,
                "total": regions + heads + features + router}

    # ----- updates -------------------------------------------------------------------------------
    def add_(self, model: TextClassifier, task: str, region: Region, *,
             head_names: Sequence[str] = ()) -> SkillPatch:
        """Records ``task``'s skill: owner codes on ``region`` and the model's values there (+ head tensors).

        Raises:
            UserError: the task already has a skill, the region lacks one of the map's tensors, or it
                overlaps a region learned earlier.
        """
        region = self._claim(task, region)
        region.meta["task"] = task
        patch = SkillPatch.from_model(model, region, extra_names=head_names)
        self.patches.append(patch)
        return patch

    def _claim(self, task: str, region: Region) -> Region:
        """Checks ``region`` and writes ``task``'s owner code on it; returns it restricted to the map's tensors."""
        if task in self.tasks:
            raise UserError(f"task {task!r} already has a skill in this map")
        if len(self.tasks) >= MAX_TASKS:
            raise UserError(f"a owner map holds at most {MAX_TASKS} tasks")
        region = region.restrict(list(self.pre))
        if not (region & ~self.free()).is_empty:
            raise UserError(f"region of task {task!r} overlaps an earlier task's region")
        self.tasks.append(task)
        for n, m in region.masks.items():
            self.owner[n][m] = len(self.tasks)
        return region

    @torch.no_grad()
    def apply_(self, model: TextClassifier) -> None:
        """Puts the run into ``model`` IN PLACE, whatever its values were: first the recorded Avalanche head
        adaptations (:attr:`adaptations`; a model fresh from its constructor gets its heads back, an adapted one is
        unchanged), then θ_pre on the graftable tensors, then every stored skill (region values and heads)."""
        if self.adaptations:
            from .adaptations import replay_adaptation_  # Avalanche: only for models that recorded any

            replay_adaptation_(model, self.adaptations)
        params = dict(model.named_parameters())
        for n, t in self.pre.items():
            params[n].copy_(t)
        for patch in self.patches:
            patch_(model, patch)

    # ----- storage -------------------------------------------------------------------------------
    def save(self, directory: str | os.PathLike, *, pre: bool = False) -> Path:
        """Writes ``task-KK/`` patch folders, the feature statistics, the closed-form router's sums
        (``router-KK.safetensors``, KK tasks) and, with ``pre``, θ_pre (``pre.safetensors``), then ``skills.json`` (last, so a torn save fails to load)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for k, patch in enumerate(self.patches):
            patch.save(directory / f"task-{k:02d}")
        if pre:
            tensors = {n: t.contiguous() for n, t in self.pre.items()}
            write_safetensors(directory / PRE_FILE, tensors)
        else:
            (directory / PRE_FILE).unlink(missing_ok=True)
        counts = save_stats(directory, [self.features.get(t) for t in self.tasks])
        router = self.class_heads.tensors() if self.class_heads is not None else {}
        router_file = ROUTER_FILES.format(len(self.tasks)) if router else None
        if router:
            write_safetensors(directory / router_file, {n: t.contiguous() for n, t in router.items()})
        write_json(directory / MAP_CONFIG, {
            "format_version": FORMAT_VERSION, "cl_graft_version": version(), "tasks": self.tasks,
            "names": self.names, "shapes": {n: list(t.shape) for n, t in self.pre.items()},
            "pre_fingerprint": self.pre_fingerprint, "sizes": [p.region.size for p in self.patches],
            "bytes": self.bytes(), "features": counts, "pre": pre,
            "class_heads": ({**self.class_heads.meta(), "file": router_file} if self.class_heads is not None
                            else None),
            "task_meta": {t: self.task_meta[t] for t in self.tasks if t in self.task_meta},
            "adaptations": self.adaptations})
        for stale in directory.glob(ROUTER_FILES.replace("{:02d}", "*")):
            if stale.name != router_file:
                stale.unlink()
        return directory

    @classmethod
    def load(cls, directory: str | os.PathLike, model: TextClassifier) -> OwnerMap:
        """Reads a saved map for ``model``. θ_pre comes from ``pre.safetensors`` when it was saved (``model``
        only needs the same tensor names and shapes; run :meth:`apply_` to put the run's values in it), else
        from ``model``, which must then be at θ_pre (checked by fingerprint). ``model`` is not modified.

        Raises:
            UserError: a missing or malformed folder, or a model with other tensors or another θ_pre.
        """
        directory = Path(directory)
        cfg = read_checked(directory / MAP_CONFIG, MAP_SCHEMA)
        if cfg.get("format_version") != FORMAT_VERSION:
            raise UserError(f"{directory / MAP_CONFIG}: not a owner map of format {FORMAT_VERSION}")
        params = dict(model.named_parameters())
        names = cfg["names"]
        unshaped = [n for n in names if n not in cfg["shapes"]]
        if unshaped:
            raise UserError(f"{directory / MAP_CONFIG}: field 'shapes' lacks tensor {unshaped[0]!r}")
        if len(set(cfg["tasks"])) != len(cfg["tasks"]):
            raise UserError(f"{directory / MAP_CONFIG}: field 'tasks' names a task more than once")
        bad = [n for n in names if n not in params or list(params[n].shape) != cfg["shapes"][n]]
        if not names or bad:
            raise UserError(f"{directory}: skills were saved for another model ({bad[0] if bad else 'no'} tensor "
                            f"differs)")
        if cfg.get("pre"):
            saved = read_safetensors(directory / PRE_FILE)
            if sorted(saved) != sorted(names):
                raise UserError(f"{directory / PRE_FILE}: holds other tensors than {MAP_CONFIG} names")
            skills = cls({n: saved[n] for n in names})
        else:
            skills = cls({n: params[n] for n in names})
        if skills.pre_fingerprint != cfg.get("pre_fingerprint"):
            raise UserError(f"{directory}: skills were saved for another pre-trained model (θ_pre differs)")
        tasks = cfg.get("tasks", [])
        for k, task in enumerate(tasks):
            patch = SkillPatch.load(directory / f"task-{k:02d}")
            skills._claim(task, patch.region)
            skills.patches.append(patch)
        counts = cfg.get("features") or [None] * len(tasks)        # maps saved before statistics: none
        if len(counts) != len(tasks):
            raise UserError(f"{directory / MAP_CONFIG}: {len(counts)} feature counts for {len(tasks)} tasks")
        stats = load_stats(directory, counts)
        skills.features = {t: s for t, s in zip(tasks, stats) if s is not None}
        meta = cfg.get("class_heads")
        if meta is not None:
            name = meta.get("file")
            if name is not None and name != ROUTER_FILES.format(len(tasks)):
                raise UserError(f"{directory / MAP_CONFIG}: field 'class_heads.file' is {name!r}, not the router "
                                f"file of {len(tasks)} tasks")
            tensors = read_safetensors(directory / name) if name else {}
            skills.class_heads = ClassHeads.restore(meta, tensors, what=str(directory / (name or MAP_CONFIG)))
        skills.task_meta = {str(t): dict(m) for t, m in (cfg.get("task_meta") or {}).items()}
        skills.adaptations = list(cfg.get("adaptations") or [])
        return skills

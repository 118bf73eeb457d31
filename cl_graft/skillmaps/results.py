"""The results of a multi-task skill-map run (Panigrahi et al. 2023, §5.1): the schema and its JSON file.

A results folder (``cl-graft multitask --out DIR``) holds:

- ``skillmap.json`` (:data:`RESULTS_FILE`): the measured numbers (accuracies of θ_pre, θ_mt, single-task
  models, grafted and union models; region sizes and pairwise intersections; anatomy shares), the derived
  matrices (overlap, IoU, transfer, union gains) for readers, and ``info`` (run config, timings, metrics);
- ``regions/<task>/``: each task's region with its multi-task head (see :mod:`cl_graft.regions.io`);
- ``figures/*.png``: redrawn from ``skillmap.json`` alone by :func:`.report.draw_figures` (``cl-graft plot``).

Derived matrices are recomputed from the measured numbers with :mod:`cl_graft.skillmaps.analysis` on load (cheap
numpy), so a figure never disagrees with the numbers it shows.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..errors import UserError
from ..files import read_json, write_json
from . import analysis

RESULTS_FILE = "skillmap.json"
FORMAT = "cl-graft/skillmap"
FORMAT_VERSION = 1
REGIONS_DIR = "regions"
FIGURES_DIR = "figures"


def _jsonable(a: Any) -> Any:
    """numpy → nested lists, NaN → null (strict JSON)."""
    if isinstance(a, np.ndarray):
        return [_jsonable(x) for x in a.tolist()] if a.ndim else _jsonable(a.item())
    if isinstance(a, np.generic):
        return _jsonable(a.item())
    if isinstance(a, dict):
        return {k: _jsonable(v) for k, v in a.items()}
    if isinstance(a, (list, tuple)):
        return [_jsonable(x) for x in a]
    if isinstance(a, float) and not np.isfinite(a):
        return None
    return a


@dataclass
class SkillMap:
    """Measured numbers of one run; T tasks, G groups. Accuracies are fractions in [0, 1].

    Attributes:
        tasks: the T task names.
        groups: group name → member tasks (G groups, every member in ``tasks``).
        acc_pre: (T,) θ_pre (pre-trained backbone with the multi-task heads).
        acc_mt: (T,) the multi-task model θ_mt.
        acc_single: (T,) single-task fine-tuning, or None when skipped.
        acc_graft: (T, T) θ_pre grafted with γ_i (row) evaluated on task j (column).
        acc_union: (G, T) θ_pre grafted with the union of group g's regions.
        acc_union_steps: (G, T) the same after a few gradient steps on the union only.
        region_elements: (T,) |γ_i|.
        numel: N, elements of the graftable set.
        intersections: (T, T) |γ_i ∩ γ_j|.
        union_size: (G,) |∪_{i∈g} γ_i|.
        anatomy: ``{"layer" | "type": {"labels": [K], "share": (T, K), "density": (T, K)}}``.
        info: free JSON: config, timings, per-model metrics, region paths.
    """

    tasks: list[str]
    groups: dict[str, list[str]]
    acc_pre: np.ndarray
    acc_mt: np.ndarray
    acc_single: np.ndarray | None
    acc_graft: np.ndarray
    acc_union: np.ndarray
    acc_union_steps: np.ndarray
    region_elements: np.ndarray
    numel: int
    intersections: np.ndarray
    union_size: np.ndarray
    anatomy: dict[str, dict[str, Any]]
    info: dict[str, Any] = field(default_factory=dict)

    # ----- derived (pure numpy, see cl_graft.skillmaps.analysis) ----------------------------------------------
    @property
    def overlap(self) -> np.ndarray:
        return analysis.overlap_matrix(self.intersections)

    @property
    def iou(self) -> np.ndarray:
        return analysis.iou_matrix(self.intersections)

    @property
    def chance_overlap(self) -> np.ndarray:
        return analysis.chance_overlap(self.region_elements, self.numel)

    @property
    def transfer(self) -> np.ndarray:
        return analysis.transfer_matrix(self.acc_graft, self.acc_pre, self.acc_mt)

    @property
    def member(self) -> np.ndarray:
        return analysis.membership(self.groups, self.tasks)

    def union_gain(self, *, steps: bool = False) -> np.ndarray:
        """(G, T) relative gain of each group's union model (after the quick steps with ``steps``)."""
        acc = self.acc_union_steps if steps else self.acc_union
        return analysis.relative_gain(acc, self.acc_pre, self.acc_mt)

    def group_gains(self, *, steps: bool = False) -> dict[str, np.ndarray]:
        return analysis.group_gains(self.union_gain(steps=steps), self.member)

    # ----- JSON ------------------------------------------------------------------------------------
    _ARRAYS: ClassVar[dict[str, str]] = {  # key → shape in T (tasks) and G (groups)
        "acc_pre": "T", "acc_mt": "T", "acc_graft": "TT", "acc_union": "GT", "acc_union_steps": "GT",
        "region_elements": "T", "intersections": "TT", "union_size": "G"}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"format": FORMAT, "format_version": FORMAT_VERSION, "tasks": self.tasks,
                               "groups": self.groups, "numel": self.numel}
        out.update({k: _jsonable(getattr(self, k)) for k in self._ARRAYS})
        out["acc_single"] = None if self.acc_single is None else _jsonable(self.acc_single)
        out["anatomy"] = {axis: {"labels": a["labels"], "share": _jsonable(a["share"]),
                                 "density": _jsonable(a["density"])} for axis, a in self.anatomy.items()}
        gains, gains_steps = self.group_gains(), self.group_gains(steps=True)
        out["derived"] = _jsonable({
            "overlap": self.overlap, "iou": self.iou, "chance_overlap": self.chance_overlap,
            "transfer": self.transfer, "union_gain": self.union_gain(),
            "union_gain_steps": self.union_gain(steps=True),
            "group_gain_in": gains["in"], "group_gain_out": gains["out"],
            "group_gain_in_steps": gains_steps["in"], "group_gain_out_steps": gains_steps["out"]})
        out["derived"]["note"] = ("overlap[i][j] = |γi∩γj|/|γj|; transfer[i][j] and union gains = "
                                  "(acc − acc_pre)/(acc_mt − acc_pre) on task j; null = undefined")
        out["info"] = _jsonable(self.info)
        return out

    @classmethod
    def from_json(cls, d: Any, where: str = RESULTS_FILE) -> SkillMap:
        """Validates and reads :meth:`to_json` output; a one-line :class:`UserError` on anything alien."""
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            found = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise UserError(f"{where}: not a cl-graft multitask results file (format {found!r}, "
                            f"expected {FORMAT!r})")
        if d.get("format_version") != FORMAT_VERSION:
            raise UserError(f"{where}: results format version {d.get('format_version')!r}, this cl-graft "
                            f"reads {FORMAT_VERSION}")
        if "region_elements" not in d and "region_size" in d:           # written before the rename: the count
            d = {**d, "region_elements": d["region_size"]}              # was called region_size
        required = ("tasks", "groups", "numel", "anatomy", "acc_single", *cls._ARRAYS)
        missing = [k for k in required if k not in d]
        if missing:
            raise UserError(f"{where}: results lack {missing[0]!r} (different run layout?)")
        tasks, groups = d["tasks"], d["groups"]
        if (not isinstance(tasks, list) or len(tasks) < 2 or not all(isinstance(t, str) for t in tasks)
                or not isinstance(groups, dict) or not all(isinstance(g, list) for g in groups.values())):
            raise UserError(f"{where}: 'tasks' must list two or more names and 'groups' map names to lists")
        if isinstance(d["numel"], bool) or not isinstance(d["numel"], int) or d["numel"] < 1:
            raise UserError(f"{where}: 'numel' must be a positive integer, got {d['numel']!r}")
        sizes = {"T": len(tasks), "G": len(groups)}
        arrays = {k: cls._read_array(d[k], k, [sizes[c] for c in dims], where)
                  for k, dims in cls._ARRAYS.items()}
        single = d["acc_single"]
        if single is not None:
            single = cls._read_array(single, "acc_single", [len(tasks)], where)
        anatomy = {}
        for axis in analysis.ANATOMY_AXES:
            a = d["anatomy"].get(axis) if isinstance(d["anatomy"], dict) else None
            if not isinstance(a, dict) or not isinstance(a.get("labels"), list):
                raise UserError(f"{where}: anatomy lacks {axis!r} labels")
            k = len(a["labels"])
            anatomy[axis] = {"labels": a["labels"],
                             **{m: cls._read_array(a.get(m), f"anatomy.{axis}.{m}", [len(tasks), k], where)
                                for m in ("share", "density")}}
        sm = cls(tasks=tasks, groups=groups, acc_single=single, numel=d["numel"], anatomy=anatomy,
                 info=d.get("info") or {}, **arrays)
        analysis.membership(groups, tasks)                              # groups name only known tasks
        return sm

    @staticmethod
    def _read_array(value: Any, key: str, shape: list[int], where: str) -> np.ndarray:
        try:
            a = np.array([np.nan if v is None else v for v in value] if shape and len(shape) == 1 else
                         [[np.nan if v is None else v for v in row] for row in value], dtype=float)
        except (TypeError, ValueError):
            raise UserError(f"{where}: {key!r} is not a numeric array of shape {tuple(shape)}") from None
        if list(a.shape) != shape and not (0 in shape and a.size == 0):
            raise UserError(f"{where}: {key!r} has shape {a.shape}, expected {tuple(shape)}")
        return a.reshape(shape)


def save_skillmap(sm: SkillMap, out: str | Path) -> Path:
    """Writes ``out/skillmap.json`` (atomically)."""
    path = Path(out) / RESULTS_FILE
    write_json(path, sm.to_json())
    return path


def load_skillmap(folder: str | Path) -> SkillMap:
    """Reads a results folder written by a multitask run; refuses anything else with a one-line error."""
    folder = Path(folder)
    if not folder.is_dir():
        raise UserError(f"{folder}: no such results folder")
    path = folder / RESULTS_FILE
    if not path.is_file():
        raise UserError(f"{folder}: not a cl-graft multitask results folder (no {RESULTS_FILE})")
    return SkillMap.from_json(read_json(path), str(path))

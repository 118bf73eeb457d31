"""Rows of a task: loading (local JSONL or the Hugging Face Hub), strict validation, k-shot and caps.

Rows are plain dicts, ``{"text": str, "label": int}`` or ``{"text_a": str, "text_b": str, "label": int}``.
A local data folder holds ``<task>/{train,test}.jsonl`` (+ ``meta.json``); see the shared data README.
Every problem with the data is a one-line :class:`~cl_graft.errors.DataError` naming the file and line.
"""
from __future__ import annotations

import dataclasses
import hashlib
import random
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cl_graft.errors import DataError, DataWarning, UserError
from cl_graft.presets import Preset
from cl_graft.task import TaskRows, TaskSpec

from .tasks import HUB, HubSource, get_task, read_jsonl, resolve_data_dir

Row = dict[str, Any]


@dataclass
class TaskData:
    """A task with its rows.

    Attributes:
        spec: the task.
        train: training rows.
        test: test rows (for GLUE tasks the GLUE dev set, as in LM-BFF).
        source: where the rows came from (a folder, or ``hub:<id>``), for logs.
    """

    spec: TaskSpec
    train: list[Row]
    test: list[Row]
    source: str


def _fields(spec: TaskSpec) -> tuple[str, ...]:
    return ("text_a", "text_b") if spec.pair else ("text",)


def check_row(obj: Any, spec: TaskSpec, where: str) -> Row:
    """Validate one row against ``spec`` and return it with only the task's fields.

    Args:
        obj: the decoded row.
        spec: the task it belongs to.
        where: location for error messages, e.g. ``"data/sst2/train.jsonl:17"``.

    Raises:
        DataError: not an object, a missing or non-string text field, a non-int label or one out of range.
    """
    if not isinstance(obj, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    row: Row = {}
    for name in (*_fields(spec), "label"):
        if name not in obj:
            needs = list(_fields(spec))
            raise DataError(f"{where}: missing field {name!r} (task {spec.name!r} needs {needs})")
        row[name] = obj[name]
        if name != "label" and not isinstance(row[name], str):
            raise DataError(f"{where}: field {name!r} must be a string, got {type(row[name]).__name__}")
    label = row["label"]
    if isinstance(label, bool) or not isinstance(label, int):
        raise DataError(f"{where}: label must be an integer, got {label!r}")
    if not 0 <= label < spec.num_labels:
        raise DataError(f"{where}: label {label} outside the task's {spec.num_labels} labels")
    return row


def read_rows(path: Path, spec: TaskSpec) -> list[Row]:
    """All rows of a JSONL file, validated; blank lines are skipped.

    Raises:
        DataError: missing or unreadable file, malformed JSON or a bad row (with ``file:line``), no rows.
    """
    rows = [check_row(obj, spec, f"{path}:{lineno}") for lineno, obj in read_jsonl(path)]
    if not rows:
        raise DataError(f"{path} is empty")
    return rows


def _few(names: list[str]) -> str:
    """At most five of ``names``, quoted, and how many more."""
    return ", ".join(map(repr, names[:5])) + (f" (+{len(names) - 5} more)" if len(names) > 5 else "")


def names_map(names: Sequence[str], spec: TaskSpec, source: HubSource, where: str) -> dict[int | str, int]:
    """Hub label index -> our label index, matched by name (``source.by_name``); the names in ``source.drop``
    get no entry, so their rows are left out.

    Args:
        names: the Hub's ClassLabel names, in the Hub's index order.

    Raises:
        DataError: a Hub name that is neither a task label nor dropped, or a task label the Hub lacks (one line
            naming them).
    """
    ours = {name: i for i, name in enumerate(spec.labels)}
    kept = [n for n in names if n not in source.drop]
    unknown, missing = [n for n in kept if n not in ours], [n for n in spec.labels if n not in kept]
    problems = [f"Hub labels {_few(unknown)} are not among them"] if unknown else []
    if missing:
        problems.append(f"labels {_few(missing)} are not on the Hub")
    if problems:
        raise DataError(f"{where}: the Hub's label names do not match the {spec.num_labels} labels of task "
                        f"{spec.name!r} (meta.json order): {'; '.join(problems)}")
    return {i: ours[n] for i, n in enumerate(names) if n in ours}


def hub_rows(records: Iterable[Mapping[str, Any]], spec: TaskSpec, source: HubSource,
             where: str) -> list[Row]:
    """Map Hub records to our rows: rename columns, map/drop labels, validate.

    Args:
        records: the rows of one loaded split (a ``datasets.Dataset`` or any iterable of mappings; with
            ``source.by_name``, a ``datasets.Dataset`` whose label column is a ClassLabel).
        spec: the task.
        source: the task's Hub description.
        where: split name for error messages, e.g. ``"hub:nyu-mll/glue/mnli:validation_matched"``.

    Raises:
        DataError: a missing column, a bad label, label names that do not match (:func:`names_map`), or no
            rows left.
    """
    if source.by_name:
        feature = (getattr(records, "features", None) or {}).get(source.label_field)
        if not isinstance(getattr(feature, "names", None), list):
            raise DataError(f"{where}: column {source.label_field!r} has no label names (not a ClassLabel)")
        source = dataclasses.replace(source, label_map=names_map(feature.names, spec, source, where))
    rows: list[Row] = []
    for i, rec in enumerate(records):
        if source.label_field not in rec:
            raise DataError(f"{where}[{i}]: missing column {source.label_field!r}")
        label = rec[source.label_field]
        if source.label_map is not None:
            if label not in source.label_map:
                continue
            label = source.label_map[label]
        obj = {"label": label}
        for ours, theirs in source.fields.items():
            if theirs not in rec:
                raise DataError(f"{where}[{i}]: missing column {theirs!r}")
            obj[ours] = rec[theirs]
        rows.append(check_row(obj, spec, f"{where}[{i}]"))
    if not rows:
        raise DataError(f"{where} is empty")
    return rows


def _load_hub(spec: TaskSpec, loader: Callable[..., Iterable[Mapping[str, Any]]] | None) -> TaskData:
    source = HUB[spec.name]
    if loader is None:
        try:
            from datasets import load_dataset as loader
        except ImportError:
            msg = "loading from the Hub needs the 'datasets' package; install it or pass a data dir"
            raise UserError(msg) from None
    splits = []
    for split in (source.train_split, source.test_split):
        where = f"hub:{source.id}:{split}"
        try:
            records = loader(source.path, source.config, split=split)
        except Exception as e:  # network, auth, unknown split...: one line for the user, cause kept
            first = (str(e).strip().splitlines() or [""])[0]
            raise DataError(f"{where}: cannot load ({type(e).__name__}: {first})") from e
        splits.append(hub_rows(records, spec, source, where))
    return TaskData(spec, splits[0], splits[1], f"hub:{source.id}")


def load_task(name: str, data_dir: str | Path | None = None, *,
              loader: Callable[..., Iterable[Mapping[str, Any]]] | None = None) -> TaskData:
    """Load a task's train and test rows, from a local data folder or else from the Hub.

    Args:
        name: task id (registered, or a folder of the data dir with a ``meta.json``).
        data_dir: local data folder; None means ``$CL_GRAFT_DATA``, and the Hub if that is unset too.
        loader: stand-in for ``datasets.load_dataset`` (called as ``loader(path, config, split=...)``);
            None uses the real one, imported only here.

    Raises:
        UserError: unknown task. DataError: a missing task folder or file, or bad rows.
    """
    root = resolve_data_dir(data_dir)
    spec = get_task(name, root)
    if root is None:
        return _load_hub(spec, loader)
    folder = root / name
    if not folder.is_dir():
        raise DataError(f"{folder}: no such task folder in the data dir")
    return TaskData(spec, read_rows(folder / "train.jsonl", spec), read_rows(folder / "test.jsonl", spec),
                    str(folder))


def data_sha256(name: str, data_dir: str | Path | None = None) -> str:
    """The identity of a task's data: sha256 over its folder's ``meta.json``, ``train.jsonl`` and ``test.jsonl``
    (``hub:<id>`` for data from the Hub), so a run can tell whether it is given the same rows again."""
    root = resolve_data_dir(data_dir)
    if root is None:
        source = HUB.get(name)
        return f"hub:{source.id}" if source else f"hub:{name}"
    h = hashlib.sha256()
    for file in ("meta.json", "train.jsonl", "test.jsonl"):
        path = root / name / file
        h.update(file.encode() + b"\0")
        if path.is_file():
            with path.open("rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def kshot(rows: list[Row], k: int, *, seed: int, num_labels: int,
          dev_k: int | None = None, where: str = "rows") -> tuple[list[Row], list[Row]]:
    """LM-BFF-style few-shot split: per class, shuffle with ``seed``, take ``k`` train and ``dev_k`` dev rows.

    Classes with too few rows give what they have (train first), with a :class:`DataWarning` naming ``where``
    (a class without rows, or too few for its ``dev_k`` dev rows: less checkpoint selection). Both outputs are
    shuffled with the seed, so the result depends only on ``rows``, ``k``, ``dev_k`` and ``seed``; train and
    dev never share a row.

    Args:
        rows: validated rows.
        k: train rows per class (>= 1).
        seed: random seed.
        num_labels: number of classes.
        dev_k: dev rows per class (>= 0); None means ``k``.

    Returns:
        ``(train, dev)``.
    """
    dev_k = k if dev_k is None else dev_k
    if k < 1 or dev_k < 0:
        raise UserError(f"k-shot needs k >= 1 and dev_k >= 0, got k={k}, dev_k={dev_k}")
    by_class: list[list[Row]] = [[] for _ in range(num_labels)]
    for row in rows:
        if not 0 <= row["label"] < num_labels:
            raise UserError(f"k-shot: label {row['label']} outside the task's {num_labels} labels")
        by_class[row["label"]].append(row)
    rng = random.Random(seed)
    train: list[Row] = []
    dev: list[Row] = []
    for label, members in enumerate(by_class):
        if len(members) < k + dev_k:
            got = f"{min(len(members), k)} train and {max(len(members) - k, 0)} dev rows" if members else "no rows"
            warnings.warn(f"{where}: class {label} has {len(members)} rows, fewer than k + dev_k = {k + dev_k} "
                          f"({got})", DataWarning, stacklevel=2)
        members = members[:]
        rng.shuffle(members)
        train += members[:k]
        dev += members[k:k + dev_k]
    rng.shuffle(train)
    rng.shuffle(dev)
    return train, dev


def cap(rows: list[Row], n: int | None, *, seed: int) -> list[Row]:
    """At most ``n`` rows, a deterministic random subset kept in the original order; None means all rows."""
    if n is not None and n < 1:
        raise UserError(f"a row cap must be >= 1, got {n}")
    if n is None or n >= len(rows):
        return list(rows)
    keep = sorted(random.Random(seed).sample(range(len(rows)), n))
    return [rows[i] for i in keep]


def load_rows(name: str, data_dir: str | Path | None, preset: Preset, *, seed: int) -> TaskRows:
    """A task's rows sized by ``preset``: ``k`` per class for train, ``dev_k`` per class for dev (from the
    rest of train), test capped at ``eval_cap`` (seeded)."""
    data = load_task(name, data_dir)
    train, dev = kshot(data.train, preset.k, seed=seed, num_labels=data.spec.num_labels, dev_k=preset.dev_k,
                       where=f"{data.source}/train")
    return TaskRows(data.spec, train, dev, cap(data.test, preset.eval_cap, seed=seed))


def split_dev(splits: Sequence[TaskRows]) -> list[TaskRows]:
    """The tuning stream: each task's train rows, the first half of its dev rows for selection and the second
    half as the rows it is scored on. No test row is in it.

    Raises:
        UserError: a task with fewer than two dev rows (nothing to tune on).
    """
    out = []
    for s in splits:
        if len(s.dev) < 2:
            raise UserError(f"--tune needs dev rows: task {s.spec.name!r} has {len(s.dev)}")
        half = len(s.dev) // 2
        out.append(TaskRows(s.spec, train=s.train, dev=s.dev[:half], test=s.dev[half:]))
    return out

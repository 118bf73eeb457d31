"""Tests of the task registry and data loading (no models, no network)."""
from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from pathlib import Path

import pytest
from cl_graft.benchmarks import TASKS, TaskData, cap, get_task, kshot, load_task, resolve_data_dir
from cl_graft.benchmarks.data import data_sha256, hub_rows
from cl_graft.benchmarks.intent_labels import BANKING77, CLINC150
from cl_graft.benchmarks.tasks import ENV_DATA, HUB

from cl_graft.errors import DataError, UserError

from helpers import REPO_ROOT, hub_dataset

SHARED = Path(os.environ.get(ENV_DATA) or REPO_ROOT.parent / "shared" / "data")
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared data folder {SHARED} does not exist")


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    monkeypatch.delenv(ENV_DATA, raising=False)


def write_task(root: Path, name: str, labels: list[str], train: list, test: list | None = None) -> Path:
    """A task folder; list items that are str are written verbatim, others as JSON."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"labels": labels}))
    for split, rows in (("train", train), ("test", test if test is not None else train)):
        lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
        (folder / f"{split}.jsonl").write_text("".join(line + "\n" for line in lines))
    return folder


# ---- registry ----

PAPER = ["sst2", "agnews", "qnli", "imdb", "yelp", "mnli", "snli", "cr", "mpqa", "mrpc", "qqp", "rte"]
INTENTS = ["clinc150", "banking77"]


def test_registry_has_the_twelve_tasks_and_the_two_intent_tasks():
    assert sorted(TASKS) == sorted(PAPER + INTENTS)
    assert sorted(HUB) == sorted(TASKS)
    for name, spec in TASKS.items():
        assert spec.name == name
        assert len(spec.label_words) == (spec.num_labels if name in PAPER else 0)   # intents: label names
        assert spec.causal_template.endswith("{mask}")
        assert spec.metric == ("f1" if name in ("mrpc", "qqp") else "accuracy")
        fields = set(HUB[name].fields)
        assert fields == ({"text_a", "text_b"} if spec.pair else {"text"})
        for placeholder in ("{a}", "{b}") if spec.pair else ("{x}",):
            assert placeholder in spec.template and placeholder in spec.causal_template
    assert TASKS["mnli"].label_words == ("Yes", "Maybe", "No")
    assert TASKS["qnli"].label_words == ("Yes", "No")
    assert TASKS["mrpc"].label_words == ("No", "Yes")
    assert HUB["mnli"].test_split == "validation_matched"
    assert (TASKS["clinc150"].num_labels, TASKS["banking77"].num_labels) == (150, 77)


@needs_shared
@pytest.mark.parametrize("name", sorted(TASKS))
def test_registry_labels_match_shared_meta(name):
    meta = SHARED / name / "meta.json"
    if not meta.is_file():
        pytest.skip(f"{meta} not present")
    assert list(TASKS[name].labels) == json.loads(meta.read_text())["labels"]
    assert get_task(name, SHARED) is TASKS[name]


@needs_shared
@pytest.mark.parametrize("name", INTENTS)
def test_intent_tasks_keep_the_spec_they_had_as_unregistered_folders(name, tmp_path):
    (tmp_path / name).symlink_to(SHARED / name)
    (tmp_path / "copy").symlink_to(SHARED / name)
    assert get_task(name, tmp_path) == dataclasses.replace(get_task("copy", tmp_path), name=name)


def test_unknown_task_lists_known_ones(tmp_path):
    write_task(tmp_path, "mine", ["a", "b"], [{"text": "x", "label": 0}])
    with pytest.raises(UserError, match=r"unknown task 'foo'; known: .*sst2.*mine"):
        get_task("foo", tmp_path)
    with pytest.raises(UserError, match="unknown task 'foo'"):
        get_task("foo")


def test_unregistered_folder_is_a_task(tmp_path):
    write_task(tmp_path, "single", ["low", "mid", "high"], ["", {"text": "x", "label": 2}])
    write_task(tmp_path, "paired", ["no", "yes"], [{"text_a": "p", "text_b": "q", "label": 1}])
    single, paired = get_task("single", tmp_path), get_task("paired", tmp_path)
    assert single.labels == ("low", "mid", "high") and not single.pair and single.words == single.labels
    assert paired.pair and "{a}" in paired.template and paired.prompt_for_causal.endswith("{mask}")
    data = load_task("paired", tmp_path)
    assert isinstance(data, TaskData) and data.train == [{"text_a": "p", "text_b": "q", "label": 1}]


def test_registered_task_with_mismatched_meta(tmp_path):
    write_task(tmp_path, "sst2", ["positive", "negative"], [{"text": "x", "label": 0}])
    with pytest.raises(DataError, match="meta.json: labels"):
        get_task("sst2", tmp_path)


def test_import_is_light(fresh_imports):
    assert fresh_imports["cl_graft.benchmarks"] == []          # neither Avalanche nor datasets (conftest)


# ---- data dir ----

def test_resolve_data_dir(tmp_path, monkeypatch):
    assert resolve_data_dir(None) is None
    assert resolve_data_dir(tmp_path) == tmp_path
    monkeypatch.setenv(ENV_DATA, str(tmp_path))
    assert resolve_data_dir(None) == tmp_path
    with pytest.raises(UserError, match="nope"):
        resolve_data_dir(tmp_path / "nope")
    monkeypatch.setenv(ENV_DATA, str(tmp_path / "gone"))
    with pytest.raises(UserError, match=rf"\${ENV_DATA} .*gone"):
        resolve_data_dir(None)


def test_missing_task_folder_names_the_path(tmp_path):
    with pytest.raises(DataError, match=str(tmp_path / "rte")):
        load_task("rte", tmp_path)


# ---- real data ----

@needs_shared
def test_load_real_sst2_and_mrpc():
    sst2 = load_task("sst2", SHARED)
    assert (len(sst2.train), len(sst2.test)) == (6919, 872)
    assert set(sst2.train[0]) == {"text", "label"}
    assert Counter(r["label"] for r in sst2.test) == {0: 428, 1: 444}
    mrpc = load_task("mrpc", SHARED)
    assert (len(mrpc.train), len(mrpc.test)) == (3667, 408) and mrpc.spec.metric == "f1"
    assert set(mrpc.train[0]) == {"text_a", "text_b", "label"}


@needs_shared
def test_env_var_selects_local_data(monkeypatch):
    monkeypatch.setenv(ENV_DATA, str(SHARED))
    assert load_task("rte").source == str(SHARED / "rte")


@needs_shared
def test_empty_text_is_allowed():
    assert any(r["text"] == "" for r in load_task("cr", SHARED).train)


# ---- bad input ----

BAD_ROWS = [
    ('{"text": "ok", "label": 0', "invalid JSON"),
    ('{"label": 0}', "missing field 'text'"),
    ('{"text": 3, "label": 0}', "field 'text' must be a string"),
    ('{"text": "ok", "label": "1"}', "label must be an integer"),
    ('{"text": "ok", "label": true}', "label must be an integer"),
    ('{"text": "ok", "label": 5}', "label 5 outside the task's 2 labels"),
    ('{"text": "ok", "label": -1}', "label -1 outside"),
    ('["text", 0]', "expected a JSON object"),
]


@pytest.mark.parametrize(("line", "message"), BAD_ROWS)
def test_bad_row_names_file_and_line(tmp_path, line, message):
    good = {"text": "fine", "label": 1}
    write_task(tmp_path, "t", ["neg", "pos"], [good, "", good, line], test=[good])
    path = tmp_path / "t" / "train.jsonl"
    with pytest.raises(DataError) as info:
        load_task("t", tmp_path)
    assert str(info.value).startswith(f"{path}:4: ") and message in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_row_in_registered_task(tmp_path):
    write_task(tmp_path, "mnli", ["entailment", "neutral", "contradiction"],
               [{"text_a": "a", "text_b": "b", "label": 2}], test=[{"text": "single", "label": 0}])
    with pytest.raises(DataError, match=rf"{tmp_path / 'mnli' / 'test.jsonl'}:1: missing field 'text_a'"):
        load_task("mnli", tmp_path)


def test_not_utf8(tmp_path):
    folder = write_task(tmp_path, "t", ["neg", "pos"], [{"text": "x", "label": 0}])
    (folder / "test.jsonl").write_bytes(b'{"text": "x", "label": 0}\n{"text": "\xff", "label": 0}\n')
    with pytest.raises(DataError, match=r"test.jsonl:2: not valid UTF-8"):
        load_task("t", tmp_path)


def test_empty_split(tmp_path):
    folder = write_task(tmp_path, "t", ["neg", "pos"], [{"text": "x", "label": 0}])
    (folder / "train.jsonl").write_text("\n\n")
    with pytest.raises(DataError, match=r"train.jsonl is empty"):
        get_task("t", tmp_path)
    write_task(tmp_path, "sst2", ["negative", "positive"], [{"text": "x", "label": 0}], test=[])
    with pytest.raises(DataError, match=r"sst2/test.jsonl is empty"):
        load_task("sst2", tmp_path)


def test_missing_split_file(tmp_path):
    folder = write_task(tmp_path, "sst2", ["negative", "positive"], [{"text": "x", "label": 0}])
    (folder / "test.jsonl").unlink()
    with pytest.raises(DataError, match=r"test.jsonl: file not found"):
        load_task("sst2", tmp_path)


@pytest.mark.parametrize(("meta", "message"), [
    ("{not json", "not valid JSON"),
    ('{"labels": ["only"]}', "'labels' must be"),
    ('{"labels": "ab"}', "'labels' must be"),
    ('["a", "b"]', "'labels' must be"),
])
def test_bad_meta(tmp_path, meta, message):
    folder = write_task(tmp_path, "t", ["a", "b"], [{"text": "x", "label": 0}])
    (folder / "meta.json").write_text(meta)
    with pytest.raises(DataError, match=message) as info:
        load_task("t", tmp_path)
    assert str(folder / "meta.json") in str(info.value)


def test_unreadable_meta(tmp_path):
    folder = write_task(tmp_path, "t", ["a", "b"], [{"text": "x", "label": 0}])
    (folder / "meta.json").unlink()
    (folder / "meta.json").mkdir()
    with pytest.raises(DataError, match="cannot read meta.json"):
        get_task("t", tmp_path)


# ---- kshot / cap ----

def _rows(per_class: list[int]) -> list[dict]:
    return [{"text": f"{c}-{i}", "label": c} for c, n in enumerate(per_class) for i in range(n)]


def test_kshot_counts_determinism_and_disjointness():
    rows = _rows([50, 40, 32])
    train, dev = kshot(rows, 16, seed=13, num_labels=3)
    assert Counter(r["label"] for r in train) == {0: 16, 1: 16, 2: 16}
    assert Counter(r["label"] for r in dev) == {0: 16, 1: 16, 2: 16}
    assert not {r["text"] for r in train} & {r["text"] for r in dev}
    assert kshot(rows, 16, seed=13, num_labels=3) == (train, dev)
    assert kshot(list(rows), 16, seed=21, num_labels=3)[0] != train
    assert [r["label"] for r in train] != sorted(r["label"] for r in train)  # shuffled, not grouped


def test_kshot_small_classes_and_dev_k():
    train, dev = kshot(_rows([3, 20]), 4, seed=0, num_labels=2, dev_k=2)
    assert Counter(r["label"] for r in train) == {0: 3, 1: 4}
    assert Counter(r["label"] for r in dev) == {1: 2}
    assert kshot(_rows([5, 5]), 2, seed=0, num_labels=2, dev_k=0)[1] == []
    with pytest.raises(UserError, match="k >= 1"):
        kshot(_rows([5, 5]), 0, seed=0, num_labels=2)
    with pytest.raises(UserError, match="outside"):
        kshot(_rows([5, 5, 5]), 1, seed=0, num_labels=2)


def test_cap():
    rows = _rows([30, 30])
    assert cap(rows, None, seed=0) == rows and cap(rows, 100, seed=0) == rows
    small = cap(rows, 10, seed=1)
    assert len(small) == 10 and small == cap(rows, 10, seed=1) and small != cap(rows, 10, seed=2)
    assert small == sorted(small, key=rows.index)  # source order kept
    with pytest.raises(UserError):
        cap(rows, 0, seed=0)


# ---- Hub mapping (stubbed loader) ----

def fake_hub(tables: dict[tuple[str, str | None, str], list[dict]], calls: list):
    def load_dataset(path, name=None, *, split):
        calls.append((path, name, split))
        return tables[(path, name, split)]
    return load_dataset


def test_hub_glue_mnli_uses_validation_matched():
    rec = {"premise": "p", "hypothesis": "h", "label": 1, "idx": 0}
    tables = {("nyu-mll/glue", "mnli", "train"): [rec] * 3,
              ("nyu-mll/glue", "mnli", "validation_matched"): [dict(rec, label=2)]}
    calls: list = []
    data = load_task("mnli", loader=fake_hub(tables, calls))
    assert calls == [("nyu-mll/glue", "mnli", "train"), ("nyu-mll/glue", "mnli", "validation_matched")]
    assert data.train == [{"text_a": "p", "text_b": "h", "label": 1}] * 3
    assert data.test == [{"text_a": "p", "text_b": "h", "label": 2}]
    assert data.source == "hub:nyu-mll/glue/mnli"


def test_hub_snli_drops_unlabelled_rows():
    recs = [{"premise": "p", "hypothesis": str(lab), "label": lab} for lab in (0, -1, 2, 1, -1)]
    tables = {("stanfordnlp/snli", None, s): recs for s in ("train", "test")}
    data = load_task("snli", loader=fake_hub(tables, []))
    assert [r["label"] for r in data.train] == [0, 2, 1]
    assert [r["text_b"] for r in data.test] == ["0", "2", "1"]


def test_hub_errors():
    src, spec = HUB["sst2"], TASKS["sst2"]
    with pytest.raises(DataError, match=r"hub:x\[1\]: label 7 outside the task's 2 labels"):
        hub_rows([{"sentence": "a", "label": 0}, {"sentence": "b", "label": 7}], spec, src, "hub:x")
    with pytest.raises(DataError, match=r"hub:x\[0\]: missing column 'sentence'"):
        hub_rows([{"text": "a", "label": 0}], spec, src, "hub:x")
    with pytest.raises(DataError, match="hub:x is empty"):
        hub_rows([], spec, src, "hub:x")

    def offline(*args, **kwargs):
        raise ConnectionError("no network\nsecond line")
    expected = r"^hub:nyu-mll/glue/sst2:train: cannot load \(ConnectionError: no network\)$"
    with pytest.raises(DataError, match=expected):
        load_task("sst2", loader=offline)


def clinc_hub_names() -> list[str]:
    """clinc_oos's 151 intent names: another order than meta.json's, out-of-scope ``oos`` at index 42."""
    names = list(reversed(CLINC150))
    names.insert(42, "oos")
    return names


def test_hub_clinc150_maps_intents_by_name_and_drops_out_of_scope_rows():
    names = clinc_hub_names()
    train = [("say yes", "yes"), ("off topic", "oos"), ("wake me at six", "alarm"), ("rain today?", "weather")]
    test = [("nope", "oos"), ("set an alarm", "alarm")]
    tables = {("clinc_oos", "plus", "train+validation"): hub_dataset("intent", names, train),
              ("clinc_oos", "plus", "test"): hub_dataset("intent", names, test)}
    calls: list = []
    data = load_task("clinc150", loader=fake_hub(tables, calls))
    assert calls == [("clinc_oos", "plus", "train+validation"), ("clinc_oos", "plus", "test")]
    assert data.train == [{"text": "say yes", "label": 0}, {"text": "wake me at six", "label": 149},
                          {"text": "rain today?", "label": CLINC150.index("weather")}]
    assert data.test == [{"text": "set an alarm", "label": 149}]
    assert data.source == "hub:clinc_oos/plus" == data_sha256("clinc150")
    assert data.spec is TASKS["clinc150"] and data.spec.labels == CLINC150


def test_hub_banking77_maps_every_label_by_name():
    names = sorted(BANKING77, key=str.casefold)             # the Hub's order: alphabetical
    assert names != list(BANKING77) and len(names) == 77
    rows = [(f"about {n}", n) for n in names]
    tables = {("PolyAI/banking77", None, s): hub_dataset("label", names, rows) for s in ("train", "test")}
    data = load_task("banking77", loader=fake_hub(tables, []))
    assert [(r["text"], BANKING77[r["label"]]) for r in data.train] == rows == \
           [(r["text"], BANKING77[r["label"]]) for r in data.test]
    assert data.train[0] == {"text": "about activate_my_card", "label": BANKING77.index("activate_my_card")}
    assert data.source == "hub:PolyAI/banking77" == data_sha256("banking77")


def test_hub_label_names_that_do_not_match_are_one_line():
    names = [n.replace("reverted_card_payment?", "reverted_card_payment") for n in sorted(BANKING77)]
    split = hub_dataset("label", names, [("x", names[0])])
    with pytest.raises(DataError) as e:
        load_task("banking77", loader=fake_hub({("PolyAI/banking77", None, s): split for s in ("train", "test")}, []))
    assert str(e.value) == ("hub:PolyAI/banking77:train: the Hub's label names do not match the 77 labels of task "
                            "'banking77' (meta.json order): Hub labels 'reverted_card_payment' are not among them; "
                            "labels 'reverted_card_payment?' are not on the Hub")
    names = [n for n in clinc_hub_names() if n not in ("alarm", "yes")]
    tables = {("clinc_oos", "plus", s): hub_dataset("intent", names, [("x", "oos")])
              for s in ("train+validation", "test")}
    with pytest.raises(DataError, match=r"^hub:clinc_oos/plus:train\+validation: .*: labels 'yes', 'alarm' "
                                        r"are not on the Hub$"):
        load_task("clinc150", loader=fake_hub(tables, []))
    plain = {("PolyAI/banking77", None, s): [{"text": "x", "label": 0}] for s in ("train", "test")}
    with pytest.raises(DataError, match=r"column 'label' has no label names \(not a ClassLabel\)$"):
        load_task("banking77", loader=fake_hub(plain, []))

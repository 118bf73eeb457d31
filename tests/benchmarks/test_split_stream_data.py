"""What a split text stream says of its data: a class without training rows (never learned) or without test rows
(never scored) is a warning naming the class and the experience, experiences of one class are one warning, and the
run record's ``dev_k`` is the number of dev rows a class gave (at most an eighth of its rows), not the preset's."""
from __future__ import annotations

import warnings

import pytest

from cl_graft.benchmarks.families import StreamRequest, find_family
from cl_graft.errors import DataWarning, UserError
from cl_graft.presets import get_preset

from helpers import save_tiny_model, write_task

pytest.importorskip("avalanche")


def _rows(per_class: dict[int, int]) -> list[dict]:
    return [{"text": f"word{c} row {i}", "label": c} for c, n in per_class.items() for i in range(n)]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A saved tiny BERT and two 4-label tasks: ``zerogroup`` (classes 2 and 3 without training rows, class 1
    without test rows) and ``tiny4`` (40 training and 8 test rows per class)."""
    root = tmp_path_factory.mktemp("split-data")
    save_tiny_model(root / "model")
    labels = ["c0", "c1", "c2", "c3"]
    write_task(root / "data" / "zerogroup", labels, {"train": _rows({0: 40, 1: 40}),
                                                     "test": _rows({0: 8, 2: 8, 3: 8})})
    write_task(root / "data" / "tiny4", labels, {"train": _rows(dict.fromkeys(range(4), 40)),
                                                 "test": _rows(dict.fromkeys(range(4), 8))})
    return root


def _setup(env, spec: str, scenario: str, **more):
    request = StreamRequest(spec=spec, scenario=scenario, data=get_preset("smoke"), seed=0,
                            model=str(env / "model"), data_dir=str(env / "data"), **more)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        setup = find_family(spec).setup(request)
    return setup, [str(w.message) for w in caught if issubclass(w.category, DataWarning)]


@pytest.mark.parametrize("scenario", ["class", "task"])
def test_classes_without_training_or_test_rows_are_named_with_their_experience(env, scenario):
    _, said = _setup(env, "split-zerogroup:2", scenario, class_order="0,2,1,3")      # groups [0, 2], [1, 3]
    folder = env / "data" / "zerogroup"
    assert said == [f"{folder}/train: class 2 has 0 rows (experience zerogroup-0 cannot learn it)",
                    f"{folder}/train: class 3 has 0 rows (experience zerogroup-1 cannot learn it)",
                    f"{folder}/test: class 1 has 0 rows (experience zerogroup-1 never scores it)"]


def test_one_class_experiences_are_one_warning_or_refused(env):
    _, said = _setup(env, "split-tiny4:4", "class")
    assert said == ["--stream split-tiny4:4: 4 of 4 experiences hold one class (tiny4-0, tiny4-1, tiny4-2, ...): "
                    "training on one class teaches nothing that tells classes apart (a method that trains on an "
                    "experience's own classes alone learns nothing from it)"]
    assert _setup(env, "split-tiny4:2", "class")[1] == []                        # two classes each: nothing
    with pytest.raises(UserError, match="^task 'tiny4-0' needs at least two labels"):
        _setup(env, "split-tiny4:4", "task")                                     # a task of one label: refused


def test_the_record_holds_the_dev_rows_a_class_gave_and_a_run_of_that_dev_k_takes_the_same_rows(env):
    from dataclasses import replace

    setup, _ = _setup(env, "split-tiny4:2", "task")
    assert get_preset("smoke").dev_k == 16 and setup.record["dev_k"] == 40 // 8      # an eighth of 40 rows
    stream, _ = setup.make()
    assert [len(s.dev) for s in stream.splits] == [2 * 5, 2 * 5]
    again = find_family("split-tiny4:2").setup(StreamRequest(
        spec="split-tiny4:2", scenario="task", data=replace(get_preset("smoke"), dev_k=setup.record["dev_k"]),
        seed=0, model=str(env / "model"), data_dir=str(env / "data")))
    assert [s.dev for s in again.make()[0].splits] == [s.dev for s in stream.splits]

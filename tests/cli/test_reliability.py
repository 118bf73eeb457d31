"""Issue 15: a diverged run is never saved, a command never touches files that are not its own, ``--resume``
checks every setting and the data, a missing pre-trained head is refused, and bad input is one line + exit 2."""
from __future__ import annotations

import json
import os
import shutil
import stat
import time
from dataclasses import replace

import pytest
import torch
from click.testing import CliRunner

from cl_graft.cli import main
from cl_graft.errors import DataWarning, UserError
from cl_graft.files import write_json
from cl_graft.regions.config import LocalizeConfig
from cl_graft.regions.learned import learn_region
from cl_graft.regions.region import graftable_names
from cl_graft.training.finetune import FinetuneConfig
from cl_graft.training.models import clone_model
from cl_graft.training.multitask import finetune_multitask_

from helpers import SENTIMENT, save_tiny_model, sentiment_rows, tiny_bert, write_task
from helpers.toy_streams import build_model, stream_rows

USER_FILES = {"figures/important.png": b"\x89PNG user figure", "config.json": b'{"mine": true}\n'}
LOCALIZE_FAST = ["--preset", "smoke", "--steps", "2", "--n-batches", "1", "--select-rows", "16"]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A saved tiny BERT (no MLM head), data with tasks ``alpha`` and ``beta``, a finetune, run and multitask folder."""
    root = tmp_path_factory.mktemp("reliability")
    save_tiny_model(root / "model")
    for name, flip in (("alpha", False), ("beta", True)):                         # labels: words of the vocabulary
        write_task(root / "data" / name, ["bad", "good"],
                   {"train": sentiment_rows(96, 1 + flip, flip), "test": sentiment_rows(40, 3 + flip, flip)})
    assert cli(root, "finetune", "--task", "alpha", "--steps", "2", "--out", root / "ft").exit_code == 0
    res = cli(root, "run", "--stream", "alpha,beta", "--strategies", "naive", "--quiet", "--out", root / "run")
    assert res.exit_code == 0, res.output
    assert cli(root, "multitask", "--tasks", "alpha,beta", "--no-single", "--out", root / "mt").exit_code == 0
    return root


def cli(root, command, *args, data=None):
    base = ["--model", root / "model", "--data-dir", data or root / "data", "--preset", "smoke"]
    if command == "plot":
        base = []
    return CliRunner().invoke(main, [str(a) for a in (command, *args, *base)])


def one_error(res) -> str:
    """The output's only ``error:`` line, which must be its last, with no traceback."""
    errors = [line for line in res.output.splitlines() if line.startswith("error:")]
    assert res.exit_code == 2 and len(errors) == 1 and "Traceback" not in res.output, res.output
    assert res.output.rstrip().endswith(errors[0]), res.output
    return errors[0]


def snapshot(folder) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ----- 1. a diverged model is never saved ---------------------------------------------------------------------
def test_diverged_finetune_exits_2_and_writes_no_model(env, tmp_path):
    out = tmp_path / "nan"
    error = one_error(cli(env, "finetune", "--task", "alpha", "--lr", "1e9", "--out", out))
    assert "finetune alpha step" in error and "diverged" in error
    assert not out.exists()


@pytest.mark.parametrize("lr", ["nan", "inf", "-inf", "0"])
def test_non_finite_learning_rate_is_refused_up_front(env, tmp_path, lr):
    error = one_error(cli(env, "finetune", "--task", "alpha", "--lr", lr, "--out", tmp_path / "o"))
    assert "lr must be" in error and not (tmp_path / "o").exists()


def test_guard_stops_multitask_and_localization(toy_rows):
    model = tiny_bert()
    model.add_task(SENTIMENT)
    with pytest.raises(UserError, match=r"multitask step \d+ \(toy\): the loss is (nan|inf)"):
        finetune_multitask_(model, {"toy": toy_rows}, {}, FinetuneConfig(lr=1e9, steps=40, batch_size=4),
                            progress=False)
    pre = tiny_bert()
    pre.add_task(SENTIMENT)
    ft = clone_model(pre)
    name = graftable_names(ft.named_parameters())[0]
    with torch.no_grad():
        dict(ft.named_parameters())[name].view(-1)[0] = float("nan")
    with pytest.raises(UserError, match="fine-tuned model: .* NaN"):
        learn_region(pre, ft, toy_rows, [], LocalizeConfig(region_size=0.05, steps=1), progress=False)
    with pytest.raises(UserError, match="sigmoid_bias"):
        LocalizeConfig(sigmoid_bias=float("nan"))


def test_guard_stops_avalanche_strategies():
    from cl_graft.benchmarks.streams import Stream
    from cl_graft.strategies.comparison.runner import run_strategy
    from cl_graft.strategies.interface.config import continual_setup

    cfg = continual_setup("smoke", seed=0, steps=20)[1]
    cfg = replace(cfg, recipe=replace(cfg.recipe, lr=1e9))
    with pytest.raises(UserError, match=r"experience 0 (step \d+: the loss|: .* NaN)"):
        run_strategy("naive", build_model(), Stream.make(stream_rows(), build_model()), cfg)


# ----- 2. files that are not the command's own are never deleted or replaced ----------------------------------
def _user_folder(tmp_path):
    folder = tmp_path / "user"
    for name, data in USER_FILES.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return folder


COMMANDS = {
    "finetune": ["finetune", "--task", "alpha", "--steps", "2"],
    "localize": ["localize", "--task", "alpha", "--region-size", "0.05", "--methods", "topk", *LOCALIZE_FAST],
    "multitask": ["multitask", "--tasks", "alpha,beta", "--no-single"],
    "run": ["run", "--stream", "alpha,beta", "--strategies", "naive", "--quiet"],
}


@pytest.mark.parametrize("overwrite", [False, True])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_user_files_survive_every_command(env, tmp_path, command, overwrite):
    folder = _user_folder(tmp_path)
    res = cli(env, *COMMANDS[command], "--out", folder, *(["--overwrite"] if overwrite else []))
    assert "choose a new or empty folder" in one_error(res)
    assert snapshot(folder) == USER_FILES


def test_plot_and_localize_refuse_other_commands_folders(env, tmp_path):
    folder = _user_folder(tmp_path)
    assert "choose a new or empty folder" in one_error(cli(env, "plot", env / "mt", "--out", folder))
    before = snapshot(env / "ft")
    error = one_error(cli(env, "localize", "--task", "alpha", "--finetuned", env / "ft", "--out", env / "ft",
                          "--overwrite", *LOCALIZE_FAST))
    assert "holds the output of cl-graft finetune" in error
    assert snapshot(env / "ft") == before and snapshot(folder) == USER_FILES


def test_overwrite_replaces_own_output_completely_and_nothing_else(env, tmp_path):
    out = tmp_path / "loc"
    args = ["localize", "--task", "alpha", "--finetuned", env / "ft", "--methods", "topk", *LOCALIZE_FAST]
    assert cli(env, *args, "--region-size", "0.05", "--out", out).exit_code == 0
    (out / "notes.txt").write_text("the user's own notes")
    assert "already holds results" in one_error(cli(env, *args, "--region-size", "0.1", "--out", out))
    res = cli(env, *args, "--region-size", "0.1", "--out", out, "--overwrite")
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (out / "regions").iterdir()) == ["topk-0.1"]        # no stale regions
    assert (out / "notes.txt").read_text() == "the user's own notes"
    record = json.loads((out / "config.json").read_text())
    assert "notes.txt" not in record["files"] and "regions/topk-0.1/region_config.json" in record["files"]
    assert record["files"] == sorted(p.relative_to(out).as_posix() for p in out.rglob("*")
                                     if p.is_file() and p.name not in ("notes.txt", ".cl-graft.json"))


# ----- 3. --resume checks every setting and the data ----------------------------------------------------------
@pytest.mark.parametrize("change, word", [
    (["--k", "4"], "another k"),
    (["--strategies", "naive,ewc"], "another strategies"),
    (["--steps", "3"], "another config"),
])
def test_resume_refuses_other_settings(env, change, word):
    before = snapshot(env / "run")
    args = ["run", "--stream", "alpha,beta", "--strategies", "naive", "--quiet", *change, "--resume"]
    assert word in one_error(cli(env, *args, "--out", env / "run"))
    assert snapshot(env / "run") == before


def test_resume_needs_an_earlier_run_of_the_same_command(env, tmp_path):
    args = ["run", "--stream", "alpha,beta", "--strategies", "naive", "--quiet", "--resume"]
    assert "holds no output of cl-graft run" in one_error(cli(env, *args, "--out", tmp_path / "new"))
    assert "holds no output of cl-graft run" in one_error(cli(env, *args, "--out", env / "ft"))
    assert not (tmp_path / "new").exists()


def test_resume_checks_the_data_itself(env, tmp_path):
    same, other = tmp_path / "same", tmp_path / "other"
    shutil.copytree(env / "data", same)
    shutil.copytree(env / "data", other)
    lines = (other / "beta" / "train.jsonl").read_text().splitlines()
    (other / "beta" / "train.jsonl").write_text("\n".join(lines[1:]) + "\n")
    args = ["run", "--stream", "alpha,beta", "--strategies", "naive", "--quiet", "--resume", "--out", env / "run"]
    assert "another data_sha256" in one_error(cli(env, *args, data=other))
    assert cli(env, *args, data=same).exit_code == 0                   # the same rows elsewhere: the same run


# ----- 4. a prompt head the model has no pre-trained weights for ----------------------------------------------
def test_missing_mlm_head_is_refused_unless_fresh_head(env, tmp_path):
    args = ["finetune", "--task", "alpha", "--steps", "2", "--head", "mlm"]
    error = one_error(cli(env, *args, "--out", tmp_path / "a"))
    assert "no pre-trained mlm head (cls.predictions." in error and "--fresh-head" in error
    assert not (tmp_path / "a").exists()
    assert cli(env, *args, "--fresh-head", "--out", tmp_path / "b").exit_code == 0


# ----- 5 and 6. one line and exit 2, never a traceback --------------------------------------------------------
def _broken_model(env, tmp_path, how: str):
    folder = tmp_path / f"ft-{how}"
    shutil.copytree(env / "ft", folder)
    if how == "truncated":
        data = (folder / "model.safetensors").read_bytes()
        (folder / "model.safetensors").write_bytes(data[: len(data) // 3])
    elif how == "edited":
        config = json.loads((folder / "classifier_config.json").read_text())
        (folder / "classifier_config.json").write_text(json.dumps({**config, "head": "mystery"}))
    else:
        (folder / "backbone" / "config.json").write_text("{ not json")
    return folder


def _task_folder(env, tmp_path, name: str, first_line: bytes):
    data = tmp_path / "data"
    shutil.copytree(env / "data", data)
    folder = data / name
    folder.mkdir()
    (folder / "meta.json").write_text(json.dumps({"labels": ["negative", "positive"]}))
    rows = (env / "data" / "alpha" / "train.jsonl").read_bytes()
    (folder / "train.jsonl").write_bytes(first_line + rows)
    (folder / "test.jsonl").write_bytes(rows)
    return data


@pytest.mark.parametrize("case, message", [
    ("empty out", "--out is empty"),
    ("unwritable out", "Not a directory"),
    ("non-utf8 first line", "train.jsonl:1: not valid UTF-8"),
    ("task named my.task", "task name 'my.task'"),
    ("truncated model", "model.safetensors: cannot load"),
    ("edited model", "not a readable cl-graft model folder"),
    ("broken backbone config", "not a readable cl-graft model folder"),
    ("seed 2^63", "--seed must be in [0, 2^32)"),
])
def test_no_traceback(env, tmp_path, case, message):
    out, data = tmp_path / "out", env / "data"
    args = ["finetune", "--task", "alpha", "--steps", "2"]
    if case == "empty out":
        out = ""
    elif case == "unwritable out":
        (tmp_path / "a-file").write_text("x")
        out = tmp_path / "a-file" / "out"
    elif case == "non-utf8 first line":
        data = _task_folder(env, tmp_path, "raw", b'{"text": "caf\xe9", "label": 0}\n')
        args = ["finetune", "--task", "raw", "--steps", "2"]
    elif case == "task named my.task":
        data = _task_folder(env, tmp_path, "my.task", b"")
        args = ["finetune", "--task", "my.task", "--steps", "2"]
    elif case.endswith(("model", "config")):
        model = _broken_model(env, tmp_path, case.split()[0])
        args = ["localize", "--task", "alpha", "--finetuned", model, "--methods", "topk", *LOCALIZE_FAST]
    else:
        args += ["--seed", str(2**63)]
    assert message in one_error(cli(env, *args, "--out", out, data=data))
    assert not (tmp_path / "out").exists() and not os.path.exists(".cl-graft.json")    # "" is not the cwd


# ----- 7. smaller ------------------------------------------------------------------------------------------------
def test_written_files_get_the_umask_mode(tmp_path):
    from safetensors.torch import save_file

    from cl_graft.files import atomic_write

    old = os.umask(0o022)
    try:
        write_json(tmp_path / "a.json", {"x": 1})
        atomic_write(tmp_path / "a.safetensors", lambda p: save_file({"t": torch.zeros(2)}, p))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "a.safetensors").stat().st_mode) == 0o644


def test_run_files_are_all_readable_like_the_csvs(env):
    modes = {stat.S_IMODE(p.stat().st_mode) for p in (env / "run").rglob("*") if p.is_file()}
    assert len(modes) == 1, modes


def test_bad_small_options(env, tmp_path):
    assert "sigmoid_bias" in one_error(cli(env, "localize", "--task", "alpha", "--sigmoid-bias", "nan",
                                           *LOCALIZE_FAST, "--out", tmp_path / "o"))
    assert "empty item" in one_error(cli(env, "run", "--stream", "alpha,,beta", "--out", tmp_path / "o"))


def test_small_classes_warn(env, tmp_path):
    from cl_graft.benchmarks import kshot

    rows = [{"text": "a", "label": 0}] * 20 + [{"text": "b", "label": 1}] * 3
    with pytest.warns(DataWarning, match="class 1 has 3 rows, fewer than k \\+ dev_k = 32 \\(3 train and 0 dev"):
        kshot(rows, 16, seed=0, num_labels=3, dev_k=16)
    res = cli(env, "finetune", "--task", "alpha", "--steps", "2", "--k", "64", "--out", tmp_path / "o")
    assert res.exit_code == 0 and "warning: " in res.output and "fewer than k + dev_k = 80" in res.output


def test_json_error_says_at_column_once(tmp_path):
    from cl_graft.benchmarks.data import read_rows

    path = tmp_path / "train.jsonl"
    path.write_text('{"text": "tab\there", "label": 0}\n')
    with pytest.raises(UserError, match="at column") as e:
        read_rows(path, SENTIMENT)
    assert "at at" not in str(e.value)


def test_huge_line_is_cut_before_tokenizing():
    model = tiny_bert()
    model.add_task(SENTIMENT)
    text = "it was great fun " * 1_200_000                               # 20 MB
    t0 = time.perf_counter()
    enc = model.encode([{"text": text, "label": 1}])
    assert time.perf_counter() - t0 < 2.0
    assert enc["input_ids"].shape[1] == model.max_length

"""``cl-graft export``: one task's union-grafted model out of a ``cl-graft run`` of a text stream (a task list, or a
split text stream in either scenario) as a transformers folder."""
from __future__ import annotations

from pathlib import Path

import click

from ..errors import UserError
from ..schema import ListOf, Obj, check_json

AVALANCHE = True
"""This command uses Avalanche (:func:`cl_graft.cli.command_modules`)."""

RECORD = "cl_graft_export.json"
"""The export's run record (``config.json`` is the transformers model's own)."""


TASK_LIST = {"stream": ListOf(str), "seed": int, "model": str, "head": str, "preset": str}
"""The fields of a task-list run's record (``--stream qnli,agnews,...``) that export reads."""


def _run_record(skills: Path) -> tuple[dict, Path, bool]:
    """The settings of the ``cl-graft run`` whose skills folder this is (``<run>/<strategy>/state/skills``): its
    ``config.json``, or for an unfinished run the settings it recorded when it started, checked (a task list's
    fields, or a family stream's, :data:`~cl_graft.benchmarks.families.RECORDED`); with the run's folder and
    whether the run finished."""
    from ..artifacts import RUN_CONFIG
    from ..files import read_json
    from ..outdir import OWNER_FILE

    if not (skills / "skills.json").is_file():
        raise UserError(f"--skills {skills}: not a skills folder (skills.json missing)")
    for folder in skills.resolve().parents:
        if (folder / RUN_CONFIG).is_file():
            record = read_json(folder / RUN_CONFIG)
            if isinstance(record, dict) and record.get("command") == "run":
                return check_json(folder / RUN_CONFIG, record, _schema(record)), folder, True
        if (folder / OWNER_FILE).is_file():
            owner = read_json(folder / OWNER_FILE)
            if isinstance(owner, dict) and owner.get("command") == "run":
                schema = Obj({"settings": _schema(owner.get("settings"))})
                return check_json(folder / OWNER_FILE, owner, schema)["settings"], folder, False
    raise UserError(f"--skills {skills}: no cl-graft run config.json above it")


def _schema(record) -> Obj:
    """The schema of a run record: a family stream's (its ``stream`` one spec) or a task list's."""
    from ..benchmarks.families import RECORDED

    return RECORDED if isinstance(record, dict) and isinstance(record.get("stream"), str) else Obj(TASK_LIST)


def _start_model(record: dict, skills: Path, data_dir: str | None):
    """The classifier the run started from, seeded as the run built it, and the run's tasks in stream order.

    Raises:
        UserError: a run whose model is not a text classifier (a digits stream's), or other data than the run's.
    """
    import torch

    from ..benchmarks.families import find_family, recorded_setup
    from ..benchmarks.tasks import get_task
    from ..presets import get_preset
    from ..training.models import TextClassifier, build_classifier

    if isinstance(record["stream"], list):                          # a task list: its tasks' label names suffice
        torch.manual_seed(record["seed"])
        clf = build_classifier(record["model"], head=record["head"],
                               max_length=get_preset(record["preset"], seed=record["seed"]).max_length)
        for i, name in enumerate(record["stream"]):
            clf.add_task(get_task(name, data_dir), seed=record["seed"] + i)
        return clf, record["stream"]
    setup = recorded_setup(record, data_dir)
    if not isinstance(setup.base, TextClassifier):
        family = find_family(record["stream"]).name
        raise UserError(f"--skills {skills}: a run of the {family} stream {record['stream']}; export writes a task of "
                        f"a text-stream run (--stream qnli,agnews,... or split-TASK:N) as a transformers folder; a "
                        f"{family} model is exported from Python (cl_graft.strategies.export_task)")
    sha = setup.record.get("data_sha256")
    if record.get("data_sha256", sha) != sha:
        where = f"--data-dir {data_dir}" if data_dir else "the default data ($CL_GRAFT_DATA, else the Hub)"
        raise UserError(f"{where}: its {', '.join(sha)} data differs from the run's (its record's field "
                        f"'data_sha256'); give the run's data folder")
    return setup.base, record["tasks"]


@click.command()
@click.option("--skills", type=click.Path(file_okay=False, exists=True), required=True,
              help="A run's skills folder, e.g. runs/cl/graft/state/skills.")
@click.option("--task", required=True, help="The task whose model to export (learned in the run).")
@click.option("--out", type=click.Path(file_okay=False), required=True, help="Output folder.")
@click.option("--data-dir", type=click.Path(file_okay=False), default=None,
              help="Folder of the tasks (their label names, a split stream's classes; default: $CL_GRAFT_DATA, "
                   "else the registry).")
@click.option("--overwrite", is_flag=True, help="Replace an export already in --out.")
def export(skills, task, out, data_dir, overwrite):
    """Write TASK's model (θ_pre + the regions of the tasks learned up to it + its head) to OUT in Hugging Face
    save_pretrained format (safetensors), loadable with AutoModel.from_pretrained(OUT) or, with its head,
    cl_graft.strategies.graft.export.load_task_model(OUT)."""
    from ..outdir import claim_out_dir
    from ..provenance import portable_path, run_record
    from ..strategies.graft.export import export_task
    from ..strategies.graft.saved_checks import load_skills

    skills = Path(skills)
    record, run, finished = _run_record(skills)
    clf, stream = _start_model(record, skills, data_dir)
    if task not in stream:
        raise UserError(f"task {task!r} is not in the run's stream ({','.join(stream)})")
    owners = load_skills(skills, clf)
    if owners.tasks != stream[:len(owners.tasks)]:
        raise UserError(f"{skills / 'skills.json'}: field 'tasks' ({','.join(owners.tasks)}) is not the start of "
                        f"the run's stream ({','.join(stream)})")
    if task not in owners.tasks:
        learned = ", ".join(owners.tasks) or "none yet"
        if finished:
            raise UserError(f"--skills {skills} holds no skill for task {task!r} (it holds {learned})")
        raise UserError(f"task {task!r} is not learned in the unfinished run in {run}; resume it with `cl-graft run "
                        f"... --out {run} --resume` or export a finished task ({learned})")
    settings = {"command": "export", "skills": portable_path(skills.resolve()), "task": task}
    with claim_out_dir(out, "export", settings=settings, overwrite=overwrite, record_name=RECORD) as run_dir:
        export_task(owners, clf, task, run_dir.path)
        run_dir.finish(run_record(**settings))
    click.echo(f"{task} -> {run_dir.path}  (AutoModel.from_pretrained or cl_graft.strategies.load_task_model)")

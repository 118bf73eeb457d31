"""Which answer a row of a class-incremental text stream gets from graft, and where its accuracy goes: a saved
``cl-graft run --scenario class`` run with graft's state, its rows rebuilt from the run record (class order, data
sizes, seed), scored on dev rows (the rule is chosen there) and on test rows.

Each row's features at θ_pre are scored by the linear discriminant over every class seen (:class:`~cl_graft.
strategies.routing.features.FeatureRouter`: graft's router in the runs this probe was made for, ``--router lda``
since graft chooses its router on dev rows), and each learned task's grafted state answers it.
Rules, as shares of rows answered right:

- ``task identified``: the router's task is the row's;
- ``all classes seen``: the chosen task's state answers from every class (graft's answer with ``--router lda
  --answer routed``);
- ``chosen task's classes``: the same state, its answer kept to the chosen task's classes (a rule tried and left
  out: it changed nothing measurable on dev rows with the defaults);
- ``row's own task``: the row's own task's state, from its task's classes (the grafted models alone, no routing);
- ``router's class``: the discriminant's best class (no grafted model);
- ``nearest class mean``: the cosine-nearest class mean of the router's statistics (``ncm``'s rule).

    python -m cl_graft.benchmarks.experiments.probes.class_answers --run benchmarks/results/class_text/RUN \\
        --data-dir ../shared/data --out runs/class_answers
"""
from __future__ import annotations

from pathlib import Path

import click
import torch

from cl_graft.benchmarks.families import RECORDED, recorded_setup
from cl_graft.files import read_json, write_json
from cl_graft.grafting.graft import patch_, restore_
from cl_graft.schema import check_json
from cl_graft.strategies.graft.saved_checks import load_skills
from cl_graft.strategies.routing.features import FeatureRouter
from cl_graft.strategies.head_inputs import HeadInputs

from ..script_out import ScriptError, claimed, out_options, settings_of

RULES = ("task identified", "all classes seen", "chosen task's classes", "row's own task", "router's class",
         "nearest class mean")


def rebuild(run: Path, data_dir: str | None):
    """The run's classifier (its skills applied), its owner map and its experiences' rows."""
    cfg = read_json(run / "config.json")
    if cfg.get("scenario") != "class" or "graft" not in cfg.get("strategies", []):
        raise ScriptError(f"{run}: not a class-scenario run with graft (config.json fields 'scenario', 'strategies')")
    skills = run / "graft" / "state" / "skills"
    if not skills.is_dir():
        raise ScriptError(f"{skills}: no graft state (the run's state folder is needed)")
    setup = recorded_setup(check_json(run / "config.json", cfg, RECORDED), data_dir)
    clf = setup.base
    owners = load_skills(skills, clf)
    owners.apply_(clf)
    clf.eval()
    stream, _ = setup.make()
    return clf, owners, stream.splits, stream.head


def run_options(command):
    """The options of a probe of a saved class-scenario run: ``--run``, ``--data-dir`` and its output folder's."""
    command = out_options()(command)
    command = click.option("--data-dir", default=None,
                           help="the task folders (default: $CL_GRAFT_DATA, else the Hub)")(command)
    return click.option("--run", "run_dir", required=True,
                        help="a cl-graft run folder (--scenario class, graft, its state)")(command)


@torch.no_grad()
def state_passes(clf, owners, head: str, rows: list[dict], state: int, batch: int = 64
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """The head inputs ``(n, d)`` and logits ``(n, C)`` of ``rows`` with the model in ``state`` (the owner map's
    ``rollback_patch(state)``: -1 θ_pre, k task k's grafted model; put back after; without ``owners``: the model as
    it is)."""
    patch = owners.rollback_patch(state) if owners is not None else None
    stash = patch_(clf, patch) if patch is not None else None
    feats, logits = [], []
    try:
        with HeadInputs(clf.heads[head]) as rec:
            for s in range(0, len(rows), batch):
                enc = clf.encode(rows[s:s + batch], head)
                logits.append(clf(enc["input_ids"], enc["attention_mask"], task=head).float())
                feats.append(rec.take(len(rows[s:s + batch])))
    finally:
        if stash is not None:
            restore_(clf, stash)
    return torch.cat(feats), torch.cat(logits)


def answers(clf, owners, head: str, rows: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    """Features at θ_pre ``(n, d)`` and each learned task's logits ``(T, n, C)``."""
    logits = [state_passes(clf, owners, head, rows, k)[1] for k in range(len(owners.tasks))]
    return state_passes(clf, owners, head, rows, -1)[0], torch.stack(logits)


def shares(router: FeatureRouter, f: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor,
           tasks: torch.Tensor) -> dict[str, float]:
    """Each rule's share of rows answered right (see the module docstring); ``logits`` ``(T, n, C)``."""
    n, rows = len(labels), torch.arange(len(labels))
    keep = torch.zeros(len(router.classes), logits.shape[-1], dtype=torch.bool)      # (T, C)
    for k, c in enumerate(router.classes):
        keep[k, c] = True
    chosen = router.scores(f).argmax(0)                                             # (n,)
    classes = torch.cat(router.classes)                                             # (M,) label of each mean
    nearest = (torch.nn.functional.normalize(f.double(), dim=1)
               @ torch.nn.functional.normalize(router.means, dim=1).T).argmax(1)
    picks = {"task identified": None,
             "all classes seen": logits[chosen, rows].argmax(1),
             "chosen task's classes": logits[chosen, rows].masked_fill(~keep[chosen], -torch.inf).argmax(1),
             "row's own task": logits[tasks, rows].masked_fill(~keep[tasks], -torch.inf).argmax(1),
             "router's class": classes[router.mean_scores(f).argmax(0)],
             "nearest class mean": classes[nearest]}
    out = {rule: float((pick == labels).float().mean()) for rule, pick in picks.items() if pick is not None}
    return {"task identified": float((chosen == tasks).float().mean()), **out, "rows": n}


@click.command()
@run_options
def main(run_dir, data_dir, out, overwrite) -> None:
    params = click.get_current_context().params
    with claimed("class_answers", params) as out_dir:
        clf, owners, splits, head = rebuild(Path(run_dir), data_dir)
        router = FeatureRouter([owners.features[t] for t in owners.tasks])
        result = {}
        for which in ("dev", "test"):
            rows = [r for s in splits for r in getattr(s, which)]
            tasks = torch.tensor([k for k, s in enumerate(splits) for _ in getattr(s, which)])
            f, logits = answers(clf, owners, head, rows)
            result[which] = {**shares(router, f, logits, torch.tensor([r["label"] for r in rows]), tasks),
                             "experience_rows": [len(getattr(s, which)) for s in splits]}
        write_json(out_dir.path / "class_answers.json", {"settings": settings_of(params), "rules": result})
        for rule in RULES:
            click.echo(f"{rule:<24}" + "  ".join(f"{w} {100 * result[w][rule]:.2f}%" for w in ("dev", "test")))


if __name__ == "__main__":
    main()

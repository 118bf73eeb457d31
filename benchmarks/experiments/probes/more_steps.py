"""Does training an experience longer make its fine-tuned model answer better than the router's head within the
experience (issue 54, item 3's lever "more steps per experience")?

The grafted models can answer a routed row no better than the model they were grafted from. A saved ``cl-graft run
--scenario class`` run's stream and starting model are rebuilt from its record (the same class order, data sizes
and seeded model as the run's, :func:`cl_graft.benchmarks.families.recorded_setup`); for each experience asked,
θ_pre is fine-tuned on that experience's training rows alone with the run's recipe (optimizer, learning rate,
batch, decay, clipping, frozen embeddings: :func:`cl_graft.training.finetune.train_`, the project's own loop rather
than the run's Avalanche one) for ``--steps`` steps, and every ``--every`` steps scored on the experience's dev and
test rows, answering from the experience's classes (the routed answer of a row routed right, before any region
is cut). Beside it, RanPAC's head over θ_pre's unit-length features fitted on every training row of the stream
(graft's router head: its width and projection seed; ridge chosen on every experience's dev rows) answers the same
rows from the same classes. No choice is made on test rows: the steps are reported as they are.

    python -m cl_graft.benchmarks.experiments.probes.more_steps --run RUN --data-dir ../shared/data \\
        --out runs/more_steps
"""
from __future__ import annotations

import copy
from pathlib import Path

import click
import torch

from cl_graft.benchmarks.families import RECORDED, recorded_setup
from cl_graft.files import read_json, write_json
from cl_graft.schema import check_json
from cl_graft.strategies.routing.class_heads import RIDGES
from cl_graft.training.finetune import FinetuneConfig, batches, train_, trainable_names

from ..script_out import claimed, settings_of
from .class_answers import run_options
from .within_experience import in_classes, passes, ranpac


def within(logits: torch.Tensor, rows: list[dict], classes: list[int]) -> float:
    """Share of ``rows`` whose best class among ``classes`` in ``logits`` ``(n, C)`` is theirs."""
    y = torch.tensor([r["label"] for r in rows])
    return float((in_classes(logits, classes) == y).float().mean())


@click.command()
@run_options
@click.option("--experiences", default="0,1,2", show_default=True, help="experiences fine-tuned (positions)")
@click.option("--steps", type=int, default=600, show_default=True, help="optimizer steps per experience")
@click.option("--every", type=int, default=200, show_default=True, help="score every this many steps")
def main(run_dir, data_dir, out, overwrite, experiences, steps, every) -> None:
    params = click.get_current_context().params
    with claimed("more_steps", params) as out_dir:
        run = Path(run_dir)
        record = check_json(run / "config.json", read_json(run / "config.json"), RECORDED)
        setup = recorded_setup(record, data_dir)
        stream, _ = setup.make()
        splits, head = stream.splits, stream.head
        pre = setup.base.eval()
        rows = {w: [r for s in splits for r in getattr(s, w)] for w in ("train", "dev")}
        train_feats, _ = passes(pre, None, head, rows["train"], -1)
        fitted = ranpac(train_feats, torch.tensor([r["label"] for r in rows["train"]]))
        dev_feats, _ = passes(pre, None, head, rows["dev"], -1)
        dev_y = torch.tensor([r["label"] for r in rows["dev"]])
        ridge = max(RIDGES, key=lambda r: (int((fitted.scores(dev_feats, ridge=r).argmax(1) == dev_y).sum()),
                                           -RIDGES.index(r)))
        recipe = {k: v for k, v in record["config"]["recipe"].items() if k in FinetuneConfig.__dataclass_fields__}
        cfg = FinetuneConfig(**{**recipe, "steps": steps, "eval_every": every})
        names = trainable_names(pre, freeze_embeddings=cfg.freeze_embeddings)
        result = {"ridge": ridge, "recipe": cfg.to_json(), "experiences": {}}
        for k in (int(x) for x in experiences.split(",")):
            split = splits[k]
            classes = sorted({r["label"] for r in split.train})
            head_scores = {w: fitted.scores(passes(pre, None, head, getattr(split, w), -1)[0], ridge=ridge)
                           for w in ("dev", "test")}
            model = copy.deepcopy(pre)

            def score() -> tuple[float, dict]:
                got = {w: within(passes(model, None, head, getattr(split, w), -1)[1], getattr(split, w), classes)
                       for w in ("dev", "test")}
                return got["dev"], got

            draws = ((head, b) for b in batches(split.train, cfg.batch_size, cfg.steps, cfg.seed))
            _, _, _, history = train_(model, draws, cfg, names=names, select=score, desc=f"experience {k}",
                                      progress=False)
            result["experiences"][str(k)] = {
                "rows": {w: len(getattr(split, w)) for w in ("dev", "test")},
                "head": {w: within(head_scores[w], getattr(split, w), classes) for w in ("dev", "test")},
                "fine_tuned": {str(h["step"]): h["dev"] for h in history}}
            click.echo(f"experience {k}: head dev {100 * result['experiences'][str(k)]['head']['dev']:.1f}%; "
                       + "; ".join(f"{h['step']} steps dev {100 * h['dev']['dev']:.1f}% test "
                                   f"{100 * h['dev']['test']:.1f}%" for h in history))
        write_json(out_dir.path / "more_steps.json", {"settings": settings_of(params), **result})


if __name__ == "__main__":
    main()

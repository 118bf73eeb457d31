"""The baselines' entries of ``cl-graft run`` (Avalanche's strategies, named as its classes in lower case with
hyphens): how each is built (:mod:`.build`), its settings and grid (:mod:`.settings`), the scenarios it serves
(:mod:`.scenario`) and what it keeps (:mod:`.kept`, and in words its ``stores``).

``replay-matched`` is Replay with a memory of as many bytes as :data:`MATCHED` kept in the same run; ``joint``
is Avalanche's ``JointTraining`` on the whole stream; ``single`` a model per task, each fine-tuned alone.
"""
from __future__ import annotations

from ..interface.entry import StrategyEntry
from . import build, cumulative, kept, linear_probe, ncm
from .settings import (
    GRIDS,
    AGEMSettings,
    BiCSettings,
    DERSettings,
    ERACESettings,
    EWCSettings,
    GEMSettings,
    ICaRLSettings,
    LwFSettings,
    ReplaySettings,
    SISettings,
)

CLASS = ("class",)
MATCHED = "graft"
"""The strategy whose kept bytes ``replay-matched``'s memory holds."""
MODEL = "the trained weights"
_OWN_LOADER = "draws its memory through a loader of its own, which collates text rows as dicts"

ENTRIES: tuple[StrategyEntry, ...] = (
    StrategyEntry(name="naive", help="Avalanche Naive: plain fine-tuning on each experience", stores=MODEL,
                  build=build.stock("Naive"), kept_bytes=kept.nothing),
    StrategyEntry(name="ewc", help="Avalanche EWC (a penalty per experience: separate mode)",
                  stores=MODEL + ", and per experience the diagonal Fisher and the weights after it",
                  build=build.stock("EWC", {"mode": "separate"}, ewc_lambda="ewc_lambda"),
                  kept_bytes=kept.ewc, settings=EWCSettings, grid=GRIDS["ewc"]),
    StrategyEntry(name="lwf", help="Avalanche LwF (distillation from the previous model)",
                  stores=MODEL + " and the previous model",
                  build=build.stock("LwF", alpha="lwf_alpha", temperature="lwf_temperature"),
                  kept_bytes=kept.lwf, settings=LwFSettings, grid=GRIDS["lwf"]),
    StrategyEntry(name="replay", help="Avalanche Replay (reservoir memory of earlier rows)",
                  stores=MODEL + " and the replay memory's rows (token ids or inputs)",
                  build=build.stock("Replay", mem_size="replay_mem"), kept_bytes=kept.replay,
                  settings=ReplaySettings, grid=GRIDS["replay"]),
    StrategyEntry(name="replay-matched", help=f"Avalanche Replay with a memory of as many bytes as {MATCHED} keeps "
                  "in the same run", stores=MODEL + f" and as many bytes of memory rows as {MATCHED} keeps",
                  build=build.replay_matched(MATCHED), kept_bytes=kept.replay, peers=(MATCHED,)),
    StrategyEntry(name="joint", help="Avalanche JointTraining on the whole stream (upper reference)",
                  stores=MODEL, build=build.stock("JointTraining"), kept_bytes=kept.nothing,
                  fit="whole-stream"),
    StrategyEntry(name="single", help="one model per task, each fine-tuned alone from θ_pre (--scenario task)",
                  stores="one trained copy of the weights per task", build=build.single, kept_bytes=kept.nothing,
                  fit="separate", scenarios=("task",)),
    StrategyEntry(name="si", help="Avalanche's SynapticIntelligence plugin with copied weight snapshots (path-integral "
                  "importances, quadratic penalty)",
                  stores=MODEL + ", the weights after the last experience, their importances and path integral, "
                  "and Avalanche's per-step copies (4 × the weights)",
                  build=build.si,
                  kept_bytes=kept.si, settings=SISettings, grid=GRIDS["si"]),
    StrategyEntry(name="gem", help="Avalanche GEM (each step's gradient projected so that no experience's memory "
                  "loss rises)", stores=MODEL + ", gem_patterns rows per experience and one gradient per experience",
                  build=build.gem, kept_bytes=kept.gem, settings=GEMSettings, grid=GRIDS["gem"],
                  check=build.tensor_rows("gem", "keeps each experience's memory rows as one tensor")),
    StrategyEntry(name="agem", help="Avalanche AGEM (one averaged memory gradient constrains each step)",
                  stores=MODEL + ", gem_patterns rows per experience and a reference gradient",
                  build=build.agem, kept_bytes=kept.agem, settings=AGEMSettings, grid=GRIDS["agem"]),
    StrategyEntry(name="cumulative", help="Avalanche Cumulative: retrain on every experience so far (the ceiling)",
                  stores=MODEL + " and every training row seen", build=cumulative.build,
                  kept_bytes=kept.cumulative),
    StrategyEntry(name="er-ace", help="Avalanche ER_ACE (replay, asymmetric cross-entropy; --scenario class)",
                  stores=MODEL + " and replay_mem rows",
                  build=build.stock("ER_ACE", mem_size="replay_mem", batch_size_mem="er_ace_batch"),
                  check=build.tensor_rows("er-ace", _OWN_LOADER),
                  kept_bytes=kept.replay, settings=ERACESettings, grid=GRIDS["er-ace"], scenarios=CLASS),
    StrategyEntry(name="der", help="Avalanche DER (DER++: replay of rows and their logits; --scenario class)",
                  stores=MODEL + ", replay_mem rows and their logits",
                  build=build.stock("DER", mem_size="replay_mem", alpha="der_alpha", beta="der_beta"),
                  check=build.tensor_rows("der", _OWN_LOADER),
                  kept_bytes=kept.der, settings=DERSettings, grid=GRIDS["der"], scenarios=CLASS),
    StrategyEntry(name="icarl", help="Avalanche ICaRL (herded exemplars, nearest-mean classifier; --scenario class, "
                  "--model mlp, new classes per experience)",
                  stores=MODEL + ", replay_mem exemplars, a mean feature vector per class and the previous model",
                  build=build.icarl, kept_bytes=kept.icarl, settings=ICaRLSettings, scenarios=CLASS),
    StrategyEntry(name="bic", help="Avalanche BiC (replay, distillation, a bias layer on old classes; --scenario "
                  "class, --model mlp, new classes per experience)",
                  stores=MODEL + ", replay_mem rows (a share held out), the bias layer and the previous model",
                  build=build.bic, kept_bytes=kept.bic, settings=BiCSettings, grid=GRIDS["bic"], scenarios=CLASS,
                  check=build.tensor_rows("bic", "splits each experience's dataset, which Avalanche's text datasets "
                                          "do not allow")),
    linear_probe.ENTRY,
    ncm.ENTRY,
)
"""Every baseline entry of this package, in ``--help`` order (``linear-probe`` and ``ncm`` each a module of its own)."""

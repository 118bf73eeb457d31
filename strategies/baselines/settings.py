"""The settings of Avalanche's baselines in ``cl-graft run``: one small frozen dataclass per strategy (as peft's
per-method configs), each with the candidate points ``--tune`` tries (:data:`GRIDS`, in order: a run's tuning
budget takes the first ones, the same number for every strategy).

``replay`` tunes its memory size, as it always has. The rest of the replay family (``er-ace``, ``der``,
``icarl``, ``bic``) keeps ``replay_mem`` rows (the same option, sized by the preset): the memory is the budget
the user sets, their bytes are recorded, and their grids tune each method's own knob at that memory. GEM and
A-GEM keep ``gem_patterns`` rows per experience.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cl_graft.errors import UserError
from cl_graft.presets import Preset

from ..interface.settings import Settings

REPLAY_MEM_HELP = "Replay memory size in rows."


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise UserError(f"{name} must be > 0, got {value}")


@dataclass(frozen=True)
class EWCSettings(Settings):
    """``ewc``'s (Kirkpatrick et al. 2017; a penalty per experience, Avalanche's ``separate`` mode)."""

    ewc_lambda: float = field(default=1e4, metadata={"help": "EWC penalty weight (tune with --tune)."})

    def __post_init__(self) -> None:
        if self.ewc_lambda < 0:
            raise UserError(f"ewc_lambda must be >= 0, got {self.ewc_lambda}")


@dataclass(frozen=True)
class LwFSettings(Settings):
    """``lwf``'s (Li & Hoiem 2016; Avalanche's defaults)."""

    lwf_alpha: float = field(default=1.0, metadata={"help": "LwF distillation weight."})
    lwf_temperature: float = field(default=2.0, metadata={"help": "LwF softmax temperature."})

    def __post_init__(self) -> None:
        if self.lwf_alpha < 0:
            raise UserError(f"lwf_alpha must be >= 0, got {self.lwf_alpha}")
        _positive("lwf_temperature", self.lwf_temperature)


@dataclass(frozen=True)
class SISettings(Settings):
    """``si``'s (Zenke et al. 2017), run through the copied-snapshot plugin
    (:mod:`cl_graft.strategies.plugins.synaptic_intelligence`): Avalanche clips each importance at 1e-3, so a
    useful λ is ~100× the paper's c, and the damping ξ is the paper's order (Avalanche's 1e-7 diverges)."""

    si_lambda: float = field(default=100.0, metadata={"help": "SI penalty weight (tune with --tune)."})
    si_eps: float = field(default=0.1, metadata={"help": "SI damping ξ of the importance denominator."})

    def __post_init__(self) -> None:
        _positive("si_lambda", self.si_lambda)
        _positive("si_eps", self.si_eps)


@dataclass(frozen=True)
class GEMSettings(Settings):
    """``gem``'s (Lopez-Paz & Ranzato 2017)."""

    gem_patterns: int = field(default=32, metadata={"help": "GEM / A-GEM: rows kept per experience."})
    gem_strength: float = field(default=0.5, metadata={
        "help": "GEM's memory strength γ (offset of the projected gradient towards backward transfer)."})

    def __post_init__(self) -> None:
        _positive("gem_patterns", self.gem_patterns)
        if self.gem_strength < 0:
            raise UserError(f"gem_strength must be >= 0, got {self.gem_strength}")


@dataclass(frozen=True)
class AGEMSettings(Settings):
    """``agem``'s (Chaudhry et al. 2019)."""

    gem_patterns: int = field(default=32, metadata={"help": "GEM / A-GEM: rows kept per experience."})
    agem_sample: int = field(default=256, metadata={
        "help": "A-GEM: memory rows per reference gradient (split evenly over the experiences kept; at least "
                "one per experience)."})

    def __post_init__(self) -> None:
        _positive("gem_patterns", self.gem_patterns)
        _positive("agem_sample", self.agem_sample)


@dataclass(frozen=True)
class ReplayFamily(Settings):
    """A memory of ``replay_mem`` rows, sized by the preset as ``replay``'s."""

    replay_mem: int = field(default=256, metadata={"help": REPLAY_MEM_HELP, "preset": True})

    def __post_init__(self) -> None:
        if self.replay_mem < 1:
            raise UserError(f"replay_mem must be >= 1, got {self.replay_mem}")

    @classmethod
    def from_preset(cls, preset: Preset, *, seed: int):
        return cls(replay_mem=preset.continual.replay_mem)


@dataclass(frozen=True)
class ReplaySettings(ReplayFamily):
    """``replay``'s (a class-balanced reservoir over experiences, Avalanche's ``Replay``)."""


@dataclass(frozen=True)
class ERACESettings(ReplayFamily):
    """``er-ace``'s (Caccia et al. 2022)."""

    er_ace_batch: int = field(default=10, metadata={"help": "ER-ACE: memory rows per training step."})

    def __post_init__(self) -> None:
        super().__post_init__()
        _positive("er_ace_batch", self.er_ace_batch)


@dataclass(frozen=True)
class DERSettings(ReplayFamily):
    """``der``'s (DER++, Buzzega et al. 2020; β = 0 is DER)."""

    der_alpha: float = field(default=0.1, metadata={"help": "DER: weight of the logit-matching loss on memory."})
    der_beta: float = field(default=0.5, metadata={"help": "DER++: weight of the label loss on memory (0: DER)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.der_alpha < 0 or self.der_beta < 0:
            raise UserError(f"der_alpha and der_beta must be >= 0, got {self.der_alpha}, {self.der_beta}")


@dataclass(frozen=True)
class ICaRLSettings(ReplayFamily):
    """``icarl``'s (Rebuffi et al. 2017): exemplars by herding, nearest-mean-of-exemplars at test."""

    icarl_fixed_memory: bool = field(default=True, metadata={
        "help": "iCaRL: replay_mem rows in all (shared by the classes seen); off: replay_mem rows per class."})


@dataclass(frozen=True)
class BiCSettings(ReplayFamily):
    """``bic``'s (Wu et al. 2019): replay + distillation, then a bias layer fitted on held-out memory rows."""

    bic_val_share: float = field(default=0.1, metadata={
        "help": "BiC: share of the memory held out to fit the bias layer."})
    bic_stage2_epochs: int = field(default=200, metadata={"help": "BiC: epochs fitting the bias layer."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.bic_val_share < 1:
            raise UserError(f"bic_val_share must be in (0, 1), got {self.bic_val_share}")
        _positive("bic_stage2_epochs", self.bic_stage2_epochs)


GRIDS = {
    "ewc": ({"ewc_lambda": 1e2}, {"ewc_lambda": 1e3}, {"ewc_lambda": 1e1}, {"ewc_lambda": 1e4}, {"ewc_lambda": 1.0}),
    "lwf": ({"lwf_alpha": 0.5, "lwf_temperature": 2.0}, {"lwf_alpha": 1.0, "lwf_temperature": 2.0},
            {"lwf_alpha": 1.0, "lwf_temperature": 1.0}, {"lwf_alpha": 2.0, "lwf_temperature": 2.0},
            {"lwf_alpha": 0.5, "lwf_temperature": 1.0}),
    "replay": ({"replay_mem": 64}, {"replay_mem": 256}, {"replay_mem": 1024}, {"replay_mem": 16},
               {"replay_mem": 4096}),
    "si": ({"si_lambda": 1e2}, {"si_lambda": 1e3}, {"si_lambda": 1e1}, {"si_lambda": 1e4}, {"si_lambda": 1.0}),
    "gem": ({"gem_strength": 0.0}, {"gem_strength": 0.5}, {"gem_strength": 1.0}, {"gem_strength": 0.25},
            {"gem_strength": 2.0}),
    "agem": ({"agem_sample": 64}, {"agem_sample": 256}, {"agem_sample": 1024}, {"agem_sample": 32},
             {"agem_sample": 512}),
    "er-ace": ({"er_ace_batch": 10}, {"er_ace_batch": 32}, {"er_ace_batch": 64}, {"er_ace_batch": 16},
               {"er_ace_batch": 128}),
    "der": ({"der_alpha": 0.1, "der_beta": 0.5}, {"der_alpha": 0.5, "der_beta": 0.5},
            {"der_alpha": 0.5, "der_beta": 1.0}, {"der_alpha": 0.2, "der_beta": 0.0},
            {"der_alpha": 1.0, "der_beta": 0.5}),
    "icarl": (),
    "bic": ({"bic_val_share": 0.1}, {"bic_val_share": 0.05}, {"bic_val_share": 0.2}, {"bic_val_share": 0.3},
            {"bic_val_share": 0.02}),
}
"""Strategy → the points ``--tune`` tries, in order (iCaRL: none; its one knob besides the memory budget is
how that budget is shared, a choice of the user). EWC and SI have small λ among the first three: EWC's
separate penalties add up over a long stream, and a large λ makes SGD diverge (λ = 100 on 50 permuted digit
tasks: NaN weights, every task at 10%), SI's importances are capped at 1e-3."""

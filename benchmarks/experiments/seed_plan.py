"""The seeds driver's plan, read from its options (:mod:`.seeds`): the benchmarks (``STREAM/MODEL/SCENARIO``),
each benchmark's seeds (``--seeds``, ``--seeds-of``) and the ``--run-option`` values it passes to every
invocation. Each option is checked here, in one line naming it, before anything runs or is written."""
from __future__ import annotations

from dataclasses import dataclass

from cl_graft.errors import UserError
from cl_graft.task import SCENARIOS

from .script_out import ScriptError

OWNED = ("--seed", "--out", "--stream", "--scenario", "--strategies", "--tune", "--tune-budget", "--settings-from",
         "--data-dir", "--resume", "--overwrite")
"""The ``cl-graft run`` options the driver sets itself (from ``--seeds``, ``--benchmarks``, the peers, its tuning
plan, ``--data-dir`` and its folders): a ``--run-option`` giving one would override the driver's value (one seed
run twice, a run outside ``--out``), so it is refused."""


@dataclass(frozen=True, kw_only=True)
class Benchmark:
    """One table: a stream, the model every strategy starts from (``""``: ``cl-graft run``'s default) and the
    scenario."""

    stream: str
    model: str
    scenario: str

    @classmethod
    def parse(cls, text: str) -> Benchmark:
        parts = text.split("/")
        if len(parts) != 3 or parts[2] not in SCENARIOS or not parts[0]:
            raise ScriptError(f"a benchmark is STREAM/MODEL/SCENARIO (e.g. split-digits/mlp/class, or "
                              f"split-clinc150:15//class for the default model), got {text!r}")
        return cls(stream=parts[0], model=parts[1], scenario=parts[2])

    @property
    def name(self) -> str:
        return f"{self.stream}/{self.model}/{self.scenario}"

    @property
    def folder(self) -> str:
        return "-".join(p for p in (self.stream.replace(":", "-"), self.model, self.scenario) if p)

    def family(self) -> str:
        """The name of the stream family that claims the stream, its scenario checked.

        Raises:
            ScriptError: no family claims it, or it does not serve the scenario (one line).
        """
        from cl_graft.benchmarks.families import find_family

        try:
            family = find_family(self.stream)
            family.check_scenario(self.scenario, self.stream)
        except UserError as e:
            raise ScriptError(f"--benchmarks {self.name}: {e}") from None
        return family.name


def parse_seeds(text: str, option: str) -> list[int]:
    """Comma-separated whole numbers, at least two and each once (the intervals are over seeds).

    Raises:
        ScriptError: anything else (one line naming ``option``).
    """
    if not all(s.strip().isdigit() for s in text.split(",")):
        raise ScriptError(f"{option} is comma-separated whole numbers >= 0, e.g. 0,1,2; got {text!r}")
    seeds = [int(s) for s in text.split(",")]
    twice = next((s for i, s in enumerate(seeds) if s in seeds[:i]), None)
    if twice is not None:
        raise ScriptError(f"{option} lists seed {twice} twice; give each seed once (the intervals are over distinct "
                          f"seeds)")
    if len(seeds) < 2:
        raise ScriptError(f"{option} needs at least two seeds (the intervals are over seeds)")
    return seeds


def parse_benchmarks(text: str) -> list[Benchmark]:
    """Comma-separated benchmarks (:meth:`Benchmark.parse`), each once.

    Raises:
        ScriptError: a malformed benchmark, or one listed twice (a page holds one table per benchmark; a second
            entry is a typo for another benchmark, not a request for the same table again).
    """
    benches = [Benchmark.parse(b) for b in text.split(",")]
    twice = next((b for i, b in enumerate(benches) if b in benches[:i]), None)
    if twice is not None:
        raise ScriptError(f"--benchmarks lists {twice.name} twice; give each benchmark once")
    return benches


def check_run_options(options: tuple[str, ...], benches: list[Benchmark]) -> None:
    """Refuses a ``--run-option`` naming an option of :data:`OWNED`, in any spelling ``cl-graft run`` accepts
    (``--seed=7``, or ``--seed`` and ``7`` as two run-options; click takes no abbreviation of a long option), and
    ``--model`` when a benchmark of ``benches`` names its model (the run-option would silently replace it; a
    benchmark with an empty MODEL takes its model from ``--run-option=--model=PATH``).

    Raises:
        ScriptError: one line naming the option.
    """
    named = [b.name for b in benches if b.model]
    for option in options:
        name = option.strip().split("=", 1)[0].split(maxsplit=1)[0] if option.strip() else ""
        if name in OWNED:
            raise ScriptError(f"--run-option {option}: the driver sets {name} of every invocation itself (it owns "
                              f"{', '.join(OWNED)}); use its own options (--seeds, --benchmarks, --class-peers, "
                              f"--task-peers, --tune-budget, --settings-from, --data-dir, --out)")
        if name == "--model" and named:
            raise ScriptError(f"--run-option {option}: benchmark {named[0]} names its model; give the model in the "
                              f"benchmark (STREAM/MODEL/SCENARIO) or leave MODEL empty to take it from --run-option")


def seeds_of(benches: list[Benchmark], seeds: list[int], given: tuple[str, ...]) -> dict[Benchmark, list[int]]:
    """Each benchmark's seeds: ``--seeds-of BENCHMARK=SEEDS`` where given, else ``seeds``.

    Raises:
        ScriptError: a ``--seeds-of`` without ``=``, naming a benchmark not in ``--benchmarks``, or naming one
            that an earlier ``--seeds-of`` named (the last would silently win).
    """
    out = dict.fromkeys(benches, seeds)
    seen: dict[Benchmark, str] = {}
    for text in given:
        name, equals, values = text.rpartition("=")
        bench = Benchmark.parse(name) if equals else None
        if bench not in out:
            raise ScriptError(f"--seeds-of is BENCHMARK=SEEDS with a benchmark of --benchmarks, e.g. "
                              f"split-banking77:7//class=0,1,2; got {text!r}")
        if bench in seen:
            raise ScriptError(f"--seeds-of gives benchmark {bench.name} twice ({seen[bench]!r} and {text!r}); give "
                              f"its seeds once")
        seen[bench] = text
        out[bench] = parse_seeds(values, f"--seeds-of {name}")
    return out

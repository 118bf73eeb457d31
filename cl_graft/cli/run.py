"""``cl-graft run``: continual learning on a task stream, every strategy on the same benchmark and seeds.

The options after ``--strategies`` up to ``--steps`` are the built-in strategies' own settings, one per field of
their settings classes (:data:`cl_graft.strategies.comparison.registry.STRATEGIES`), written by :func:`run_command`;
the help's list of strategies, what each stores and which route rows without task labels come from the same
entries. Plugin strategies (entry-point group ``"cl_graft.strategies"``) are listed by name and not loaded, so a
broken one leaves every command working: they are loaded when ``--strategies`` names a strategy that is not built
in, and the options the command does not know are then read as their settings options (:func:`_plugin_settings`).
This module names no strategy.
"""
from __future__ import annotations

import dataclasses

import click

from ..benchmarks.digits import MODELS as DIGIT_MODELS
from ..benchmarks.families import grammar
from ..plugin_points import listing
from ..strategies.comparison.registry import DEFAULT_STRATEGIES, STRATEGIES, registry_options
from ..strategies.comparison.tuning import TUNE_BUDGET
from ..strategies.interface.registration import ENTRY_POINTS
from ..task import SCENARIOS
from .common import common_options, console_options, field_option

AVALANCHE = True
"""This command uses Avalanche (:func:`cl_graft.cli.command_modules`)."""

ROUTING = [n for n, e in STRATEGIES.items() if e.routes is not None]
"""The strategies that can serve test rows without their task labels."""
RULES = list(dict.fromkeys(r for e in STRATEGIES.values() if e.routes is not None for r in e.routes.rules))
"""Their rules (``--task-inference``)."""


def routing_by_rule() -> str:
    """Which strategies route by each rule, for ``--help``: ``rule: a, b; rule: ...``."""
    return "; ".join(f"{r}: {', '.join(n for n in ROUTING if r in STRATEGIES[n].routes.rules)}" for r in RULES)


def plugins_text() -> str:
    """The plugin strategies for ``--help``, by entry-point name and distribution, none loaded (empty: none)."""
    plugins = listing(ENTRY_POINTS)
    return (f"; or a plugin's strategy (entry point group {ENTRY_POINTS}, loaded when --strategies names a "
            f"strategy that is not built in; its settings options are then read too): {plugins}") if plugins else ""


def epilog() -> str:
    """Output, and what each strategy stores (its entry's ``stores``)."""
    stored = "\n".join(f"  {name}: {entry.stores}" for name, entry in STRATEGIES.items())
    return f"""\b
Output: a live progress line on a terminal (strategy, task i/T, phase: train, a strategy's own step after training,
eval, with steps or rows, elapsed time and ETA), one line per task as it ends, then the summary table.
Machines read the files instead: <out>/<strategy>/result.json as each strategy ends, results.json,
results.csv and matrices.csv at the end.

\b
stored (bytes kept beside the model a strategy starts from, to serve every task):
{stored}"""


def settings_options(f, options: list | None = None):
    """One option per setting of ``options`` (default: those of the built-in strategies, :func:`registry_options`);
    not given = the strategy's own default (the preset's where the preset sizes it)."""
    for opt in reversed(registry_options() if options is None else options):
        shown = "the preset's" if opt.preset else opt.field.metadata.get("shown", _default_text(opt.field))
        f = field_option(opt.field, opt.kind, name=opt.name, help=opt.help, default=None, shown=shown)(f)
    return f


def _default_text(fld: dataclasses.Field) -> str | None:
    """What ``--help`` shows as a settings field's default (None: nothing)."""
    if fld.default is not dataclasses.MISSING:
        return None if fld.default is None else str(fld.default)
    return None if fld.default_factory is dataclasses.MISSING else str(fld.default_factory())


def run_command() -> click.Command:
    """The ``run`` command, with the settings options of the strategies :data:`STRATEGIES` holds now."""
    @click.command(name="run", epilog=epilog(),
                   context_settings={"ignore_unknown_options": True, "allow_extra_args": True})   # plugins' settings
    @click.option("--stream", required=True, help=f"The stream: {grammar()}. Digits streams take --model "
                  + ", ".join(f"{m} ({text})" for m, text in DIGIT_MODELS.items()) + ".")
    @click.option("--scenario", type=click.Choice(list(SCENARIOS)), default="task", show_default=True,
                  help="task: every strategy gets the task label at test (a single-head model runs as its multi-head "
                  "copy, the same for every strategy; a split text stream gets a head per experience); class "
                  "(digits and split text streams): none does, one head answers every class seen so far "
                  "(strategies that keep a model per task route each row to one of them).")
    @click.option("--class-order", default=None, help="Split text streams: the task's label indices in the order "
                  "they arrive, comma-separated (default: a permutation seeded by --seed, recorded in results.json).")
    @click.option("--strategies", default=",".join(DEFAULT_STRATEGIES), show_default=True,
                  help=f"Comma-separated: {', '.join(STRATEGIES)}{plugins_text()}.")
    @settings_options
    @click.option("--steps", type=int, default=None, help="Optimizer steps per experience (default: the preset's).")
    @click.option("--k", type=int, default=None, help="Training examples per class (default: the preset's).")
    @click.option("--eval-cap", type=int, default=None,
                  help="Test rows per task of a text stream, a seeded subsample (default: the preset's); every "
                       "strategy scores every task after every experience, so a long stream costs T² × this.")
    @click.option("--tune", is_flag=True, help="Choose each strategy's settings from its grid on dev rows first "
                  "(same budget for every strategy; test rows are never used to choose).")
    @click.option("--tune-budget", type=click.IntRange(min=1), default=None, show_default=str(TUNE_BUDGET),
                  help="With --tune: grid points every strategy tries (the first ones of its grid).")
    @click.option("--settings-from", type=click.Path(file_okay=False, path_type=str), default=None,
                  help="Use the settings an earlier `run --tune` chose on its dev rows (its --out folder), e.g. to "
                       "run more seeds with them.")
    @click.option("--task-inference", type=click.Choice(RULES), default=None,
                  help="After the stream, also evaluate with task labels withheld: each input goes to the task whose "
                       "model is most confident (entropy, max-softmax; T forward passes per input) or whose "
                       "head-input statistics make its features most likely (features); a closed-form head answers "
                       "it over every task's classes (features; right only in its own task's column). By rule: "
                       f"{routing_by_rule()}.")
    @click.option("--resume", is_flag=True,
                  help="Continue an interrupted run in --out (every setting and the data must be the same).")
    @console_options
    @common_options
    @click.pass_context
    def run(ctx, **options):
        """Train the strategies on the stream; print a line per task as it ends, then accuracy, forgetting, BWT,
        storage and wall time per strategy; write results.json/csv, matrices.csv and figures/ under --out."""
        _run(**options, unknown=ctx.args)

    return run


def _given_settings(options: dict, names: list[str], unknown: list[str]) -> dict:
    """Setting key → value of the settings options given: the built-in strategies' (popped from ``options``) and
    the plugin strategies' among ``names`` (read from ``unknown``, :func:`_plugin_settings`).

    Raises:
        UserError: an option none of the strategies ``names`` has.
        click.UsageError: as :func:`_plugin_settings`.
    """
    from ..errors import UserError
    from ..strategies.comparison.registry import entry_of
    from ..strategies.interface.settings import has_setting

    entries = {n: entry_of(n) for n in names}
    given = _plugin_settings(unknown, [e for n, e in entries.items() if n not in STRATEGIES])
    for opt in registry_options():
        value = options.pop(opt.name)
        if value is None:
            continue
        if not any(has_setting(e.settings, opt.key) for e in entries.values()):
            raise UserError(f"--{opt.name.replace('_', '-')} is a setting of none of --strategies {','.join(names)}")
        given[opt.key] = value
    return given


def _plugin_settings(unknown: list[str], plugins: list) -> dict:
    """Setting key → value of the plugin strategies' own settings options (``plugins``: their entries, loaded)
    in ``unknown``, the arguments the command did not know (``--toy-scale 0.5``).

    Raises:
        UserError: a plugin's setting named as another strategy's with another meaning.
        click.UsageError: an argument that is no such option (as click says it for any command), or a bad value.
    """
    from ..errors import UserError

    known = {opt.name for opt in registry_options()}
    try:
        own = [opt for opt in registry_options([*STRATEGIES.values(), *plugins]) if opt.name not in known]
    except ValueError as e:
        raise UserError(f"a plugin strategy's setting: {e}") from None
    reader = settings_options(click.Command("run", add_help_option=False), own)
    ctx = click.get_current_context()
    try:
        values = reader.make_context("run", list(unknown)).params
    except click.NoSuchOption as e:                              # as click says it, the command's options offered
        names = [name for param in [*ctx.command.params, *reader.params] for name in param.opts]
        raise click.NoSuchOption(e.option_name, possibilities=names, ctx=ctx) from None
    except click.UsageError as e:
        raise click.UsageError(e.format_message(), ctx=ctx) from None
    return {opt.key: values[opt.name] for opt in own if values[opt.name] is not None}


def _run(*, stream, scenario, class_order, strategies, steps, k, eval_cap, tune, tune_budget, settings_from,
         task_inference, resume, quiet, verbose, model, head, fresh_head, preset, data_dir, seed, device, out,
         overwrite, unknown, **options) -> None:
    from .. import distributed
    from ..benchmarks.families import StreamRequest, lookup
    from ..console import Console
    from ..errors import UserError
    from ..outdir import claim_out_dir
    from ..provenance import finish_record, run_record
    from ..strategies.interface.config import continual_setup
    from ..strategies.comparison.registry import entry_of, parse_strategies, plugin_records, strategy_settings
    from ..strategies.comparison.tuning import chosen_settings, refuse_fixed_choices
    from ..training.models import resolve_device

    console = Console.from_flags(quiet=quiet, verbose=verbose)
    device = resolve_device(device)
    served_by = lookup(stream, data_dir=data_dir)
    family = served_by.family
    family.check_scenario(scenario, stream)
    if scenario == "class" and task_inference:
        raise UserError("--scenario class already withholds task labels (strategies that can route do); "
                        "drop --task-inference")
    names = parse_strategies(strategies)
    routed = [n for n in names if entry_of(n).routes is not None and task_inference in entry_of(n).routes.rules]
    if task_inference and not routed:
        raise UserError(f"--task-inference {task_inference} scores strategies that route rows without task labels "
                        f"by it ({routing_by_rule()}); none of --strategies {','.join(names)} does")
    given = _given_settings(options, names, unknown)
    if tune and settings_from:
        raise UserError("--tune and --settings-from exclude each other: tune here, or reuse an earlier choice")
    if tune_budget is not None and not tune:
        raise UserError("--tune-budget is the number of grid points --tune tries; add --tune or drop it")
    tune_budget = tune_budget or TUNE_BUDGET
    chosen = chosen_settings(settings_from, names, given) if settings_from else None
    refuse_fixed_choices(given, names, tune_budget=tune_budget if tune else None, chosen=chosen)
    data, cfg = continual_setup(preset, seed=seed, steps=steps, k=k, eval_cap=eval_cap)
    own = {n: strategy_settings(n, data, seed=seed, given=given) for n in names}
    distributed.check_batch(cfg.recipe.batch_size)
    for s in own.values():
        for what, size in s.batch_sizes().items():
            distributed.check_batch(size, what)
    set_options = {"k": k, "eval_cap": eval_cap, "head": head != "linear" or None, "fresh_head": fresh_head or None,
                   "data_dir": data_dir, "class_order": class_order}
    setup = family.setup(StreamRequest(
        spec=stream.strip(), scenario=scenario, data=data, seed=seed, tune=tune, model=model, head=head,
        fresh_head=fresh_head, data_dir=data_dir, device=device, class_order=class_order,
        given=frozenset(o for o, v in set_options.items() if v is not None)))
    base, make_streams = setup.base, setup.make
    from ..strategies.comparison.report import (                # the harness imports Avalanche (~7 s): only
        chance_bands,                                             # once the stream and every option are checked
        scenario_line,
        strategy_notes,
        strategy_table,
        summary_table,
        write_results,
    )
    from ..strategies.comparison.runner import run_continual

    settings = {"command": "run", **setup.record, "strategies": names, "preset": preset, "seed": seed,
                "config": cfg.to_json(), "strategy_settings": {n: s.to_json() for n, s in own.items()},
                "tune": tune, "tune_budget": tune_budget if tune else None, "settings_from": chosen,
                "task_inference": task_inference}
    record = run_record(**settings, device=str(device), data=setup.source, stream_family=served_by.record(),
                        strategy_plugins=plugin_records(names))
    def on_result(result) -> None:
        if console.verbose:
            console.echo("\n" + strategy_table(result) + "\n")
        for line in strategy_notes(result):
            console.echo(f"{result.name:<14}{line}")

    with claim_out_dir(out, "run", settings=settings, overwrite=overwrite, resume=resume,
                       keep_on_error=True) as run_dir, console:
        the_stream, tune_stream = make_streams()
        results = run_continual(base, the_stream, own, cfg, out=run_dir.path, tune_stream=tune_stream,
                                tune_budget=tune_budget, chosen=chosen, resume=resume, task_inference=task_inference,
                                console=console,
                                on_result=on_result)
        console.phase("writing results and figures")
        bands = chance_bands(the_stream.benchmark.test_stream)
        record = {**record, "strategy_settings": _settings_run(own, results),          # what ran, tuning applied
                  "strategies_cpu_seconds": _strategies_cpu(results)}
        write_results(run_dir.path, results, record=finish_record(record), scenario=scenario, bands=bands)
        console.close()
        console.echo(f"\n{scenario_line(scenario)}\n" + summary_table(results, bands=bands)
                     + f"\n\nresults -> {run_dir.path}")
        run_dir.finish(record)


def _strategies_cpu(results: dict) -> float:
    """The strategies' CPU seconds summed (each ``info["cpu_seconds"]``, an earlier process's share included where
    a strategy resumed or was read back finished): the invocation's cost beside the record's ``cpu_seconds``,
    which is this process's alone."""
    return round(sum(r.info.get("cpu_seconds") or 0.0 for r in results.values()), 1)


def _settings_run(own: dict, results: dict) -> dict:
    """Each strategy's settings as it ran (JSON): its own, with the point that tuning or ``--settings-from`` chose
    (``info["tuning"]["chosen"]``) applied."""
    from ..strategies.interface.settings import apply_point

    return {n: (apply_point(s, results[n].info["tuning"]["chosen"]) if results[n].info.get("tuning") else s).to_json()
            for n, s in own.items()}


run = run_command()

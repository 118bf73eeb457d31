"""Pages that call a text run set "the default" name the one made with today's defaults.

``benchmarks/results/text_size/default.json`` records which ``text_size`` run set holds the README's main job
(``cl-graft run --stream qnli,agnews,sst2 --strategies graft,naive --preset quick``, seeds 0-2) at today's
defaults (``runs``) and its re-runs (``repeats``). The record is checked against the code and the runs: its runs
were made by the plain command with today's ``RegionSize()`` settings, and no other run set of that kind started
later. The pages are checked against the record: a sentence (or table row) of a Markdown page that says "default"
and names a ``text_size`` run set names the recorded one, unless it marks its default as past ("before",
"earlier", "was/were the default(s)") without calling it current ("now", "current", "today"); each page that
points at the default's runs has such a sentence.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import re
import shlex
import statistics
from pathlib import Path

from helpers import REPO_ROOT

TEXT_SIZE = REPO_ROOT / "benchmarks" / "results" / "text_size"
RECORD = TEXT_SIZE / "default.json"
PLAIN_OPTIONS = {"--stream", "--strategies", "--preset", "--device", "--seed", "--data-dir", "--quiet", "--out"}
"""The options of the main job's runs that leave graft's settings at their defaults."""
MAIN_JOB = {"--stream": "qnli,agnews,sst2", "--strategies": "graft,naive", "--preset": "quick"}
POINTING = {"BENCHMARKS.md": "the text stream with the default (automatic) region size",
            "benchmarks/results/continual.md": "The default automatic region size on this stream",
            "benchmarks/results/text_size/README.md": "holds the current default",
            "benchmarks/results/speed/README.md": "the default now"}
"""Pages that point at the default's runs: the phrase of the sentence that does (README's figures name their runs
through ``tests/docs/test_readme_figures.py``; the rule of the third test reads its sentences too)."""
DEFAULT = re.compile(r"\bdefaults?\b", re.IGNORECASE)
PAST = re.compile(r"\b(?:before|earlier|was the default|were the defaults)\b", re.IGNORECASE)
PRESENT = re.compile(r"\b(?:now|current|currently|today'?s?)\b", re.IGNORECASE)


@functools.cache
def record() -> dict:
    return json.loads(RECORD.read_text(encoding="utf-8"))


@functools.cache
def run_sets() -> dict[str, list[dict]]:
    """Each ``text_size`` folder holding ``seedS/config.json`` run records: its records, by seed."""
    return {p.name: [json.loads(c.read_text(encoding="utf-8")) for c in sorted(p.glob("seed*/config.json"))]
            for p in sorted(TEXT_SIZE.iterdir()) if p.is_dir() and any(p.glob("seed*/config.json"))}


def options(command_line: str) -> dict[str, str | None]:
    """A ``cl-graft run`` command line's options and their values (``None`` for a flag)."""
    words, out = shlex.split(command_line)[2:], {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            out[word] = words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else None
    return out


def at_todays_defaults(records: list[dict]) -> bool:
    """The main job, run with no option that changes graft's settings, recorded with today's size settings."""
    from cl_graft.strategies.graft.sizing.rules import RegionSize            # Avalanche: about 7 s
    today = json.loads(json.dumps(dataclasses.asdict(RegionSize())))
    return bool(records) and all(
        set(options(r["command_line"])) <= PLAIN_OPTIONS
        and all(options(r["command_line"]).get(k) == v for k, v in MAIN_JOB.items())
        and r["strategy_settings"]["graft"].get("region_size") == today for r in records)


def sentences(text: str) -> list[str]:
    """Paragraphs and list items of a Markdown page cut into sentences, and each cell of a table row after the first
    joined to the first (the row's name), whitespace flattened."""
    out = []
    for block in re.split(r"\n\s*\n|\n(?=\|)|\n(?=\s*- )", text):
        if block.lstrip().startswith("|"):
            name, *cells = re.split(r"(?<!\\)\|", block.strip().strip("|"))
            out += [" ".join(f"{name} | {cell}".split()) for cell in cells]
        else:
            out += [" ".join(s.split()) for s in re.split(r"(?<=[.;])\s+(?=[A-Z(`*\[])", block)]
    return out


@functools.cache
def run_set_name() -> re.Pattern:
    names = sorted(run_sets(), key=len, reverse=True)                      # text_quick before text
    return re.compile(r"(?<![\w])(" + "|".join(map(re.escape, names)) + r")(?![\w])")


def named_run_sets(sentence: str) -> set[str]:
    return set(run_set_name().findall(sentence))


def pages() -> list[Path]:
    return [REPO_ROOT / "README.md", REPO_ROOT / "BENCHMARKS.md", *sorted((REPO_ROOT / "docs").rglob("*.md")),
            *sorted((REPO_ROOT / "benchmarks" / "results").rglob("*.md"))]


def default_claims(page: Path) -> list[tuple[str, set[str]]]:
    """The page's sentences that call a named text run set the default now (not marked as past)."""
    out = []
    for sentence in sentences(page.read_text(encoding="utf-8")):
        names = named_run_sets(sentence)
        if names and DEFAULT.search(sentence) and (PRESENT.search(sentence) or not PAST.search(sentence)):
            out.append((sentence, names))
    return out


def test_the_record_names_runs_made_at_todays_defaults():
    sets = run_sets()
    for name in (record()["runs"], *record()["repeats"]):
        assert len(sets.get(name, [])) == 3, f"text_size/{name}: three seeds' run records expected"
        assert at_todays_defaults(sets[name]), (
            f"text_size/{name} was not made by the main job with today's defaults (RegionSize changed?): "
            "run it again and update text_size/default.json and the pages")


def test_no_later_run_set_at_todays_defaults_is_left_out_of_the_record():
    sets, ours = run_sets(), {record()["runs"], *record()["repeats"]}
    started = min(r["started"] for r in sets[record()["runs"]])
    later = [name for name, records in sets.items() if name not in ours and at_todays_defaults(records)
             and min(r["started"] for r in records) > started]
    assert not later, f"run sets at today's defaults newer than the recorded one: {later} (update default.json)"


def test_pages_that_call_a_run_set_the_default_name_the_recorded_one():
    ours = {record()["runs"], *record()["repeats"]}
    wrong = [f"{page.relative_to(REPO_ROOT)}: {sentence[:160]}…" for page in pages()
             for sentence, names in default_claims(page) if not names & ours]
    assert not wrong, (f"these sentences call a run set other than text_size/{record()['runs']} (default.json) the "
                       "default; name it, or mark the default they mean as past:\n" + "\n".join(wrong))


def test_the_pages_that_point_at_the_default_point_at_the_recorded_runs():
    for rel, phrase in POINTING.items():
        claims = [names for sentence, names in default_claims(REPO_ROOT / rel) if phrase in sentence]
        assert claims, f"{rel}: no sentence with {phrase!r} names a text_size run set"
        assert all(record()["runs"] in names for names in claims), (
            f"{rel}: the sentence with {phrase!r} should name text_size/{record()['runs']}")


def test_the_guide_quotes_the_default_runs_sizes():
    shares = [s["share"] for seed in range(3) for s in json.loads(
        (TEXT_SIZE / record()["runs"] / f"seed{seed}" / "results.json").read_text(encoding="utf-8"))[
        "strategies"]["graft"]["info"]["sizing"]]
    sizes = sorted(round(100 * s) for s in shares)
    quote = f"{sizes[0]}–{sizes[-1]}% (median {round(100 * statistics.median(shares)):g}%)"
    guide = " ".join((REPO_ROOT / "docs" / "guide.md").read_text(encoding="utf-8").split())
    sentence = next(s for s in sentences(guide) if "pre-trained encoder's skill" in s)
    assert quote in sentence, f"docs/guide.md should give the default runs' sizes, {quote}: {sentence}"

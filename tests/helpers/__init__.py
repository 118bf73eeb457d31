"""Plain helpers shared by the test files: tiny randomly initialised BERT, RoBERTa-MLM and GPT-2 classifiers built
locally (no downloads), toy tasks and rows, ``cl-graft run`` in process, and paths; the toy Avalanche streams are in
:mod:`helpers.toy_streams`, README's quotes rebuilt from their artifacts in ``helpers.readme_*``. Test files import
from here (``from helpers import ...``; ``tests/`` is on ``sys.path`` through pyproject's ``pythonpath``), never
from one another; fixtures live in ``conftest.py``.

Importing this module does not import Avalanche (``conftest.py`` imports it, and so do the processes that
``mp.spawn`` starts for ``test_distributed``): the helpers that need it import it when first used.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import torch
from click.testing import CliRunner

from cl_graft.cli import main
from cl_graft.layers import PACKAGES
from cl_graft.task import TaskRows, TaskSpec
from cl_graft.training.finetune import FinetuneConfig
from cl_graft.training.models import TextClassifier, build_classifier

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The repository's root folder (this file is ``tests/helpers/__init__.py``)."""


def package_modules() -> dict[str, Path]:
    """Every module of the installed packages (:data:`cl_graft.layers.PACKAGES`): dotted name → file (``pkg`` for
    ``pkg/__init__.py``)."""
    import importlib.util

    out: dict[str, Path] = {}
    for package in PACKAGES:
        root = Path(next(iter(importlib.util.find_spec(package).submodule_search_locations)))
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if "__pycache__" not in parts:
                out[".".join((package, *parts[:-1]) if parts[-1] == "__init__" else (package, *parts))] = path
    return out

# ----------------------------------------------------------------------------- tiny models

CORPUS = [
    "it was great fun and a good movie", "it was terrible and bad", "is this a question ? yes no maybe",
    "world sports business tech news", "the film is wonderful", "a dull and boring plot",
]
SENTIMENT = TaskSpec(name="toy", labels=("negative", "positive"), template="{x} It was {mask} .",
                     label_words=("terrible", "great"), causal_template="{x} It was {mask}")
PAIR = TaskSpec(name="toypair", labels=("entailment", "not_entailment"), pair=True,
                template="{a} ? {mask} , {b}", label_words=("yes", "no"),
                causal_template="{a} Question: {b} Answer: {mask}")


def shared_data_dir() -> Path | None:
    """The real task data: $CL_GRAFT_DATA, else ../shared/data beside the repository."""
    env = os.environ.get("CL_GRAFT_DATA")
    path = Path(env) if env else REPO_ROOT.parent / "shared" / "data"
    return path if path.is_dir() else None


MINILM_FINETUNE = ["finetune", "--task", "sst2", "--preset", "smoke", "--steps", "6"]
"""The real MiniLM's one fine-tuning in the suite (conftest's ``minilm_sst2``): `cl-graft finetune` of the real
sst2 (add ``--data-dir`` and ``--out``)."""


def _bpe():
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS * 5, vocab_size=400, min_frequency=1,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    return bpe._tokenizer


def _wordpiece():
    from transformers import BertTokenizer

    words = sorted({w for line in CORPUS for w in line.split()} | {"question", "answer", "topic", ",", "."})
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words)}
    return BertTokenizer(vocab=vocab)


def tiny_bert(head: str = "linear") -> TextClassifier:
    from transformers import BertConfig, BertForMaskedLM, BertModel

    torch.manual_seed(0)
    tok = _wordpiece()
    cfg = BertConfig(vocab_size=len(tok.get_vocab()), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=37, max_position_embeddings=64)
    backbone = BertModel(cfg) if head == "linear" else BertForMaskedLM(cfg)
    return build_classifier("tiny-bert", head=head, backbone=backbone, tokenizer=tok, max_length=32)


def tiny_roberta_mlm() -> TextClassifier:
    from transformers import RobertaConfig, RobertaForMaskedLM, RobertaTokenizerFast

    torch.manual_seed(0)
    tok = RobertaTokenizerFast(tokenizer_object=_bpe(), bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                               unk_token="<unk>", mask_token="<mask>", cls_token="<s>", sep_token="</s>")
    cfg = RobertaConfig(vocab_size=len(tok.get_vocab()), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=70, pad_token_id=tok.pad_token_id,
                        initializer_range=0.3)
    return build_classifier("tiny-roberta", head="mlm", backbone=RobertaForMaskedLM(cfg), tokenizer=tok,
                            max_length=32)


def tiny_gpt2() -> TextClassifier:
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast

    torch.manual_seed(0)
    tok = GPT2TokenizerFast(tokenizer_object=_bpe(), bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    cfg = GPT2Config(vocab_size=len(tok.get_vocab()), n_embd=32, n_layer=2, n_head=2, n_positions=64,
                     bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    return build_classifier("tiny-gpt2", head="causal", backbone=GPT2LMHeadModel(cfg), tokenizer=tok, max_length=32)


TINY_MODELS = {"bert-linear": tiny_bert, "roberta-mlm": tiny_roberta_mlm, "gpt2-causal": tiny_gpt2}


def save_tiny_model(folder: Path) -> Path:
    """:func:`tiny_bert`'s backbone and tokenizer saved as a Hugging Face folder (what ``--model`` takes)."""
    clf = tiny_bert()
    clf.backbone.save_pretrained(folder)
    clf.tokenizer.save_pretrained(folder)
    return folder


# ----------------------------------------------------------------------------- toy data

POS, NEG = ["great", "good", "wonderful", "fun"], ["terrible", "bad", "dull", "boring"]
FILL = ["it", "was", "a", "the", "and", "is"]
NEUTRAL = ["it", "was", "and", "a", "movie", "the", "film", "is", "plot", "news", "world", "this"]
GOOD = ["it was great fun", "a good movie", "the film is wonderful", "great fun and good"]
BAD = ["it was terrible", "a dull and boring plot", "bad and boring", "terrible plot"]


def write_task(folder: Path, labels: list[str], splits: dict[str, list[dict]]) -> Path:
    """A task folder of a data dir: ``meta.json`` with ``labels`` and one ``<split>.jsonl`` per split."""
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"labels": labels}))
    for split, rows in splits.items():
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def hub_dataset(label_field: str, names: list[str], rows: list[tuple[str, str]]):
    """A ``datasets.Dataset`` shaped like a split of the Hub's intent datasets (clinc_oos, PolyAI/banking77):
    ``text`` and the ClassLabel column ``label_field`` of ``names``; ``rows`` are ``(text, label name)``."""
    from datasets import ClassLabel, Dataset, Features, Value

    features = Features({"text": Value("string"), label_field: ClassLabel(names=names)})
    return Dataset.from_dict({"text": [t for t, _ in rows], label_field: [names.index(n) for _, n in rows]},
                             features=features)


INTENT_WORDS = ["great", "good", "terrible", "boring", "movie", "film", "plot", "news", "world", "fun", "dull",
                "wonderful"]


def intents_env(root: Path, seed: int = 0) -> Path:
    """``root`` with a saved tiny BERT (``model``) and a data dir (``data``) holding ``intents``: six classes, each
    marked by two words, 240 training and 60 test rows (a task to split into experiences)."""
    save_tiny_model(root / "model")
    rng = random.Random(seed)

    def rows(n):
        return [{"text": " ".join([INTENT_WORDS[2 * (i % 6)], INTENT_WORDS[2 * (i % 6) + 1],
                                   *rng.sample(INTENT_WORDS, 2)]), "label": i % 6} for i in range(n)]

    write_task(root / "data" / "intents", [f"c{i}" for i in range(6)], {"train": rows(240), "test": rows(60)})
    return root


def sentiment_rows(n: int, seed: int, flip: bool) -> list[dict]:
    """Four filler words and one sentiment word; label = positive (or, with ``flip``, negative)."""
    rng, out = random.Random(seed), []
    for _ in range(n):
        y = rng.randrange(2)
        toks = [rng.choice(FILL) for _ in range(4)]
        toks.insert(rng.randrange(len(toks) + 1), rng.choice(POS if y else NEG))
        out.append({"text": " ".join(toks), "label": y ^ flip})
    return out


def alternating_sentiment_rows(rng: random.Random, count: int, *, fillers: int = 4,
                               neutral: list[str] = NEUTRAL) -> list[dict]:
    """``count`` rows of ``fillers`` neutral words and one sentiment word at a random place, labels alternating
    0, 1, ... (1 = positive), drawn from ``rng``. ``test_region_methods`` passes five fillers and its own neutral
    words (one more, "question"): one generator, each test's data as it was."""
    out = []
    for i in range(count):
        words = [rng.choice(neutral) for _ in range(fillers)]
        words.insert(rng.randrange(fillers + 1), rng.choice(POS if i % 2 else NEG))
        out.append({"text": " ".join(words), "label": i % 2})
    return out


def write_sentiment_task(root, name: str, n: int, seed: int) -> None:
    """``n`` train and 40 test rows (:func:`alternating_sentiment_rows`, one seeded draw)."""
    rng = random.Random(seed)
    train = alternating_sentiment_rows(rng, n)
    write_task(root / name, ["negative", "positive"], {"train": train, "test": alternating_sentiment_rows(rng, 40)})


def command_setup(root: Path, tasks: list[str]) -> tuple[Path, list[str]]:
    """For a command's tests: a saved tiny BERT (``root/tiny``) and sentiment tasks (``write_sentiment_task``, 80
    train rows, seeds 0, 1, ...) in ``root/data``; returns ``root`` and the model, data and smoke-preset options."""
    save_tiny_model(root / "tiny")
    for i, name in enumerate(tasks):
        write_sentiment_task(root / "data", name, 80, i)
    return root, ["--model", str(root / "tiny"), "--data-dir", str(root / "data"), "--preset", "smoke"]


def toy_tasks() -> dict[str, list[dict]]:
    """A sentiment task and a pair task (label 0 when both sides agree in sentiment), tiny vocabulary."""
    single = [{"text": t, "label": 1} for t in GOOD] + [{"text": t, "label": 0} for t in BAD]
    pair = [{"text_a": a, "text_b": b, "label": 0} for a, b in zip(GOOD, GOOD[1:] + GOOD[:1], strict=True)]
    pair += [{"text_a": a, "text_b": b, "label": 1} for a, b in zip(GOOD, BAD, strict=True)]
    return {"toy": single, "toypair": pair}


# ----------------------------------------------------------------------------- the skill-map run


def tiny_skillmap_config(**kw):
    from cl_graft.regions.config import LocalizeConfig
    from cl_graft.skillmaps.experiment import SkillmapConfig

    ft = FinetuneConfig(lr=0.2, batch_size=4, steps=40, eval_every=20, seed=0)
    loc = LocalizeConfig(region_size=0.02, steps=2, batch_size=4, n_batches=1, select_rows=8, eval_every=1)
    args = {"multitask": ft, "localize": loc, "single": replace(ft, steps=20), "union_steps": 3,
            "groups": {"sentiment": ("toy",), "pairs": ("toypair",)}}
    return SkillmapConfig(**{**args, **kw})


def tiny_splits():

    data = toy_tasks()
    return {"toy": TaskRows(SENTIMENT, data["toy"], data["toy"], data["toy"]),
            "toypair": TaskRows(PAIR, data["toypair"], data["toypair"], data["toypair"])}


# ----------------------------------------------------------------------------- `cl-graft run`


def cli(env, *args):
    """``cl-graft run`` on the ``env`` fixture's model and data folder, smoke preset (its console: no progress
    line off a terminal, one result line per task, the summary table)."""
    return CliRunner().invoke(main, ["run", "--model", str(env / "model"), "--data-dir", str(env / "data"),
                                     "--preset", "smoke", *args])


def entry_point_module(folder: Path, module: str, source: str, *, group: str, name: str) -> Path:
    """A user's package in ``folder`` (a test puts the folder on the path): ``<module>.py`` holding ``source``
    (dedented) and its distribution's metadata declaring the entry point ``name = module`` of ``group``.
    Returns the metadata's ``entry_points.txt`` (a test rewrites it to point elsewhere)."""
    (folder / f"{module}.py").write_text(textwrap.dedent(source))
    meta = folder / f"{module}-0.1.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module.replace('_', '-')}\nVersion: 0.1\n")
    (meta / "entry_points.txt").write_text(f"[{group}]\n{name} = {module}\n")
    return meta / "entry_points.txt"


class InProcessCli:
    """Stands in for the ``subprocess`` module of an experiment script that starts ``python -m cl_graft.cli ARGS``
    as its own process: :meth:`run` runs the same command in this process (``cl_graft.cli.main``, which records
    ``cl-graft ARGS`` as the command line, as the process would), so a test pays no new interpreter and no second
    import of torch, transformers and Avalanche per invocation. ``commands`` keeps each command's ``ARGS``.

    Only that command is accepted; anything else fails the test. The command's output goes to ``stdout`` when it
    is a file (a script's log), like the process's; its exit status is the returned ``returncode`` (with
    ``check=True`` a failure raises ``CalledProcessError``, as ``subprocess.run`` does).
    """

    CalledProcessError = subprocess.CalledProcessError
    STDOUT = subprocess.STDOUT

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def run(self, cmd: list[str], *, check: bool = False, stdout=None, **_ignored) -> subprocess.CompletedProcess:
        head = [sys.executable, "-m", "cl_graft.cli"]
        assert list(cmd[:3]) == head, f"not a cl-graft command: {cmd[:3]}"
        args = [str(a) for a in cmd[3:]]
        self.commands.append(args)
        result = CliRunner().invoke(main, args)
        if hasattr(stdout, "write"):
            stdout.write(result.output)
        if check and result.exit_code:
            raise subprocess.CalledProcessError(result.exit_code, cmd, output=result.output)
        return subprocess.CompletedProcess(cmd, result.exit_code, stdout=result.output)


# ----------------------------------------------------------------------------- the runner's training calls

def training_calls(monkeypatch, *, stop_at: int | None = None, experience: int | None = None) -> list[tuple]:
    """Records the comparison runner's training calls (:func:`~cl_graft.strategies.comparison.clock.train_experience`)
    as ``(experience index or None, seed)`` in the list returned; the ``stop_at``-th call (from 1), or the first
    call on experience index ``experience``, raises ``KeyboardInterrupt`` (a user's Ctrl-C) instead of training."""
    from cl_graft.strategies.comparison import clock

    train, calls = clock.train_experience, []

    def recorded(strategy, exp, seed):
        calls.append((getattr(exp, "current_experience", None), seed))
        if len(calls) == stop_at or (experience is not None and calls[-1][0] == experience):
            raise KeyboardInterrupt
        train(strategy, exp, seed)

    monkeypatch.setattr(clock, "train_experience", recorded)
    return calls


# ----------------------------------------------------------------------------- results.json of `cl-graft run`

def strategy_json(final: list[float], *, forgetting: float = 0.0, **fields) -> dict:
    """One strategy of a ``cl-graft run`` results.json as the checked loader reads it
    (``strategies/comparison/results_file.py``): a matrix whose last row is ``final`` (a single row when
    ``forgetting`` is NaN, as a strategy fit per task; else one row per task, every earlier task ``forgetting``
    higher before the last), its summary computed from it, and ``fields`` (``info``, ``bytes``, ``seconds``)."""
    from cl_graft.strategies.comparison.metrics import summarize

    t = len(final)
    earlier = [min(1.0, a + forgetting) if j < t - 1 else a for j, a in enumerate(final)]
    matrix = [list(final)] if forgetting != forgetting else [earlier] * (t - 1) + [list(final)]
    entry = {"matrix": matrix, "bytes": 0, "seconds": 1.0, "info": {}, **fields}
    return {**entry, "summary": {**summarize(matrix), "bytes": entry["bytes"], "seconds": entry["seconds"]}}


def results_json(run: dict, tasks: list[str], strategies: dict[str, dict], **extra) -> dict:
    """A ``cl-graft run`` results.json: the run record, the tasks and ``strategies`` (name → :func:`strategy_json`),
    each named with the run's tasks; ``extra``: ``scenario``, ``chance``, ..."""
    return {"run": run, "tasks": tasks, **extra,
            "strategies": {n: {"name": n, "tasks": tasks, **s} for n, s in strategies.items()}}

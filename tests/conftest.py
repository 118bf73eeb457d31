"""Shared fixtures: tiny randomly initialised BERT, RoBERTa-MLM and GPT-2 classifiers, built locally (no downloads)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

from cl_graft.task import TaskSpec
from cl_graft.training.models import TextClassifier, build_classifier

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
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "data"
    return path if path.is_dir() else None


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


@pytest.fixture(params=sorted(TINY_MODELS))
def tiny_model(request) -> TextClassifier:
    """Each tiny architecture/head pair in turn, with the toy sentiment task registered."""
    model = TINY_MODELS[request.param]()
    model.add_task(SENTIMENT)
    return model


@pytest.fixture
def toy_rows() -> list[dict]:
    good = ["it was great fun", "a good movie", "the film is wonderful", "great fun and good"]
    bad = ["it was terrible", "a dull and boring plot", "bad and boring", "terrible plot"]
    return [{"text": t, "label": 1} for t in good] + [{"text": t, "label": 0} for t in bad]


def save_tiny_model(folder: Path) -> Path:
    """:func:`tiny_bert`'s backbone and tokenizer saved as a Hugging Face folder (what ``--model`` takes)."""
    clf = tiny_bert()
    clf.backbone.save_pretrained(folder)
    clf.tokenizer.save_pretrained(folder)
    return folder


def write_task(folder: Path, labels: list[str], splits: dict[str, list[dict]]) -> Path:
    """A task folder of a data dir: ``meta.json`` with ``labels`` and one ``<split>.jsonl`` per split."""
    folder.mkdir(parents=True)
    (folder / "meta.json").write_text(json.dumps({"labels": labels}))
    for split, rows in splits.items():
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.fixture(scope="session")
def eval_outputs():
    """An Avalanche plugin class whose instances record every eval mini-batch's output, per experience, in
    ``.out`` (experience id → list of ``(B, C)`` tensors; an experience's list restarts when it is evaluated)."""
    from avalanche.core import SupervisedPlugin

    class EvalOutputs(SupervisedPlugin):
        def __init__(self):
            super().__init__()
            self.out: dict[int, list[torch.Tensor]] = {}

        def before_eval_exp(self, strategy, **kw):
            self.out[strategy.experience.current_experience] = []

        def after_eval_iteration(self, strategy, **kw):
            self.out[strategy.experience.current_experience].append(strategy.mb_output.detach().clone())

    return EvalOutputs


@pytest.fixture(scope="session")
def cli_root(tmp_path_factory) -> Path:
    """For command-line tests: a saved tiny BERT (``model/``) and a data folder (``data/``) with two sentiment tasks
    over the tiny vocabulary, ``alpha`` and ``beta`` (the same words, labels swapped)."""
    import random

    root = tmp_path_factory.mktemp("cli-root")
    save_tiny_model(root / "model")
    pos, neg, fill = ["great", "good", "wonderful", "fun"], ["terrible", "bad", "dull", "boring"], ["it", "was", "a"]

    def rows(n: int, seed: int, flip: int) -> list[dict]:
        rng, out = random.Random(seed), []
        for _ in range(n):
            y = rng.randrange(2)
            words = [rng.choice(fill) for _ in range(3)] + [rng.choice(pos if y else neg)]
            rng.shuffle(words)
            out.append({"text": " ".join(words), "label": y ^ flip})
        return out

    for name, flip in (("alpha", 0), ("beta", 1)):
        write_task(root / "data" / name, ["bad", "good"], {"train": rows(96, 1 + flip, flip),
                                                          "test": rows(40, 3 + flip, flip)})
    return root

"""Prompt templates to token ids, with truncation that never cuts the prediction slot.

A template such as ``"{a} ? {mask} , {b}"`` is split into literal pieces and fields; each piece is tokenised
on its own, fields are truncated (longest first) until the whole fits ``max_length``, and the model's
special tokens are added around the result. For causal LMs the template ends at ``{mask}``: the slot is the
next token after the last prompt token, so no mask token is inserted.
"""
from __future__ import annotations

import re

import torch

from ..errors import UserError
from ..task import TaskSpec

_PIECE = re.compile(r"(\{x\}|\{a\}|\{b\}|\{mask\})")
_FIELDS = {"{x}": "text", "{a}": "text_a", "{b}": "text_b"}


CHARS_PER_TOKEN = 16
"""Text beyond ``CHARS_PER_TOKEN · max_length`` characters is cut before tokenising: every token covers at least
one character, so only text that is mostly whitespace could lose a kept token, and a 20 MB line no longer takes
seconds and gigabytes to encode."""


def clip_text(text: str, max_length: int) -> str:
    """``text`` cut to ``CHARS_PER_TOKEN · max_length`` characters (see :data:`CHARS_PER_TOKEN`)."""
    return text[:CHARS_PER_TOKEN * max_length]


def label_word_ids(tokenizer, words: tuple[str, ...], *, causal: bool) -> torch.Tensor:
    """Token id of each label word, as it appears after a space (RoBERTa/GPT-2 ``Ġword``); (C,) long.

    A word that tokenises into several pieces is scored by its first piece; two labels sharing that piece
    is an error.
    """
    ids = []
    for w in words:
        toks = tokenizer.encode(" " + w, add_special_tokens=False)
        if not toks:
            raise UserError(f"label word {w!r} is empty for this tokenizer")
        ids.append(toks[0])
    if len(set(ids)) != len(ids):
        raise UserError(f"label words {list(words)} share a first token; choose distinct words")
    return torch.tensor(ids, dtype=torch.long)


def special_wrap(tokenizer) -> tuple[list[int], list[int]]:
    """The special-token ids a tokenizer puts before and after a single sequence (e.g. [CLS] … [SEP])."""
    probe = "hello"
    bare = tokenizer.encode(probe, add_special_tokens=False)
    full = tokenizer.encode(probe)
    for i in range(len(full) - len(bare) + 1):
        if full[i:i + len(bare)] == bare:
            return full[:i], full[i + len(bare):]
    raise UserError(f"cannot tell where {type(tokenizer).__name__} puts its special tokens")


def _pieces(template: str) -> list[str]:
    return [p for p in _PIECE.split(template) if p.strip()]


def encode_prompt(tokenizer, row: dict, spec: TaskSpec, *, max_length: int, causal: bool,
                  wrap: tuple[list[int], list[int]] | None = None) -> list[int]:
    """Token ids (with special tokens) of one row formatted with the task's template.

    ``wrap`` is :func:`special_wrap` of the tokenizer, computed here when not given.
    """
    template = spec.prompt_for_causal if causal else spec.template
    parts: list[list[int] | str] = []
    for i, piece in enumerate(_pieces(template)):
        if piece == "{mask}":
            parts.append("MASK")
            continue
        text = clip_text(row[_FIELDS[piece]], max_length) if piece in _FIELDS else piece.strip()
        lead = " " if i > 0 else ""
        parts.append(tokenizer.encode(lead + text, add_special_tokens=False) if text else [])
    if causal and parts and parts[-1] == "MASK":
        parts = parts[:-1]
    prefix, suffix = wrap or special_wrap(tokenizer)
    n_special = len(prefix) + len(suffix)
    fields = [i for i, piece in enumerate(_pieces(template)[:len(parts)]) if piece in _FIELDS]
    budget = max_length - n_special
    while sum(1 if p == "MASK" else len(p) for p in parts) > budget:
        longest = max(fields, key=lambda i: len(parts[i]), default=None)
        if longest is None or not parts[longest]:
            raise UserError(f"max_length {max_length} is too short for the template of task {spec.name!r}")
        parts[longest] = parts[longest][:-1]
    ids: list[int] = []
    for p in parts:
        ids.extend([tokenizer.mask_token_id] if p == "MASK" else p)
    return prefix + ids + suffix


def encode_prompt_batch(tokenizer, rows: list[dict], spec: TaskSpec, *, max_length: int,
                        causal: bool) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``/``attention_mask``, both (B, L) long."""
    wrap = special_wrap(tokenizer)
    seqs = [encode_prompt(tokenizer, r, spec, max_length=max_length, causal=causal, wrap=wrap) for r in rows]
    width = max(len(s) for s in seqs)
    pad = tokenizer.pad_token_id
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    att = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        att[i, :len(s)] = 1
    return {"input_ids": ids, "attention_mask": att}

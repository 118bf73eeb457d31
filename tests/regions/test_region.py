"""Tests for cl_graft.regions.region / region_io: names, set algebra, breakdown, fingerprints, save/load."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from cl_graft import files, ops
from cl_graft.errors import UserError
from cl_graft.regions import io as region_io
from cl_graft.regions.region import (
    CONFIG_NAME,
    HEADS_NAME,
    MASKS_NAME,
    PARAM_TYPES,
    Region,
    fingerprint,
    graftable_names,
    layer_index,
    load_heads,
    param_type,
)

SHAPES = {"enc.layer.0.w": (3, 5), "enc.layer.0.b": (7,), "enc.layer.1.w": (2, 3, 3)}  # 15 + 7 + 18 = 40
LLAMA = {
    "model.layers.3.self_attn.q_proj.weight": "attn_q", "model.layers.3.self_attn.k_proj.weight": "attn_k",
    "model.layers.3.self_attn.v_proj.weight": "attn_v", "model.layers.3.self_attn.o_proj.weight": "attn_out",
    "model.layers.3.mlp.gate_proj.weight": "ffn_in", "model.layers.3.mlp.up_proj.weight": "ffn_in",
    "model.layers.3.mlp.down_proj.weight": "ffn_out", "model.layers.3.input_layernorm.weight": "layernorm",
    "model.layers.3.post_attention_layernorm.weight": "layernorm",
}  # fmt: skip


def _random(k: int, seed: int, shapes=SHAPES) -> Region:
    return Region(ops.random_mask(shapes, k, seed=seed))


def _bert_params():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                     vocab_size=100, max_position_embeddings=16)  # fmt: skip
    return dict(BertModel(cfg).named_parameters())


def _gpt2_params():
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    cfg = GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=16)
    return dict(GPT2Model(cfg).named_parameters())


# ---------------------------------------------------------------- names and classification


def test_graftable_names_bert_gpt2_llama():
    bert = _bert_params()
    names = graftable_names(bert.items())
    assert len(names) == 2 * 16 and all(n.startswith("encoder.layer.") for n in names)
    assert names == [n for n in bert if n.startswith("encoder.layer.")]  # model order kept
    gpt2 = graftable_names(_gpt2_params().items())
    assert len(gpt2) == 2 * 12 and not any(n.startswith(("wte", "wpe", "ln_f")) for n in gpt2)
    llama = [("model.embed_tokens.weight", None), *((n, None) for n in LLAMA), ("lm_head.weight", None)]
    assert graftable_names(llama) == list(LLAMA)
    no_ln = graftable_names(bert.items(), exclude=r"LayerNorm")
    assert len(no_ln) == 2 * 12


def test_graftable_names_errors():
    with pytest.raises(UserError, match=r"nothing matches 'xyz'"):
        graftable_names([("a.weight", torch.zeros(1))], pattern="xyz")
    with pytest.raises(UserError, match="regex"):
        graftable_names([("a.weight", torch.zeros(1))], pattern="(")


def test_param_type_bert_gpt2_llama():
    bert = {n: param_type(n) for n in graftable_names(_bert_params().items()) if ".layer.1." in n}
    expected = {
        "attention.self.query": "attn_q", "attention.self.key": "attn_k", "attention.self.value": "attn_v",
        "attention.output.dense": "attn_out", "attention.output.LayerNorm": "layernorm",
        "intermediate.dense": "ffn_in", "output.dense": "ffn_out", "output.LayerNorm": "layernorm",
    }  # fmt: skip
    assert bert == {f"encoder.layer.1.{m}.{p}": t for m, t in expected.items() for p in ("weight", "bias")}
    gpt2 = {n: param_type(n) for n in graftable_names(_gpt2_params().items()) if n.startswith("h.0.")}
    expected = {"ln_1": "layernorm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_out",
                "ln_2": "layernorm", "mlp.c_fc": "ffn_in", "mlp.c_proj": "ffn_out"}  # fmt: skip
    assert gpt2 == {f"h.0.{m}.{p}": t for m, t in expected.items() for p in ("weight", "bias")}
    assert {n: param_type(n) for n in LLAMA} == LLAMA
    assert param_type("encoder.layer.0.something.weight") == "other"
    assert layer_index("roberta.encoder.layer.11.output.dense.weight") == 11
    assert layer_index("transformer.h.3.attn.c_attn.weight") == 3
    assert layer_index("embeddings.word_embeddings.weight") is None


def test_breakdown_bert():
    params = _bert_params()
    shapes = {n: tuple(params[n].shape) for n in graftable_names(params.items())}
    full = Region.full(shapes).breakdown()
    numel = sum(t.numel() for t in map(params.get, shapes))
    assert full["size"] == full["numel"] == numel
    assert list(full["by_layer"]) == [0, 1]
    assert list(full["by_type"]) == [t for t in PARAM_TYPES if t not in ("attn_qkv", "other")]
    assert sum(v["size"] for v in full["by_type"].values()) == numel  # by_type partitions the region
    assert full["by_type"]["ffn_in"] == {"size": 2 * (32 * 37 + 37), "numel": 2 * (32 * 37 + 37)}
    assert full["by_type"]["layernorm"]["size"] == 2 * 2 * (32 + 32)
    biases = 2 * (4 * 32 + 37 + 32 + 2 * 32)  # q k v o, intermediate, output, two LayerNorm biases
    assert full["bias"] == {"size": biases, "numel": biases}

    one = {n: torch.zeros(s, dtype=torch.bool) for n, s in shapes.items()}
    one["encoder.layer.1.attention.self.query.bias"][[0, 5]] = True
    one["encoder.layer.0.intermediate.dense.weight"][2, 3] = True
    b = Region(one).breakdown()
    assert b["size"] == 3 and b["by_layer"][0]["size"] == 1 and b["by_layer"][1]["size"] == 2
    assert b["by_type"]["attn_q"]["size"] == 2 and b["by_type"]["ffn_in"]["size"] == 1
    assert b["bias"]["size"] == 2 and b["by_type"]["attn_k"]["size"] == 0


# ---------------------------------------------------------------- the Region value


def test_sizes_and_density():
    r = _random(13, 0)
    assert r.size == 13 and r.numel == 40 and r.density() == 13 / 40
    assert r.density_over(130) == 0.1
    assert r.names == list(SHAPES) and r.shapes == SHAPES
    assert sum(r.counts().values()) == 13
    assert Region.empty(SHAPES).is_empty and Region.full(SHAPES).size == 40
    with pytest.raises(UserError):
        r.density_over(0)
    with pytest.raises(UserError, match="bool"):
        Region({"a": torch.ones(3)})


def test_set_algebra_laws():
    a, b, c = _random(15, 1), _random(20, 2), _random(9, 3)
    empty, full = Region.empty(SHAPES), Region.full(SHAPES)
    a_bits = {n: m.clone() for n, m in a.masks.items()}
    assert (a | b) & a == a and (a & b) | a == a  # absorption
    assert ((a | b) - a).size == (b - a).size
    assert ((a - b) & b).is_empty
    assert ~(a | b) == ~a & ~b and ~(a & b) == ~a | ~b  # De Morgan
    assert a - b == a & ~b and a ^ b == (a | b) - (a & b)
    assert (a | b) & c == (a & c) | (b & c)
    assert a | empty == a and a & full == a and (a ^ a).is_empty and a - empty == a
    assert (a | b).size == a.size + b.size - (a & b).size
    assert all(torch.equal(a.masks[n], a_bits[n]) for n in SHAPES)  # operands untouched


def test_random_region_exact_seeded_and_recorded():
    a, b = Region.random(SHAPES, 11, seed=7), Region.random(SHAPES, 11, seed=7)
    assert a == b and a.size == 11 and a.meta == {"method": "random", "seed": 7}
    assert Region.random(SHAPES, 11, seed=8) != a and Region.random(SHAPES, 99, seed=1).size == a.numel


def test_set_operations_keep_and_record_meta():
    a = Region(_random(15, 1).masks, {"method": "graft", "config": {"region_size": 0.1}, "task": "sst2"})
    b = Region(_random(20, 2).masks, {"method": "free elements", "derived": [{"op": "~"}]})
    for result, op in ((a & b, "&"), (a | b, "|"), (a - b, "-"), (a ^ b, "^")):
        assert result.meta["method"] == "graft" and result.meta["config"] == {"region_size": 0.1}
        assert result.meta["derived"] == [{"op": op, "other": {"method": "free elements"}}]
    assert ((a & b) - b).meta["derived"][1]["op"] == "-"
    assert (~a).meta["derived"] == [{"op": "~"}] and "derived" not in a.meta   # operands untouched
    kept = a.restrict(["enc.layer.0.b"])
    assert kept.names == ["enc.layer.0.b"] and kept.meta == a.meta and kept.meta is not a.meta
    with pytest.raises(UserError, match="lacks tensor 'nope'"):
        a.restrict(["nope"])


def test_set_algebra_rejects_mismatched_regions():
    a = _random(3, 0)
    with pytest.raises(UserError, match="different tensors"):
        a | _random(3, 0, {"other.layer.0.w": (40,)})
    with pytest.raises(UserError, match="shape"):
        a & _random(3, 0, {**SHAPES, "enc.layer.0.b": (8,)})
    with pytest.raises(TypeError):
        a | 1


def test_overlap_and_iou_hand_computed():
    shapes = {"x": (10,)}
    a = Region({"x": torch.tensor([1, 1, 1, 1, 0, 0, 0, 0, 0, 0], dtype=torch.bool)})
    b = Region({"x": torch.tensor([0, 0, 1, 1, 1, 1, 1, 1, 0, 0], dtype=torch.bool)})
    assert a.overlap(b) == 2 / 6 and b.overlap(a) == 2 / 4  # |a∩b|/|other|
    assert a.iou(b) == b.iou(a) == 2 / 8
    empty = Region.empty(shapes)
    assert a.overlap(empty) == 0.0 and empty.overlap(a) == 0.0 and empty.iou(empty) == 0.0
    assert a.iou(a) == 1.0 and a.overlap(a) == 1.0


def test_constructor_copies_and_equality():
    masks = ops.random_mask(SHAPES, 5, seed=4)
    r = Region(masks, meta={"method": "random", "nested": {"k": 5}})
    meta_before = {"k": 5}
    masks["enc.layer.0.b"].fill_(True)
    assert r.size == 5  # the region kept its own copy
    r2 = Region(r.masks, meta={"other": 1})
    assert r == r2  # meta ignored
    assert r != _random(5, 5) and r != Region.empty({"enc.layer.0.b": (7,)})
    assert r.meta["nested"] == meta_before and r.to("cpu") == r
    assert "5/40" in repr(r)


# ---------------------------------------------------------------- fingerprints


def test_fingerprint_deterministic_and_sensitive():
    state = {n: torch.randn(s, generator=torch.Generator().manual_seed(0)) for n, s in SHAPES.items()}
    fp = fingerprint(state)
    assert fp == fingerprint(dict(reversed(list(state.items())))) and len(fp) == 64
    assert fingerprint(state, names=["enc.layer.0.b"]) != fp
    changed = {**state, "enc.layer.0.b": state["enc.layer.0.b"].clone()}
    changed["enc.layer.0.b"][3] = torch.nextafter(changed["enc.layer.0.b"][3], torch.tensor(1e9))
    assert fingerprint(changed) != fp
    assert fingerprint({n: t.double() for n, t in state.items()}) != fp
    assert fingerprint({"w": torch.ones(2, 3).t()}) == fingerprint({"w": torch.ones(3, 2)})  # non-contiguous
    assert fingerprint({"b": torch.ones(3, dtype=torch.bfloat16)}) != fingerprint({"b": torch.ones(3)})
    with pytest.raises(UserError, match="nope"):
        fingerprint(state, names=["nope"])


def test_check_model():
    r = Region(ops.random_mask(SHAPES, 4, seed=0), meta={"fingerprints": {"pre": "a" * 64}})
    r.check_model(SHAPES)
    r.check_model(SHAPES, {"pre": "a" * 64})
    with pytest.raises(UserError, match=r"2 name\(s\) differ, first 'enc.layer.1.w' is not in the model"):
        r.check_model({**{n: s for n, s in SHAPES.items() if n != "enc.layer.1.w"}, "x": (1,)})
    with pytest.raises(UserError, match=r"1 shape\(s\) differ, first 'enc.layer.0.b' is \(8,\)"):
        r.check_model({**SHAPES, "enc.layer.0.b": (8,)})
    with pytest.raises(UserError, match="fingerprint"):
        r.check_model(SHAPES, {"pre": "b" * 64})
    Region(r.masks).check_model(SHAPES, {"pre": "b" * 64})  # unknown on one side: not checked


# ---------------------------------------------------------------- save / load


def test_round_trip_bit_exact(tmp_path):
    shapes = {"a.layer.0.w": (3, 7), "a.layer.0.b": (5,), "a.layer.1.w": (1,), "a.layer.1.z": (2, 0)}
    meta = {"method": "magnitude_topk", "region_size": 1e-4, "fingerprints": {"pre": "x", "ft": "y"}}
    for k in (0, 1, 13, 27):
        r = Region(ops.random_mask(shapes, k, seed=k), meta=meta)
        r.save(tmp_path / str(k))
        loaded = Region.load(tmp_path / str(k))
        assert loaded == r and loaded.names == r.names and loaded.meta == meta
        assert all(loaded.masks[n].dtype == torch.bool for n in shapes)
    config = json.loads((tmp_path / "13" / CONFIG_NAME).read_text())
    assert config["size"] == 13 and config["numel"] == 27 and config["density"] == 13 / 27
    assert config["shapes"]["a.layer.0.w"] == [3, 7] and sum(config["counts"].values()) == 13
    assert config["format_version"] == region_io.FORMAT_VERSION and config["cl_graft_version"]
    assert config["heads"] is None and len(config["sha256"]) == 64
    assert sorted(p.name for p in (tmp_path / "13").iterdir()) == sorted([CONFIG_NAME, MASKS_NAME])


def test_pack_bits_padding():
    for n in (1, 7, 8, 9, 23):
        bits = torch.rand(n, generator=torch.Generator().manual_seed(n)) > 0.5
        packed = region_io.pack_bits(bits)
        assert packed.dtype == torch.uint8 and packed.shape == ((n + 7) // 8,)
        assert torch.equal(region_io.unpack_bits(packed, (n,)), bits)


def test_heads_round_trip_and_staleness(tmp_path):
    r = _random(6, 1)
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(2, 8, generator=g)
    heads = {"sst2.weight": weight, "sst2.bias": torch.zeros(2), "agnews.weight": weight[:1].t()}
    r.save(tmp_path, heads=heads)
    got = load_heads(tmp_path)
    assert list(got) == list(heads) and all(torch.equal(got[n], heads[n]) for n in heads)
    r.save(tmp_path)  # re-saved without heads: the old heads file must not be picked up
    with pytest.raises(UserError, match="without heads"):
        load_heads(tmp_path)
    r.save(tmp_path, heads={"sst2.weight": weight})
    save_file({"sst2.weight": weight + 1}, tmp_path / HEADS_NAME)  # replaced behind the region's back
    with pytest.raises(UserError, match=f"{HEADS_NAME}: heads do not match"):
        load_heads(tmp_path)
    (tmp_path / HEADS_NAME).write_bytes(b"garbage")
    with pytest.raises(UserError, match=f"{HEADS_NAME}: unreadable"):
        load_heads(tmp_path)


def _saved(tmp_path) -> Region:
    r = _random(11, 2)
    r.save(tmp_path)
    return r


def test_tampered_payload_byte(tmp_path):
    _saved(tmp_path)
    path = tmp_path / MASKS_NAME
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(UserError, match=MASKS_NAME):
        Region.load(tmp_path)


def test_tampered_header_and_truncated(tmp_path):
    _saved(tmp_path)
    path = tmp_path / MASKS_NAME
    data = path.read_bytes()
    path.write_bytes(data[:-3])
    with pytest.raises(UserError, match=MASKS_NAME):
        Region.load(tmp_path)
    path.write_bytes(data[:8] + b"#" + data[9:])
    with pytest.raises(UserError, match=MASKS_NAME):
        Region.load(tmp_path)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda c: c["counts"].update({"enc.layer.0.b": c["counts"]["enc.layer.0.b"] + 1}), "inconsistent"),
        (lambda c: c.update(size=c["size"] + 1), "inconsistent"),
        (lambda c: c.update(sha256="0" * 64), "sha256"),
        (lambda c: c.update(format_version=99), "unknown format version 99"),
        (lambda c: c["shapes"].update({"enc.layer.0.b": [9]}), "inconsistent"),
        (lambda c: c["shapes"].update({"enc.layer.0.b": [70]}) or c.update(numel=103), "truncated"),
        (lambda c: c.pop("names"), "field .names. is missing"),
    ],
)
def test_tampered_config(tmp_path, edit, message):
    _saved(tmp_path)
    path = tmp_path / CONFIG_NAME
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))
    with pytest.raises(UserError, match=message) as err:
        Region.load(tmp_path)
    assert str(tmp_path) in str(err.value) and "\n" not in str(err.value)


def test_count_edited_consistently_is_caught_by_bits(tmp_path):
    _saved(tmp_path)
    path = tmp_path / CONFIG_NAME
    config = json.loads(path.read_text())
    config["counts"]["enc.layer.0.b"] += 1
    config["size"] += 1
    path.write_text(json.dumps(config))
    with pytest.raises(UserError, match="selected, config says"):
        Region.load(tmp_path)


def test_missing_files_and_bad_json(tmp_path):
    with pytest.raises(UserError, match=CONFIG_NAME):
        Region.load(tmp_path)
    _saved(tmp_path)
    (tmp_path / MASKS_NAME).unlink()
    with pytest.raises(UserError, match=f"{MASKS_NAME}: missing"):
        Region.load(tmp_path)
    (tmp_path / CONFIG_NAME).write_text("{not json")
    with pytest.raises(UserError, match="not valid JSON"):
        Region.load(tmp_path)


def test_unserialisable_meta_writes_nothing(tmp_path):
    with pytest.raises(UserError, match="JSON"):
        Region(_random(3, 0).masks, meta={"bad": object()}).save(tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_failed_save_keeps_previous_region(tmp_path, monkeypatch):
    old = _saved(tmp_path)

    def broken(tensors, path, metadata=None):
        with open(path, "wb") as f:
            f.write(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(files, "save_file", broken)
    with pytest.raises(UserError, match=r"cannot write \(disk full\)"):
        _random(30, 9).save(tmp_path)
    assert Region.load(tmp_path) == old
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([CONFIG_NAME, MASKS_NAME])  # no temp files

"""Declared contracts (issue 45, item 5): a family's module is checked against the Protocols of its capabilities
and objectives when it is first loaded, so a missing hook is a one-line error at load, not an AttributeError at the
end of a training; the optional hooks are read through one declared place."""

from __future__ import annotations

import pytest
import torch.nn as nn

from corpusforge.models import contracts
from corpusforge.models.family import FamilySpec, families
from corpusforge.models.gpt.config import GPTConfig


class NoDecoder(nn.Module):
    """Says it translates but has only the teacher-forced forward."""

    def forward(self, src, src_mask, tgt_in, tgt_mask):
        return src


class OneArgClassifier(nn.Module):
    def forward(self, ids):
        return ids


class NoAttention(nn.Module):
    def forward(self, idx, state=None):
        return idx, state


class NoPretrain(nn.Module):
    def forward(self, idx, state=None, return_attention=False):
        return idx, state


def spec(cls: type, **kwargs) -> FamilySpec:
    return FamilySpec(name=f"fake_{cls.__name__.lower()}", config=GPTConfig, module=f"{__name__}:{cls.__name__}",
                      doc="a test family", **kwargs)


def test_every_family_meets_the_contracts_it_declares():
    checked = 0
    for name, s in families().items():
        assert contracts.problems(s, s.module_class()) == [], name
        checked += len(contracts.contracts_of(s))
    assert checked >= 15  # every capability of every family was looked at


@pytest.mark.parametrize("family, message", [
    (spec(NoDecoder, objective="seq2seq", trains_on="pairs", capabilities=frozenset({"translate"})),
     "family fake_nodecoder: translate needs NoDecoder.encode (corpusforge.models.contracts.Translates) "
     "(and 2 more)"),
    (spec(OneArgClassifier, objective="classification", trains_on="labelled", capabilities=frozenset({"classify"})),
     "family fake_oneargclassifier: classify: OneArgClassifier.forward takes 1 argument(s) (ids), the contract 2 "
     "(ids, mask) (corpusforge.models.contracts.Classifies)"),
    (spec(NoAttention, objective="causal_lm", capabilities=frozenset({"generate", "attention_maps"})),
     "family fake_noattention: attention_maps: NoAttention.forward has no return_attention keyword "
     "(corpusforge.models.contracts.AttentionMaps)"),
    (spec(NoPretrain, objective="bert_pretraining"),
     "family fake_nopretrain: objective bert_pretraining needs NoPretrain.pretrain "
     "(corpusforge.models.contracts.PretrainsBert)"),
])
def test_a_module_that_lacks_a_hook_is_refused_when_it_is_loaded(family, message):
    with pytest.raises(TypeError) as err:
        family.module_class()
    assert str(err.value) == message


def test_optional_hooks_are_declared_and_read_in_one_place():
    from corpusforge.models.bert_classifier.config import BertClassifierConfig
    from corpusforge.models.zoo import build_model

    plain = NoAttention()
    assert contracts.prepare(plain)([3, 4]) == [3, 4]  # no prepare: the ids as they are
    assert contracts.hook(plain, "HEAD", ()) == ()
    bert = build_model("bert_classifier", BertClassifierConfig(vocab_size=20, n_layer=1, n_head=2, n_embd=8,
                                                               block_size=8, cls_id=1, sep_id=2, pad_id=0))
    assert contracts.prepare(bert)([5, 6]) == [1, 5, 6, 2]  # BERT's [CLS] ... [SEP]
    assert contracts.hook(bert, "HEAD") == ("pooler.", "classifier.")
    with pytest.raises(KeyError, match="not a declared hook"):
        contracts.hook(bert, "HEADS")


def test_families_compose_a_shared_body_and_are_found_by_the_spec_that_built_them():
    """Issue 45, item 4: the BERT-bodied families hold one body module (corpusforge.models.bert.model.BertBody) under
    heads of their own instead of inheriting from each other and deleting what they do not use; GPT carries none of
    BERT's inputs; a model's family is the one its spec built (recorded by build_model), not found by class
    hierarchy."""
    import inspect

    from corpusforge.models.bert.model import BertBody
    from corpusforge.models.family import family_of
    from corpusforge.models.gpt.model import GPT
    from corpusforge.models.zoo import build_model

    classes = {name: spec.module_class() for name, spec in families().items()}
    for name in ("bert", "bert_classifier", "sbert"):
        others = [o for o, c in classes.items() if o != name and issubclass(classes[name], c)]
        assert not others, f"{name}'s module inherits from {others}'s"
    assert "key_mask" not in inspect.signature(GPT._blocks).parameters and not hasattr(GPT, "encode")
    small = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8, "cls_id": 1, "sep_id": 2, "pad_id": 0}
    models = {"bert": build_model("bert", {**small, "mask_id": 3}),
              "bert_classifier": build_model("bert_classifier", small), "sbert": build_model("sbert", small)}
    for name, model in models.items():
        assert isinstance(model.body, BertBody) and family_of(model).name == name
        assert not hasattr(model, "lm_head") or name == "bert"  # no head deleted: none built
        assert {k.split(".")[0] for k in model.state_dict()} - {"body", "lm_head", "pooler", "nsp_head", "classifier"} \
            == set(), name
    bodies = [{k for k in m.state_dict() if k.startswith("body.")} for m in models.values()]
    assert bodies[0] == bodies[1] == bodies[2]  # one body: a checkpoint of one loads into another by name

    class Adapted(GPT):  # a subclass is not its parent's family unless the family's spec built it
        pass

    cfg = GPTConfig(n_layer=1, n_head=2, n_embd=16, block_size=8, vocab_size=11)
    assert family_of(GPT(cfg)).name == "gpt"
    with pytest.raises(ValueError, match="Adapted is no family's module"):
        family_of(Adapted(cfg))
    built = build_model("gpt", cfg)
    assert built.family_name == "gpt" and "family_name" not in built.state_dict()

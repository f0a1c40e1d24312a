"""Issue 45, item 2: post-training picks what it reads and optimises through its method (one class per objective,
corpusforge.tasks.post_training.methods), not through branches on the method's name. In-process, a char tokenizer
trained here, no model."""

from __future__ import annotations

import pytest

from corpusforge.models.tokenization import make_tokenizer
from corpusforge.tasks.post_training.config import METHODS, post_training_config_from_dict
from corpusforge.tasks.post_training.data import end_id, examples
from corpusforge.tasks.post_training.methods import METHOD

ROWS = [{"text": "good film", "label": "1"}, {"text": "bad film", "label": "0"}, {"text": "no label"}]
SFT = {"init": "lm", "method": "sft", "prompt": "Review: {text}\nSentiment:", "response": " {label}",
       "values": {"label": {"0": "negative", "1": "positive"}}}


@pytest.fixture(scope="module")
def tokenizer():
    tok = make_tokenizer("char")
    tok.train(["Review: good bad film no label\nSentiment: positive negative"])
    return tok


def test_every_method_has_one_class_and_its_objective():
    assert tuple(METHOD) == METHODS == ("full", "lora", "sft", "dpo")
    for method in METHODS:
        cfg = post_training_config_from_dict({**SFT, "method": method})
        assert cfg.objective == METHOD[method].objective
        settings = cfg.settings(None)
        # sft and dpo carry their own settings; full and lora take the start model's family's (unknown here)
        assert (settings is None) == (cfg.objective == "lm"), method
        if settings is not None:
            assert settings.kind == cfg.objective
    assert post_training_config_from_dict({**SFT, "method": "lora"}).lora is not None  # lora: adapters by default
    assert post_training_config_from_dict({**SFT, "method": "full"}).lora is None
    assert METHOD["sft"].answers and METHOD["dpo"].answers and not METHOD["full"].answers
    assert METHOD["sft"].start_loss and not METHOD["dpo"].start_loss  # dpo's margin is 0 at the start


def test_fields_follow_the_templates_each_method_reads():
    assert post_training_config_from_dict({**SFT, "method": "full", "text": "body"}).fields() == ["body"]
    assert post_training_config_from_dict(SFT).fields() == ["text", "label"]
    dpo = post_training_config_from_dict({**SFT, "method": "dpo", "rejected": " {other}"})
    assert dpo.fields() == ["text", "label", "other"]
    made_up = post_training_config_from_dict({**SFT, "method": "dpo", "rejected": None})
    assert made_up.fields() == ["text", "label"]  # no rejected template: the start model's answers, no field


def test_examples_fill_each_template_and_end_every_answer(tokenizer):
    end = end_id(tokenizer)
    cfg = post_training_config_from_dict(SFT)
    ids, made, skipped = METHOD["sft"].examples(cfg, ROWS, tokenizer, None)
    assert skipped == 1 and len(ids) == 2 and made.ids is ids  # the record without a label is counted, not lost
    assert made.prompts == ["Review: good film\nSentiment:", "Review: bad film\nSentiment:"]
    assert made.responses == [" positive", " negative"]
    prompt, response = ids[0]
    assert prompt == tokenizer.encode(made.prompts[0]) and response == tokenizer.encode(" positive") + [end]
    # dpo: a third element, the rejected answer, ends with the end id too; given texts stand in for it
    three = examples(ROWS[:2], [SFT["prompt"], SFT["response"], " {text}"], cfg.values, tokenizer)
    assert [len(x) for x in three.ids] == [3, 3] and three.ids[1][2] == tokenizer.encode(" bad film") + [end]
    given = examples(ROWS[:2], [SFT["prompt"], SFT["response"], None], cfg.values, tokenizer, ["x", "y"])
    assert given.ids[0][:2] == three.ids[0][:2] and given.ids[1][2] == tokenizer.encode("y") + [end]
    # full/lora: one token stream, each record's text followed by the end id, nothing held out
    stream, held, skipped = METHOD["full"].examples(post_training_config_from_dict({**SFT, "method": "full"}),
                                                    ROWS, tokenizer, None)
    assert held is None and skipped == 0
    assert list(stream) == [i for r in ROWS for i in tokenizer.encode(r["text"]) + [end]]

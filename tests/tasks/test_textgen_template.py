"""A registered fine-tuned text generator applies the prompt template it was trained on (issue 34): the served
model takes the review and answers, as SFT taught it, up to its end token."""

from __future__ import annotations

import json

import pytest
import torch

from corpusforge.models.gpt.config import GPTConfig
from corpusforge.models.gpt.model import GPT
from corpusforge.models.sampling import generate
from corpusforge.models.tokenization import make_tokenizer
from corpusforge.models.zoo import save_model
from corpusforge.tasks.textgen import TextGenerator, fill_prompt

TEXT = ["Review: a great film\nSentiment: positive", "Review: dull and slow\nSentiment: negative"] * 20


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A pyfunc data folder as registration writes it: lm/ (weights + config.json) and tokenizer/."""
    root = tmp_path_factory.mktemp("textgen")
    tok = make_tokenizer("byte-bpe")
    tok.train(TEXT, vocab_size=300)
    tok.save(root / "tokenizer")
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=48, n_layer=1, n_head=2, n_embd=16))
    save_model(model, root / "lm")
    return root, tok, model


def with_template(root, template, eot_id=None) -> TextGenerator:
    spec = json.loads((root / "lm" / "config.json").read_text())
    spec["tokenizer"] = {"eot_id": eot_id}
    if template is not None:
        spec["post_training"] = {"method": "sft", "template": template}
    (root / "lm" / "config.json").write_text(json.dumps(spec))
    return TextGenerator(root)


def expected(model, tok, prompt: str, n: int) -> str:
    """The greedy answer straight from the sampler: the prompt's ids, stopped at the end id, decoded."""
    new = generate(model, tok.encode(prompt), n, greedy=True, stop_id=tok.eot_id)
    new = new[:-1] if new and new[-1] == tok.eot_id else new
    full = tok.decode(tok.encode(prompt) + new, skip_special_tokens=False)
    return full[len(tok.decode(tok.encode(prompt), skip_special_tokens=False)):].strip()


def test_the_template_is_filled_and_the_answer_ends_at_the_end_token(served):
    root, tok, model = served
    gen = with_template(root, {"prompt": "Review: {sentence}\nSentiment:", "response": " {label}", "values": {}},
                        tok.eot_id)
    params = {"greedy": True, "max_new_tokens": 6}
    [answer] = gen.predict(["a great film"], params)
    assert answer == expected(model, tok, "Review: a great film\nSentiment:", 6)
    # template=False: the input is the whole prompt, continued as an lm would (no stop, nothing stripped)
    [raw] = gen.predict(["Review: a great film\nSentiment:"], {**params, "template": False})
    [same] = with_template(root, None).predict(["Review: a great film\nSentiment:"], params)
    assert raw == same


def test_values_rename_and_templates_of_several_fields():
    t = {"prompt": "Label {label}:", "values": {"label": {"1": "positive"}}}
    assert fill_prompt(t, "1") == "Label positive:" and fill_prompt(t, "0") == "Label 0:"
    assert fill_prompt({"prompt": "{prompt}"}, "as given") == "as given"
    with pytest.raises(ValueError, match=r"reads 2 fields \(premise, hypothesis\).*\"template\": false"):
        fill_prompt({"prompt": "{premise} / {hypothesis}"}, "x")

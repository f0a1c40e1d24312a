"""Retrieval-augmented generation: a language model that can generate (an lm or post_training artifact: a GPT,
often fine-tuned with SFT on question-answer prompts) answers a question from the passages retrieved for it.

The prompt puts the passages first, then the question (the common RAG layout, as in the texts' task table):

    Context: <passage 1>
    <passage 2>
    Question: <question>
    Answer:

Passages are added best first while the prompt and the answer's ``max_new_tokens`` fit the model's block; a passage
that does not fit is left out and counted (``passages_left_out``), never cut silently. The answer is the greedy
continuation up to the end-of-text token (a post-trained model ends its answers so) or the first line break. Its
score is the mean log-probability per answer token under the model; its source passage is the first passage read
that contains the answer's text (case folded), else none (``passage`` null: the model did not copy its answer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PROMPT = "Context: {context}\nQuestion: {question}\nAnswer:"


def generative_answer(model, tokenizer, question: str, passages: Sequence[str], eot_id: int | None,
                      max_new_tokens: int = 32) -> dict[str, Any]:
    """The model's answer to ``question`` from ``passages`` (best first): ``answer``, ``score`` (mean log-probability
    per token), ``passage`` (the index of the first passage read holding the answer, or None), ``passages_read``,
    ``passages_left_out`` and the ``prompt``."""
    import torch

    from corpusforge.models.objectives import evaluating
    from corpusforge.models.sampling import generate
    from corpusforge.models.zoo import family_of

    spec = family_of(model)
    if not spec.can("generate"):
        raise ValueError(f"a {spec.name} model cannot generate an answer; give a qa reader or a GPT (lm or "
                         "post_training artifact)")
    block = int(model.cfg.block_size)
    read: list[str] = []
    kept: list[int] = []  # the indices (in ``passages``) of those read
    for i, passage in enumerate(passages):
        trial = PROMPT.format(context="\n".join([*read, passage]), question=question)
        if len(tokenizer.encode(trial)) + max_new_tokens <= block:
            read.append(passage)
            kept.append(i)
    prompt = PROMPT.format(context="\n".join(read), question=question)
    ids = tokenizer.encode(prompt)
    if len(ids) + max_new_tokens > block:
        raise ValueError(f"the question alone with the prompt takes {len(ids)} of the model's {block}-token block, "
                         f"leaving no room for a {max_new_tokens}-token answer; ask a shorter question")
    new = generate(model, ids, max_new_tokens, greedy=True, stop_id=eot_id, recurrent=spec.recurrent)
    if eot_id is not None and new and new[-1] == eot_id:
        new = new[:-1]
    text = tokenizer.decode(new)
    answer = text.split("\n", 1)[0].strip()
    score = None
    if new:
        with evaluating(model), torch.no_grad():
            x = torch.as_tensor([ids + new], device=next(model.parameters()).device)
            logits, _ = model(x[:, :-1])
            logp = torch.log_softmax(logits.float(), -1)[0, len(ids) - 1:]
            score = float(logp.gather(-1, x[0, len(ids):].unsqueeze(-1)).mean())
    folded = answer.casefold()
    source = next((kept[i] for i, p in enumerate(read) if folded and folded in p.casefold()), None)
    return {"answer": answer, "score": score, "passage": source, "passages_read": len(read),
            "passages_left_out": len(passages) - len(read), "prompt": prompt}

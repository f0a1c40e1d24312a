"""Text generation shared by every stage whose models continue a text (the lm stage, post-training): the generation
defaults, ``generate_text``, and the MLflow pyfunc flavor that writes text.

A registered text generator's ``loader_module`` is this module (or corpusforge.tasks.lm.pyfunc, the lm stage's name
for it, which older registered models record): MLflow calls ``_load_pyfunc(data_path)``. Nothing is pickled: the
data directory holds ``lm/`` (``config.json`` + ``model.safetensors``: plain weights, adapters merged) and
``tokenizer/`` (the tokenizer artifact's files). The PyTorch module itself is ``get_raw_model()``. The registered
model carries the corpusforge modules this loader uses (MLflow's ``code/``, ``bundle_code`` in
corpusforge.storage.tracking), so it loads and serves where corpusforge is not installed.

Input: a string, a list of strings, a dict with ``prompt``, or a DataFrame with a ``prompt`` column.
Output: one continuation (without the prompt) per prompt. Params (all optional): see ``DEFAULT_PARAMS``.
A model fine-tuned on a prompt template (SFT, DPO: ``post_training.template`` in its config.json) puts each input
into that template first when the template reads one field (``"Review: {sentence}\nSentiment:"``: send the review,
get " positive") and answers up to its end token, as it was trained to; ``template=False`` sends the input as the
whole prompt (the answer still ends at the end token, as ``corpusforge lm generate`` ends it). A template of
several fields takes the whole prompt (``template=False``).
A leaf at import time: torch is imported when a model is used.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

# The generation defaults, in one place: `corpusforge lm generate`, the lm_sample step (SampleConfig) and the
# registered MLflow pyfunc (DEFAULT_PARAMS below) all read them. top_k/top_p None: off.
GENERATE_DEFAULTS: dict[str, Any] = {"prompt": "\n", "max_new_tokens": 200, "temperature": 0.8, "top_k": None,
                                     "top_p": None, "seed": 1337}


def generate_text(model, tok, prompt: str, max_new_tokens: int, *, greedy: bool = False, temperature: float = 1.0,
                  top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                  eot_id: int | None = None, stop_at_eot: bool = False) -> str:
    """``prompt`` continued by up to ``max_new_tokens`` tokens (sampled, or greedy), without the prompt;
    ``stop_at_eot``: up to the end-of-text id (an answer's end), which is left out."""
    from corpusforge.models.sampling import generate
    from corpusforge.models.zoo import family_of

    spec = family_of(model)
    if not spec.can("generate"):
        raise ValueError(f"a {spec.name} model cannot generate text ({spec.doc}); `corpusforge lm inspect` shows "
                         "what it predicts")
    ids = tok.encode(prompt) if prompt else []
    if not ids:
        if eot_id is None:
            raise ValueError("prompt: empty, and the tokenizer has no end-of-text id to start from")
        ids = [int(eot_id)]
    stop = int(eot_id) if stop_at_eot and eot_id is not None else None
    new = generate(model, ids, max_new_tokens, greedy=greedy, temperature=temperature, top_k=top_k, top_p=top_p,
                   seed=seed, stop_id=stop, recurrent=spec.recurrent)
    if stop is not None and new and new[-1] == stop:
        new = new[:-1]
    # decode in context: word-level tokenizers put the space *between* tokens, so decode(new) alone
    # would glue the first new word to the prompt
    full, prefix = render_ids(tok, ids + new, eot_id), render_ids(tok, ids, eot_id)
    return full[len(prefix):] if full.startswith(prefix) else render_ids(tok, new, eot_id)


def render_ids(tok, ids: list[int], eot_id: int | None) -> str:
    """Token ids as text for reading: each end-of-text id becomes a line break (a document boundary), and
    other special tokens stay visible (PTB's ``<unk>``): a plain decode would drop them without a trace."""
    parts: list[list[int]] = [[]]
    for i in ids:
        if eot_id is not None and i == eot_id:
            parts.append([])
        else:
            parts[-1].append(i)
    return "\n".join(tok.decode(part, skip_special_tokens=False) if part else "" for part in parts)


# the defaults of `corpusforge lm generate` (GENERATE_DEFAULTS); MLflow params need concrete values,
# so top_k 0 and top_p 1.0 stand for "off"
DEFAULT_PARAMS: dict[str, Any] = {"max_new_tokens": GENERATE_DEFAULTS["max_new_tokens"],
                                  "temperature": GENERATE_DEFAULTS["temperature"],
                                  "top_k": GENERATE_DEFAULTS["top_k"] or 0, "top_p": GENERATE_DEFAULTS["top_p"] or 1.0,
                                  "seed": GENERATE_DEFAULTS["seed"], "greedy": False, "template": True}
# the predictions that find the code a registered text generator carries (storage.tracking.bundle_pyfunc_code):
# greedy, and sampled with top-k and top-p, two tokens each
PROBE_PARAMS: tuple[dict[str, Any], ...] = ({"greedy": True, "max_new_tokens": 2},
                                            {"max_new_tokens": 2, "top_k": 5, "top_p": 0.9})


class TextGenerator:
    """What ``mlflow.pyfunc.load_model`` wraps: the model, its tokenizer and a ``predict`` that samples."""

    def __init__(self, data_path: str | Path, reading: Callable[[Any, dict[str, Any]], Any] | None = None):
        """``reading``: load_with_tokenizer's hook (an lm's prompts are cleaned as its corpus was)."""
        from corpusforge.tasks.encoded import load_with_tokenizer

        data = Path(data_path)
        self.model, self.tokenizer, self.spec = load_with_tokenizer(data / "lm", data / "tokenizer", reading=reading)

    def get_raw_model(self):
        """The torch ``nn.Module`` (what ``PyFuncModel.get_raw_model()`` returns)."""
        return self.model

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> list[str]:
        unknown = set(params or {}) - set(DEFAULT_PARAMS)
        if unknown:
            raise ValueError(f"params: unknown {sorted(unknown)}; allowed: {', '.join(DEFAULT_PARAMS)}")
        p = {**DEFAULT_PARAMS, **(params or {})}
        eot = (self.spec.get("tokenizer") or {}).get("eot_id")
        texts = _texts(model_input)
        trained_on = (self.spec.get("post_training") or {}).get("template")  # answers end at its end token
        template = trained_on if p["template"] else None
        prompts = [fill_prompt(template, t) for t in texts] if template else texts
        answers = [generate_text(self.model, self.tokenizer, prompt, int(p["max_new_tokens"]),
                                 greedy=bool(p["greedy"]), temperature=float(p["temperature"]),
                                 top_k=int(p["top_k"]) or None,
                                 top_p=float(p["top_p"]) if float(p["top_p"]) < 1.0 else None, seed=int(p["seed"]),
                                 eot_id=eot, stop_at_eot=bool(trained_on))
                   for prompt in prompts]
        return [a.strip() for a in answers] if template else answers


def fill_prompt(template: dict[str, Any], text: str) -> str:
    """``text`` put into a fine-tuned model's prompt template (``{"prompt": "Review: {sentence}\nSentiment:",
    "values": {...}}``): the template's one field takes it (renamed by ``values`` as in training). A template of
    several fields cannot be filled from one text: a ValueError saying to send the whole prompt."""
    import string

    prompt = str(template.get("prompt") or "{prompt}")
    names = list(dict.fromkeys(n for _, n, _, _ in string.Formatter().parse(prompt) if n is not None))
    if len(names) != 1:
        raise ValueError(f"this model's prompt template {prompt!r} reads {len(names)} fields ({', '.join(names)}); "
                         "send the whole prompt with params {\"template\": false}")
    value = (template.get("values") or {}).get(names[0], {}).get(text, text)
    return prompt.format(**{names[0]: value})


def _texts(model_input: Any) -> list[str]:
    from corpusforge.storage.tracking import pyfunc_texts

    return pyfunc_texts(model_input, "prompt")


def _load_pyfunc(data_path: str) -> TextGenerator:
    return TextGenerator(data_path)

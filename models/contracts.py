"""What a family's module must provide: one ``typing.Protocol`` per capability (corpusforge.models.family
CAPABILITIES) and per optional hook, declared here instead of being read with ``getattr`` where they are used.

:func:`check` runs when a family's module is first loaded (``FamilySpec.module_class``): a family that declares a
capability, or trains with an objective, whose methods its class lacks (or whose ``forward`` takes other arguments)
is a one-line error naming the family, the capability and the method, not an ``AttributeError`` at the end of a
long training. The optional hooks are read through :func:`hook`, which says what the fallback is.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Protocol


class Generates(Protocol):
    """``generate``: continues a text left to right. ``forward(idx (B, T), state=None)`` gives ``(logits (B, T, V),
    state)``; sampling feeds a recurrent family one token at a time with the state it returned."""

    def forward(self, idx: Any, state: Any = None) -> Any: ...


class AttentionMaps(Protocol):
    """``attention_maps``: ``forward(..., return_attention=True)`` also gives one (B, heads, T, T) map per layer."""

    def forward(self, *args: Any, return_attention: bool = False) -> Any: ...


class FillsMask(Protocol):
    """``fill_mask``: ``forward(idx (B, T))`` gives ``(logits (B, T, V), _)`` with every position seen both ways."""

    def forward(self, idx: Any, state: Any = None) -> Any: ...


class Classifies(Protocol):
    """``classify``: ``forward(ids (B, T), mask (B, T))`` gives class logits (B, C)."""

    def forward(self, ids: Any, mask: Any) -> Any: ...


class Translates(Protocol):
    """``translate``: teacher-forced ``forward(src, src_mask, tgt_in, tgt_mask)`` gives (B, T, V) logits; decoding
    (corpusforge.models.decoding) encodes once, then steps the decoder with a cache it reorders for the beam."""

    def forward(self, src: Any, src_mask: Any, tgt_in: Any, tgt_mask: Any) -> Any: ...
    def encode(self, src: Any, src_mask: Any) -> Any: ...
    def decode_step(self, *args: Any, **kwargs: Any) -> Any: ...
    def reorder_cache(self, cache: Any, index: Any) -> Any: ...


class Tags(Protocol):
    """``tag``: ``collate(sentences)`` pads a batch of the tagging objective's sentences to the model's inputs (the
    word mask, (B, T) True on words, last); ``forward(*inputs)`` gives emissions (B, T, n_tags), one score per tag
    at each word; ``tag_loss(emissions, tags, mask)`` gives (the loss summed over the words, how many words);
    ``decode(emissions, mask)`` one tag id per word of each sentence."""

    def collate(self, sentences: Any) -> Any: ...
    def forward(self, *inputs: Any) -> Any: ...
    def tag_loss(self, emissions: Any, tags: Any, mask: Any) -> Any: ...
    def decode(self, emissions: Any, mask: Any) -> Any: ...


class Answers(Protocol):
    """``answer``: ``collate(windows)`` pads (ids, segments) pairs of ``[CLS] question [SEP] passage [SEP]`` to
    ``(ids, segments, mask)``; ``forward(ids, segments, mask)`` gives (start scores (B, T), end scores (B, T));
    ``span_loss(start, end, gold_start, gold_end)`` the loss summed over the windows."""

    def collate(self, windows: Any) -> Any: ...
    def forward(self, ids: Any, segments: Any, mask: Any) -> Any: ...
    def span_loss(self, start: Any, end: Any, gold_start: Any, gold_end: Any) -> Any: ...


class EmbedsTokens(Protocol):
    """``embed`` for a family trained on a token stream: ``hidden_states(idx (B, T))`` gives (B, T, D) contextual
    vectors (``embed contextual``)."""

    def hidden_states(self, idx: Any) -> Any: ...


class EmbedsTexts(Protocol):
    """``embed`` for a family trained on labelled records: ``features(ids, mask)`` gives the (B, D) vector its
    classifier reads."""

    def features(self, ids: Any, mask: Any) -> Any: ...


class EmbedsSentences(Protocol):
    """``embed`` for a sentence encoder (trained on pairs): ``forward(ids, mask)`` gives (B, D) sentence vectors."""

    def forward(self, ids: Any, mask: Any) -> Any: ...


class PretrainsBert(Protocol):
    """The ``bert_pretraining`` objective: ``pretrain(ids, segments, key_mask)`` gives (masked-LM logits,
    next-sentence logits or None)."""

    def pretrain(self, ids: Any, segments: Any, key_mask: Any) -> Any: ...


# --- optional hooks: read where present, with the fallback said here -----------------------------------------------

HOOKS: dict[str, str] = {
    "prepare": "prepare(ids: list[int]) -> list[int]: wraps a record's ids as the model reads them (BERT's "
               "[CLS] ... [SEP]); without it, the ids as they are",
    "HEAD": "HEAD: tuple of parameter-name prefixes of the task head (classify.finetune: head trains only those); "
            "without it, no head: finetune head is refused",
    "get_input_embeddings": "get_input_embeddings() -> nn.Embedding: where word vectors are copied "
                            "(classify.embeddings); without it, vectors cannot be copied in",
    "flops_per_token": "flops_per_token(T=None) -> float: training FLOPs per token for MFU; without it, MFU is not "
                       "reported",
    "upgrade_weights": "upgrade_weights(tensors) -> dict: a checkpoint's tensors under today's parameter names (one "
                       "written before the family's modules were renamed); without it, names are taken as they are",
}


def hook(model: Any, name: str, default: Any = None) -> Any:
    """The optional hook ``name`` of ``model`` (one of :data:`HOOKS`), or ``default`` when it has none."""
    if name not in HOOKS:
        raise KeyError(f"{name}: not a declared hook ({', '.join(HOOKS)})")
    return getattr(model, name, default)


def prepare(model: Any) -> Callable[[list[int]], list[int]]:
    """The model's ``prepare`` hook, or the ids as they are."""
    return hook(model, "prepare", lambda ids: list(ids))


# --- the check ------------------------------------------------------------------------------------------------------

CAPABILITY_CONTRACTS: dict[str, type] = {"generate": Generates, "attention_maps": AttentionMaps,
                                         "fill_mask": FillsMask, "classify": Classifies, "translate": Translates,
                                         "tag": Tags, "answer": Answers}
EMBED_CONTRACTS: dict[str, type] = {"tokens": EmbedsTokens, "labelled": EmbedsTexts, "pairs": EmbedsSentences}
OBJECTIVE_CONTRACTS: dict[str, type] = {"bert_pretraining": PretrainsBert}


def contracts_of(spec: Any) -> list[tuple[str, type]]:
    """(what asks for it, the Protocol) for every capability the family declares and every objective kind it
    trains with."""
    out = [(c, CAPABILITY_CONTRACTS[c]) for c in sorted(spec.capabilities) if c in CAPABILITY_CONTRACTS]
    if "embed" in spec.capabilities:
        out.append(("embed", EMBED_CONTRACTS[spec.trains_on]))
    kinds = sorted({spec.objective, *spec.objectives})  # the kinds it trains with (objectives.allowed)
    out += [(f"objective {k}", OBJECTIVE_CONTRACTS[k]) for k in kinds if k in OBJECTIVE_CONTRACTS]
    return out


def _members(protocol: type) -> dict[str, Any]:
    return {name: value for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")}


def _takes(method: Any, wanted: Any) -> str | None:
    """Why ``method`` cannot be called as the Protocol's ``wanted`` is (too few positional parameters, a keyword
    it lacks), or None."""
    have = inspect.signature(method).parameters.values()
    need = [p for p in inspect.signature(wanted).parameters.values() if p.name != "self"]
    if any(p.kind is p.VAR_POSITIONAL for p in have):
        positional_ok = True
    else:
        positional = [p for p in have if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"]
        required = [p for p in positional if p.default is p.empty]
        wanted_positional = [p for p in need if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        positional_ok = len(required) <= len(wanted_positional) <= len(positional)
        if not positional_ok and not any(p.kind is p.VAR_POSITIONAL for p in need):
            return (f"takes {len(positional)} argument(s) ({', '.join(p.name for p in positional)}), the contract "
                    f"{len(wanted_positional)} ({', '.join(p.name for p in wanted_positional)})")
    names = {p.name for p in have}
    for p in need:
        if p.kind is p.KEYWORD_ONLY and p.name not in names and not any(q.kind is q.VAR_KEYWORD for q in have):
            return f"has no {p.name} keyword"
    return None


def problems(spec: Any, cls: type) -> list[str]:
    """What ``cls`` (the family's module) lacks of its contracts, one line each."""
    out = []
    for why, protocol in contracts_of(spec):
        for name, wanted in _members(protocol).items():
            method = getattr(cls, name, None)
            if not callable(method):
                out.append(f"family {spec.name}: {why} needs {cls.__name__}.{name} "
                           f"(corpusforge.models.contracts.{protocol.__name__})")
                continue
            wrong = _takes(method, wanted)
            if wrong:
                out.append(f"family {spec.name}: {why}: {cls.__name__}.{name} {wrong} "
                           f"(corpusforge.models.contracts.{protocol.__name__})")
    return out


def check(spec: Any, cls: type) -> None:
    """A TypeError naming the first thing ``cls`` lacks of the family's contracts (:func:`problems`)."""
    found = problems(spec, cls)
    if found:
        raise TypeError(found[0] + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""))

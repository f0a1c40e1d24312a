"""What our tokenizers give the Hugging Face formats: the classic BPE as a ``tokenizer.json``, the roles' template
as a ``tokenizers`` post-processor, and the roles as the ``tokenizer_config.json`` that ``transformers`` reads.

Roles for transformers: ``tokenizer_config.json`` beside ``tokenizer.json`` names each role's token
(``pad_token``, ``cls_token``, ...; unk too) and lists eot and the extra specials as additional special
tokens, so ``AutoTokenizer.from_pretrained(folder)`` (and ``PreTrainedTokenizerFast``) know them, pad with the pad
token and skip them on decode. ``model_input_names`` includes ``token_type_ids``: a pair's segment ids come out.
Written only when roles are set (a tokenizer without roles keeps its files, and so its artifact's bytes).

Classic BPE to ``tokenizer.json``, encoding like our implementation:

HF's BPE model can only glue an end-of-word suffix onto the last character (``w</w>``), while the
classic algorithm keeps ``</w>`` as a symbol of its own that merges like any other. The export keeps
it separate instead:

- a normalizer inserts the literal ``</w>`` after every word (and, for the ``punct`` pre-tokenizer,
  first puts a space between letters/digits and punctuation, the way ``\\w+|[^\\w\\s]+`` splits);
- the pre-tokenizer splits on whitespace, so each word arrives as ``low</w>``;
- three helper merges of the highest priority rebuild ``</w>`` from ``<``, ``/``, ``w``, ``>``;
- then our merges follow in learned order. HF's BPE applies merges greedily by rank, as we do;
- the decoder is ``BPEDecoder(suffix="</w>")``: the same rule as ``ClassicBPETokenizer.decode``.

Known gap (documented, tested): the helper tokens ``<``, ``/``, ``>``, ``</``, ``</w`` get ids after
ours when our alphabet lacks them, so text that literally contains ``</w`` (or those characters
when training never saw them) encodes differently in the export; ours gives ``<unk>`` there.
Token ids of every token we learned are identical in both.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corpusforge.models.tokenization.base import TRANSFORMERS_FILE, Template, Tokenizer

if TYPE_CHECKING:
    from corpusforge.models.tokenization.classic_bpe import ClassicBPETokenizer

HELPER_MERGES = (("<", "/"), ("</", "w"), ("</w", ">"))


def template_processing(templates: tuple[Template, Template] | None, token_to_id: Callable[[str], int | None]):
    """``tokenizers``' TemplateProcessing for base.template's (single, pair), or None without one."""
    if templates is None:
        return None
    from tokenizers import processors

    def spell(pieces: Template) -> list[str]:
        return [f"{piece}:{type_id}" for piece, type_id in pieces]

    single, pair = templates
    used = dict.fromkeys(p for p, _ in pair if not p.startswith("$"))
    return processors.TemplateProcessing(single=spell(single), pair=spell(pair),
                                         special_tokens=[(t, token_to_id(t)) for t in used])


def transformers_config(tok: Tokenizer) -> dict[str, Any]:
    """The ``tokenizer_config.json`` of ``tok``: its roles by transformers' names. ``PreTrainedTokenizerFast``
    (the tokenizers-backed class in transformers 4 and 5) needs no Python tokenizer class of ours;
    ``clean_up_tokenization_spaces: false`` keeps decode as ``tokenizers`` decodes (no "a ." -> "a." rewriting)."""
    roles = {r: t for r, t in tok.role_tokens.items() if r != "eot"}
    named = set(roles.values())
    extra = [t for t in (tok.eot_token, *tok.extra_special_tokens) if t and t not in named]
    return {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
            **{f"{r}_token": t for r, t in roles.items()},
            "additional_special_tokens": list(dict.fromkeys(extra)),
            "model_input_names": ["input_ids", "token_type_ids", "attention_mask"]}


def write_transformers_config(tok: Tokenizer, directory: Path) -> None:
    """Write ``tokenizer_config.json`` when ``tok`` has roles (none: nothing, the folder as before roles)."""
    if tok.roles:
        (directory / TRANSFORMERS_FILE).write_text(json.dumps(transformers_config(tok), indent=2, ensure_ascii=False)
                                                   + "\n", encoding="utf-8")


def classic_bpe_to_hf(tok: ClassicBPETokenizer, end: str):
    """``end``: the tokenizer's end-of-word marker (classic_bpe.END; passed in, so this module does not import
    the one that calls it)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    END = end

    vocab = dict(tok.vocab)
    for helper in ("<", "/", "w", ">", "</", "</w", END):
        vocab.setdefault(helper, len(vocab))
    merges = [m for m in HELPER_MERGES] + [m for m in tok.merges]
    model = models.BPE(vocab=vocab, merges=merges, unk_token=tok.unk_token if tok.unk_token in vocab else None)
    hf = Tokenizer(model)
    steps = []
    if tok.pre_tokenizer == "punct":
        steps.append(normalizers.Replace(Regex(r"(?<=\w)(?=[^\w\s])|(?<=[^\w\s])(?=\w)"), " "))
    steps.append(normalizers.Replace(Regex(r"(?<=\S)(?=\s|\z)"), END))
    hf.normalizer = normalizers.Sequence(steps)
    hf.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    hf.decoder = decoders.BPEDecoder(suffix=END)
    specials = tok.special_token_list()
    if specials:
        hf.add_special_tokens(specials)
    processor = template_processing(tok.template(), hf.token_to_id)  # the roles' template, as ours applies it
    if processor is not None:
        hf.post_processor = processor
    return hf

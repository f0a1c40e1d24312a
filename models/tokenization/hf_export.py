"""Export a classic BPE to an HF ``tokenizer.json`` that encodes like our implementation.

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

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from corpusforge.models.tokenization.classic_bpe import ClassicBPETokenizer

HELPER_MERGES = (("<", "/"), ("</", "w"), ("</w", ">"))


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
    return hf

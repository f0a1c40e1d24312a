"""Classic BPE (Sennrich et al. 2016), exactly as the teaching texts walk through it.

Training:
- the text is split into words (on whitespace by default); each unique word is counted once;
- a word becomes its characters plus a separate end-of-word symbol ``</w>``: ``low`` -> ``l o w </w>``;
- each iteration merges the most frequent adjacent pair (counts weighted by word frequency);
- ties go to the pair that occurs first in corpus order (words in order of first appearance, then
  left to right inside the word). HF's ``BpeTrainer(end_of_word_suffix="</w>")`` differs on both
  counts (it glues the suffix to the last character and breaks ties by token id), hence this module.

Speed: pair counts are updated incrementally. A pair -> word-index index says which words a merge
touches; only those are rewritten, and a max-heap with lazy deletion finds the next pair. Ties at the
top count are resolved by the first-occurrence rule among the few tied pairs.

Encoding applies the learned merges greedily by rank (the lowest-ranked adjacent pair first), as
minbpe and HF's BPE model do. On the training words this matches the training-time segmentation except
in a rare corner: a token string that two different merges can produce (``a+bc`` and ``ab+c``).
"""

from __future__ import annotations

import heapq
import json
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from corpusforge.models.tokenization.base import HF_FILE, Tokenizer, apply_template, saved_roles

END = "</w>"
PRE_TOKENIZERS = ("whitespace", "punct")
_PUNCT = re.compile(r"\w+|[^\w\s]+")
FILE = "classic_bpe.json"


def pre_tokenize(text: str, mode: str = "whitespace") -> list[str]:
    """Words of ``text``: whitespace-separated (``whitespace``) or also split at punctuation (``punct``)."""
    return text.split() if mode == "whitespace" else _PUNCT.findall(text)


def count_words(texts: Iterable[str], mode: str = "whitespace") -> dict[str, int]:
    """Word -> count, in order of first appearance (dicts keep insertion order)."""
    counts: dict[str, int] = {}
    for text in texts:
        for word in pre_tokenize(text, mode):
            counts[word] = counts.get(word, 0) + 1
    return counts


def merge_symbols(symbols: Sequence[str], left: str, right: str) -> list[str]:
    """Replace every non-overlapping occurrence of (left, right), scanning left to right."""
    out: list[str] = []
    i, n = 0, len(symbols)
    while i < n:
        if i < n - 1 and symbols[i] == left and symbols[i + 1] == right:
            out.append(left + right)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def token_table(token_counts: dict[str, int], top: int = 10) -> list[tuple[str, int]]:
    """The token-frequency table as the teaching texts print it: by frequency, ties alphabetically."""
    rows = sorted(((t, c) for t, c in token_counts.items() if c > 0), key=lambda tc: (-tc[1], tc[0]))
    return rows[:top] if top > 0 else rows


IterationCallback = Callable[[int, tuple[str, str] | None, int, dict[str, int]], None]


def learn_bpe(
    word_counts: dict[str, int],
    max_merges: int,
    min_frequency: int = 2,
    max_new_tokens: int | None = None,
    on_iteration: IterationCallback | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> list[tuple[str, str]]:
    """Learn up to ``max_merges`` merges from word counts (insertion order = corpus order).

    Stops early when the best pair occurs fewer than ``min_frequency`` times or when
    ``max_new_tokens`` distinct new tokens exist. ``on_iteration(i, merge, pair_count, token_counts)``
    is called with the state before the first merge (i=0, merge=None) and after each merge i;
    ``on_progress(done, total)`` every 100 merges.
    """
    words = [[*w, END] for w in word_counts]
    freqs = list(word_counts.values())
    pair_counts: dict[tuple[str, str], int] = defaultdict(int)
    pair_words: dict[tuple[str, str], set[int]] = defaultdict(set)
    for i, syms in enumerate(words):
        f = freqs[i]
        for p in zip(syms, syms[1:]):
            pair_counts[p] += f
            pair_words[p].add(i)
    token_counts: dict[str, int] = {}
    if on_iteration is not None:
        for syms, f in zip(words, freqs):
            for s in syms:
                token_counts[s] = token_counts.get(s, 0) + f
        on_iteration(0, None, 0, token_counts)
    heap = [(-c, p) for p, c in pair_counts.items()]
    heapq.heapify(heap)
    known = {s for syms in words for s in syms}
    merges: list[tuple[str, str]] = []
    new_tokens = 0
    while len(merges) < max_merges and (max_new_tokens is None or new_tokens < max_new_tokens):
        best = _pop_best(heap, pair_counts, pair_words, words)
        if best is None:
            break
        count = pair_counts[best]
        if count < min_frequency:
            break
        left, right = best
        merged = left + right
        merges.append(best)
        if merged not in known:
            known.add(merged)
            new_tokens += 1
        delta: dict[tuple[str, str], int] = defaultdict(int)
        for i in list(pair_words[best]):
            syms, f = words[i], freqs[i]
            new = merge_symbols(syms, left, right)
            old_pairs, new_pairs = list(zip(syms, syms[1:])), list(zip(new, new[1:]))
            for p in old_pairs:
                delta[p] -= f
            for p in new_pairs:
                delta[p] += f
            old_set, new_set = set(old_pairs), set(new_pairs)
            for p in old_set - new_set:
                pair_words[p].discard(i)
            for p in new_set - old_set:
                pair_words[p].add(i)
            if on_iteration is not None:
                k = (len(syms) - len(new)) * f  # occurrences merged in this word, times its frequency
                token_counts[left] -= k
                token_counts[right] -= k
                token_counts[merged] = token_counts.get(merged, 0) + k
            words[i] = new
        for p, d in delta.items():
            if d:
                pair_counts[p] += d
                if pair_counts[p] > 0:
                    heapq.heappush(heap, (-pair_counts[p], p))
                else:
                    del pair_counts[p]
                    pair_words.pop(p, None)
        if on_iteration is not None:
            on_iteration(len(merges), best, count, token_counts)
        if on_progress is not None and len(merges) % 100 == 0:
            on_progress(len(merges), max_merges)
    return merges


def _first_occurrence(pair: tuple[str, str], word_ids: set[int], words: list[list[str]]) -> tuple[int, int]:
    i = min(word_ids)
    syms = words[i]
    for j in range(len(syms) - 1):
        if syms[j] == pair[0] and syms[j + 1] == pair[1]:
            return i, j
    raise AssertionError(f"pair {pair} indexed in word {i} but absent")  # index out of sync: a bug


def _pop_best(heap, pair_counts, pair_words, words) -> tuple[str, str] | None:
    """The most frequent pair; among equals the one occurring first in corpus order."""
    while heap and pair_counts.get(heap[0][1], 0) != -heap[0][0]:
        heapq.heappop(heap)  # stale entry: the count changed since it was pushed
    if not heap:
        return None
    top = -heap[0][0]
    tied: list[tuple[str, str]] = []
    while heap and -heap[0][0] == top:
        _, p = heapq.heappop(heap)
        if pair_counts.get(p, 0) == top and p not in tied:
            tied.append(p)
    best = tied[0] if len(tied) == 1 else min(tied, key=lambda p: _first_occurrence(p, pair_words[p], words))
    for p in tied:
        if p != best:
            heapq.heappush(heap, (-top, p))
    return best


class ClassicBPETokenizer(Tokenizer):
    """Sennrich BPE with a separate ``</w>`` symbol. Not lossless: whitespace is normalized to one space."""

    kind = "classic-bpe"
    lossless = False

    def __init__(self, unk_token: str | None = "<unk>", eot_token: str | None = "<|endoftext|>",
                 extra_special_tokens: Sequence[str] = (), pre_tokenizer: str = "whitespace",
                 roles: Mapping[str, str] | None = None) -> None:
        super().__init__(unk_token, eot_token, extra_special_tokens, roles)
        if pre_tokenizer not in PRE_TOKENIZERS:
            raise ValueError(f"pre_tokenizer: use one of {', '.join(PRE_TOKENIZERS)}")
        self.pre_tokenizer = pre_tokenizer
        self.alphabet: list[str] = []
        self.merges: list[tuple[str, str]] = []
        self.trace: list[dict[str, Any]] = []
        self.initial_words: list[tuple[str, int]] = []
        self._build_vocab()

    # --- training --------------------------------------------------------------------------------
    def train(self, texts: Iterable[str], vocab_size: int | None = None, merges: int | None = None,
              min_frequency: int = 2, trace: bool = False, trace_top: int = 10,
              on_progress: Callable[[int, int], None] | None = None) -> None:
        """Learn merges until ``merges`` merges or ``vocab_size`` tokens (specials + alphabet + merges).

        ``on_progress(done, total)``: once before the first merge, every 100 merges (:func:`learn_bpe`), and once
        at the end (``done`` < ``total`` when training stopped early)."""
        counts = count_words(texts, self.pre_tokenizer)
        alphabet: list[str] = []
        seen: set[str] = set()
        for word in counts:
            for s in (*word, END):
                if s not in seen:
                    seen.add(s)
                    alphabet.append(s)
        self.alphabet = alphabet
        base = len(self.special_token_list()) + len(alphabet)
        max_new = None if vocab_size is None else max(vocab_size - base, 0)
        max_merges = merges if merges is not None else (max_new if max_new is not None else 0)
        self.trace = []
        self.initial_words = [(" ".join([*w, END]), c) for w, c in counts.items()] if trace else []

        def record(i: int, merge, pair_count: int, token_counts: dict[str, int]) -> None:
            self.trace.append({"iteration": i, "merge": list(merge) if merge else None, "pair_count": pair_count,
                               "table": [[t, c] for t, c in token_table(token_counts, trace_top)]})

        if on_progress is not None:
            on_progress(0, max_merges)
        self.merges = learn_bpe(counts, max_merges, min_frequency, max_new, record if trace else None, on_progress)
        if on_progress is not None and (len(self.merges) % 100 or not self.merges):
            on_progress(len(self.merges), max_merges)
        self._build_vocab()

    def _build_vocab(self) -> None:
        self.vocab: dict[str, int] = {}
        for tok in (*self.special_token_list(), *self.alphabet, *(a + b for a, b in self.merges)):
            self.vocab.setdefault(tok, len(self.vocab))
        self.inverse = {i: t for t, i in self.vocab.items()}
        self.ranks = {m: r for r, m in enumerate(self.merges)}
        self._cache: dict[str, list[int]] = {}
        self._specials = set(self.special_token_list())
        longest_first = sorted(self._specials, key=len, reverse=True)
        self._special_re = re.compile("(" + "|".join(map(re.escape, longest_first)) + ")") if longest_first else None

    # --- encoding --------------------------------------------------------------------------------
    def segment_word(self, word: str) -> list[str]:
        """Greedy by rank: merge the adjacent pair learned earliest, until no learned pair is left."""
        syms = [*word, END]
        ranks = self.ranks
        while len(syms) > 1:
            best = min(zip(syms, syms[1:]), key=lambda p: ranks.get(p, 1 << 62))
            if best not in ranks:
                break
            syms = merge_symbols(syms, *best)
        return syms

    def _encode_word(self, word: str) -> list[int]:
        ids = self._cache.get(word)
        if ids is None:
            unk = self.unk_id
            ids = []
            for s in self.segment_word(word):
                tid = self.vocab.get(s)
                if tid is None:
                    # only a character never seen in training can be missing: one <unk> per character
                    ids.extend([unk] * len(s) if unk is not None else [])
                else:
                    ids.append(tid)
            if len(self._cache) < 500_000:
                self._cache[word] = ids
        return ids

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Special tokens in the text stay whole (as in the tokenizer.json export); the rest is split into words.
        ``add_special_tokens``: the roles' template around it (the export's post-processor does the same)."""
        pieces = self.template() if add_special_tokens else None
        if pieces is not None:
            return apply_template(pieces[0], {"$A": self.encode(text)}, self.token_to_id)[0]
        out: list[int] = []
        for piece in self._special_re.split(text) if self._special_re is not None else (text,):
            if piece in self.vocab and piece in self._specials:
                out.append(self.vocab[piece])
                continue
            for word in pre_tokenize(piece, self.pre_tokenizer):
                out.extend(self._encode_word(word))
        return out

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """``skip_special_tokens`` leaves out every special token but ``<unk>`` (tokenizers' skip_special_tokens, in
        the export, drops it too). The rule of tokenizers' BPEDecoder(suffix="</w>"): the suffix is a space, except
        on the last token; a special token has no suffix, so it joins what follows up to the next ``</w>``: an
        unknown character is decoded inside its word (``Z<unk>bra``), and a special written in the text as a word
        of its own (PTB's ``<unk>``) before the next word, as the export decodes it (``a <unk>b``)."""
        skipped = set(self.special_token_list()) - {self.unk_token} if skip_special_tokens else set()
        toks = [self.inverse[i] for i in ids if self.inverse.get(i) is not None and self.inverse[i] not in skipped]
        last = len(toks) - 1
        return "".join(t.replace(END, "" if i == last else " ") for i, t in enumerate(toks))

    def id_to_token(self, token_id: int) -> str:
        return self.inverse[token_id]

    def token_to_id(self, token: str) -> int | None:
        return self.vocab.get(token)

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    # --- trace -----------------------------------------------------------------------------------
    def trace_text(self) -> str:
        """The trace printed like the teaching texts: the initial word corpus, then one table per iteration."""
        lines = ["--- Initial Word Corpus ---", f"{'Word':<18} {'Count':>7}", f"{'-' * 18} {'-' * 7}"]
        lines += [f"{w:<18} {c:>7}" for w, c in self.initial_words]
        for i, it in enumerate(self.trace):
            width = max([len("Token")] + [len(t) for t, _ in it["table"]])
            lines += [f"Iteration {it['iteration']}", f"| {'Token':<{width}} | Frequency |",
                      f"|{'-' * (width + 2)}+{'-' * 11}|"]
            lines += [f"| {t:<{width}} | {c:>9} |" for t, c in it["table"]]
            if i + 1 < len(self.trace):
                a, b = self.trace[i + 1]["merge"]
                lines.append(f"Action: Merge ({a!r}, {b!r})")
        return "\n".join(lines)

    # --- persistence -----------------------------------------------------------------------------
    def files(self) -> list[str]:
        return [FILE, HF_FILE]

    def meta(self) -> dict[str, Any]:
        return {**super().meta(), "pre_tokenizer": self.pre_tokenizer, "merges": len(self.merges),
                "hf_export": "exact for text without literal '</w' sequences; see models/tokenization/hf_export.py"}

    def _save_files(self, directory: Path) -> None:
        data = {"kind": self.kind, "version": 1, "pre_tokenizer": self.pre_tokenizer, "alphabet": self.alphabet,
                "merges": [list(m) for m in self.merges], "specials": self.special_token_list()}
        (directory / FILE).write_text(json.dumps(data, ensure_ascii=False) + "\n", encoding="utf-8")
        from corpusforge.models.tokenization.hf_export import classic_bpe_to_hf, write_transformers_config

        classic_bpe_to_hf(self, END).save(str(directory / HF_FILE))
        write_transformers_config(self, directory)

    @classmethod
    def load(cls, directory: str | Path) -> ClassicBPETokenizer:
        from corpusforge.models.tokenization.base import read_meta

        d = Path(directory)
        meta = read_meta(d)
        data = json.loads((d / FILE).read_text(encoding="utf-8"))
        tok = cls(unk_token=meta.get("unk_token"), eot_token=meta.get("eot_token"),
                  extra_special_tokens=meta.get("extra_special_tokens", ()), pre_tokenizer=data["pre_tokenizer"],
                  roles=saved_roles(meta))
        tok.alphabet = list(data["alphabet"])
        tok.merges = [(a, b) for a, b in data["merges"]]
        tok._build_vocab()
        return tok

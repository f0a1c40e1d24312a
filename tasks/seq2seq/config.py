"""The seq2seq stage's config: an encoder-decoder family and its config, training, the translation direction(s), and
how the trained model is decoded and scored (its own step, so editing the decoding retrains nothing).

A leaf module: it imports no step module of its stage, so the pipeline can validate a config cheaply."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from corpusforge.models.configs import TrainConfig
from corpusforge.models.family import FamilyConfigs
from corpusforge.tasks.config import (
    NOT_IN_ID, ConfigError, artifact_ref, check_artifact_name, derived_model_config, from_dict, model_identity,
    objective_field, roles_to_add, settle_family,
)

MODEL_STEP, EVAL_STEP = "seq2seq", "seq2seq_eval"
# the stage trains the families that learn from source/target pairs (corpusforge.models.family: trains_on "pairs")
# and translate (encoder-decoders), or extract (sentence scorers: task extract)
PAIR_FAMILIES = FamilyConfigs("pairs", ("translate", "extract"))
# T5's task prefix (Raffel et al. 2020: "translate English to German: ..."); {source}/{target}: the languages' names
T5_PREFIX = "translate {source} to {target}: "
Direction = Literal["forward", "backward", "both"]
Task = Literal["translate", "summarize", "denoise", "extract"]
RougeRule = Literal["best", "rouge1"]


@dataclass(frozen=True)
class DecodeConfig:
    """How the trained model translates the held-out splits that are scored (the ``seq2seq_eval`` step)."""

    beam: int = field(default=5, metadata={"doc": "Beam size (1: greedy decoding)."})
    length_penalty: float = field(default=0.6, metadata={
        "doc": "Beam search: GNMT's alpha (Wu et al. 2016): finished hypotheses are ranked by log P / ((5 + length) "
               "/ 6) ** alpha; 0 ranks by log P alone, which favours short outputs."})
    max_len: int = field(default=128, metadata={
        "doc": "Most target tokens a translation may have (also capped by the model's max_len)."})
    batch_size: int = field(default=64, metadata={"doc": "Sentences decoded together (speed only).", **NOT_IN_ID})
    min_len: int = field(default=0, metadata={
        "doc": "Fewest target tokens: the eos is held back until that many are out (0: none; summaries).",
        "identity": lambda cfg: cfg.min_len != 0})
    no_repeat_ngram_size: int = field(default=0, metadata={
        "doc": "n > 0: no n-gram twice in one output (fairseq's and HF's option; 3 is usual for summaries); 0: off.",
        "identity": lambda cfg: cfg.no_repeat_ngram_size != 0})
    rouge_rule: RougeRule = field(default="best", metadata={
        "doc": "task summarize, a document with several references: best (each ROUGE metric takes its best "
               "reference, as most papers report SciTLDR) or rouge1 (the SciTLDR authors' rule: the reference with the "
               "best ROUGE-1 gives all three); corpusforge.models.summ_eval.",
        "identity": lambda cfg: cfg.rouge_rule != "best"})
    sentences: int = field(default=1, metadata={
        "doc": "task extract: the sentences an extractive summary takes (the best-scored, in document order).",
        "identity": lambda cfg: cfg.sentences != 1})
    max_words: int = field(default=0, metadata={
        "doc": "task extract: a length budget in words; a chosen sentence that would pass it is skipped for the next "
               "best (the first one always kept). 0: no budget.",
        "identity": lambda cfg: cfg.max_words != 0})

    def __post_init__(self) -> None:
        for name in ("beam", "max_len", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.sentences < 1:
            raise ValueError(f"sentences: must be >= 1, got {self.sentences}")
        for name in ("min_len", "no_repeat_ngram_size", "max_words"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.length_penalty < 0:
            raise ValueError(f"length_penalty: must be >= 0, got {self.length_penalty}")
        if self.rouge_rule not in ("best", "rouge1"):
            raise ValueError(f"rouge_rule: best or rouge1, got {self.rouge_rule!r}")


def _prefixed(cfg: Seq2SeqStageConfig) -> bool:
    return cfg.prefix_template is not None


MODEL = ("seq2seq",)  # fields that change the trained model (the seq2seq step's id)


@dataclass(frozen=True)
class Seq2SeqStageConfig:
    """An encoder-decoder trained on the tokenizer stage's encoded pairs (``<field>_ids`` columns)."""

    name: str = field(default="seq2seq", metadata={"doc": "Artifact name (and the registered model's name)."})
    family: str = field(default="seq2seq", metadata={"steps": MODEL, "doc":
        "The model family (a folder under models/ that trains on pairs): seq2seq (GRU/LSTM encoder-decoder, with or "
        "without attention: model.attention), transformer (Vaswani et al. 2017) or, with task: extract, extractive "
        "(a sentence scorer)."})
    model: object | None = field(default=None, metadata={"steps": MODEL, "doc":
        "The family's config (the dataclass in corpusforge.models.<family>.config, picked by family; null: its "
        "defaults); vocab_size and the pad/bos/eos ids come from the tokenizer.",
        "variants": ("family", PAIR_FAMILIES), "identity_value": model_identity})
    objective: object | None = objective_field(steps=MODEL)
    train: TrainConfig = field(default_factory=TrainConfig, metadata={"steps": MODEL, "doc":
        "How to train (corpusforge.models.configs.TrainConfig): the same keys as lm.train."})
    source: str = field(default="src", metadata={"steps": MODEL, "doc":
        "The corpus field translated from (line-aligned files from `seq2seq train` are src and tgt)."})
    target: str = field(default="tgt", metadata={"steps": MODEL, "doc": "The corpus field translated into."})
    direction: Direction = field(default="forward", metadata={"steps": MODEL, "doc":
        "forward: source -> target; backward: target -> source (the same pairs read the other way); both: one model "
        "learns both directions, T5-style, each source led by its task prefix, and each direction is scored."})
    prefix: str | None = field(default=None, metadata={"steps": MODEL, "doc":
        "Task prefix put before every source text, T5-style; {source} and {target} become the languages' names, and "
        "each prefix is one special token of the run's tokenizer. null: none for one direction, 'translate {source} "
        "to {target}: ' for both."})
    languages: dict[str, str] = field(default_factory=dict, metadata={"steps": MODEL, "identity": _prefixed, "doc":
        "The languages' names in prefixes, by field: {src: German, tgt: English} (default: the field names)."})
    task: Task = field(default="translate", metadata={"steps": MODEL, "identity": lambda cfg: cfg.task != "translate",
                                                      "doc":
        "translate: one target per source, scored with BLEU/chrF (translations/). summarize: the source is a document "
        "and the target holds one or more reference summaries, one per line (a JSON list read with reader.join_lists: "
        "\"\\n\"); the model learns from each (document, reference) pair and its summaries (summaries/) are scored "
        "with ROUGE-1/2/L against all of a document's references, beside the Lead-1 baseline (the first source line) "
        "and the one-sentence extractive oracle on the same split. denoise: BART's pre-training on plain text (the "
        "source field alone; objective: {kind: denoising}): the model rebuilds each text from a corrupted copy "
        "(spans masked, sentences shuffled), so that a summarizer or translator can start from it (init). extract: "
        "an extractive summarizer (family extractive) learns which of a document's sentences (its lines) is the "
        "oracle one (the best ROUGE-1 against the references) and summarizes with the best-scored ones "
        "(decode.sentences, decode.max_words), scored as summarize is."})
    init: str | None = field(default=None, metadata={"steps": MODEL, **artifact_ref(("seq2seq",), doc=(
        "A trained encoder-decoder to start from (a seq2seq artifact id, e.g. a task: denoise model): its weights, "
        "its shape (model fields other than dropout follow it) and its tokenizer (the pairs are encoded again with "
        "it when the run's differs). null: a fresh init."))})
    max_source_len: int | None = field(default=None, metadata={"steps": MODEL, "identity": lambda cfg: cfg.max_source_len is not None,
                                                               "doc":
        "Source tokens read (prefix included): longer sources are cut, in training and when decoding; null: the "
        "model's max_len. Documents want more than their summaries."})
    max_target_len: int | None = field(default=None, metadata={"steps": MODEL, "identity": lambda cfg: cfg.max_target_len is not None,
                                                               "doc":
        "Target tokens trained on (with the bos or eos); a longer target is cut and loses its eos. null: the model's "
        "max_len. Decoding's own cap is decode.max_len."})
    decode: DecodeConfig = field(default_factory=DecodeConfig, metadata={"steps": ("seq2seq_eval",), "doc":
        "How the held-out splits are translated for BLEU/chrF (the seq2seq_eval step: editing it retrains nothing)."})
    evaluate_test: bool = field(default=True, metadata={"doc":
        "Also report loss/perplexity and BLEU/chrF on the test split (the headline bleu/chrf are the test split's "
        "when it is scored, else the validation split's)."})

    def __post_init__(self) -> None:
        check_artifact_name(self.name)
        settle_family(self, PAIR_FAMILIES)
        if not self.source or not self.target or self.source == self.target:
            raise ValueError(f"source/target: two different fields, got {self.source!r} and {self.target!r}")
        unknown = set(self.languages) - {self.source, self.target}
        if unknown:
            raise ValueError(f"languages: names the fields {self.source} and {self.target}, not {sorted(unknown)}")
        if self.prefix is not None:
            try:
                self.prefix.format(source="", target="")
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(f"prefix: only {{source}} and {{target}} may be filled in ({exc})") from None
        if self.task not in ("translate", "summarize", "denoise", "extract"):
            raise ValueError(f"task: translate, summarize, denoise or extract, got {self.task!r}")
        from corpusforge.models.family import family as family_spec

        extracts = family_spec(self.family).can("extract")
        if extracts != (self.task == "extract"):
            raise ValueError(f"family: {self.family} " + ("only extracts sentences: set task: extract" if extracts else
                                                           "writes text; task: extract needs family: extractive"))
        if self.task != "translate" and self.direction != "forward":
            raise ValueError(f"direction: task {self.task} reads the source field forward, not {self.direction}")
        denoising = getattr(self.objective, "kind", None) == "denoising"
        if denoising != (self.task == "denoise"):
            raise ValueError("task: denoise trains with objective: {kind: denoising} and that objective only with task: "
                             f"denoise (got task {self.task}, objective {getattr(self.objective, 'kind', None)})")
        for name in ("max_source_len", "max_target_len"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 2):
                raise ValueError(f"{name}: at least 2 tokens (or null: the model's max_len), got {value!r}")
        if self.direction == "both" and self.prefix == "":
            raise ValueError("prefix: both directions need a task prefix, so the model knows which way to translate")
        if self.direction == "both" and "{source}" not in self.prefix_template and "{target}" not in self.prefix_template:
            raise ValueError("prefix: both directions need {source} or {target} in it, else both prefixes are the same")

    @property
    def prefix_template(self) -> str | None:
        """The prefix template in force (None: no prefix)."""
        if self.prefix is None:
            return T5_PREFIX if self.direction == "both" else None
        return self.prefix or None

    def directions(self) -> list[tuple[str, str]]:
        """(from field, to field) of each direction the model learns, the headline one first."""
        forward, backward = (self.source, self.target), (self.target, self.source)
        return {"forward": [forward], "backward": [backward], "both": [forward, backward]}[self.direction]

    def prefix_for(self, source_field: str, target_field: str) -> str:
        """The task prefix of one direction ("" when none)."""
        template = self.prefix_template
        if template is None:
            return ""
        name = lambda f: self.languages.get(f, f)  # noqa: E731
        return template.format(source=name(source_field), target=name(target_field))

    def model_config(self, vocab_size: int, special_ids: dict[str, int] | None = None) -> object:
        """The model's config with what the tokenizer sets: its vocabulary size and the ids the family derives from
        special-token roles (pad, bos, eos: corpusforge.models.family ``derived``)."""
        return derived_model_config(self.family, self.model, vocab_size, special_ids)


def seq2seq_config_from_dict(data: dict[str, Any]) -> Seq2SeqStageConfig:
    return from_dict(Seq2SeqStageConfig, data, "seq2seq")


def tokenizer_for(cfg: Seq2SeqStageConfig, tokenizer_cfg: Any) -> Any:
    """The run's tokenizer config as the seq2seq stage needs it (its ``adjust_upstream``, checked with the config,
    before any work): the special-token roles the family derives ids from (pad, bos, eos) added when the tokenizer
    section has none of a field's roles (its own value wins); each task prefix (T5-style directions) added as one
    special token, so any vocabulary tells the directions apart; and, when the section names no fields, the pair's
    two fields encoded into ``<field>_ids`` columns (format parquet). The model adds bos/eos itself, so a tokenizer
    that wraps every text in them is refused."""
    added = roles_to_add(cfg.family, tokenizer_cfg)
    if cfg.task == "denoise" and "mask" not in (tokenizer_cfg.roles or {}):
        added["mask"] = "<mask>"  # text infilling's one token per hidden span
    changes: dict[str, Any] = {"roles": {**(tokenizer_cfg.roles or {}), **added}} if added else {}
    prefixes = [p for p in (cfg.prefix_for(a, b) for a, b in cfg.directions()) if p]
    missing = [p for p in prefixes if p not in tokenizer_cfg.special_tokens]
    if missing:  # one token each: a vocabulary trained on the pairs alone may lack the prefixes' words
        changes["special_tokens"] = (*tokenizer_cfg.special_tokens, *missing)
    read = (cfg.source,) if cfg.task == "denoise" else (cfg.source, cfg.target)
    if not tokenizer_cfg.fields:
        changes.update(fields=read, format="parquet")
    elif not set(read) <= set(tokenizer_cfg.fields):
        raise ConfigError(f"tokenizer.fields: {list(tokenizer_cfg.fields)} lacks the seq2seq stage's "
                          f"{'/'.join(read)}; add {'it' if len(read) == 1 else 'them'} (or set seq2seq.source"
                          f"{'' if len(read) == 1 else '/target'})")
    if tokenizer_cfg.add_special_tokens:
        raise ConfigError("tokenizer.add_special_tokens: the seq2seq stage reads plain ids (the model puts bos/eos "
                          "around the target itself); set it to false")
    if not getattr(tokenizer_cfg, "encode", True):
        raise ConfigError("seq2seq: trains on the encoded pairs; set tokenizer.encode: true")
    return dataclasses.replace(tokenizer_cfg, **changes) if changes else tokenizer_cfg

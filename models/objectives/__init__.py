"""Training objectives: what a task asks of the one trainer (corpusforge.models.training).

The trainer knows no task. An objective makes the batches, wraps the model in the module that computes the
loss (so the model and its loss compile as one graph), says whether a state is carried from one batch to the
next, and evaluates with its own metrics (the Annotated Transformer's ``loss_compute``, torchtitan's loss
config, sentence-transformers' losses that wrap the model). One module per kind of data:

- :mod:`.base`: the interface (:class:`Objective`, :class:`Batch`), ``IGNORE``, :func:`evaluating` (eval mode for a
  block), :func:`mask_tokens` (BERT's 80/10/10), :func:`loss_metrics`;
- :mod:`.lm`: :class:`CausalLM` (random windows of the token stream, each position predicts the next token:
  nanoGPT) and :class:`TruncatedBPTT` (``batch_size`` contiguous streams read in order, the recurrent state carried
  from one batch to the next and detached at every boundary: Zaremba et al. 2014);
- :mod:`.masked`: :class:`MaskedLM` (~15% of positions chosen, the loss on those only: Devlin et al. 2019) and
  :class:`BertPretraining` (masked LM plus next-sentence prediction over ``[CLS] A [SEP] B [SEP]`` pairs);
- :mod:`.classification`: :class:`Classification` (labelled sequences);
- :mod:`.tagging`: :class:`Tagging` (sentences with a tag per word: a tagger's softmax or CRF loss per word);
- :mod:`.seq2seq`: :class:`Seq2Seq` (source-target pairs: teacher forcing, label smoothing, padding ignored) and
  :class:`Denoising` (BART's pre-training: a text rebuilt from its copy with spans masked and sentences shuffled);
- :mod:`.extractive`: :class:`Extractive` (documents whose sentences are labelled in or out of the summary);
- :mod:`.span`: :class:`SpanExtraction` (question-passage windows with the answer's start and end token: a reader);
- :mod:`.contrastive`: :class:`Contrastive` (sentence pairs, in-batch negatives);
- :mod:`.sft` and :mod:`.preference`: post-training's :class:`SFT` and :class:`DPO` on records.

**Objectives as configuration.** This module imports no torch. It declares the kinds (:data:`KINDS`) and the
settings of each: the keys of a stage's ``objective:`` section, a tagged union keyed by ``kind`` as a ``model:``
section is keyed by ``family`` (``objective: {kind: seq2seq, label_smoothing: 0.1}``). A family names the kind it
trains with by default in its spec (``objective="seq2seq"``, with family defaults such as the Transformer's label
smoothing 0.1 in ``objective_defaults``) and the other kinds it can train with (``objectives``); a spec may also
name a factory of its own (``"module:function"``, called as ``function(model_cfg, splits)``). The classes and
factories above are importable from here too (loaded when first used).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# --- the settings of each kind (the keys of a stage's ``objective:`` section besides ``kind``) ----------------------


@dataclass(frozen=True)
class NoSettings:
    """An objective with nothing to set."""

    kind: str = field(default="causal_lm", metadata={"doc": "The objective (corpusforge.models.objectives.KINDS)."})


@dataclass(frozen=True)
class MaskedSettings:
    """Masked language modelling (masked_lm, bert_pretraining)."""

    kind: str = field(default="masked_lm", metadata={"doc": "The objective (corpusforge.models.objectives.KINDS)."})
    mask_prob: float = field(default=0.15, metadata={"doc": "Share of positions chosen for the masked-LM loss."})

    def __post_init__(self) -> None:
        if not 0.0 < self.mask_prob < 1.0:
            raise ValueError(f"mask_prob: must be in (0, 1), got {self.mask_prob}")


@dataclass(frozen=True)
class Seq2SeqSettings:
    """Teacher-forced cross-entropy over the target tokens."""

    kind: str = field(default="seq2seq", metadata={"doc": "The objective (corpusforge.models.objectives.KINDS)."})
    label_smoothing: float = field(default=0.0, metadata={
        "doc": "Share of the target's probability spread over the vocabulary (0: none; the Transformer paper: 0.1)."})

    def __post_init__(self) -> None:
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing: must be in [0, 1), got {self.label_smoothing}")


@dataclass(frozen=True)
class DenoisingSettings:
    """BART's denoising objective (Lewis et al. 2020): an encoder-decoder rebuilds a text from a corrupted copy."""

    kind: str = field(default="denoising", metadata={"doc": "The objective (corpusforge.models.objectives.KINDS)."})
    mask_ratio: float = field(default=0.3, metadata={
        "doc": "Text infilling: the share of a text's tokens hidden in spans, each span one <mask> (BART: 0.3)."})
    poisson_lambda: float = field(default=3.0, metadata={
        "doc": "Text infilling: span lengths drawn from Poisson(lambda) (BART: 3; a 0-length span inserts a mask)."})
    permute_sentences: bool = field(default=True, metadata={
        "doc": "Sentence permutation: a text's sentences (its lines) shuffled before infilling (BART's base model "
               "combines both)."})
    label_smoothing: float = field(default=0.0, metadata={
        "doc": "Share of the target's probability spread over the vocabulary (0: none)."})

    def __post_init__(self) -> None:
        if not 0.0 <= self.mask_ratio < 1.0:
            raise ValueError(f"mask_ratio: must be in [0, 1), got {self.mask_ratio}")
        if not 0.0 < self.poisson_lambda <= 64.0:
            raise ValueError(f"poisson_lambda: must be in (0, 64], got {self.poisson_lambda}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing: must be in [0, 1), got {self.label_smoothing}")


@dataclass(frozen=True)
class ContrastiveSettings:
    """The in-batch contrastive loss over sentence pairs."""

    kind: str = field(default="contrastive", metadata={"doc": "The objective (corpusforge.models.objectives.KINDS)."})
    scale: float = field(default=20.0, metadata={
        "doc": "Cosine similarities are multiplied by this before the softmax (sentence-transformers' "
               "MultipleNegativesRankingLoss: 20)."})
    symmetric: bool = field(default=True, metadata={
        "doc": "Score the pairs both ways (a sentence finds its partner among the batch's partners, and back)."})
    gather_across_ranks: bool = field(default=False, metadata={
        "identity": lambda cfg: cfg.gather_across_ranks,  # in the id only when on: the ids made before stay
        "doc": "With train.processes > 1: each pair's negatives are the partners of every rank's micro-batch, not "
               "its own rank's only (gathered with their gradient: sentence-transformers' gather_across_devices, "
               "CLIP's all_gather): N times the negatives. The model then depends on the number of processes; "
               "off, it does not."})

    def __post_init__(self) -> None:
        if self.scale <= 0:
            raise ValueError(f"scale: must be > 0, got {self.scale}")


@dataclass(frozen=True)
class SFTSettings:
    """Supervised fine-tuning on (prompt, response) records."""

    kind: str = field(default="sft", metadata={"doc": "The objective (corpusforge.models.objectives.KINDS)."})
    pack: bool = field(default=True, metadata={"doc": "Pack short examples into one row of block_size tokens."})


@dataclass(frozen=True)
class DPOSettings:
    """Direct Preference Optimization on (prompt, chosen, rejected) records."""

    kind: str = field(default="dpo", metadata={"doc": "The objective (corpusforge.models.objectives.KINDS)."})
    beta: float = field(default=0.1, metadata={"doc": "DPO's beta: larger keeps the policy closer to the reference."})
    nll_weight: float = field(default=0.0, metadata={
        "doc": "Weight of the chosen responses' per-token negative log-likelihood added to the DPO loss (RPO)."})

    def __post_init__(self) -> None:
        if self.beta <= 0:
            raise ValueError(f"beta: must be > 0, got {self.beta}")
        if self.nll_weight < 0:
            raise ValueError(f"nll_weight: must be >= 0, got {self.nll_weight}")


@dataclass(frozen=True)
class ObjectiveKind:
    """One kind of objective: its factory (``"module:function(model_cfg, splits, settings, **context)"``), the
    dataclass of its settings, the data it reads (a family's ``trains_on``, or ``records`` for post-training's
    prompt/response records) and a line saying what it optimises."""

    name: str
    factory: str
    settings: type
    reads: str
    doc: str


_HERE = __name__
KINDS: dict[str, ObjectiveKind] = {k.name: k for k in (
    ObjectiveKind("causal_lm", f"{_HERE}.lm:causal_lm", NoSettings, "tokens",
                  "next-token cross-entropy on random windows of the token stream"),
    ObjectiveKind("truncated_bptt", f"{_HERE}.lm:truncated_bptt", NoSettings, "tokens",
                  "next-token cross-entropy on contiguous streams, the recurrent state carried between batches"),
    ObjectiveKind("masked_lm", f"{_HERE}.masked:masked_lm", MaskedSettings, "tokens",
                  "masked-LM cross-entropy on the chosen positions of random windows"),
    ObjectiveKind("bert_pretraining", f"{_HERE}.masked:bert_pretraining", MaskedSettings, "tokens",
                  "masked LM plus next-sentence prediction on sentence pairs"),
    ObjectiveKind("classification", f"{_HERE}.classification:classification", NoSettings, "labelled",
                  "cross-entropy of the class"),
    ObjectiveKind("tagging", f"{_HERE}.tagging:tagging", NoSettings, "tagged",
                  "a tag per word: each word's cross-entropy (softmax) or the CRF's sentence log-likelihood, per word"),
    ObjectiveKind("span", f"{_HERE}.span:span", NoSettings, "spans",
                  "the cross-entropy of the answer's start and of its end over a window's tokens, per window"),
    ObjectiveKind("seq2seq", f"{_HERE}.seq2seq:seq2seq", Seq2SeqSettings, "pairs",
                  "teacher-forced, label-smoothed cross-entropy over the target tokens"),
    ObjectiveKind("denoising", f"{_HERE}.seq2seq:denoising", DenoisingSettings, "pairs",
                  "BART's text infilling and sentence permutation: rebuild each text from its corrupted copy"),
    ObjectiveKind("extractive", f"{_HERE}.extractive:extractive", NoSettings, "pairs",
                  "binary cross-entropy per sentence: is it in the extractive summary"),
    ObjectiveKind("contrastive", f"{_HERE}.contrastive:contrastive", ContrastiveSettings, "pairs",
                  "in-batch contrastive loss over sentence pairs"),
    ObjectiveKind("sft", f"{_HERE}.sft:sft", SFTSettings, "records",
                  "next-token cross-entropy on the response tokens of (prompt, response) records"),
    ObjectiveKind("dpo", f"{_HERE}.preference:dpo", DPOSettings, "records",
                  "Direct Preference Optimization on (prompt, chosen, rejected) records"),
)}


def kind(name: str) -> ObjectiveKind:
    if name not in KINDS:
        raise ValueError(f"kind: one of {', '.join(KINDS)}, got {name!r}")
    return KINDS[name]


def _is_ref(name: str) -> bool:
    return ":" in name


def settings_class(name: str) -> type:
    """The settings dataclass of a kind (a family's own ``"module:function"`` objective has none)."""
    return NoSettings if _is_ref(name) else kind(name).settings


def settings_fields(name: str) -> tuple[str, ...]:
    """The settings' keys besides ``kind``."""
    return tuple(f.name for f in dataclasses.fields(settings_class(name)) if f.name != "kind")


def default_settings(spec: Any) -> Any:
    """The settings a family trains with when a stage's config has no ``objective:`` section: its spec's kind, with
    its ``objective_defaults``."""
    return settings_class(spec.objective)(kind=spec.objective, **dict(spec.objective_defaults))


def allowed(spec: Any) -> tuple[str, ...]:
    """The kinds a stage may train ``spec``'s family with: its default first, then the others it declares."""
    return (spec.objective, *sorted(set(spec.objectives) - {spec.objective}))


def settle(spec: Any, settings: Any) -> Any:
    """A stage's ``objective`` for ``spec``'s family: None becomes the family's default; a mapping is read as
    settings (its ``kind`` defaulting to the family's); a kind the family does not train with is a ValueError
    naming the ones it does."""
    if settings is None:
        return default_settings(spec)
    if isinstance(settings, Mapping):
        settings = settings_from(spec, settings)
    if settings.kind not in allowed(spec):
        raise ValueError(f"objective.kind: family {spec.name} trains with {' or '.join(allowed(spec))}, "
                         f"not {settings.kind!r}")
    return settings


def settings_from(spec: Any, data: Mapping[str, Any]) -> Any:
    """Settings from a mapping (a config's ``objective:`` section): its kind, else the family's; the family's
    defaults for that kind where the mapping is silent."""
    data = dict(data)
    name = data.get("kind", spec.objective)
    cls = settings_class(name)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown key; objective kind {name} takes "
                         + (", ".join(sorted(known)) if known else "no settings besides kind"))
    defaults = dict(spec.objective_defaults) if name == spec.objective else {}
    return cls(**{**defaults, **data, "kind": name})


def recorded(spec: Any, saved: Mapping[str, Any]) -> Any:
    """The settings a saved model was trained with, from its ``config.json`` (``saved``): its ``objective`` entry;
    for a model saved before objectives were configuration, the family's default kind with the settings its model
    config held then (``mask_prob``, ``label_smoothing``, ``scale``, ``symmetric``)."""
    entry = saved.get("objective")
    if isinstance(entry, Mapping) and entry.get("kind"):
        return settings_from(spec, entry)
    model = saved.get("model") or {}
    return settings_from(spec, {k: v for k, v in model.items() if k in settings_fields(spec.objective)})


def legacy_keys(spec: Any, model: Mapping[str, Any]) -> dict[str, Any]:
    """A saved model config (``config.json``'s ``model``) without the keys its family's objective settings took
    over (a model saved before objectives were configuration still loads)."""
    fields = {f.name for f in dataclasses.fields(spec.config)}
    moved = set(settings_fields(spec.objective)) - fields
    return {k: v for k, v in model.items() if k not in moved}


def identity_of(spec: Any, settings: Any) -> dict[str, Any]:
    """What an objective adds to its stage's artifact id, beside the model's fields: its settings, under the names
    they had when they were model fields (so moving them off the model configs changed no id), and its kind only
    when it is not the family's default."""
    out = {name: getattr(settings, name) for name in settings_fields(settings.kind)}
    if settings.kind != spec.objective:
        out["objective"] = settings.kind
    return out


def build(settings: Any, model_cfg: Any, splits: Mapping[str, Any], **context: Any) -> Any:
    """The objective ``settings`` names, for a model of config ``model_cfg`` on ``splits`` (``context``: what a
    kind needs besides, such as post-training's pad id and DPO's reference)."""
    if _is_ref(settings.kind):  # a family's own factory: (model_cfg, splits)
        return _load(settings.kind)(model_cfg, splits, **context)
    return _load(kind(settings.kind).factory)(model_cfg, splits, settings, **context)


def _load(ref: str) -> Any:
    """The object a "module:attribute" string names (as corpusforge.models.family.load_ref, which imports this)."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


# --- the classes, importable from here (loaded when first used: importing this module needs no torch). A factory
# named like its module (seq2seq, classification, contrastive, sft) is imported from the module itself.

_EXPORTS = {
    "base": ("IGNORE", "LN2", "Batch", "Objective", "evaluating", "loss_metrics", "mask_tokens"),
    "lm": ("NextTokenLoss", "TokenStream", "CausalLM", "TruncatedBPTT", "StreamBatches", "as_tokens",
           "random_windows", "detach_state", "causal_lm", "truncated_bptt"),
    "masked": ("MaskedLM", "BertPretraining", "BertPretrainingLoss", "sentences_of", "masked_lm", "bert_pretraining"),
    "classification": ("Classification", "ClassifierLoss"),
    "tagging": ("Tagging", "TaggerLoss"),
    "seq2seq": ("Seq2Seq", "Seq2SeqLoss", "Denoising", "corrupt"),
    "extractive": ("Extractive", "ExtractiveLoss", "pad_documents"),
    "span": ("SpanExtraction", "SpanLoss"),
    "contrastive": ("Contrastive", "ContrastiveLoss", "in_batch_loss", "retrieval_scores"),
    "sft": ("SFT", "sft_targets", "fit_prompt"),
    "preference": ("DPO", "DPOLoss", "dpo_loss", "disable_dropout", "token_logps", "sequence_logps",
                   "reference_logps", "dpo"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])

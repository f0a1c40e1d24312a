"""Model families, each declared once: one folder ``models/<family>/`` with a torch-free ``config.py``, the module(s),
and a ``spec.py`` holding ``SPEC = FamilySpec(...)``.

Everything outside the folder (the zoo, config validation, the trainer's objective, registration, the run report,
inspection, sampling and the CLI) asks the spec for what it needs, a capability or a trait, never for a family's
name (torchtitan's model folders and their spec). The registry is found, not written down: every subpackage of
``corpusforge.models`` with a ``spec.py`` is a family, so adding one is adding its folder. Reading the specs imports
no torch (``module`` is a "module:attribute" string, loaded when a model is built; ``objective`` names a kind of
corpusforge.models.objectives, whose settings a stage's ``objective:`` section holds).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

# What a trained model can be asked to do; code outside a family's folder asks for these.
CAPABILITIES = frozenset({
    "generate",        # continue a text left to right (sampling, the lm_sample step, the registered pyfunc)
    "attention_maps",  # forward(..., return_attention=True) gives one (B, heads, T, T) map per layer
    "fill_mask",       # predicts the token under the tokenizer's mask role (an encoder's inspection)
    "embed",           # gives vectors for tokens or sentences
    "classify",        # gives a label and probabilities for a text
    "extract",         # scores the sentences of a document (an extractive summarizer: the seq2seq stage's task extract)
    "translate",       # maps a source text to a target text
    "tag",             # gives one tag per word of a sentence (part of speech, named-entity BIO tags)
    "answer",          # scores where an answer starts and ends in a passage, given a question (extractive QA)
})
# the kinds of data a family learns from (FamilySpec.trains_on)
TRAINS_ON = ("tokens", "pairs", "labelled", "tagged", "spans")


@dataclass(frozen=True)
class FamilySpec:
    """What a model family is and can do.

    ``derived`` names the config fields the tokenizer fills in, like ``vocab_size``: ``{field: (role, ...)}`` takes
    the id of the first of those special-token roles the tokenizer has (``"vocab_size"`` is always derived).
    ``version`` joins the id of what a stage trains for the family when above 1. ``trains_on`` says what data the
    family learns from, so a stage accepts the families it can feed: ``tokens``
    (a token stream: language models), ``pairs`` (source and target: encoder-decoders), ``labelled`` (text and
    label: classifiers), ``tagged`` (a sentence's words and one tag per word: taggers), ``spans`` (a question, a passage and the answer's
    place in it: readers). ``recurrent`` families carry a state from one call to the next (sampling feeds them one
    token at a time; their LM objective reads contiguous streams, truncated BPTT)."""

    name: str
    config: type
    module: str  # "module:Class" of the nn.Module, built as Class(config)
    # the kind of objective it trains with by default (corpusforge.models.objectives.KINDS: causal_lm, seq2seq, ...),
    # or "module:function" of a factory of its own, called as function(model_cfg, splits)
    objective: str
    doc: str
    trains_on: str = "tokens"
    capabilities: frozenset[str] = frozenset()
    recurrent: bool = False
    derived: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # format -> "module:function(model_dir, out_dir, tokenizer_dir=None)" returning a summary dict (`lm export`)
    exporters: Mapping[str, str] = field(default_factory=dict)
    # bumped by hand when the same config and data would now train other weights (the step's id then changes for
    # this family only; 1 leaves the ids it always had)
    version: int = 1
    # the families whose checkpoints a stage's ``init`` may name for this family (its own included): a bert
    # classifier starts from a bert's encoder. Empty: not declared, any checkpoint is tried (its weights are loaded
    # by name, and what is missing or mismatched is reported). Checked before a run (tasks.step.resolve_references)
    starts_from: frozenset[str] = frozenset()
    # the default objective's settings where this family's differ from the kind's (the Transformer's label_smoothing
    # 0.1): what a stage trains it with when its config has no ``objective:`` section
    objective_defaults: Mapping[str, Any] = field(default_factory=dict)
    # the other kinds a stage's ``objective.kind`` may pick for this family (they must read its trains_on data)
    objectives: frozenset[str] = frozenset()
    # role -> the token a run's tokenizer is given for a role the family derives an id from, when the tokenizer
    # section names none (BERT's "[CLS]"; an encoder-decoder's "<s>"); a role not listed: "[ROLE]"
    role_tokens: Mapping[str, str] = field(default_factory=dict)
    # the Linear layers LoRA adapts when a stage's lora section names none (module name suffixes: GPT's "attn.c_attn",
    # the Transformer's "W_q", "W_v"); empty: LoRA needs its targets named (corpusforge.models.lora)
    lora_targets: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = set(self.capabilities) - CAPABILITIES
        if unknown:
            raise ValueError(f"family {self.name}: unknown capabilities {sorted(unknown)}; known: {sorted(CAPABILITIES)}")
        if self.trains_on not in TRAINS_ON:
            raise ValueError(f"family {self.name}: trains_on must be {', '.join(TRAINS_ON)}")
        from corpusforge.models.objectives import KINDS, settings_fields  # torch-free

        for kind in {self.objective, *self.objectives} - ({self.objective} if ":" in self.objective else set()):
            if kind not in KINDS:
                raise ValueError(f"family {self.name}: objective {kind!r} is no kind of corpusforge.models.objectives "
                                 f"({', '.join(KINDS)}) and no \"module:function\"")
            if KINDS[kind].reads != self.trains_on:
                raise ValueError(f"family {self.name}: objective {kind} reads {KINDS[kind].reads}, the family trains "
                                 f"on {self.trains_on}")
        unknown = set(self.objective_defaults) - set(settings_fields(self.objective))
        if unknown:
            raise ValueError(f"family {self.name}: objective_defaults {sorted(unknown)} are no settings of "
                             f"{self.objective}")

    def role_token(self, role: str) -> str:
        """The token a run's tokenizer is given for ``role`` when its section names none."""
        return self.role_tokens.get(role, f"[{role.upper()}]")

    def can(self, capability: str) -> bool:
        if capability not in CAPABILITIES:
            raise ValueError(f"unknown capability {capability!r}")
        return capability in self.capabilities

    def module_class(self) -> type:
        """The family's ``nn.Module`` class, checked against the contracts of its capabilities and objectives the
        first time it is loaded (corpusforge.models.contracts: a missing hook is a TypeError naming it)."""
        cls = load_ref(self.module)
        if (self.name, cls) not in _CHECKED:
            from corpusforge.models.contracts import check

            check(self, cls)
            _CHECKED.add((self.name, cls))
        return cls


def load_ref(ref: str) -> Any:
    """The object a "module:attribute" string names."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


_FAMILIES: dict[str, FamilySpec] | None = None
_CHECKED: set[tuple[str, type]] = set()  # (family, module class) already checked against its contracts


def families() -> dict[str, FamilySpec]:
    """Every family, by name: the ``SPEC`` of each ``corpusforge.models.<folder>.spec`` module, sorted by name."""
    global _FAMILIES
    if _FAMILIES is None:
        import corpusforge.models as package

        found: dict[str, FamilySpec] = {}
        for info in pkgutil.iter_modules(package.__path__):
            if not info.ispkg:
                continue
            folder = f"{package.__name__}.{info.name}"
            if importlib.util.find_spec(f"{folder}.spec") is None:
                continue
            spec = importlib.import_module(f"{folder}.spec").SPEC
            if not isinstance(spec, FamilySpec) or spec.name in found:
                raise RuntimeError(f"{folder}.spec: SPEC must be one FamilySpec with a name of its own")
            found[spec.name] = spec
        _FAMILIES = dict(sorted(found.items()))
    return _FAMILIES


def family_package(name: str, imported: Collection[str]) -> bool:
    """Whether the module ``name`` is a model family's folder: a package of corpusforge.models whose ``spec`` module
    is among ``imported`` (the code a registered model carries copies such a folder whole)."""
    return name.startswith(f"{__package__}.") and f"{name}.spec" in imported


def family_of(model: Any) -> FamilySpec:
    """The family that built ``model``: the name ``corpusforge.models.zoo.build_model`` records on it
    (``family_name``) or, for a module constructed by hand, the family whose module is its class exactly (adapters
    injected in place keep the class). Found by the spec, never by the class hierarchy."""
    name = getattr(model, "family_name", None)
    if isinstance(name, str):
        return family(name)
    ref = f"{type(model).__module__}:{type(model).__qualname__}"
    for spec in families().values():
        if spec.module == ref:
            return spec
    raise ValueError(f"{type(model).__name__} is no family's module; families: {', '.join(families())}")


def family(name: str) -> FamilySpec:
    specs = families()
    if name not in specs:
        raise ValueError(f"family: one of {', '.join(specs)}, got {name!r}")
    return specs[name]


class FamilyConfigs(Mapping[str, type]):
    """family name -> config class of the families that train on ``trains_on`` data (and, when given, have
    ``capability``, or one of several: pairs that are translated, pairs whose sentences are embedded), read when
    first used: a
    stage's config types its ``model`` field by its ``family`` field with it (tasks.config "variants")."""

    def __init__(self, trains_on: str, capability: str | tuple[str, ...] | None = None):
        self.trains_on = trains_on
        self.capabilities = (capability,) if isinstance(capability, str) else tuple(capability or ())

    def _map(self) -> dict[str, type]:
        return {n: s.config for n, s in families().items()
                if s.trains_on == self.trains_on and (not self.capabilities or any(map(s.can, self.capabilities)))}

    def __getitem__(self, name: str) -> type:
        return self._map()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._map())

    def __len__(self) -> int:
        return len(self._map())

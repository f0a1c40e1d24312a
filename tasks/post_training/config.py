"""The post_training stage's config: which model it starts from, the method (continue training all weights or LoRA
adapters on text, supervised fine-tuning on prompt/response records, DPO on preference triplets), the record
templates, the adapters and training.

A leaf module: it imports no step module of its stage, so the pipeline can validate a config cheaply."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from corpusforge.models.configs import LoraSettings, TrainConfig
from corpusforge.tasks.config import artifact_ref, check_artifact_name, from_dict
from corpusforge.tasks.post_training.methods import METHOD
from corpusforge.tasks.post_training.templates import render, template_fields

__all__ = ["MERGE_STEP", "METHODS", "STEP", "PostTrainingConfig", "post_training_config_from_dict", "render",
           "template_fields"]

STEP, MERGE_STEP = "post_training", "lora_merge"
METHODS = tuple(METHOD)  # full, lora, sft, dpo


@dataclass(frozen=True)
class PostTrainingConfig:
    """Train a language model further, from a checkpoint, on the corpus's records."""

    name: str = field(default="post", metadata={"doc": "Artifact name (and the registered model's name)."})
    init: str | None = field(default=None, metadata=artifact_ref(("lm", STEP, MERGE_STEP), doc=(
        "The model to start from (required): an lm section of this pipeline or the id (unique prefix) of an lm, "
        "post_training or lora_merge artifact. Its tokenizer encodes the records; its id joins this step's inputs "
        "(the lineage shows it).")))
    method: Literal["full", "lora", "sft", "dpo"] = field(default="sft", metadata={"doc": (
        "full: continue training every weight on the text field (next-token loss); lora: the same with LoRA "
        "adapters only; sft: supervised fine-tuning on prompt -> response (loss on the response tokens only); dpo: "
        "direct preference optimisation on prompt, chosen, rejected against a frozen reference (the start).")})
    lora: LoraSettings | None = field(default=None, metadata={"doc": (
        "LoRA adapters (method lora: its defaults when null; with sft or dpo: adapters instead of all weights, "
        "the reference of dpo is the model with its adapters off). The artifact then holds only the adapters "
        "(`lm merge` folds them into plain weights).")})
    text: str = field(default="text", metadata={"doc": "full/lora: the field with the text to continue training on."})
    prompt: str = field(default="{prompt}", metadata={"doc": (
        "sft/dpo: the prompt as a template over the record's fields, e.g. \"Review: {text}\\nSentiment:\" (the "
        "instruction template, stored with the model).")})
    response: str = field(default="{response}", metadata={"doc": (
        "sft: the response template (dpo: the chosen answer), e.g. \" {label}\"; the tokenizer's end-of-text "
        "token is appended so the model learns to stop.")})
    rejected: str | None = field(default="{rejected}", metadata={"doc": (
        "dpo: the rejected answer's template; null: a wrong answer made for each record: the start model's "
        "greedy answer when it differs from the chosen one, else another record's different response.")})
    values: dict[str, dict[str, str]] = field(default_factory=dict, metadata={"doc": (
        "Field values renamed before the templates read them, e.g. {label: {'0': negative, '1': positive}}.")})
    pack: bool = field(default=True, metadata={"doc": "sft: pack short examples into one row of block_size tokens."})
    beta: float = field(default=0.1, metadata={"doc": "dpo: the strength of the KL penalty toward the reference."})
    nll_weight: float = field(default=0.0, metadata={"doc": (
        "dpo: add this multiple of the chosen answers' cross-entropy to the loss (RPO; TRL's rpo_alpha), which keeps "
        "them likely: plain DPO (0) can widen the margin by lowering both answers, which breaks greedy answers that "
        "share tokens (a label word and the end token).")})
    eval_records: int = field(default=500, metadata={"doc": (
        "sft/dpo: held-out records whose answers are generated (greedy) and compared with the gold response "
        "(answer_accuracy); 0: none.")})
    train: TrainConfig = field(default_factory=TrainConfig, metadata={"doc": (
        "How to train (the lm section's train keys; a fine-tune wants a smaller lr and fewer steps than "
        "pre-training: see configs/post_training/).")})

    def __post_init__(self) -> None:
        check_artifact_name(self.name)
        if self.method not in METHODS:
            raise ValueError(f"method: one of {', '.join(METHODS)}, got {self.method!r}")
        if not self.init:
            raise ValueError("init: the model to start from is required (an lm section or an artifact id)")
        if self.lora is None and METHOD[self.method].adapters:
            object.__setattr__(self, "lora", LoraSettings())
        self.settings(None)  # beta and nll_weight checked as the dpo objective's settings
        if self.eval_records < 0:
            raise ValueError(f"eval_records: must be >= 0, got {self.eval_records}")
        for name in ("prompt", "response") + (("rejected",) if self.rejected else ()):
            template_fields(getattr(self, name))
        object.__setattr__(self, "values", {str(k): {str(a): str(b) for a, b in dict(v).items()}
                                            for k, v in dict(self.values or {}).items()})

    @property
    def objective(self) -> str:
        """What is optimised: lm (next token on text), sft or dpo (the method's, METHOD in
        corpusforge.tasks.post_training.methods)."""
        return METHOD[self.method].objective

    def settings(self, spec) -> Any:
        """The objective's settings (corpusforge.models.objectives): sft with ``pack``, dpo with ``beta`` and
        ``nll_weight``; for full and lora, the start model's family's default (``spec``, its FamilySpec; None
        before the start model is known)."""
        return METHOD[self.method].settings(self, spec)

    def fields(self) -> list[str]:
        """The record fields this method reads."""
        return METHOD[self.method].fields(self)

    def train_config(self) -> TrainConfig:
        return self.train


def post_training_config_from_dict(data: dict[str, Any]) -> PostTrainingConfig:
    return from_dict(PostTrainingConfig, data, "post_training")

"""What each post-training method reads and how it is scored: one class per objective, looked up by the method's
name (``METHOD[cfg.method]``), so the stage's build, its config and ``lm finetune`` ask the method instead of
branching on its name.

- :class:`Text` (methods ``full`` and ``lora``, objective ``lm``): the text field of each record, encoded and joined
  into one token stream per split; the objective is the start model's family's own;
- :class:`Instructions` (``sft``): a prompt and a response template over the record's fields; held-out prompts are
  answered greedily and scored against the gold responses;
- :class:`Preferences` (``dpo``): an instruction with a chosen and a rejected answer (the rejected template, or
  one made from the start model's own wrong answers), scored against the start model.

A leaf module: no torch, no polars at import (the pipeline validates configs with it)."""

from __future__ import annotations

from typing import Any

from corpusforge.tasks.post_training.templates import template_fields

PostTrainingConfig = Any  # annotations only: corpusforge.tasks.post_training.config imports this module


class Text:
    """Continue the next-token objective on a text field (``full``; ``lora`` on adapters)."""

    objective = "lm"
    templates: tuple[str, ...] = ()  # the config's template fields this method reads, in order
    answers = False  # held-out prompts answered and scored (needs a family that can generate)
    start_loss = True  # the start model's validation loss is measured before the first step

    def __init__(self, adapters: bool = False):
        self.adapters = adapters  # trains LoRA adapters even when the config has no lora section (its defaults)

    def fields(self, cfg: PostTrainingConfig) -> list[str]:
        """The record fields the method reads."""
        return [cfg.text]

    def settings(self, cfg: PostTrainingConfig, spec) -> Any:
        """The objective's settings: the start model's family's default (None before it is known)."""
        from corpusforge.models.objectives import default_settings

        return default_settings(spec) if spec is not None else None

    def examples(self, cfg: PostTrainingConfig, rows: list[dict[str, Any]], tokenizer, start_model):
        """(the split's training data, its held-out Records or None, records skipped)."""
        from corpusforge.tasks.post_training.data import token_stream

        return token_stream(rows, cfg.text, tokenizer), None, 0

    def context(self, model, tokenizer) -> dict[str, Any]:
        """Keyword arguments of the objective's build beyond (settings, model config, splits)."""
        return {}

    def metadata(self, cfg: PostTrainingConfig) -> dict[str, Any]:
        """What config.json's post_training section records about the data."""
        return {"text": cfg.text}


class Instructions(Text):
    """Supervised fine-tuning: the loss on the response tokens only, given the prompt."""

    objective = "sft"
    templates = ("prompt", "response")
    answers = True

    def fields(self, cfg: PostTrainingConfig) -> list[str]:
        names: list[str] = []
        for key in self.templates:
            template = getattr(cfg, key)
            names += template_fields(template) if template else []
        return list(dict.fromkeys(names))

    def settings(self, cfg: PostTrainingConfig, spec) -> Any:
        from corpusforge.models.objectives import SFTSettings

        return SFTSettings(kind="sft", pack=cfg.pack)

    def given(self, cfg: PostTrainingConfig, rows, tokenizer, start_model) -> list[str] | None:
        """Texts that stand in for the last template, one per record (None: every template is filled)."""
        return None

    def examples(self, cfg: PostTrainingConfig, rows: list[dict[str, Any]], tokenizer, start_model):
        from corpusforge.tasks.post_training.data import examples

        made = examples(rows, [getattr(cfg, key) for key in self.templates], cfg.values, tokenizer,
                        self.given(cfg, rows, tokenizer, start_model))
        return made.ids, made, made.skipped

    def context(self, model, tokenizer) -> dict[str, Any]:
        """Records are padded with the tokenizer's pad id, else its end id."""
        from corpusforge.tasks.post_training.data import end_id

        pad = tokenizer.role_ids.get("pad")
        return {"pad_id": int(pad) if pad is not None else end_id(tokenizer)}

    def metadata(self, cfg: PostTrainingConfig) -> dict[str, Any]:
        return {"template": {"prompt": cfg.prompt, "response": cfg.response, "values": cfg.values}}


class Preferences(Instructions):
    """Direct preference optimisation against the start model: a chosen and a rejected answer per prompt. The start
    model's log-probabilities of every record are computed once before the first step (reference "start": no
    second copy of the weights, full or LoRA); dropout is off in the policy so its log-probabilities are computed
    as the reference's are (TRL's default too). Its start loss is not measured: the margin is 0 there."""

    objective = "dpo"
    start_loss = False

    templates = ("prompt", "response", "rejected")  # no rejected template (null): made per record, see given

    def settings(self, cfg: PostTrainingConfig, spec) -> Any:
        from corpusforge.models.objectives import DPOSettings

        return DPOSettings(kind="dpo", beta=cfg.beta, nll_weight=cfg.nll_weight)

    def given(self, cfg: PostTrainingConfig, rows, tokenizer, start_model) -> list[str] | None:
        """No rejected template: the start model's own wrong answers (corpusforge.tasks.post_training.data)."""
        if cfg.rejected:
            return None
        from corpusforge.tasks.post_training.data import wrong_answers

        return wrong_answers(cfg, rows, tokenizer, start_model)

    def context(self, model, tokenizer) -> dict[str, Any]:
        from corpusforge.models.objectives import disable_dropout

        disable_dropout(model)
        return {**super().context(model, tokenizer), "reference": "start"}


METHOD: dict[str, Text] = {"full": Text(), "lora": Text(adapters=True), "sft": Instructions(), "dpo": Preferences()}

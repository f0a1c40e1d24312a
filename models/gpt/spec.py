"""The GPT family's declaration (corpusforge.models.family)."""

from corpusforge.models.family import FamilySpec
from corpusforge.models.gpt.config import GPTConfig

SPEC = FamilySpec(
    name="gpt", config=GPTConfig, module="corpusforge.models.gpt.model:GPT",
    objective="causal_lm",
    doc="decoder Transformer trained on the next token",
    capabilities=frozenset({"generate", "attention_maps"}),
    exporters={"hf": "corpusforge.models.gpt.hf:export_hf"},  # transformers GPT2LMHeadModel (models/gpt/hf.py)
    lora_targets=("attn.c_attn", "attn.c_proj"),  # LoRA paper 7.1: attention (q,k,v fused)
)

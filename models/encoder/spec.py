"""The masked encoder family's declaration (corpusforge.models.family)."""

from corpusforge.models.encoder.config import EncoderConfig
from corpusforge.models.family import FamilySpec

SPEC = FamilySpec(
    name="encoder", config=EncoderConfig, module="corpusforge.models.encoder.model:TransformerEncoder",
    objective="masked_lm",
    doc="bidirectional Transformer trained on masked tokens (its val_loss/val_ppl score the masked tokens; it "
        "cannot generate)",
    capabilities=frozenset({"attention_maps", "fill_mask", "embed"}),
    derived={"mask_id": ("mask",)},
    role_tokens={"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"},
    lora_targets=("attn.c_attn", "attn.c_proj"),
)

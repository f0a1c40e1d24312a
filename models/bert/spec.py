"""The BERT family's declaration (corpusforge.models.family)."""

from corpusforge.models.bert.config import BertConfig
from corpusforge.models.family import FamilySpec

SPEC = FamilySpec(
    name="bert", config=BertConfig, module="corpusforge.models.bert.model:Bert",
    objective="bert_pretraining",
    doc="BERT pre-training: [CLS] A [SEP] B [SEP] with segment embeddings, masked LM plus next-sentence prediction "
        "(its val_loss is their sum; val_ppl scores the masked tokens; it cannot generate)",
    capabilities=frozenset({"attention_maps", "fill_mask", "embed"}),
    derived={"mask_id": ("mask",), "cls_id": ("cls",), "sep_id": ("sep",), "pad_id": ("pad",), "eot_id": ("eot",)},
    role_tokens={"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"},
    lora_targets=("attn.c_attn", "attn.c_proj"),
    version=2,  # the body is a module of its own: weights named body.* (older checkpoints load, upgraded)
)

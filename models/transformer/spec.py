"""The encoder-decoder Transformer family's declaration (corpusforge.models.family)."""

from corpusforge.models.family import FamilySpec
from corpusforge.models.transformer.config import TransformerConfig

SPEC = FamilySpec(
    name="transformer", config=TransformerConfig, module="corpusforge.models.transformer.model:Transformer",
    objective="seq2seq",
    objectives=frozenset({"denoising"}),  # BART's pre-training on plain text (the seq2seq stage's task: denoise)
    doc="the encoder-decoder Transformer of 'Attention is all you need' (post-LN or pre-LN, sinusoidal or learned "
        "positions, shared embeddings, tied output), trained on source-target pairs",
    trains_on="pairs",
    capabilities=frozenset({"translate", "attention_maps"}),
    derived={"pad_id": ("pad",), "bos_id": ("bos",), "eos_id": ("eos",)},
    objective_defaults={"label_smoothing": 0.1},  # the paper's
    role_tokens={"pad": "<pad>", "bos": "<s>", "eos": "</s>"},
    lora_targets=("W_q", "W_v"),  # the LoRA paper's W_q and W_v (section 7.1)
)

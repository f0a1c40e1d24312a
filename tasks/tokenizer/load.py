"""``Artifact.load()`` of a tokenizer artifact (declared on the tokenizer step, tasks/tokenizer/__init__.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_tokenizer_artifact(artifact_dir: Path, manifest: dict[str, Any]):
    """The ``tokenizers.Tokenizer`` itself (classic-bpe: our ``ClassicBPETokenizer``)."""
    from corpusforge.models.tokenization import load_tokenizer

    tok = load_tokenizer(artifact_dir)
    return getattr(tok, "hf", None) or tok

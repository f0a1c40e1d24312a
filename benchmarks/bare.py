"""What the GPU scripts (lm_gpu.py, seq2seq_gpu.py, encoder_gpu.py) share so that they run on a bare GPU image,
where corpusforge and its pipeline dependencies are not installed: ``map_checkout`` maps corpusforge's packages onto
this checkout's folders (pyproject's package-dir: corpusforge = flows/, corpusforge.models = models/, ...) without
running any install or the top package's __init__ (which would import the pipeline); ``apply_set`` applies
``--set key.path=value`` overrides (YAML values) to a preset's section."""

from __future__ import annotations

import importlib
import sys
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def map_checkout(extra: tuple[tuple[str, str], ...] = ()) -> None:
    """Map ``corpusforge`` and ``corpusforge.models`` (and ``extra``: (package, folder) pairs) onto the checkout,
    unless corpusforge is installed and importable (then the installed package is used)."""
    try:
        for name in ("corpusforge.models", *(n for n, _ in extra)):
            importlib.import_module(name)
        return
    except ImportError:
        pass
    for name, folder in (("corpusforge", "flows"), ("corpusforge.models", "models"), *extra):
        module = types.ModuleType(name)
        module.__path__ = [str(REPO / folder)]
        sys.modules[name] = module


def apply_set(section: dict, assignments: list[str]) -> None:
    """``key.path=value`` overrides, the value read as YAML (``train.lr=3e-4``, ``model.cell=lstm``)."""
    import yaml

    for item in assignments:
        key, _, value = item.partition("=")
        parts = key.split(".")
        node = section
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = yaml.safe_load(value)

"""corpusforge: raw text corpora into trained NLP artifacts (Prefect flows, a content-addressed store, MLflow).

    import corpusforge as cf
    result = cf.run("configs/demo.yaml")
    result["ngram"].load().perplexity(...)

The Python API (``corpusforge.api``: ``run``, ``corpus``, ``tokenizer.train``, ``ngram.estimate``,
``embed.train``, ``lm.train``, ``seq2seq.train``, ``classify.train``, ``tag.train``, ``qa.train/ask/evaluate``, ``artifacts.find/show/verify/load/du/gc``) is
imported on first use, so ``import corpusforge`` stays cheap (the CLI imports this package too). The stage code lives in
``corpusforge.tasks``, the model zoo in ``corpusforge.models``, the store in ``corpusforge.storage``.
"""

from __future__ import annotations

import os as _os
import sys as _sys

# What the command sets first for itself (corpusforge.door.CLI_DEFAULTS), for the Python API too: OpenMP threads that
# sleep rather than spin while they wait. With the default (spinning) a BiLSTM step from Python took 1.1-1.3 s on a
# busy 2-core machine against 0.25 s from the command (issue 50). OpenMP reads it once, when torch loads its OpenMP
# library: so it is set here, on `import corpusforge`, and never over a value the user set. When torch was imported
# first it comes too late for this process; training says so once (corpusforge.models.training.spin_warning).
from corpusforge.door import CLI_DEFAULTS as _CLI_DEFAULTS  # noqa: E402 - the standard library only

TORCH_BEFORE_US = "torch" in _sys.modules and "OMP_WAIT_POLICY" not in _os.environ
_os.environ.setdefault("OMP_WAIT_POLICY", _CLI_DEFAULTS["OMP_WAIT_POLICY"])

API = ("run", "corpus", "tokenizer", "ngram", "embed", "lm", "seq2seq", "classify", "tag", "qa", "artifacts", "Artifact",
       "RunResult", "load_config", "run_config")
__all__ = list(API)


def __getattr__(name: str):
    if name == "api":
        import importlib

        return importlib.import_module("corpusforge.api")
    if name in API:
        from corpusforge import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

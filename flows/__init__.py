"""corpusforge: raw text corpora into trained NLP artifacts (Prefect flows, a content-addressed store, MLflow).

    import corpusforge as cf
    result = cf.run("configs/demo.yaml")
    result["ngram"].load().perplexity(...)

The Python API (``corpusforge.api``: ``run``, ``corpus``, ``tokenizer.train``, ``ngram.estimate``,
``embed.train``, ``lm.train``, ``seq2seq.train``, ``classify.train``, ``artifacts.find/show/verify/load/du/gc``) is
imported on first use, so ``import corpusforge`` stays cheap (the CLI imports this package too). The stage code lives in
``corpusforge.tasks``, the model zoo in ``corpusforge.models``, the store in ``corpusforge.storage``.
"""

from __future__ import annotations

API = ("run", "corpus", "tokenizer", "ngram", "embed", "lm", "seq2seq", "classify", "artifacts", "Artifact",
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

"""``corpusforge ngram ...``: estimate n-gram LMs from text files, query and evaluate them.

``estimate`` runs the pipeline flow (corpus + ngram stages); ``query`` and ``evaluate`` only read
artifacts (or ARPA files) and never start Prefect.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from corpusforge.cli.common import (
    JsonOpt,
    SetOpt,
    StoreOpt,
    _fail,
    _intact,
    _print_result,
    _run_flow,
    _store,
    choices,
    out,
    print_json,
)

# Why --json may hold a null perplexity or log probability (the notes say so next to each one)
MLE_ZERO = "an n-gram unseen in training has probability 0 under mle; add-k or kneser-ney smoothing give it some"


def _above_zero(value):
    """Option callback: a number that must be > 0 (None: not given)."""
    if value is not None and not value > 0:
        raise typer.BadParameter(f"{value} is not > 0")
    return value

app = typer.Typer(help="N-gram language models counted in DuckDB: estimate, query, evaluate.", no_args_is_help=True)

SMOOTHINGS = ("mle", "add-k", "stupid-backoff", "kneser-ney", "modified-kneser-ney")
Smoothing = choices("Smoothing", SMOOTHINGS)


@app.command()
def estimate(
    sources: Annotated[list[Path], typer.Argument(metavar="TRAIN_SOURCES...",
                                                  help="Training text files or directories: one sentence per line.")],
    order: Annotated[int, typer.Option("--order", min=1, help="Highest n-gram order N.")] = 3,
    smoothing: Annotated[Smoothing, typer.Option(  # type: ignore[valid-type]
        "--smoothing", show_default=False,
        help="Default modified-kneser-ney (KenLM lmplz's). add-k with k=1 is Laplace; stupid-backoff gives "
             "scores, not probabilities.")] = "modified-kneser-ney",
    k: Annotated[float, typer.Option("--k", callback=_above_zero, help="add-k: the pseudo-count (Laplace: 1).")] = 1.0,
    eval_files: Annotated[Optional[list[str]], typer.Option(  # str: the JSON's keys are the paths as given
        "--eval", metavar="FILE", help="Evaluation text file (repeatable).")] = None,
    arpa: Annotated[Optional[Path], typer.Option("--arpa", help="Write the model as ARPA here (.gz: gzipped).")] = None,
    prune: Annotated[Optional[str], typer.Option(
        "--prune", metavar="T1,T2,...",
        help="lmplz's --prune (Kneser-Ney): count thresholds per order, e.g. 0,0,1 drops the trigrams and higher "
             "seen once; the first is 0, non-decreasing, the last applies to the higher orders.")] = None,
    set_: SetOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Count n-grams of TRAIN_SOURCES in DuckDB and estimate a smoothed LM (reused when already built).

    Each line is a sentence and whitespace separates tokens; the text is not altered. --set keys address
    the ngram section (memory_limit=2GB, threads=2, sentence=document) or the pipeline (runner., tracking.).
    """
    from corpusforge.tasks.config import ConfigError

    smoothing = getattr(smoothing, "value", smoothing)  # the plain string the config and the JSON carry
    if smoothing not in SMOOTHINGS:
        _fail(f"--smoothing: {smoothing!r} is not allowed; use one of {', '.join(SMOOTHINGS)}", 2)
    if arpa is not None and smoothing == "stupid-backoff":
        _fail("--arpa: stupid backoff gives scores, not probabilities; ARPA export is for probability models", 2)
    given = list(eval_files or [])
    evals = [Path(p) for p in given]
    for path in evals:
        if not path.is_file():
            _fail(f"--eval: no such file: {path}", 2)
    from corpusforge.api import ngram_config

    try:
        data = ngram_config([str(s) for s in sources], order, smoothing, k, evals, set_ or [])
    except ConfigError as exc:
        _fail(str(exc), 2)
    if prune is not None:
        data["ngram"]["prune"] = _thresholds(prune)
    summary = _run_flow(data, _store(store), Path.cwd(), as_json)
    result = summary["stages"]["ngram"]
    stats = json.loads((Path(result["path"]) / "stats.json").read_text(encoding="utf-8"))
    # the i-th --eval file is the artifact's "eval{i}_<stem>" evaluation (it records the file's name, not its path)
    by_index = {k.split("_", 1)[0]: e for k, e in stats["evaluations"].items() if k.startswith("eval")}
    perplexity, perplexity_wo, oov = {}, {}, {}
    for i, key in enumerate(given):  # keyed by the path as the user typed it
        e = by_index.get(f"eval{i}")
        if e is None:
            continue
        perplexity[key] = _number(e["perplexity"])
        perplexity_wo[key] = _number(e["perplexity_without_oov"])
        oov[key] = e["oov"]
    arpa_written = None
    if arpa is not None:
        built = Path(result["path"]) / "model.arpa.gz"
        if arpa.name.endswith(".gz") and built.is_file():  # the artifact already holds it
            import shutil

            arpa.parent.mkdir(parents=True, exist_ok=True)
            arpa_written = str(shutil.copyfile(built, arpa))
        else:
            from corpusforge.models.ngram_arpa import write_arpa
            from corpusforge.tasks.ngram.build import load_ngram_model

            arpa_written = str(write_arpa(load_ngram_model(result["path"]), arpa))
    payload = {"id": result["id"], "path": result["path"], "reused": result["reused"], "order": order,
               "smoothing": smoothing, "prune": list(data["ngram"].get("prune") or []),
               "scores_are_probabilities": smoothing != "stupid-backoff",
               "perplexity": perplexity, "perplexity_without_oov": perplexity_wo, "oov": oov,
               "sentences": stats["summary"]["sentences"], "tokens": stats["summary"]["tokens"],
               "arpa": arpa_written, "metrics": result["metrics"]}
    if as_json:
        _print_result(summary, True, payload, why=_why(smoothing))
        return
    _print_result(summary, False, payload)
    out.print(f"n-gram model {result['id'][:12]} ({smoothing}, order {order}): {payload['sentences']:,} sentences, "
              f"{payload['tokens']:,} tokens")
    if smoothing == "stupid-backoff":
        out.print("stupid backoff gives scores, not probabilities: its 'perplexity' is not a perplexity")
    for path, ppl in perplexity.items():
        out.print(f"  {path}: perplexity {ppl:.4f} (without OOVs {perplexity_wo[path]:.4f}), OOVs {oov[path]}")
    if arpa_written:
        out.print(f"  ARPA: {arpa_written}")


def _thresholds(text: str) -> list[int]:
    """--prune's value: integers separated by commas or spaces ("0,0,1", "0 0 1"); checked by the config."""
    parts = text.replace(",", " ").split()
    if not parts or not all(p.isdigit() for p in parts):
        _fail(f"--prune: {text!r} is not a list of counts >= 0 like 0,0,1", 2)
    return [int(p) for p in parts]


def _why(method: str) -> dict[str, str]:
    """--json notes: why a perplexity or log probability of these keys is infinite, for this smoothing."""
    if method != "mle":
        return {}
    return dict.fromkeys(("perplexity", "perplexity_without_oov", "word", "sentences", "results"), MLE_ZERO)


def _number(value):
    return float(value) if not isinstance(value, str) else float(value.replace("inf", "Infinity"))


def _load(model_ref: str, store: Optional[Path]):
    """An ngram artifact (id or prefix) or an ARPA file path."""
    path = Path(model_ref)
    if path.suffix in (".arpa", ".gz") and path.is_file():
        from corpusforge.models.ngram_arpa import read_arpa

        return read_arpa(path), str(path)
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.ngram.build import load_ngram_model

    try:
        found = Catalog(ArtifactStore(_store(store))).get(model_ref)
    except LookupError as exc:
        _fail(str(exc), 2)
    if found.manifest.get("step") != "ngram":
        _fail(f"{model_ref}: artifact {found.manifest['id'][:12]} is a {found.manifest.get('step')} artifact, "
              "not an ngram model", 2)
    return load_ngram_model(_intact(found).path), found.manifest["id"]


@app.command()
def query(
    model_ref: Annotated[str, typer.Argument(metavar="ID", help="ngram artifact id (prefix) or an ARPA file.")],
    context: Annotated[str, typer.Option("--context", help="The history, e.g. \"the cat\"; start it with <s> "
                                                           "for a sentence start.")] = "",
    top: Annotated[int, typer.Option("--top", min=1, help="How many next words to list.")] = 5,
    word: Annotated[Optional[str], typer.Option("--word", help="Also give P(word | context).")] = None,
    sentence: Annotated[Optional[list[str]], typer.Option("--sentence", help="Score a sentence (repeatable).")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Top-k next words after CONTEXT, P(word | context), sentence log10 probabilities."""
    model, ident = _load(model_ref, store)
    ctx = context.split()
    payload: dict = {"id": ident, "method": model.method, "scores_are_probabilities": model.is_probability,
                     "context": context,
                     "top": [{"word": w, "log10_prob": lp, "prob": 10 ** lp} for w, lp in model.top_next(ctx, top)]}
    if word is not None:
        lp = model.log10_prob(word, ctx)
        oov = model.word_index.get(word, 0) == 0  # maps to <unk>'s id, as a literal <unk> does (KenLM's OOV)
        payload["word"] = {"word": word, "log10_prob": lp, "prob": 10 ** lp, "oov": oov}
    if sentence:
        payload["sentences"] = [{"sentence": s, "log10_prob": model.score_sentence(s.split()),
                                 **{k: v for k, v in model.evaluate([s.split()]).items()
                                    if k in ("perplexity", "perplexity_without_oov", "oov")}} for s in sentence]
    if as_json:
        print_json(payload, why=_why(model.method))
        return
    kind = "P" if model.is_probability else "S (score, not a probability)"
    out.print(f"model {ident[:12] if len(ident) == 64 else ident} ({model.method}, order {model.order})")
    out.print(f"next words after {context!r}:")
    for item in payload["top"]:
        out.print(f"  {item['word']:<20} {kind} = {item['prob']:.6g}  (log10 {item['log10_prob']:.4f})")
    if word is not None:
        w = payload["word"]
        out.print(f"{kind}({word} | {context}) = {w['prob']:.6g} (log10 {w['log10_prob']:.4f})"
                  + ("  [OOV: scored as <unk>]" if w["oov"] else ""))
    for s in payload.get("sentences", []):
        out.print(f"log10 p = {s['log10_prob']:.4f}  perplexity {s['perplexity']:.3f}  OOVs {s['oov']}  {s['sentence']}")


@app.command()
def evaluate(
    model_ref: Annotated[str, typer.Argument(metavar="MODEL", help="ngram artifact id (prefix) or an ARPA file.")],
    files: Annotated[list[str], typer.Argument(  # str: the JSON's keys are the paths as given
        metavar="FILES...", help="Text files, one sentence per line.")],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Perplexity (with and without OOVs) and OOV count of FILES under a model or an ARPA file."""
    from corpusforge.tasks.ngram.build import read_sentences

    model, ident = _load(model_ref, store)
    results = {}
    for given in files:
        path = Path(given)
        if not path.is_file():
            _fail(f"no such file: {given}", 2)
        results[given] = model.evaluate(read_sentences(path))
    if as_json:
        print_json({"id": ident, "method": model.method, "results": results}, why=_why(model.method))
        return
    for path, r in results.items():
        out.print(f"{path}: perplexity {r['perplexity']:.4f} (without OOVs {r['perplexity_without_oov']:.4f}), "
                  f"OOVs {r['oov']}, {r['sentences']:,} sentences, {r['tokens']:,} scored tokens")

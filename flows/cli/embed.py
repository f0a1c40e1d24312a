"""``corpusforge embed ...``: train text representations, evaluate them, query neighbours.

``train`` runs the pipeline flow (corpus + embeddings sections); ``eval`` and ``neighbors`` read
artifacts from the store and never start Prefect (``eval`` publishes its ``embeddings_eval`` artifact
directly, so the same evaluation is reused next time).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from corpusforge.cli.common import (
    SOURCES_HELP,
    JsonOpt,
    SetOpt,
    StoreOpt,
    _fail,
    _intact,
    _print_result,
    _run_flow,
    _store,
    choices,
    err,
    out,
    print_json,
)

app = typer.Typer(help="Text representations: TF-IDF, word2vec, fastText, GloVe; evaluate and query them.",
                  no_args_is_help=True)

KINDS = ("tfidf", "word2vec", "fasttext", "glove")
VectorFormat = choices("VectorFormat", ("auto", "word2vec", "word2vec-binary", "glove"))
Kind = choices("EmbeddingsKind", KINDS)
PIPELINE_KEYS = ("runner.", "tracking.", "name=", "corpus.", "embeddings.")


def _payload(summary: dict, kind: str) -> dict:
    """What scripts read: the trained artifact's id/path (+ vectors_path), metrics and the evaluation."""
    from corpusforge.storage.store import read_manifest

    stage = summary["stages"]["embeddings"]
    manifest = read_manifest(Path(stage["path"])) or {}
    payload = {"id": stage["id"], "path": stage["path"], "step": stage["step"], "name": stage["name"], "kind": kind,
               "reused": stage["reused"], "metrics": stage["metrics"], "corpus_id": summary["corpus"]["id"],
               "steps": [{k: s[k] for k in ("id", "step", "reused")} for s in summary["steps"]]}
    if manifest.get("vectors_path"):
        payload["vectors_path"] = str(Path(stage["path"]) / manifest["vectors_path"])
        payload["vectors_binary_path"] = str(Path(stage["path"]) / "vectors.bin")
    evals = [s for s in summary["steps"] if s["step"] == "embeddings_eval"]
    if evals:
        payload["eval"] = {"id": evals[-1]["id"], "path": evals[-1]["path"],
                           "metrics": (read_manifest(Path(evals[-1]["path"])) or {}).get("metrics", {})}
    return payload


@app.command()
def train(
    sources: Annotated[list[Path], typer.Argument(help=SOURCES_HELP)],
    kind: Annotated[Kind, typer.Option("--kind", help="tfidf: sparse TF-IDF vectors; word2vec, fasttext (gensim) "
                                                      "or glove: dense word vectors.")] = Kind.word2vec,
    set_: SetOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Build the corpus from SOURCES (one document per line, everything in train) and train KIND on it.

    --set keys address the embeddings section (sg=0, dim=50, window=5, negative=5, min_count=5, epochs=5,
    sample=1e-3, workers=2, seed=1, analogies=FILE, similarity=[F1,F2] ...) or, with their prefix, the
    pipeline (corpus.reader.txt_mode=paragraph, corpus.split.valid=0.1, tracking.enabled=false).
    """
    from corpusforge.api import embed_config
    from corpusforge.tasks.config import ConfigError

    kind = kind.value
    try:
        data = embed_config([str(s) for s in sources], kind, set_ or [])
    except ConfigError as exc:
        _fail(str(exc), 2)
    summary = _run_flow(data, _store(store), Path.cwd(), as_json)
    payload = _payload(summary, data["embeddings"]["kind"])
    if as_json:
        _print_result(summary, True, payload)
        return
    _print_result(summary, False, payload)
    out.print(f"[bold]{payload['kind']}[/] {payload['id'][:12]} at {payload['path']}")
    if "vectors_path" in payload:
        out.print(f"vectors (word2vec text format): {payload['vectors_path']}")
    if "eval" in payload:
        out.print(json.dumps(payload["eval"]["metrics"], indent=1))


@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(metavar="FILE", help="Word vectors: word2vec text (a 'WORDS DIMENSIONS' "
                                         "header) or binary (.bin), or GloVe text (no header).")],
    name: Annotated[Optional[str], typer.Option("--name", help="Artifact name (default: the file's stem).")] = None,
    fmt: Annotated[VectorFormat, typer.Option("--format", help="The file's format (auto: .bin is binary word2vec; a "
                                                               "two-number first line is word2vec text; else "
                                                               "GloVe).")] = VectorFormat.auto,
    lowercase: Annotated[bool, typer.Option("--lowercase", help="The vectors' words are lowercase (GloVe's are): "
                                                                "queries are lowercased to match.")] = False,
    limit: Annotated[Optional[int], typer.Option("--limit", min=1, help="Keep the first N words only (such files "
                                                                        "list the most frequent first).")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Bring word vectors trained elsewhere into the store as an embeddings artifact.

    The artifact is read like a trained one: embed neighbors/eval/contextual, and classify train --set
    embeddings=ID (the embedding layer starts from them: e.g. Google News word2vec for sst2-bilstm). Its id is the
    file's content digest and name with the settings: importing the same file again reuses it.
    """
    import corpusforge.api as cf
    from corpusforge.tasks.config import ConfigError

    if not file.is_file():
        _fail(f"vectors file {str(file)!r} does not exist", 2)
    size = file.stat().st_size
    if size > 100 * 2**20:  # Google News' 3.6 GB takes minutes to read and to write back in both formats
        err.print(f"importing {file.name} ({size / 2**30:.1f} GiB): reading it and writing vectors.txt and "
                  "vectors.bin takes a while" + ("" if limit else "; --limit N keeps the first N words"))
    try:
        art = cf.embed.import_vectors(file, name=name, format=fmt.value, lowercase=lowercase, limit=limit, store=store)
    except ConfigError as exc:
        _fail(str(exc), 2)
    payload = {"id": art.id, "path": str(art.path), "step": art.step, "name": art.name, "reused": art.reused,
               "kind": art.manifest["config"]["kind"], "format": art.manifest["config"]["imported"],
               "metrics": art.metrics, "vectors_path": str(art.path / "vectors.txt"),
               "vectors_binary_path": str(art.path / "vectors.bin")}
    if as_json:
        print_json(payload)
        return
    m = art.metrics
    out.print(f"[bold]{payload['format']}[/] vectors {art.id[:12]} ({int(m['vocab_size']):,} words x "
              f"{int(m['dim'])}){' (reused)' if art.reused else ''} at {art.path}")
    out.print(f"start a classifier from them: corpusforge classify train FILE --preset P --set embeddings={art.id[:12]}")


def _find_embeddings(artifact_id: str, store: Optional[Path]):
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    catalog = Catalog(ArtifactStore(_store(store)))
    try:
        found = catalog.get(artifact_id)
    except LookupError as exc:  # an unknown or ambiguous id is bad usage
        _fail(str(exc.args[0]), 2)
    if found.manifest.get("step") != "embeddings":
        _fail(f"{artifact_id}: artifact is a {found.manifest.get('step')!r}, not an 'embeddings' artifact "
              "(TF-IDF matrices have no word vectors)", 2)
    return _intact(found)


@app.command("eval")
def eval_(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="Embeddings artifact id (or unique prefix).")],
    analogies: Annotated[Optional[Path], typer.Option("--analogies", help="questions-words file.")] = None,
    similarity: Annotated[Optional[list[Path]], typer.Option("--similarity", help="Word-pair file (repeatable).")] = None,
    neighbors: Annotated[Optional[list[str]], typer.Option("--neighbors", help="Word to list neighbours of (repeatable).")] = None,
    query: Annotated[Optional[list[str]], typer.Option("--query", help="e.g. 'king - man + woman' (repeatable).")] = None,
    top: Annotated[int, typer.Option("--top", min=1, help="Neighbours / answers per word or query.")] = 10,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Evaluate an embeddings artifact: analogy accuracy (per section, coverage), Spearman on word pairs."""
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.embeddings.config import EmbeddingsConfig
    from corpusforge.tasks.embeddings.eval import build_embeddings_eval
    from corpusforge.tasks.step import StepResult

    found = _find_embeddings(artifact_id, store)
    for p in [analogies, *(similarity or [])]:
        if p is not None and not p.is_file():
            _fail(f"evaluation file {str(p)!r} does not exist", 2)
    if not (analogies or similarity or neighbors or query):
        _fail("give at least one of --analogies, --similarity, --neighbors, --query", 2)
    m = found.manifest
    try:
        cfg = EmbeddingsConfig(kind=m["config"]["kind"], name=m["name"],
                               analogies=str(analogies.resolve()) if analogies else None,
                               similarity=tuple(str(p.resolve()) for p in similarity or ()),
                               neighbors=tuple(neighbors or ()), queries=tuple(query or ()), top=top)
    except ValueError as exc:
        _fail(str(exc), 2)
    embeddings = StepResult(id=m["id"], step=m["step"], name=m["name"], path=str(found.path), reused=True, seconds=0.0)
    from corpusforge.tasks.progress import shard_progress

    with shard_progress(f"embeddings eval {m['name']}") as on_progress:  # stderr, and only on a terminal
        result = build_embeddings_eval(embeddings, cfg, ArtifactStore(_store(store)), on_progress=on_progress)
    report = json.loads((Path(result.path) / "eval.json").read_text(encoding="utf-8"))
    from corpusforge.storage.store import read_manifest

    metrics = (read_manifest(Path(result.path)) or {}).get("metrics", {})
    if as_json:
        print_json({"id": result.id, "path": result.path, "embeddings_id": m["id"], "reused": result.reused,
                    "metrics": metrics, "report": report})
        return
    if "analogies" in report:
        a = report["analogies"]
        out.print(f"analogies: accuracy {a['accuracy']:.4f} on {a['covered']:,} of {a['questions']:,} questions "
                  f"(coverage {a['coverage']:.1%})")
        for name, s in a["sections"].items():
            out.print(f"  {name:32s} {s['accuracy']:.4f}  ({s['correct']}/{s['covered']}, {s['total']} asked)")
    for name, s in report.get("similarity", {}).items():
        out.print(f"{name}: Spearman {s['spearman']:.4f} on {s['scored_pairs']} pairs, {s['oov_pairs']} OOV pairs")
    for word, hits in report.get("neighbors", {}).items():
        out.print(f"{word}: " + ("(out of vocabulary)" if hits is None else ", ".join(f"{w} {s:.3f}" for w, s in hits)))
    for q, hits in report.get("queries", {}).items():
        out.print(f"{q}: " + (f"(OOV: {hits['oov']})" if isinstance(hits, dict) else ", ".join(f"{w} {s:.3f}" for w, s in hits)))
    out.print(f"evaluation artifact {result.id[:12]} at {result.path}")


@app.command()
def neighbors(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="Embeddings artifact id (or unique prefix).")],
    word: Annotated[str, typer.Argument(help="A word, or a query such as 'king - man + woman'.")],
    top: Annotated[int, typer.Option("--top", min=1, help="How many neighbours.")] = 10,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Nearest neighbours of WORD by cosine similarity (fastText also answers for unseen words)."""
    from corpusforge.models.embedding_eval import WordVectors, parse_query
    from corpusforge.models.word2vec import load_vectors

    if top < 1:
        _fail("--top: must be >= 1", 2)
    found = _find_embeddings(artifact_id, store)
    words, vectors = load_vectors(found.path / "vectors.bin")
    wv = WordVectors(words, vectors)
    try:
        positive, negative = parse_query(word)
    except ValueError as exc:
        _fail(str(exc), 2)
    lowercase = bool(found.manifest["config"].get("lowercase", False))
    fold = (lambda w: w.lower()) if lowercase else (lambda w: w)
    positive, negative = [fold(w) for w in positive], [fold(w) for w in negative]
    oov = [w for w in (*positive, *negative) if w not in wv.index]
    source = "vocabulary"
    if oov and (found.path / "fasttext.bin").is_file():
        import numpy as np

        from corpusforge.models.word2vec import load_fasttext_vectors

        ft = load_fasttext_vectors(found.path / "fasttext.bin")
        query = sum(ft[w] / (np.linalg.norm(ft[w]) or 1.0) for w in positive)
        query = query - sum((ft[w] / (np.linalg.norm(ft[w]) or 1.0) for w in negative), np.zeros_like(query))
        exclude = [wv.index[w] for w in (*positive, *negative) if w in wv.index]
        hits, source = wv.nearest(query, top, exclude=exclude), "fasttext character n-grams"
    elif oov:
        _fail(f"not in the vocabulary of {found.manifest['id'][:12]}: {', '.join(oov)}", 1)
    else:
        hits = wv.most_similar(positive, negative, top)
    if as_json:
        print_json({"id": found.manifest["id"], "query": word, "source": source,
                    "neighbors": [{"word": w, "similarity": s} for w, s in hits]})
        return
    if source != "vocabulary":
        err.print(f"{', '.join(oov)}: not in the vocabulary; vector built from {source}")
    for w, s in hits:
        out.print(f"{s:.4f}  {w}")


@app.command()
def contextual(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="An encoder lm's artifact id or unique prefix "
                                                                  "(family encoder: `lm train --set family=encoder`).")],
    first: Annotated[str, typer.Argument(metavar="SENTENCE_A", help="A sentence with the word, e.g. 'the river bank'.")],
    second: Annotated[str, typer.Argument(metavar="SENTENCE_B", help="Another, e.g. 'the bank account'.")],
    word: Annotated[str, typer.Option("--word", help="The word whose two vectors are compared.")],
    static: Annotated[Optional[str], typer.Option("--static", metavar="ID", help="An embeddings artifact (word2vec, "
                                                  "fastText, GloVe): its one vector for the word, for comparison.")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The cosine of WORD's contextual vectors in two sentences (the encoder's last-layer states over the word's
    tokens), next to that of the one static vector a word embedding gives it in both."""
    from corpusforge.models.contextual import cosine, word_vector
    from corpusforge.models.family import family
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.lm.inference import load_trained

    try:
        found = Catalog(ArtifactStore(_store(store))).get(artifact_id)
    except LookupError as exc:
        _fail(str(exc.args[0]), 2)
    if found.manifest.get("step") != "lm":
        _fail(f"{artifact_id}: is a {found.manifest.get('step')!r} artifact, not an encoder lm", 2)
    name = json.loads((found.path / "config.json").read_text(encoding="utf-8")).get("family")
    if not family(name).can("embed"):
        _fail(f"{artifact_id}: a {name} model reads left to right and gives no two-sided word vectors; train an "
              "encoder (`corpusforge lm train FILE --preset shakespeare-char-cpu --set family=encoder`)", 2)
    try:
        model, tok, _spec = load_trained(_intact(found).path)
        vectors = [word_vector(model, tok, sentence, word) for sentence in (first, second)]
    except ValueError as exc:
        _fail(str(exc), 2)
    report = {"id": found.manifest["id"], "word": word, "sentences": [first, second],
              "tokens": [v[1] for v in vectors], "contextual_cosine": cosine(vectors[0][0], vectors[1][0]),
              "static_id": None, "static_cosine": None}
    if static is not None:
        from corpusforge.models.word2vec import load_vectors

        emb = _find_embeddings(static, store)
        words, table = load_vectors(emb.path / "vectors.bin")
        key = word.lower() if emb.manifest["config"].get("lowercase", False) else word
        if key not in words:
            _fail(f"{word!r} is not in the vocabulary of {emb.manifest['id'][:12]}", 1)
        vector = table[words.index(key)]
        # the static vector is looked up, not computed from the sentence: the same in both
        report.update(static_id=emb.manifest["id"], static_cosine=cosine(vector, vector))
    if as_json:
        print_json(report, ensure_ascii=False)
        return
    out.print(f"{word!r} in {first!r} (tokens {vectors[0][1]}) and in {second!r} (tokens {vectors[1][1]})")
    out.print(f"  contextual ({name} {found.manifest['id'][:12]}): cosine {report['contextual_cosine']:.4f}")
    if report["static_cosine"] is not None:
        out.print(f"  static ({emb.manifest['config'].get('kind', 'embeddings')} {emb.manifest['id'][:12]}): "
                  f"cosine {report['static_cosine']:.4f} (one vector per word, whatever the sentence)")

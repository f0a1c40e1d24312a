"""Step ``embeddings_eval``: the standard intrinsic evaluations of a dense embeddings artifact.

Input: an ``embeddings`` artifact (its ``vectors.bin``). Config: the evaluation fields of the
embeddings section plus the sha256 of every evaluation file, so an edited file gives a new id while
changing only the evaluation never retrains. Files: ``eval.json`` (everything, including per-section
analogy accuracy, OOV pairs, neighbours and query answers) and ``pca.png`` when plot groups are given.
Manifest metrics (logged to MLflow): ``analogy_accuracy``, ``analogy_coverage``, ``analogy_covered``,
``analogy_<section>_accuracy``, ``<file stem>_spearman``, ``<file stem>_oov_pairs``, ...
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from corpusforge.storage.hashing import sha256_file
from corpusforge.storage.store import ArtifactStore, store_relative
from corpusforge.tasks.embeddings.config import EmbeddingsConfig
from corpusforge.tasks.step import StepResult, artifact_input, run_step

EVAL_STEP = "embeddings_eval"
EVAL_VERSION = 1


def _metric_name(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def _check_file(path: str, what: str) -> Path:
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"{what}: evaluation file {path!r} does not exist")
    return p.resolve()


def evaluate_vectors(
    words: Sequence[str], vectors, *, analogies: str | None = None, similarity: Sequence[str] = (),
    neighbors: Sequence[str] = (), queries: Sequence[str] = (), top: int = 10, restrict_vocab: int = 300_000,
    on_progress: Callable[[int, int], None] | None = None,
) -> tuple[dict[str, Any], dict[str, float]]:
    """Run every evaluation asked for; return (full report, flat numeric metrics).

    ``on_progress(done, total)`` counts analogy questions, word pairs, neighbour words and queries: 0 first,
    then after each analogy section, each similarity file, each neighbour word and each query.
    """
    from corpusforge.models.embedding_eval import (
        WordVectors,
        evaluate_word_pairs,
        parse_query,
        read_analogies,
        read_word_pairs,
    )

    wv = WordVectors(words, vectors)
    report: dict[str, Any] = {"vocab_size": len(words)}
    metrics: dict[str, float] = {}
    questions = read_analogies(_check_file(analogies, "analogies")) if analogies else []
    pair_sets = [read_word_pairs(_check_file(path, "similarity")) for path in similarity]
    total = len(questions) + sum(map(len, pair_sets)) + len(neighbors) + len(queries)
    done = 0

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if on_progress is not None:
            on_progress(done, total)

    advance(0)
    if analogies:
        result = _analogies_by_section(wv, questions, restrict_vocab, advance)
        report["analogies"] = {"file": Path(analogies).name, **result}  # no machine-specific path
        metrics.update(analogy_accuracy=result["accuracy"], analogy_coverage=result["coverage"],
                       analogy_covered=result["covered"], analogy_questions=result["questions"])
        for section, s in result["sections"].items():
            if s["covered"]:
                metrics[f"analogy_{_metric_name(section)}_accuracy"] = s["accuracy"]
    report["similarity"] = {}
    for path, pairs in zip(similarity, pair_sets):
        result = evaluate_word_pairs(wv, pairs, restrict_vocab)
        advance(len(pairs))
        stem = _metric_name(Path(path).stem)
        report["similarity"][stem] = {"file": Path(path).name, **result}
        metrics.update({f"{stem}_spearman": result["spearman"], f"{stem}_pearson": result["pearson"],
                        f"{stem}_oov_pairs": result["oov_pairs"], f"{stem}_pairs": result["pairs"]})
    report["neighbors"] = {}
    for word in neighbors:
        try:
            report["neighbors"][word] = wv.neighbors(word, top)
        except KeyError:
            report["neighbors"][word] = None  # out of vocabulary
        advance(1)
    report["queries"] = {}
    for query in queries:
        positive, negative = parse_query(query)
        try:
            report["queries"][query] = wv.most_similar(positive, negative, top)
        except KeyError as exc:
            report["queries"][query] = {"oov": str(exc.args[0])}
        advance(1)
    return report, metrics


def _analogies_by_section(wv, questions, restrict_vocab: int, advance: Callable[[int], None]) -> dict[str, Any]:
    """corpusforge.models.embedding_eval.evaluate_analogies, one section at a time (each question is scored on its own, so the
    totals are the same), calling ``advance(questions_in_section)`` after each."""
    from corpusforge.models.embedding_eval import evaluate_analogies

    by_section: dict[str, list] = {}
    for q in questions:
        by_section.setdefault(q.section, []).append(q)
    sections: dict[str, dict[str, Any]] = {}
    for part in by_section.values():
        sections.update(evaluate_analogies(wv, part, restrict_vocab)["sections"])
        advance(len(part))
    correct = sum(s["correct"] for s in sections.values())
    covered = sum(s["covered"] for s in sections.values())
    asked = sum(s["total"] for s in sections.values())
    return {"accuracy": correct / covered if covered else 0.0, "correct": correct, "covered": covered,
            "questions": asked, "coverage": covered / asked if asked else 0.0, "sections": sections}


def plot_groups(words: Sequence[str], vectors, groups: Sequence[Sequence[str]], path: Path, title: str) -> list[str]:
    """2-D PCA of the known words of each group, one colour per group; returns the words plotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from corpusforge.models.embedding_eval import pca_2d

    index = {w: i for i, w in enumerate(words)}
    members = [[w for w in g if w in index] for g in groups]
    flat = [w for g in members for w in g]
    fig, ax = plt.subplots(figsize=(7, 6), dpi=100)
    if len(flat) >= 2:
        xy = pca_2d(np.asarray(vectors)[[index[w] for w in flat]])
        k = 0
        for n, group in enumerate(members):
            pts = xy[k : k + len(group)]
            k += len(group)
            ax.scatter(pts[:, 0], pts[:, 1], label=", ".join(group[:3]) + ("..." if len(group) > 3 else ""), s=30)
            for (x, y), w in zip(pts, group):
                ax.annotate(w, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=9)
        ax.legend(fontsize=8, loc="best")
    else:
        ax.text(0.5, 0.5, "fewer than two known words to plot", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("PC 1")
    ax.set_ylabel("PC 2")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return flat


def eval_config(cfg: EmbeddingsConfig) -> dict[str, Any]:
    """The evaluation fields plus each file's content digest (an edited file must change the id). Files are
    named by their base names (``identity_value`` in the config) and digests: where they lie is in no id."""
    config = cfg.step_config("eval")
    files = [f for f in ([cfg.analogies] if cfg.analogies else []) + list(cfg.similarity)]
    config["file_digests"] = {Path(f).name: sha256_file(_check_file(f, "analogies/similarity")) for f in files}
    return config


def build_embeddings_eval(embeddings: StepResult, cfg: EmbeddingsConfig, store: ArtifactStore,
                          on_progress: Callable[[int, int], None] | None = None) -> StepResult:
    """``on_progress(done, total)``: see :func:`evaluate_vectors` (not called when the evaluation is reused)."""
    config = eval_config(cfg)
    return run_step(store, step=EVAL_STEP, version=EVAL_VERSION, name=cfg.name, config=config,
                    inputs=[artifact_input(embeddings)],
                    build=lambda out: _evaluate(out, embeddings, cfg, on_progress),
                    libraries=("gensim", "numpy", "scipy", "matplotlib"))


def _evaluate(out: Path, embeddings: StepResult, cfg: EmbeddingsConfig,
              on_progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    from corpusforge.models.word2vec import load_vectors

    words, vectors = load_vectors(Path(embeddings.path) / "vectors.bin")
    report, metrics = evaluate_vectors(words, vectors, analogies=cfg.analogies, similarity=cfg.similarity,
                                       neighbors=cfg.neighbors, queries=cfg.queries, top=cfg.top,
                                       restrict_vocab=cfg.restrict_vocab, on_progress=on_progress)
    report["embeddings_id"] = embeddings.id
    if cfg.plot_groups:
        report["plotted"] = plot_groups(words, vectors, cfg.plot_groups, out / "pca.png",
                                        f"{cfg.kind} {embeddings.id[:12]}: PCA of word groups")
    (out / "eval.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    # store-relative (embeddings/<dir>): a moved or copied store still finds it (storage.store.resolve_recorded)
    return {"metrics": metrics, "embeddings_id": embeddings.id,
            "embeddings_path": store_relative(embeddings.path, Path(out).resolve().parent.parent)}


def highlights(artifact_dir: str | Path, top: int = 5) -> list[str]:
    """The evaluation's answers in a line each, for the run's summary: each query ("he - king + queen -> she,
    ...") and each word's neighbours, ``top`` words per line; an out-of-vocabulary word is said as such."""
    path = Path(artifact_dir) / "eval.json"
    if not path.is_file():
        return []
    report = json.loads(path.read_text(encoding="utf-8"))
    lines = []
    for query, hits in (report.get("queries") or {}).items():
        answer = f"not in the vocabulary: {hits['oov']}" if isinstance(hits, dict) else ", ".join(w for w, _ in hits[:top])
        lines.append(f"{query} \u2192 {answer}")
    for word, hits in (report.get("neighbors") or {}).items():
        lines.append(f"neighbours of {word}: " + (", ".join(w for w, _ in hits[:top]) if hits else "not in the vocabulary"))
    return lines


def load_vectors(artifact_dir: Path, manifest: dict[str, Any]):
    """``Artifact.load()`` of dense embeddings (word2vec, fastText, GloVe): gensim ``KeyedVectors``."""
    from gensim.models import KeyedVectors

    rel = manifest.get("vectors_path")
    if not rel:
        raise TypeError(f"{manifest['step']} {manifest['name']} holds no dense vectors (kind {manifest.get('kind')!r})")
    return KeyedVectors.load_word2vec_format(str(Path(artifact_dir) / rel), binary=False)

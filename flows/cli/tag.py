"""``corpusforge tag ...``: train a sequence labeller (part of speech, named entities) on a tagged file with a
preset (a BiLSTM with a softmax or a CRF head), tag text, evaluate on a tagged file.

``tag train`` runs the whole pipeline flow (corpus of tagged records -> tag) with the preset's settings, so the
corpus is reused when it already exists. ``predict`` and ``evaluate`` read a published tag artifact through the
catalog and never start Prefect.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(help="Sequence labelling: train (BiLSTM tagger, softmax or CRF), predict (each word's tag and the "
                       "entity spans), evaluate (token accuracy; entity precision, recall and F1).",
                  no_args_is_help=True)

# after `app` exists: corpusforge.cli imports this module at its end, so either may be imported first
from corpusforge.api import preset_names  # noqa: E402
from corpusforge.api import tag_config as train_config  # noqa: E402 - the API builds the config
from corpusforge.cli.common import (  # noqa: E402
    JsonOpt,
    SetOpt,
    StoreOpt,
    _fail,
    _files_exist,
    _find_step_artifact,
    _print_result,
    _run_flow,
    _store,
    out,
    print_json,
    trained_payload, ProcessesOpt, with_processes,
)

TaggedArg = Annotated[Path, typer.Argument(metavar="FILE", help=(
    "Tagged sentences: CoNLL-U (.conllu) or a CoNLL column file (.conll, .bio, .iob: a word and its tags on each "
    "line, tab- or space-separated, a blank line between sentences)."))]


@app.command("train")
def train(
    train_file: Annotated[Path, typer.Argument(metavar="TRAIN_FILE", help=(
        "Tagged training sentences: CoNLL-U (.conllu; the preset says which column, e.g. UPOS) or a CoNLL column "
        "file (.conll, .bio, .iob; e.g. WNUT-17's word and BIO tag)."))],
    preset: Annotated[str, typer.Option("--preset", metavar="NAME|FILE.yaml",
                                        help=f"One of {', '.join(preset_names('tag'))} (shipped with the package: "
                                             "configs/tag/NAME.yaml in the repository), or the path to a YAML of "
                                             "that shape.")],
    valid: Annotated[Optional[Path], typer.Option("--valid", metavar="FILE",
                                                  help="Validation sentences (else the preset's held-out fraction).")] = None,
    test: Annotated[Optional[Path], typer.Option("--test", metavar="FILE",
                                                 help="Test sentences, scored after training.")] = None,
    init: Annotated[Optional[str], typer.Option("--init", metavar="ID", help=(
        "Fine-tune this pre-trained checkpoint (the -bert presets): a bert lm artifact (`lm train --preset "
        "bert-mlm-small`) or a tag artifact of the bert_tagger family; its shape and its tokenizer are used."))] = None,
    set_: SetOpt = None,
    processes: ProcessesOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Read the tagged sentences, train the preset's tagger and score it on the validation (and test) sentences:
    token accuracy beside the most-frequent-tag baseline, and for entity tags (BIO/BIOES) seqeval's entity
    precision, recall and F1 per type (reusing what exists).

    --set keys address the tag section by default (train.max_iters=500, model.head=crf, min_count=1); prefix
    corpus., runner. or tracking. to reach the other sections (corpus.reader.tags.upos=xpos reads XPOS into the
    upos field). A newly trained model is registered in MLflow under its name as a pyfunc that returns words, tags
    and spans (`registered_model`; null with `registered_model_reason` when none is).
    """
    from corpusforge.tasks.config import ConfigError

    _files_exist(train_file, valid, test)
    try:
        config = train_config(train_file, preset, valid, test, init, with_processes(set_, processes))
    except ConfigError as exc:
        _fail(str(exc), 2)
    summary = _run_flow(config, _store(store), Path.cwd(), as_json)
    _print_result(summary, as_json, trained_payload(summary, "tag", preset))


def _load(artifact_id: str, store: Optional[str]):
    from corpusforge.tasks.tag.inference import load_tagger

    path = _find_step_artifact(artifact_id, store, "tag", "a tagger (tag)").path
    try:
        return load_tagger(path)
    except (OSError, ValueError, KeyError) as exc:
        _fail(f"{path}: cannot load the model: {exc}", 1)


@app.command("predict")
def predict(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="tag artifact id or a unique prefix.")],
    texts: Annotated[list[str], typer.Argument(metavar="TEXT...", help=(
        "One or more texts to tag; each is split into words as tagged corpora are (clitics split: do n't)."))],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Tag each TEXT: every word's tag, and the entity spans with their character offsets (entity taggers)."""
    from corpusforge.tasks.tag.render import terminal

    tagger = _load(artifact_id, store)
    rows = tagger.tag(texts)
    if as_json:
        print_json({"id": artifact_id, "field": tagger.field, "predictions": rows}, ensure_ascii=False)
        return
    colour = sys.stdout.isatty()
    for row in rows:
        print(terminal(row, colour))


@app.command("evaluate")
def evaluate(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="tag artifact id or a unique prefix.")],
    file: TaggedArg,
    column: Annotated[Optional[str], typer.Option("--column", help=(
        "The file's tag column (a CoNLL-U column name such as upos or xpos, or a 0-based index of a column file; "
        "default: the one the model was trained on).") )] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", metavar="PNG",
                                                 help="Also draw the confusion matrix (part-of-speech tags) into PNG.")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Score a tagger on a tagged FILE: token accuracy; entity precision/recall/F1 overall and per type (seqeval,
    the CoNLL scorer's reading) for entity tags, the confusion counts for other tags; the most frequent errors.
    Sentences the reader quarantines (malformed, unknown tag) are counted and left out."""
    import time

    from corpusforge.api import TAGGED_SUFFIXES
    from corpusforge.storage.compression import inner_suffix
    from corpusforge.storage.tagged import TagColumns, TaggedError, read_columns, read_conllu

    if not file.is_file():
        _fail(f"{file}: no such file", 2)
    tagger = _load(artifact_id, store)
    reader = (tagger.spec.get("tag") or {}).get("reader") or {}
    suffix = inner_suffix(file)
    if suffix not in TAGGED_SUFFIXES:
        _fail(f"{file}: not a tagged file: tag evaluate reads CoNLL-U (.conllu) and CoNLL column files "
              f"({', '.join(TAGGED_SUFFIXES[1:])})", 2)
    if file.suffix != suffix:
        _fail(f"{file}: compressed; tag evaluate reads the file itself: decompress it first", 2)
    wanted = column if column is not None else reader.get("column", tagger.field if suffix == ".conllu" else -1)
    if isinstance(wanted, str) and wanted.lstrip("-").isdigit():
        wanted = int(wanted)
    columns = TagColumns({tagger.field: wanted})
    try:
        records = list(read_conllu(file, columns) if suffix == ".conllu"
                       else read_columns(file, columns, names=reader.get("columns") or None))
    except TaggedError as exc:
        _fail(str(exc), 2)
    good = [r for r in records if r.ok]
    skipped: dict[str, int] = {}
    for r in records:
        if not r.ok:
            skipped[r.reason] = skipped.get(r.reason, 0) + 1
    if not good:
        _fail(f"{file}: no tagged sentence ({len(records)} read, {sum(skipped.values())} quarantined)", 2)
    started = time.perf_counter()
    report = tagger.evaluate([r.fields["tokens"] for r in good], [r.fields[tagger.field] for r in good])
    seconds = time.perf_counter() - started
    if plot is not None and "confusion" in report:
        from corpusforge.tasks.confusion import plot_confusion

        plot_confusion(report["confusion"]["counts"], report["confusion"]["tags"], plot,
                       f"{file.name}: accuracy {report['accuracy']:.3f}")
    result = {"id": artifact_id, "file": str(file), "field": tagger.field, **report,
              "sentences_skipped": skipped, "seconds": seconds, "sentences_per_s": len(good) / max(seconds, 1e-9),
              **({"plot": str(plot)} if plot is not None and "confusion" in report else {})}
    if as_json:
        print_json(result, ensure_ascii=False)
        return
    line = f"accuracy {report['accuracy']:.4f}"
    if "f1" in report:
        line += f"  entity F1 {report['f1']:.4f} (precision {report['precision']:.4f}, recall {report['recall']:.4f}, " \
                f"{report['entities']} entities{', strict' if report['strict'] else ''})"
    out.print(f"{line}  ({report['sentences']} sentences, {report['words']} words, {seconds:.1f} s)", highlight=False)
    if skipped:
        out.print("left out: " + ", ".join(f"{n} {why}" for why, n in skipped.items()), style="yellow", highlight=False)
    if "per_type" in report:
        width = max(len(t) for t in report["per_type"]) if report["per_type"] else 4
        out.print(f"{'type':<{width}}  precision  recall     f1  support", highlight=False)
        for t, s in report["per_type"].items():
            out.print(f"{t:<{width}}  {s['precision']:9.4f}  {s['recall']:6.4f}  {s['f1']:.4f}  {s['support']:7d}",
                      highlight=False)
    if report["frequent_errors"]:
        out.print("most frequent errors (word: gold -> predicted, count): " + "; ".join(
            f"{e['word']}: {e['gold']} -> {e['predicted']} ({e['count']})" for e in report["frequent_errors"][:8]),
            highlight=False)
    if plot is not None and "confusion" in report:
        out.print(f"confusion matrix: {plot}", highlight=False)

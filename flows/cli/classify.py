"""``corpusforge classify ...``: train a text classifier on a labelled file with a preset (a BiLSTM, BERT from
scratch, or BERT fine-tuned from a pre-trained checkpoint), predict, evaluate.

``classify train`` runs the whole pipeline flow (corpus of labelled records -> tokenizer + encode [-> word vectors]
-> classify) with the preset's settings, so every upstream step is reused when it already exists. ``predict`` and
``evaluate`` read a published classify artifact through the catalog and never start Prefect.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(help="Text classifiers: train (BiLSTM, BERT from scratch or fine-tuned from a pre-trained "
                       "checkpoint), predict (label and probabilities), evaluate (accuracy, F1, confusion matrix).",
                  no_args_is_help=True)

# after `app` exists: corpusforge.cli imports this module at its end, so either may be imported first
from corpusforge.api import classify_config as train_config  # noqa: E402 - the API builds the config
from corpusforge.api import preset_names  # noqa: E402
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

FileArg = Annotated[Path, typer.Argument(metavar="FILE", help="TSV/CSV/JSONL with a text and a label column.")]


@app.command("train")
def train(
    train_file: Annotated[Path, typer.Argument(metavar="TRAIN_FILE", help=(
        "Labelled records: TSV/CSV (a header row) or JSONL, with a text column (text, sentence, review, ...) and a "
        "label column (label, class, sentiment, ...); integer labels stay integers."))],
    preset: Annotated[str, typer.Option("--preset", metavar="NAME|FILE.yaml",
                                        help=f"One of {', '.join(preset_names('classify'))} (shipped with the package: "
                                             "configs/classify/NAME.yaml in the repository), or the path to a YAML "
                                             "of that shape.")],
    valid: Annotated[Optional[Path], typer.Option("--valid", metavar="FILE",
                                                  help="Validation records (else the preset's held-out fraction).")] = None,
    test: Annotated[Optional[Path], typer.Option("--test", metavar="FILE",
                                                 help="Test records, scored after training (labelled).")] = None,
    init: Annotated[Optional[str], typer.Option("--init", metavar="ID", help=(
        "Fine-tune this pre-trained checkpoint: a bert lm artifact (`lm train --preset bert-mlm-small`) or a "
        "classify artifact; its shape and tokenizer are used."))] = None,
    text_column: Annotated[Optional[str], typer.Option("--text-column", help="The text column (default: found by "
                                                       "name: text, sentence, review, content, ...).")] = None,
    label_column: Annotated[Optional[str], typer.Option("--label-column", help="The label column (default: label, "
                                                        "labels, class, category, sentiment, ...).")] = None,
    set_: SetOpt = None,
    processes: ProcessesOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Read the labelled records, train the tokenizer (and word vectors when the preset has them), encode, train the
    preset's classifier and score it on the validation (and test) records: accuracy, macro F1, the confusion matrix
    (reusing what exists).

    --set keys address the classify section by default (train.max_iters=500, model.pooling=mean, finetune=head);
    prefix corpus., tokenizer., embeddings., runner. or tracking. to reach the other sections. A newly trained model is
    registered in MLflow under its name as a pyfunc that returns labels and probabilities (`registered_model`;
    null with `registered_model_reason` when none is).
    """
    from corpusforge.tasks.config import ConfigError

    _files_exist(train_file, valid, test)
    try:
        config = train_config(train_file, preset, valid, test, init, with_processes(set_, processes), text_column, label_column)
    except ConfigError as exc:
        _fail(str(exc), 2)
    summary = _run_flow(config, _store(store), Path.cwd(), as_json)
    _print_result(summary, as_json, trained_payload(summary, "classify", preset))


def _find_model(artifact_id: str, store: Optional[str]) -> Path:
    return _find_step_artifact(artifact_id, store, "classify", "a classifier (classify)").path


def _load(path: Path):
    from corpusforge.tasks.classify.inference import load_classifier

    try:
        return load_classifier(path)
    except (OSError, ValueError) as exc:
        _fail(f"{path}: cannot load the model: {exc}", 1)


@app.command("predict")
def predict(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="classify artifact id or a unique prefix.")],
    texts: Annotated[list[str], typer.Argument(metavar="TEXT...", help="One or more texts to classify.")],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Classify each TEXT: its label and the probability of every class."""
    classifier = _load(_find_model(artifact_id, store))
    rows = classifier.predict(texts)
    if as_json:
        print_json({"id": artifact_id, "predictions": [{"text": t, **r} for t, r in zip(texts, rows)]},
                   ensure_ascii=False)
        return
    for text, row in zip(texts, rows):
        probs = "  ".join(f"{c} {p:.3f}" for c, p in row["probabilities"].items())
        out.print(f"[bold]{row['label']}[/]  ({probs})  {text}", highlight=False)


def _labelled(path: Path, text_column: Optional[str], label_column: Optional[str]):
    """The labelled rows of a TSV/CSV/JSONL file (columns found by name unless given), read by the corpus readers'
    rules (a .tsv has no quoting; ragged rows are dropped and counted): corpusforge.storage.labelled.Labelled."""
    from corpusforge.api import LABEL_COLUMNS, TEXT_COLUMNS
    from corpusforge.storage.labelled import LabelledError, read_labelled

    if not path.is_file():
        _fail(f"{path}: no such file", 2)
    try:
        rows = read_labelled(path, (text_column,) if text_column else TEXT_COLUMNS,
                             (label_column,) if label_column else LABEL_COLUMNS)
    except LabelledError as exc:
        _fail(f"{exc} (name the columns with --text-column/--label-column)" if "needs a text" in str(exc)
              else str(exc), 2)
    if not rows.texts:
        _fail(f"{path}: no labelled records ({rows.summary()})", 2)
    return rows


@app.command("evaluate")
def evaluate(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="classify artifact id or a unique prefix.")],
    file: FileArg,
    text_column: Annotated[Optional[str], typer.Option("--text-column", help="The text column (default: found by "
                                                       "name).")] = None,
    label_column: Annotated[Optional[str], typer.Option("--label-column", help="The label column (default: found "
                                                        "by name).")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", metavar="PNG",
                                                 help="Also draw the confusion matrix into PNG.")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Score a classifier on any labelled FILE: accuracy, macro F1, each class's precision/recall/F1 and the
    confusion matrix (rows: true class, columns: predicted)."""
    import time

    path = _find_model(artifact_id, store)
    rows = _labelled(file, text_column, label_column)
    classifier = _load(path)
    started = time.perf_counter()
    try:
        report = classifier.evaluate(rows.texts, rows.labels)
    except ValueError as exc:
        _fail(str(exc), 2)
    seconds = time.perf_counter() - started
    if plot is not None:
        from corpusforge.tasks.confusion import plot_confusion

        plot_confusion(report["confusion_matrix"], classifier.classes, plot,
                       f"{file.name}: accuracy {report['accuracy']:.3f}")
    result = {"id": artifact_id, "file": str(file), "classes": classifier.classes, **report, **rows.accounting(),
              "seconds": seconds,
              **({"plot": str(plot)} if plot is not None else {})}
    if as_json:
        print_json(result, ensure_ascii=False)
        return
    out.print(f"accuracy {report['accuracy']:.4f}  macro F1 {report['f1']:.4f}  ({report['records']} records, "
              f"{seconds:.1f} s)", highlight=False)
    out.print(rows.summary(), highlight=False, style="yellow" if rows.dropped else None)
    width = max(len(str(c)) for c in classifier.classes)
    out.print(f"{'class':<{width}}  precision  recall     f1  support", highlight=False)
    for c, s in report["per_class"].items():
        out.print(f"{c:<{width}}  {s['precision']:9.4f}  {s['recall']:6.4f}  {s['f1']:.4f}  {s['support']:7d}",
                  highlight=False)
    out.print("confusion matrix (rows: true, columns: predicted):", highlight=False)
    for c, row in zip(classifier.classes, report["confusion_matrix"]):
        out.print(f"{str(c):<{width}}  " + "  ".join(f"{v:6d}" for v in row), highlight=False)
    if plot is not None:
        out.print(f"confusion matrix: {plot}", highlight=False)

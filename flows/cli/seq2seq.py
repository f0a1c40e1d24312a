"""``corpusforge seq2seq ...``: train an encoder-decoder with a preset (on line-aligned pairs, or on a JSONL file of
documents and reference summaries), translate, summarize, evaluate (BLEU/chrF or ROUGE).

``seq2seq train`` runs the whole pipeline flow (corpus of pairs -> joint tokenizer + encode -> seq2seq -> its
evaluation) with the preset's settings, so every upstream step is reused when it already exists. ``translate`` and
``evaluate`` read a published seq2seq artifact through the catalog and never start Prefect.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand

app = typer.Typer(help="Encoder-decoders (translation, summarization): train (GRU with or without attention, "
                       "Transformer), translate, summarize, evaluate (BLEU, chrF, ROUGE).", no_args_is_help=True)

# after `app` exists: corpusforge.cli imports this module at its end, so either may be imported first
from corpusforge.api import preset_names  # noqa: E402
from corpusforge.api import seq2seq_config as train_config  # noqa: E402 - the API builds the config
from corpusforge.cli.common import (  # noqa: E402
    JsonOpt,
    SetOpt,
    StoreOpt,
    _fail,
    _intact,
    _files_exist,
    _print_result,
    _run_flow,
    _store,
    out,
    print_json, ProcessesOpt, with_processes,
)

BeamOpt = Annotated[Optional[int], typer.Option("--beam", min=1, help="Beam size (1: greedy). Default: as the "
                                                                      "model's evaluation decoded (else 5, length "
                                                                      "penalty 0.6).")]
# `--valid SRC TGT` (line-aligned pairs) or `--valid FILE.jsonl` (records): argv cannot hold a NUL, so two files
# travel as one value joined by it (_OneOrTwoFiles)
_PAIR = "\0"
RECORD_SUFFIXES = (".jsonl", ".json", ".ndjson", ".csv", ".tsv", ".parquet")


def _is_records(name: str) -> bool:
    """A file of records by its name (compressed ones too: train.jsonl.gz)."""
    lowered = name.lower()
    for suffix in (".gz", ".bz2", ".xz", ".zst"):
        lowered = lowered.removesuffix(suffix)
    return lowered.endswith(RECORD_SUFFIXES)


class _OneOrTwoFiles(TyperCommand):
    """``seq2seq train``'s --valid/--test take two files (``--valid SRC TGT``, line-aligned pairs) or one file of
    records (``--valid dev.jsonl``, a summarization preset's): one when it names a records file (by its suffix) or
    when an option or nothing follows it, else two."""

    def parse_args(self, ctx, args):
        return super().parse_args(ctx, join_pairs(args))


def join_pairs(args: list[str]) -> list[str]:
    """The command line with each two-file --valid/--test as one value (:class:`_OneOrTwoFiles`)."""
    fixed, i = [], 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            fixed += args[i:]
            break
        if arg in ("--valid", "--test") and i + 2 < len(args) and not _is_records(args[i + 1]) \
                and not args[i + 2].startswith("-"):
            fixed += [arg, args[i + 1] + _PAIR + args[i + 2]]
            i += 3
            continue
        fixed.append(arg)
        i += 1
    return fixed


def _files(value: Optional[str]) -> Path | tuple[Path, Path] | None:
    """--valid/--test as given: one path, or a (SRC, TGT) pair."""
    if value is None:
        return None
    parts = value.split(_PAIR)
    return Path(parts[0]) if len(parts) == 1 else (Path(parts[0]), Path(parts[1]))


HeldOutOpt = Optional[str]


@app.command("train", cls=_OneOrTwoFiles)
def train(
    src_file: Annotated[Path, typer.Argument(metavar="SRC_FILE|FILE.jsonl",
                                             help="Source sentences, one per line; or, with a summarization preset "
                                                  "(scitldr-*), one JSONL file of records (an abstract and its "
                                                  "reference summaries).")],
    tgt_file: Annotated[Optional[Path], typer.Argument(metavar="TGT_FILE",
                                                       help="Their translations, line by line (not with a records "
                                                            "file).")] = None,
    preset: Annotated[str, typer.Option("--preset", metavar="NAME|FILE.yaml",
                                        help=f"One of {', '.join(preset_names('seq2seq'))} (shipped with the package: "
                                             "configs/seq2seq/NAME.yaml in the repository), or the path to a YAML "
                                             "of that shape.")] = ...,
    valid: Annotated[HeldOutOpt, typer.Option("--valid", metavar="SRC TGT|FILE",
                                              help="Validation pairs, two line-aligned files (a records file with a "
                                                   "summarization preset); else the preset's held-out fraction.")] = None,
    test: Annotated[HeldOutOpt, typer.Option("--test", metavar="SRC TGT|FILE",
                                             help="Test pairs (or records), scored after training.")] = None,
    set_: SetOpt = None,
    processes: ProcessesOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Read the pairs, train the joint tokenizer, encode, train the preset's encoder-decoder and score its outputs on
    the validation (and test) split (reusing what exists): translations with BLEU/chrF, or, with a summarization
    preset (seq2seq.task: summarize), summaries with ROUGE-1/2/L beside Lead-1 and the extractive oracle.

    --set keys address the seq2seq section by default (train.max_iters=200, model.attention=luong-dot, decode.beam=1,
    direction=both); prefix corpus., tokenizer., runner. or tracking. to reach the other sections. A newly trained
    model is registered in MLflow under its name as a pyfunc that translates (or summarizes); the JSON result has
    `registered_model` (null with `registered_model_reason` when none is).
    """
    from corpusforge.tasks.config import ConfigError

    held_valid, held_test = _files(valid), _files(test)
    _files_exist((src_file, tgt_file), held_valid, held_test)
    from corpusforge.api import split_pretraining, with_init

    try:
        pretraining, config = split_pretraining(train_config(src_file, tgt_file, preset, held_valid, held_test,
                                                             with_processes(set_, processes)))
    except ConfigError as exc:
        _fail(str(exc), 2)
    pretrained = None
    if pretraining is not None:  # the preset's denoising pre-training, a run of its own; the model starts from it
        if not as_json:
            out.print(f"pre-training ({pretraining['seq2seq'].get('task', 'denoise')}) first: "
                      f"{pretraining['seq2seq']['name']}", highlight=False)
        pre = _run_flow(pretraining, _store(store), Path.cwd(), as_json)["stages"]["seq2seq"]
        pretrained = {"id": pre["id"], "name": pre["name"], "reused": pre["reused"],
                      "metrics": {k: v for k, v in (pre.get("metrics") or {}).items()
                                  if k in ("val_loss", "val_ppl", "tokens_seen", "train_seconds", "steps")}}
        config = with_init(config, pre["id"])
    summary = _run_flow(config, _store(store), Path.cwd(), as_json)
    model = summary["stages"]["seq2seq"]
    steps = {s["step"]: s for s in summary["steps"] if s["step"] != "corpus_shard"}
    evaluation = _manifest(steps["seq2seq_eval"]["path"]) if "seq2seq_eval" in steps else {}
    from corpusforge.tasks.track import registered_model_fields

    payload = {"id": model["id"], "path": model["path"], "name": model["name"], "reused": model["reused"],
               "metrics": {**(model.get("metrics") or {}), **(evaluation.get("metrics") or {})},
               "evaluation": evaluation.get("id"), "preset": preset,
               "accounting": (summary.get("corpus") or {}).get("accounting"),
               **registered_model_fields(summary, "seq2seq"),
               "steps": {step: s["id"] for step, s in steps.items()},
               **({"pretrained": pretrained} if pretrained else {})}
    _print_result(summary, as_json, payload)


def _manifest(path: str | Path) -> dict:
    from corpusforge.storage.store import read_manifest

    return read_manifest(Path(path)) or {}


def _find_model(artifact_id: str, store: Optional[str]) -> Path:
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    try:
        found = Catalog(ArtifactStore(_store(store))).get(artifact_id)
    except LookupError as exc:  # an unknown or ambiguous id is bad usage
        _fail(str(exc.args[0]), 2)
    step = found.manifest.get("step")
    if step == "seq2seq_eval":  # the evaluation names its model: point there
        model = next((i["id"][:12] for i in found.manifest.get("inputs") or [] if i.get("step") == "seq2seq"), "?")
        _fail(f"{artifact_id}: is the evaluation of seq2seq model {model}, not the model; give {model}", 2)
    if step != "seq2seq":
        _fail(f"{artifact_id}: is a {step!r} artifact, not a seq2seq model", 2)
    return _intact(found).path


def _load(path: Path):
    from corpusforge.tasks.seq2seq.inference import load_translator

    try:
        return load_translator(path)
    except (OSError, ValueError) as exc:
        _fail(f"{path}: cannot load the model: {exc}", 1)


def _decode_defaults(model_path: Path | None = None, store: Optional[Path] = None) -> dict:
    """How the model is decoded unless flags say otherwise (beam, length penalty, most and fewest target tokens, no
    repeated n-gram): as its newest evaluation in the store decoded it (its run's ``seq2seq.decode``, in the
    evaluation's scores.json: a model trained with ``decode.beam=1`` translates greedily), else seq2seq.decode's
    defaults."""
    import json

    from corpusforge.tasks.seq2seq.config import DecodeConfig

    cfg = DecodeConfig()
    settings = {"beam": cfg.beam, "length_penalty": cfg.length_penalty, "max_len": cfg.max_len,
                "min_len": cfg.min_len, "no_repeat_ngram_size": cfg.no_repeat_ngram_size}
    if model_path is not None and _task(model_path) == "extract":  # a sentence scorer's own settings
        settings.update(sentences=cfg.sentences, max_words=cfg.max_words)
    if model_path is not None:
        from corpusforge.storage.catalog import Catalog
        from corpusforge.storage.store import ArtifactStore, read_manifest

        model_id = (read_manifest(Path(model_path)) or {}).get("id")
        evaluations = Catalog(ArtifactStore(_store(store))).find(step="seq2seq_eval", input_id=model_id,
                                                                 latest=True) if model_id else []
        for found in evaluations:
            try:
                decode = json.loads((Path(found.path) / "scores.json").read_text(encoding="utf-8"))["decode"]
                settings.update({k: decode[k] for k in settings if k in decode})
            except (OSError, ValueError, KeyError, TypeError):
                pass  # an evaluation without its decode settings: the defaults
    return settings


@app.command("translate")
def translate(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="seq2seq artifact id or a unique prefix.")],
    text: Annotated[str, typer.Argument(help="The text to translate.")],
    beam: BeamOpt = None,
    direction: Annotated[Optional[str], typer.Option("--direction", help="A model trained both ways: forward, "
                                                     "backward or FROM-TO (field names, e.g. src-tgt).")] = None,
    heatmap: Annotated[Optional[Path], typer.Option("--heatmap", metavar="PNG",
                                                    help="Also draw the alignment heatmap of the printed translation into PNG.")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Translate TEXT with a trained encoder-decoder."""
    path = _find_model(artifact_id, store)
    translator = _load(path)
    settings = _decode_defaults(path, store)
    if beam is not None:
        settings["beam"] = beam
    drawn = None
    try:
        d = translator.direction(direction)
        if heatmap is None:
            result = translator.translate([text], direction=d.key, **settings)[0]
        else:  # one decode: the heatmap shows the sentence printed (beam search included)
            from corpusforge.tasks.seq2seq.report import alignment_heatmap

            drawn, result = alignment_heatmap(path, text, heatmap, direction=d.key, translator=translator,
                                              **settings)
            drawn = str(drawn)
    except ValueError as exc:
        _fail(str(exc), 2)
    if as_json:
        print_json({"id": artifact_id, "source": text, "translation": result, "direction": d.key,
                    "beam": settings["beam"], **({"heatmap": drawn} if drawn else {})}, ensure_ascii=False)
        return
    sys.stdout.write(result + "\n")
    if drawn:
        out.print(f"alignment heatmap: {drawn}", highlight=False)


def _read_lines(path: Path, what: str) -> list[str]:
    from corpusforge.storage.formats import text_lines

    if not path.is_file():
        _fail(f"{path}: no such file ({what})", 2)
    try:
        return text_lines(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[: exc.start].count(b"\n") + 1
        _fail(f"{path}: line {line} is not UTF-8 ({what})", 2)


def _documents(path: Path, source_key: str, target_key: str | None) -> tuple[list[str], list[list[str]] | None]:
    """A JSONL file of documents: each record's ``source_key`` (a text, or a list of sentences read one per line as
    training read them: reader.join_lists) and, when ``target_key``, its references (a text or a list). One line
    of error, naming the record, for anything else."""
    import json

    if not path.is_file():
        _fail(f"{path}: no such file", 2)
    sources: list[str] = []
    references: list[list[str]] = []
    with path.open(encoding="utf-8-sig") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                _fail(f"{path}: line {lineno} is not JSON ({exc})", 2)
            for key in (source_key, target_key):
                if key is None:
                    continue
                value = record.get(key) if isinstance(record, dict) else None
                ok = isinstance(value, str) or (isinstance(value, list) and value
                                               and all(isinstance(v, str) for v in value))
                if not ok:
                    _fail(f"{path}: line {lineno}: {key!r} is not a text or a list of texts", 2)
            source = record[source_key]
            sources.append("\n".join(s.strip() for s in source if s.strip()) if isinstance(source, list) else source)
            if target_key is not None:
                target = record[target_key]
                refs = [t.strip() for t in ([target] if isinstance(target, str) else target) if t.strip()]
                if not refs:
                    _fail(f"{path}: line {lineno}: {target_key!r} holds no reference", 2)
                references.append(refs)
    if not sources:
        _fail(f"{path}: no documents", 2)
    return sources, references if target_key is not None else None


def _task(model_path: Path) -> str:
    """What the model was trained to do (its config.json's translation.task): translate, summarize, extract or
    denoise."""
    import json

    try:
        spec = json.loads((model_path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "translate"
    return (spec.get("translation") or {}).get("task", "translate")


SourceKeyOpt = Annotated[str, typer.Option("--source-key", help="JSONL: the key of each document (a text, or a list "
                                                                 "of sentences).")]
TargetKeyOpt = Annotated[str, typer.Option("--target-key", help="JSONL: the key of its reference summaries (a "
                                                                 "text, or a list).")]


@app.command("summarize")
def summarize(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="seq2seq artifact id (a summarization model) or a "
                                                                 "unique prefix.")],
    file_or_text: Annotated[str, typer.Argument(metavar="FILE_OR_TEXT", help=(
        "A .jsonl file (one document per record, its --source-key), another text file (the whole file is one "
        "document, its sentences one per line), or the document's text itself."))],
    beam: BeamOpt = None,
    sentences: Annotated[Optional[int], typer.Option("--sentences", min=1, help=(
        "An extractive model: the sentences a summary takes (default: as its evaluation, else 1)."))] = None,
    source_key: SourceKeyOpt = "source",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Also write the summaries here, one per "
                                                                          "line.")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Summarize a document (or each document of a JSONL file) with a trained encoder-decoder, decoded as its
    evaluation decoded (beam, length penalty, min_len, no_repeat_ngram_size)."""
    path = _find_model(artifact_id, store)
    given = Path(file_or_text)
    try:
        is_file = given.is_file()
    except OSError:  # a text too long to be a path
        is_file = False
    if is_file and _is_records(given.name):
        documents, _ = _documents(given, source_key, None)
    elif is_file:
        documents = [given.read_text(encoding="utf-8-sig")]
    else:
        documents = [file_or_text]
    translator = _load(path)
    if translator.task not in ("summarize", "extract"):
        out.print(f"note: {artifact_id} was trained to translate, not to summarize; its outputs follow", style="yellow")
    settings = _decode_defaults(path, store)
    if beam is not None:
        settings["beam"] = beam
    if sentences is not None:
        if translator.task != "extract":
            _fail("--sentences: only an extractive model (task extract) chooses sentences; this one writes its summary", 2)
        settings["sentences"] = sentences
    try:
        summaries = translator.summarize(documents, **settings)
    except ValueError as exc:
        _fail(str(exc), 2)
    if output is not None:
        output.write_text("".join(h.replace("\n", " ") + "\n" for h in summaries), encoding="utf-8")
    if as_json:
        print_json({"id": artifact_id, "beam": settings["beam"], "documents": len(documents),
                    "summaries": summaries}, ensure_ascii=False)
        return
    for summary in summaries:
        sys.stdout.write(summary.replace("\n", " ") + "\n")


@app.command("evaluate")
def evaluate(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="seq2seq artifact id or a unique prefix.")],
    src_file: Annotated[Path, typer.Argument(metavar="SRC_FILE|FILE.jsonl", help=(
        "Sentences to translate, one per line; with --metric rouge, a JSONL file of documents and their reference "
        "summaries (--source-key, --target-key).")) ],
    ref_file: Annotated[Optional[Path], typer.Argument(metavar="REF_FILE", help=(
        "Their reference translations (summaries), line by line; not with a JSONL file."))] = None,
    metric: Annotated[Optional[str], typer.Option("--metric", metavar="bleu|rouge", help=(
        "bleu: sacreBLEU BLEU and chrF; rouge: ROUGE-1/2/L F1 (0-100, rouge-score, Porter stemmer) against each "
        "document's references, beside Lead-1 and the one-sentence extractive oracle. Default: rouge for a "
        "summarization model, else bleu."))] = None,
    rule: Annotated[str, typer.Option("--rule", metavar="best|rouge1", help=(
        "--metric rouge with several references: best (each metric its best reference) or rouge1 (the SciTLDR "
        "authors' rule: the reference with the best ROUGE-1 gives all three)."))] = "best",
    beam: BeamOpt = None,
    direction: Annotated[Optional[str], typer.Option("--direction", help="A model trained both ways: forward, "
                                                     "backward or FROM-TO.")] = None,
    source_key: SourceKeyOpt = "source",
    target_key: TargetKeyOpt = "target",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Also write the outputs here.")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Translate SRC_FILE and score it against REF_FILE: sacreBLEU BLEU and chrF (with their signatures) and the
    lowercased tokenized BLEU of the PyTorch tutorials. With --metric rouge (a summarization model's default):
    summarize the documents of FILE.jsonl (or SRC_FILE's lines) and score ROUGE-1/2/L against their references
    (JSON keys rouge1, rouge2, rougeL, and lead1_rouge1... and oracle_rouge1... on the same documents)."""
    import time

    from corpusforge.tasks.seq2seq.inference import score

    if metric not in (None, "bleu", "rouge"):
        _fail(f"--metric: bleu or rouge, not {metric!r}", 2)
    if rule not in ("best", "rouge1"):
        _fail(f"--rule: best or rouge1, not {rule!r}", 2)
    path = _find_model(artifact_id, store)
    if metric is None:
        metric = "rouge" if _task(path) in ("summarize", "extract") else "bleu"
    if ref_file is None:
        if metric != "rouge" or not _is_records(src_file.name):
            _fail("give SRC_FILE REF_FILE (line-aligned), or --metric rouge with one FILE.jsonl", 2)
        sources, ref_lists = _documents(src_file, source_key, target_key)
        references = None
    else:
        sources, references = _read_lines(src_file, "sources"), _read_lines(ref_file, "references")
        ref_lists = [[r] for r in references]
    if references is not None and len(sources) != len(references):
        from corpusforge.storage.aligned import AlignedCounts, aligned_file, check_aligned_counts

        try:  # the lines by the readers' rule, with the lone carriage returns named where they are the cause
            check_aligned_counts({"sources": aligned_file(src_file, src_file.name),
                                  "references": aligned_file(ref_file, ref_file.name)})
        except AlignedCounts as exc:
            _fail(str(exc), 2)
        _fail(f"{src_file} has {len(sources)} lines and {ref_file} {len(references)}: they must be line-aligned", 2)
    if not sources:
        _fail(f"{src_file}: no lines to translate", 2)
    translator = _load(path)
    settings = _decode_defaults(path, store) if metric == "rouge" else _decode_defaults()
    if beam is not None:
        settings["beam"] = beam
    started = time.perf_counter()
    try:
        hyps = (translator.summarize(sources, **settings) if metric == "rouge"
                else translator.translate(sources, direction=direction, **settings))
    except ValueError as exc:
        _fail(str(exc), 2)
    seconds = time.perf_counter() - started
    if output is not None:
        output.write_text("".join(h.replace("\n", " ") + "\n" for h in hyps), encoding="utf-8")
    if metric == "rouge":
        from corpusforge.models.summ_eval import baselines, rouge
        from corpusforge.tasks.seq2seq.build import lines

        documents = [lines(s) or [s] for s in sources]
        scores = {**rouge(hyps, ref_lists, rule), **baselines(documents, ref_lists, rule)}
        report = {"id": artifact_id, "documents": len(sources), "references": sum(len(r) for r in ref_lists),
                  "file": str(src_file), "rule": rule, "beam": settings["beam"], **scores, "seconds": seconds}
        if as_json:
            print_json(report, ensure_ascii=False)
            return
        out.print(f"ROUGE-1/2/L {scores['rouge1']:.2f} / {scores['rouge2']:.2f} / {scores['rougeL']:.2f}  "
                  f"({len(sources)} documents, {report['references']} references, {rule} reference, beam "
                  f"{settings['beam']}, {seconds:.1f} s)", highlight=False)
        for label, prefix in (("Lead-1", "lead1_"), ("oracle (1 sentence)", "oracle_")):
            out.print(f"{label:<20} {scores[prefix + 'rouge1']:.2f} / {scores[prefix + 'rouge2']:.2f} / "
                      f"{scores[prefix + 'rougeL']:.2f}", highlight=False)
        return
    scores = score(hyps, references)
    report = {"id": artifact_id, "sources": str(src_file), "references": str(ref_file), "beam": settings["beam"],
              "direction": translator.direction(direction).key, **scores, "seconds": seconds}
    if as_json:
        print_json(report, ensure_ascii=False)
        return
    out.print(f"BLEU {scores['bleu']:.2f}  chrF {scores['chrf']:.2f}  lowercased tokenized BLEU "
              f"{scores['bleu_tok_lc']:.2f}  ({scores['sentences']} sentences, beam {settings['beam']}, "
              f"{seconds:.1f} s)", highlight=False)
    out.print(f"BLEU:  {scores['bleu_signature']}\nchrF:  {scores['chrf_signature']}\n"
              f"BLEU (lowercased): {scores['bleu_tok_lc_signature']}", highlight=False)

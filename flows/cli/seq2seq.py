"""``corpusforge seq2seq ...``: train an encoder-decoder on line-aligned pairs with a preset, translate, evaluate.

``seq2seq train`` runs the whole pipeline flow (corpus of pairs -> joint tokenizer + encode -> seq2seq -> its
evaluation) with the preset's settings, so every upstream step is reused when it already exists. ``translate`` and
``evaluate`` read a published seq2seq artifact through the catalog and never start Prefect.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(help="Encoder-decoders (translation): train (GRU with or without attention, Transformer), "
                       "translate, evaluate (BLEU, chrF).", no_args_is_help=True)

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
    print_json,
)

PairOpt = tuple[Path, Path]
BeamOpt = Annotated[Optional[int], typer.Option("--beam", min=1, help="Beam size (1: greedy). Default: 5, "
                                                                      "seq2seq.decode's default (length penalty 0.6).")]


@app.command("train")
def train(
    src_file: Annotated[Path, typer.Argument(metavar="SRC_FILE", help="Source sentences, one per line.")],
    tgt_file: Annotated[Path, typer.Argument(metavar="TGT_FILE", help="Their translations, line by line.")],
    preset: Annotated[str, typer.Option("--preset", metavar="NAME|FILE.yaml",
                                        help=f"One of {', '.join(preset_names('seq2seq'))} (shipped with the package: "
                                             "configs/seq2seq/NAME.yaml in the repository), or the path to a YAML "
                                             "of that shape.")],
    valid: Annotated[Optional[PairOpt], typer.Option("--valid", metavar="SRC TGT",
                                                     help="Validation pairs (else the preset's held-out fraction).")] = None,
    test: Annotated[Optional[PairOpt], typer.Option("--test", metavar="SRC TGT",
                                                    help="Test pairs, scored after training.")] = None,
    set_: SetOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Read the pairs, train the joint tokenizer, encode, train the preset's encoder-decoder and score its
    translations of the validation (and test) pairs (reusing what exists).

    --set keys address the seq2seq section by default (train.max_iters=200, model.attention=luong-dot, decode.beam=1,
    direction=both); prefix corpus., tokenizer., runner. or tracking. to reach the other sections. A newly trained
    model is registered in MLflow under its name as a pyfunc that translates; the JSON result has `registered_model`
    (null with `registered_model_reason` when none is).
    """
    from corpusforge.tasks.config import ConfigError

    _files_exist((src_file, tgt_file), valid, test)
    try:
        config = train_config(src_file, tgt_file, preset, valid, test, set_ or [])
    except ConfigError as exc:
        _fail(str(exc), 2)
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
               "steps": {step: s["id"] for step, s in steps.items()}}
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


@app.command("evaluate")
def evaluate(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="seq2seq artifact id or a unique prefix.")],
    src_file: Annotated[Path, typer.Argument(metavar="SRC_FILE", help="Sentences to translate, one per line.")],
    ref_file: Annotated[Path, typer.Argument(metavar="REF_FILE", help="Their reference translations, line by line.")],
    beam: BeamOpt = None,
    direction: Annotated[Optional[str], typer.Option("--direction", help="A model trained both ways: forward, "
                                                     "backward or FROM-TO.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Also write the translations here.")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Translate SRC_FILE and score it against REF_FILE: sacreBLEU BLEU and chrF (with their signatures) and the
    lowercased tokenized BLEU of the PyTorch tutorials."""
    import time

    from corpusforge.tasks.seq2seq.inference import score

    path = _find_model(artifact_id, store)
    sources, references = _read_lines(src_file, "sources"), _read_lines(ref_file, "references")
    if len(sources) != len(references):
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
    settings = _decode_defaults()
    if beam is not None:
        settings["beam"] = beam
    started = time.perf_counter()
    try:
        hyps = translator.translate(sources, direction=direction, **settings)
    except ValueError as exc:
        _fail(str(exc), 2)
    seconds = time.perf_counter() - started
    scores = score(hyps, references)
    if output is not None:
        output.write_text("".join(h.replace("\n", " ") + "\n" for h in hyps), encoding="utf-8")
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

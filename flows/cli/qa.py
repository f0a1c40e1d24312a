"""``corpusforge qa ...``: train an extractive question-answering reader on a SQuAD-format file with a preset
(BERT with a start/end head, started from a pre-trained bert artifact), ask it a question over a corpus of passages
(retrieve, then read), and evaluate it on a SQuAD-format file (retrieval and answer scores).

``qa train`` runs the whole pipeline flow (corpus of question-answering records -> qa) with the preset's settings,
so the corpus is reused when it already exists. ``ask`` and ``evaluate`` read a published qa artifact through the
catalog and never start Prefect.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(help="Question answering: train (an extractive BERT reader on SQuAD-format data), ask (retrieve "
                       "passages with BM25, dense or hybrid search, then read the answer), evaluate (SQuAD exact "
                       "match and F1, retrieval top-1/top-5/MRR).", no_args_is_help=True)

# after `app` exists: corpusforge.cli imports this module at its end, so either may be imported first
from corpusforge.api import preset_names  # noqa: E402
from corpusforge.cli.common import (  # noqa: E402
    JsonOpt,
    SetOpt,
    StoreOpt,
    _fail,
    _files_exist,
    _print_result,
    _run_flow,
    _store,
    out,
    print_json,
    trained_payload, ProcessesOpt, with_processes,
)

ModeOpt = Annotated[str, typer.Option("--mode", metavar="bm25|dense|hybrid", help=(
    "How passages are retrieved: bm25 (lexical, the bm25s library), dense (a sentence encoder's cosine: --encoder) "
    "or hybrid (both, fused by reciprocal rank: --encoder, --weights)."))]
EncoderOpt = Annotated[Optional[str], typer.Option("--encoder", metavar="ID", help=(
    "The sentence encoder dense and hybrid retrieval embed with (a sentence_embeddings artifact id or prefix)."))]
WeightsOpt = Annotated[Optional[str], typer.Option("--weights", metavar="W_BM25,W_DENSE", help=(
    "Hybrid: the weights of the BM25 and the dense ranking in the reciprocal rank fusion (default 1,1)."))]
TopOpt = Annotated[int, typer.Option("--top", min=1, help="Passages retrieved and read per question.")]
ChunkOpt = Annotated[int, typer.Option("--chunk-words", min=0, metavar="N", help=(
    "Retrieve and read chunks of N words of each passage instead of whole passages (0: whole passages); a passage "
    "ranks by its best chunk, and an answer's characters are given in its whole passage."))]
OverlapOpt = Annotated[int, typer.Option("--overlap", min=0, metavar="M", help=(
    "Words each chunk shares with the next (--chunk-words), so an answer cut by one chunk is whole in the next."))]


def _weights(value: Optional[str]) -> Optional[tuple[float, float]]:
    if value is None:
        return None
    try:
        a, b = (float(x) for x in value.split(","))
    except ValueError:
        _fail(f"--weights {value}: two numbers, the BM25 and the dense weight (e.g. 1,0.5)", 2)
    if a < 0 or b < 0 or a + b == 0:
        _fail(f"--weights {value}: weights are >= 0 and not both 0", 2)
    return a, b


@app.command("train")
def train(
    train_file: Annotated[Path, typer.Argument(metavar="FILE", help=(
        "Questions with answers in SQuAD v1.1 format (.json: data -> articles -> paragraphs -> context and qas, "
        "each answer's text and character offset answer_start)."))],
    preset: Annotated[str, typer.Option("--preset", metavar="NAME|FILE.yaml",
                                        help=f"One of {', '.join(preset_names('qa'))} (shipped with the package: "
                                             "configs/qa/NAME.yaml in the repository), or the path to a YAML of "
                                             "that shape.")],
    valid: Annotated[Optional[Path], typer.Option("--valid", metavar="FILE", help=(
        "Held-out questions (SQuAD format) to score on; else the preset's cross-validation over articles "
        "(qa.folds) or held-out fraction."))] = None,
    init: Annotated[Optional[str], typer.Option("--init", metavar="ID", help=(
        "The pre-trained checkpoint the reader starts from: a bert lm artifact (`lm train --preset "
        "bert-qa-small`) or a qa artifact; its shape and its tokenizer are used."))] = None,
    set_: SetOpt = None,
    processes: ProcessesOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Read the questions, train the preset's reader and score it: SQuAD exact match and F1 on each question's own
    paragraph beside the sliding-window baseline, BM25 retrieval over the scored paragraphs (top-1, top-5, MRR),
    and the answers read from the retrieved passages (reusing what exists). With qa.folds = k the scores are
    cross-validated over articles (k readers, each scoring the articles it did not see).

    --set keys address the qa section by default (train.max_iters=500, folds=5, stride=64); prefix corpus.,
    runner. or tracking. to reach the other sections. A newly trained reader is registered in MLflow under its name
    as a pyfunc that answers (question, context) rows (`registered_model`; null with `registered_model_reason`
    when none is).
    """
    from corpusforge.api import qa_config
    from corpusforge.tasks.config import ConfigError

    _files_exist(train_file, valid)
    try:
        config = qa_config(train_file, preset, valid, init, with_processes(set_, processes))
    except ConfigError as exc:
        _fail(str(exc), 2)
    summary = _run_flow(config, _store(store), Path.cwd(), as_json)
    _print_result(summary, as_json, trained_payload(summary, "qa", preset))


def _call(function, *args, **kwargs):
    """An API call whose known errors (a bad id, file, mode) are one line and exit 2."""
    from corpusforge.tasks.config import ConfigError

    try:
        return function(*args, **kwargs)
    except (ConfigError, LookupError) as exc:
        _fail(str(exc.args[0] if exc.args else exc), 2)


@app.command("ask")
def ask(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help=(
        "What answers (an artifact id or unique prefix): a qa reader (extractive: the best span of the passages) or "
        "a model that generates (an lm or post_training artifact, e.g. a GPT fine-tuned with SFT: the passages and "
        "the question in a prompt, its greedy answer)."))],
    question: Annotated[str, typer.Argument(metavar="QUESTION", help="The question to answer.")],
    corpus: Annotated[Path, typer.Option("--corpus", metavar="FILE", help=(
        "The passages answers come from: a SQuAD-format .json (its paragraphs), a .jsonl (each record's context, "
        "else text), or text (passages separated by a blank line; without blank lines, one per line)."))],
    top: TopOpt = 5,
    mode: ModeOpt = "bm25",
    encoder: EncoderOpt = None,
    weights: WeightsOpt = None,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", min=1, help=(
        "A generating model: the longest answer, in tokens."))] = 32,
    chunk_words: ChunkOpt = 0,
    overlap: OverlapOpt = 0,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer QUESTION from --corpus: retrieve the --top passages nearest it (--mode), then read them with a reader
    (extractive) or put them in a generating model's prompt (generative: retrieval-augmented generation), and print
    the answer with its score and the passage it came from."""
    from corpusforge.api import _qa_ask

    if not corpus.is_file():
        _fail(f"{corpus}: no such file", 2)
    found = _call(_qa_ask, artifact_id, question, corpus, top=top, mode=mode, encoder=encoder,
                  weights=_weights(weights), max_new_tokens=max_new_tokens, chunk_words=chunk_words, overlap=overlap,
                  store=_store(store))
    if as_json:
        print_json(found, ensure_ascii=False)
        return
    if not found["answer"]:
        out.print("no answer: " + ("the retrieved passages hold no token the reader could point at"
                                   if found["reader"] == "extractive" else "the model generated none"), highlight=False)
        return
    if found["passage"] is None:  # a generated answer that copies no passage read
        out.print(f"{found['answer']}", style="bold green", highlight=False)
        out.print(f"score {found['score']:.2f} (mean log-probability per token); generated from "
                  f"{found['passages_read']} passage(s), none of which holds this text"
                  + (f"; {found['passages_left_out']} left out (the model's block is full)"
                     if found["passages_left_out"] else ""), highlight=False)
        return
    passage, a, b = found["passage"], found["start"], found["end"]
    from rich.markup import escape

    shown = escape(passage[max(0, a - 120): a]) + "[bold]" + escape(passage[a:b]) + "[/bold]" + escape(passage[b: b + 120])
    out.print(f"{found['answer']}", style="bold green", highlight=False)
    out.print(f"score {found['score']:.2f}, passage {found['passage_index'] + 1} of the corpus ({mode} rank "
              f"{next(r['rank'] for r in found['retrieved'] if r['passage_index'] == found['passage_index'])} of "
              f"{len(found['retrieved'])})", highlight=False)
    out.print(("... " if a > 120 else "") + shown + (" ..." if b + 120 < len(passage) else ""))


@app.command("evaluate")
def evaluate(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="qa artifact id or a unique prefix.")],
    file: Annotated[Path, typer.Argument(metavar="FILE", help="Questions with answers in SQuAD v1.1 format (.json).")],
    top: TopOpt = 5,
    mode: ModeOpt = "bm25",
    encoder: EncoderOpt = None,
    weights: WeightsOpt = None,
    chunk_words: ChunkOpt = 0,
    overlap: OverlapOpt = 0,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer every question of FILE by retrieving from FILE's own paragraphs (--mode) and reading the --top
    passages: SQuAD exact match and F1 (0-100, the official normalisation), retrieval top-1, top-5 and MRR against
    each question's own paragraph, and the reader on that paragraph alone (f1_gold_paragraph) beside the
    sliding-window baseline (Rajpurkar et al. 2016)."""
    import time

    from corpusforge.api import _qa_evaluate

    if not file.is_file():
        _fail(f"{file}: no such file", 2)
    started = time.perf_counter()
    found = _call(_qa_evaluate, artifact_id, file, mode=mode, encoder=encoder, top=top, weights=_weights(weights),
                  chunk_words=chunk_words, overlap=overlap, store=_store(store))
    found["seconds"] = time.perf_counter() - started
    if as_json:
        print_json(found, ensure_ascii=False)
        return
    out.print(f"{found['questions']} questions over {found['paragraphs']} paragraphs, {mode} retrieval, top {top} "
              f"read ({found['seconds']:.1f} s)", highlight=False)
    out.print(f"retrieve then read:   exact match {found['exact_match']:5.1f}   F1 {found['f1']:5.1f}", highlight=False)
    out.print(f"gold paragraph:       exact match {found['exact_match_gold_paragraph']:5.1f}   F1 "
              f"{found['f1_gold_paragraph']:5.1f}", highlight=False)
    out.print(f"sliding-window base:  exact match {found['baseline_exact_match']:5.1f}   F1 {found['baseline_f1']:5.1f}",
              highlight=False)
    out.print(f"retrieval:            top-1 {found['retrieval_top1']:.3f}   top-5 {found['retrieval_top5']:.3f}   "
              f"MRR {found['retrieval_mrr']:.3f}", highlight=False)

"""``corpusforge tokenizer ...``: train a tokenizer from files, encode a text with it, compare tokenizers.

``train`` builds a corpus from SOURCES with settings that keep the text as written (one document per
line, clean preset ``raw``, no dedup, everything in train), so a file such as
``low low low low low lower lower newest ...`` reproduces the teaching texts' word counts exactly.
Override any of it with ``--set corpus.split.valid=0.1`` etc.; other ``--set`` keys address the
tokenizer section (``--set min_frequency=3``, ``--set encode=true``).
``encode`` and ``compare`` only read artifacts: no Prefect, no MLflow.
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
    _run_flow,
    _store,
    choices,
    err,
    out,
    print_json,
)

KINDS = ("word", "char", "classic-bpe", "bpe", "byte-bpe", "wordpiece", "unigram")
Kind = choices("TokenizerKind", KINDS)
from corpusforge.api import tokenizer_config as train_config  # noqa: E402 - the API builds the config

app = typer.Typer(help="Train, apply and compare tokenizers (word, char, classic BPE, byte-level BPE, ...).",
                  no_args_is_help=True)


@app.command("train")
def train(
    sources: Annotated[list[Path], typer.Argument(help=SOURCES_HELP)],
    kind: Annotated[Kind, typer.Option("--kind", help="word and char: whole words / characters; classic-bpe: "
                                                      "the teaching texts' BPE (merges); bpe, byte-bpe, wordpiece, "
                                                      "unigram: Hugging Face tokenizers.")],
    vocab_size: Annotated[Optional[int], typer.Option("--vocab-size", min=1, help="Target vocabulary size.")] = None,
    merges: Annotated[Optional[int], typer.Option("--merges", min=0, help="classic-bpe: number of merges.")] = None,
    trace: Annotated[bool, typer.Option("--trace", help="classic-bpe: print every merge and token table.")] = False,
    set_: SetOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Train (or reuse) a tokenizer on SOURCES; print its id, path and evaluation metrics."""
    from corpusforge.tasks.config import ConfigError

    kind = kind.value
    try:
        config = train_config([str(s) for s in sources], kind, vocab_size, merges, trace, set_ or [])
    except ConfigError as exc:
        _fail(str(exc), 2)
    summary = _run_flow(config, _store(store), Path.cwd(), as_json)
    step = next(s for s in summary["steps"] if s["step"] == "tokenizer")
    from corpusforge.storage.store import read_manifest

    manifest = read_manifest(Path(step["path"])) or {}
    path = Path(step["path"])
    payload = {"id": step["id"], "path": step["path"], "name": step["name"], "kind": manifest.get("kind", kind),
               "reused": step["reused"], "vocab_size": manifest.get("vocab_size"),
               "special_tokens": manifest.get("special_tokens"), "metrics": manifest.get("metrics", {}),
               "corpus_id": summary["corpus"]["id"],
               "tokenizer_json": str(path / "tokenizer.json") if (path / "tokenizer.json").exists() else None}
    encoded = [s for s in summary["steps"] if s["step"] == "encode"]
    if encoded:
        payload["encode_id"], payload["encode_path"] = encoded[-1]["id"], encoded[-1]["path"]
    if payload["kind"] == "classic-bpe":
        payload["merges"] = json.loads((path / "classic_bpe.json").read_text(encoding="utf-8"))["merges"]
    trace_json = path / "trace.json"
    if trace and trace_json.exists():
        payload["trace"] = json.loads(trace_json.read_text(encoding="utf-8"))
        print((path / "trace.txt").read_text(encoding="utf-8"), end="", flush=True)
    if as_json:
        print_json(payload, ensure_ascii=False)
        return
    out.print(f"tokenizer {payload['kind']} [bold]{step['id'][:12]}[/] ({'reused' if step['reused'] else 'trained'})"
              f" vocab {payload['vocab_size']} -> {step['path']}", highlight=False)
    _print_table({step["id"][:12]: {**payload["metrics"], "kind": payload["kind"]}})


def _load(artifact_id: str, store: Optional[Path]):
    from corpusforge.models.tokenization import load_tokenizer
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    try:
        found = Catalog(ArtifactStore(_store(store))).get(artifact_id)
    except LookupError as exc:  # an unknown or ambiguous id is bad usage
        _fail(str(exc.args[0]), 2)
    if found.manifest["step"] != "tokenizer":
        _fail(f"{artifact_id} is a {found.manifest['step']} artifact, not a tokenizer", 2)
    return _intact(found), load_tokenizer(found.path)


@app.command("encode")
def encode(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="Tokenizer artifact id (or unique prefix).")],
    text: Annotated[str, typer.Argument(help="The text to encode.")],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Encode TEXT with a trained tokenizer: token strings and ids."""
    _, tok = _load(artifact_id, store)
    ids = tok.encode(text)
    tokens = [tok.id_to_token(i) for i in ids]
    if as_json:
        print_json({"tokens": tokens, "ids": ids, "decoded": tok.decode(ids)}, ensure_ascii=False)
        return
    out.print(" ".join(json.dumps(t, ensure_ascii=False) for t in tokens), highlight=False)
    out.print(" ".join(map(str, ids)), highlight=False)


def _print_table(results: dict[str, dict]) -> None:
    """Plain text, so the table never gets truncated to the terminal's width."""
    from corpusforge.models.tokenization.evaluation import comparison_rows, format_table

    print(format_table(*comparison_rows(results)), flush=True)


@app.command("compare")
def compare(
    artifact_ids: Annotated[list[str], typer.Argument(metavar="ID...", help="Tokenizer artifact ids.")],
    corpus: Annotated[Optional[str], typer.Option(
        "--corpus", help="Re-evaluate all on this corpus artifact's valid split (train if empty); "
                         "default: their stored metrics.")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The evaluation table (fertility, bytes/token, unk/OOV, vocab used, round trip, throughput)."""
    results: dict[str, dict] = {}
    texts = None
    if corpus is not None:
        from corpusforge.storage.catalog import Catalog
        from corpusforge.storage.store import ArtifactStore
        from corpusforge.tasks.tokenizer.train import read_split_texts

        try:
            found = Catalog(ArtifactStore(_store(store))).get(corpus)
        except LookupError as exc:  # an unknown or ambiguous id is bad usage
            _fail(str(exc.args[0]), 2)
        texts = read_split_texts(found.path, "valid") or read_split_texts(found.path, "train")
    for aid in artifact_ids:
        found, tok = _load(aid, store)
        if texts is not None:
            from corpusforge.models.tokenization.evaluation import evaluate_tokenizer

            metrics = evaluate_tokenizer(tok, texts)
        else:
            metrics = dict(found.manifest.get("metrics", {}))
        key = f"{found.manifest['name']}:{found.manifest['id'][:8]}"
        results[key] = {**metrics, "kind": tok.kind, "vocab_size": tok.vocab_size, "id": found.manifest["id"]}
    if as_json:
        print_json(results)
        return
    if not results:
        err.print("nothing to compare")
        return
    _print_table(results)

"""``corpusforge lm ...``: train a neural LM from source files with a preset, generate text, inspect it.

``lm train`` runs the whole pipeline flow (corpus -> tokenizer + encode -> lm) with the preset's settings,
so every upstream step is reused when it already exists. ``lm generate`` and ``lm inspect`` read a
published lm artifact through the catalog and never start Prefect.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer


def _above_zero(value):
    """Option callback: a number that must be > 0 (None: not given)."""
    if value is not None and not value > 0:
        raise typer.BadParameter(f"{value} is not > 0")
    return value

app = typer.Typer(help="Neural language models: train (NPLM, RNN/LSTM/GRU, GPT), generate, inspect.",
                  no_args_is_help=True)

# after `app` exists: corpusforge.cli imports this module at its end, so either may be imported first
from corpusforge.api import preset_names  # noqa: E402
from corpusforge.api import lm_config as train_config  # noqa: E402 - the API builds the config
from corpusforge.cli.common import (  # noqa: E402,E501
    SOURCES_HELP,
    JsonOpt,
    SetOpt,
    StoreOpt,
    _fail,
    _print_result,
    _run_flow,
    _store,
    err,
    out,
    print_json,
)
from corpusforge.tasks.lm.config import GENERATE_DEFAULTS  # noqa: E402


@app.command("train")
def train(
    sources: Annotated[list[Path], typer.Argument(help=SOURCES_HELP)],
    preset: Annotated[str, typer.Option("--preset", metavar="NAME|FILE.yaml",
                                        help=f"One of {', '.join(preset_names())} (shipped with the package: "
                                             "configs/lm/NAME.yaml in the repository), or the path to a YAML of "
                                             "that shape.")],
    set_: SetOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Build the corpus, train the tokenizer, encode, and train the preset's LM (reusing what exists).

    --set keys address the lm section by default (train.max_iters=200, model.n_layer=2, family=encoder);
    prefix corpus., tokenizer., runner. or tracking. to reach the other sections. A newly trained model is
    registered in MLflow under its lm name (models:/NAME@latest); the JSON result has `registered_model`.
    """
    from corpusforge.tasks.config import ConfigError

    try:
        config = train_config(sources, preset, set_ or [])
    except ConfigError as exc:
        _fail(str(exc), 2)
    summary = _run_flow(config, _store(store), Path.cwd(), as_json)
    lm = summary["stages"]["lm"]
    payload = {"id": lm["id"], "path": lm["path"], "name": lm["name"], "reused": lm["reused"],
               "metrics": lm["metrics"], "preset": preset,
               "registered_model": next(iter(summary.get("registered_models") or []), None),
               "steps": {s["step"]: s["id"] for s in summary["steps"] if s["step"] != "corpus_shard"}}
    sample = next((s for s in summary["steps"] if s["step"] == "lm_sample"), None)
    if sample is not None:  # the lm_sample artifact (lm.sample is not part of the lm's id)
        payload["sample"] = json.loads((Path(sample["path"]) / "sample.json").read_text(encoding="utf-8"))["text"]
    _print_result(summary, as_json, payload)


def _find_lm(artifact_id: str, store: Optional[Path]) -> Path:
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    try:
        found = Catalog(ArtifactStore(_store(store))).get(artifact_id)
    except LookupError as exc:  # an unknown or ambiguous id is bad usage
        _fail(str(exc.args[0]), 2)
    if found.manifest.get("step") != "lm":
        _fail(f"{artifact_id}: is a {found.manifest.get('step')!r} artifact, not an lm", 2)
    return found.path


@app.command("generate")
def generate(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="lm artifact id or a unique prefix.")],
    prompt: Annotated[str, typer.Option("--prompt", help="Text to continue (the default, a newline, starts from "
                                                         "nothing).")] = GENERATE_DEFAULTS["prompt"],
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", "-n", min=1, help="Tokens to generate.")] = GENERATE_DEFAULTS["max_new_tokens"],
    greedy: Annotated[bool, typer.Option("--greedy", help="Always take the most likely token.")] = False,
    temperature: Annotated[float, typer.Option("--temperature", callback=_above_zero, help="Softmax temperature (> 0).")] = GENERATE_DEFAULTS["temperature"],
    top_k: Annotated[Optional[int], typer.Option("--top-k", min=1, help="Sample among the k most likely tokens.")] = None,
    top_p: Annotated[Optional[float], typer.Option("--top-p", max=1.0, callback=_above_zero, help="Nucleus sampling mass in (0, 1].")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Sampling seed (same seed, same text).")] = GENERATE_DEFAULTS["seed"],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Continue PROMPT with a trained LM."""
    from corpusforge.tasks.lm.inference import generate_from

    path = _find_lm(artifact_id, store)
    try:
        text = generate_from(path, prompt, max_new_tokens, greedy=greedy, temperature=temperature, top_k=top_k,
                             top_p=top_p, seed=seed)
    except ValueError as exc:
        _fail(str(exc), 2)
    if as_json:
        print_json({"id": artifact_id, "prompt": prompt, "text": text, "seed": seed})
        return
    sys.stdout.write(prompt + text + "\n")


@app.command("inspect")
def inspect(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="lm artifact id or a unique prefix.")],
    prompt: Annotated[str, typer.Option("--prompt", help="Text to look at.")],
    top_k: Annotated[int, typer.Option("--top-k", min=1, help="Rows of the next-token table.")] = 10,
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="Where the heatmap PNGs go (default ./lm-inspect-ID).")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Attention heatmaps per layer and head (PNG) and the top-k next tokens for PROMPT."""
    from corpusforge.tasks.lm.inference import inspect_lm

    path = _find_lm(artifact_id, store)
    target = out_dir or Path.cwd() / f"lm-inspect-{artifact_id[:12]}"
    try:
        report = inspect_lm(path, prompt, target, top_k)
    except ValueError as exc:
        _fail(str(exc), 2)
    if as_json:
        print_json(report, ensure_ascii=False)
        return
    from rich.table import Table

    what = "[MASK] filled" if report["fills_mask"] else "next token"
    table = Table(title=f"{what} after {prompt!r}")
    for col in ("rank", "token", "id", "probability"):
        table.add_column(col)
    for row in report["next_tokens"]:
        table.add_row(str(row["rank"]), repr(row["token"]), str(row["id"]), f"{row['prob']:.4f}")
    out.print(table)
    if report["heatmaps"]:
        for f in report["heatmaps"]:
            out.print(f"attention heatmap: {f}")
    else:
        err.print(f"a {report['family']} model has no attention to draw; only the table is shown")

"""``corpusforge lm ...``: train a neural LM from source files with a preset, generate text, inspect it, export it.

``lm train`` runs the whole pipeline flow (corpus -> tokenizer + encode -> lm) with the preset's settings,
so every upstream step is reused when it already exists. ``lm generate``, ``lm inspect`` and ``lm export`` read a
published lm artifact through the catalog and never start Prefect. ``lm export`` writes the format the model's
family declares (FamilySpec.exporters; a GPT: ``hf``, a transformers GPT2LMHeadModel checkpoint).
"""

from __future__ import annotations

import json
import os
import shutil
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
    _intact,
    _files_exist,
    _print_result,
    _run_flow,
    _store,
    err,
    out,
    print_json, ProcessesOpt, with_processes,
)
from corpusforge.tasks.lm.config import GENERATE_DEFAULTS  # noqa: E402


@app.command("train")
def train(
    sources: Annotated[list[Path], typer.Argument(help=SOURCES_HELP)],
    preset: Annotated[str, typer.Option("--preset", metavar="NAME|FILE.yaml",
                                        help=f"One of {', '.join(preset_names())} (shipped with the package: "
                                             "configs/lm/NAME.yaml in the repository), or the path to a YAML of "
                                             "that shape.")],
    valid: Annotated[Optional[Path], typer.Option("--valid", metavar="FILE", help=(
        "Held-out text the LM is evaluated on while it trains (else the preset's: a held-out fraction, or for the "
        "ptb-* presets a source named like ptb.valid.txt)."))] = None,
    test: Annotated[Optional[Path], typer.Option("--test", metavar="FILE", help=(
        "Held-out text the LM is scored on after training (else the preset's, as for --valid)."))] = None,
    set_: SetOpt = None,
    processes: ProcessesOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Build the corpus, train the tokenizer, encode, and train the preset's LM (reusing what exists).

    --set keys address the lm section by default (train.max_iters=200, model.n_layer=2, family=encoder);
    prefix corpus., tokenizer., runner. or tracking. to reach the other sections. A newly trained model is
    registered in MLflow under its lm name (models:/NAME@latest); the JSON result has `registered_model`
    (null with `registered_model_reason` when none is: tracking is off, ...). A masked encoder (bert, encoder)
    is registered as a mask filler: predict(["the film was [MASK] ."]) gives the filled text and the top tokens.
    """
    from corpusforge.tasks.config import ConfigError

    _files_exist(valid, test)
    try:
        config = train_config(sources, preset, with_processes(set_, processes), valid, test)
    except ConfigError as exc:
        _fail(str(exc), 2)
    summary = _run_flow(config, _store(store), Path.cwd(), as_json)
    lm = summary["stages"]["lm"]
    from corpusforge.tasks.track import registered_model_fields

    payload = {"id": lm["id"], "path": lm["path"], "name": lm["name"], "reused": lm["reused"],
               "metrics": lm["metrics"], "preset": preset,
               **registered_model_fields(summary, "lm"),
               "steps": {s["step"]: s["id"] for s in summary["steps"] if s["step"] != "corpus_shard"}}
    sample = next((s for s in summary["steps"] if s["step"] == "lm_sample"), None)
    if sample is not None:  # the lm_sample artifact (lm.sample is not part of the lm's id)
        payload["sample"] = json.loads((Path(sample["path"]) / "sample.json").read_text(encoding="utf-8"))["text"]
    _print_result(summary, as_json, payload)


# the steps whose artifacts are language models: an lm, a post-trained one, adapters merged into plain weights
MODEL_STEPS = ("lm", "post_training", "lora_merge")


def _find_lm(artifact_id: str, store: Optional[Path], steps: tuple[str, ...] = ("lm",)):
    """The catalog entry of a model artifact of one of ``steps`` (an unknown id or another step: exit 2)."""
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    try:
        found = Catalog(ArtifactStore(_store(store))).get(artifact_id)
    except LookupError as exc:  # an unknown or ambiguous id is bad usage
        _fail(str(exc.args[0]), 2)
    if found.manifest.get("step") not in steps:
        what = "an lm" if steps == ("lm",) else f"an lm (nor a post-trained model: {', '.join(steps[1:])})"
        _fail(f"{artifact_id}: is a {found.manifest.get('step')!r} artifact, not {what}", 2)
    return _intact(found)


def _load_post_trained(found, store: Optional[Path]):
    """(model, tokenizer, config.json) of a post_training or lora_merge artifact, checked against its digests (an
    adapter artifact comes merged into its base, whose digests are checked too)."""
    from corpusforge.storage.store import ArtifactStore, TamperedArtifact
    from corpusforge.tasks.post_training.inference import load_post_trained

    try:
        ArtifactStore(_store(store)).check_intact(found.path, found.manifest)
        model, tok, spec = load_post_trained(found.path)
    except TamperedArtifact as exc:
        _fail(str(exc), 1)
    except (OSError, ValueError) as exc:
        _fail(f"{found.path}: cannot load the model: {exc}", 1)
    return model, tok, spec


def _files_by_umask(folder: Path) -> None:
    """Every file of an export with the mode the user's umask gives new files: safetensors writes its weights
    0600, which left model.safetensors unreadable to the group and others beside 0644 config files (issue 50)."""
    mask = os.umask(0)
    os.umask(mask)
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(0o666 & ~mask)


@app.command("generate")
def generate(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="lm, post_training or lora_merge artifact id (or a "
                                                                  "unique prefix).")],
    prompt: Annotated[str, typer.Option("--prompt", help="Text to continue (the default, a newline, starts from "
                                                         "nothing).")] = GENERATE_DEFAULTS["prompt"],
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", "-n", min=1, help="At most this many new tokens (a model fine-tuned on a prompt template, SFT or DPO, stops at its answer's end token).")] = GENERATE_DEFAULTS["max_new_tokens"],
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
    from corpusforge.tasks.textgen import generate_text

    found = _find_lm(artifact_id, store, MODEL_STEPS)
    sampling = {"greedy": greedy, "temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed}
    try:
        if found.manifest.get("step") == "lm":
            text = generate_from(found.path, prompt, max_new_tokens, **sampling)
        else:  # post-trained: adapters merged into their base first
            model, tok, spec = _load_post_trained(found, store)
            # a model fine-tuned on a prompt template (SFT, DPO) answers up to its end token, as it was trained to
            # and as its registered model does (tasks/textgen.py); one trained further on plain text runs on
            answers = bool((spec.get("post_training") or {}).get("template"))
            text = generate_text(model, tok, prompt, max_new_tokens, eot_id=tok.eot_id, stop_at_eot=answers,
                                 **sampling)
    except ValueError as exc:
        _fail(str(exc), 2)
    if as_json:
        print_json({"id": found.manifest["id"], "prompt": prompt, "text": text, "seed": seed})
        return
    sys.stdout.write(prompt + text + "\n")


def inspect_dir(store_root: Path, lm_id: str, prompt: str) -> Path:
    """Where ``lm inspect`` draws without --out: under the store (never the current directory), one folder per
    model and prompt, so another prompt does not overwrite the last one's heatmaps."""
    import hashlib

    return Path(store_root).resolve() / "inspect" / f"lm-{lm_id[:12]}-{hashlib.sha256(prompt.encode()).hexdigest()[:8]}"


@app.command("inspect")
def inspect(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="lm artifact id or a unique prefix.")],
    prompt: Annotated[str, typer.Option("--prompt", help="Text to look at.")],
    top_k: Annotated[int, typer.Option("--top-k", min=1, help="Rows of the next-token table.")] = 10,
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="Where the heatmap PNGs go (default: a folder "
                                                                  "under the store, STORE/inspect/lm-ID-PROMPT, "
                                                                  "printed).")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Attention heatmaps per layer and head (PNG) and the top-k next tokens for PROMPT."""
    from corpusforge.tasks.lm.inference import inspect_lm

    found = _find_lm(artifact_id, store)
    target = out_dir or inspect_dir(_store(store), found.manifest["id"], prompt)
    try:
        report = inspect_lm(found.path, prompt, target, top_k)
    except ValueError as exc:
        _fail(str(exc), 2)
    if as_json:
        print_json({**report, "out_dir": str(target)}, ensure_ascii=False)
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
            out.print(f"attention heatmap: {f}", highlight=False)
    else:
        err.print(f"a {report['family']} model has no attention to draw; only the table is shown")


def _export_target(output: Path) -> Path:
    """The export's folder, resolved, after the checks that need no model: it is new or an empty folder, and its
    parent can be created and written. Leftovers of killed exports beside it (``.NAME.partial-PID`` of a process
    that is gone) are removed. Each failure is one line, exit 2."""
    target = output.expanduser().resolve()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        _fail(f"{output}: exists and is not an empty folder; export writes a new (or empty) one", 2)
    parent = target.parent
    probe = parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        _fail(f"{output}: cannot be created: {probe} is a file, not a folder", 2)
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _fail(f"{output}: cannot be created: {exc.strerror or exc}", 2)
    if not os.access(parent, os.W_OK | os.X_OK):
        _fail(f"{output}: {parent} is not writable by this user", 2)
    from corpusforge.door import pid_alive

    for left in parent.glob(f".{target.name}.partial-*"):
        pid = left.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(left, ignore_errors=True)
    return target


@app.command("export")
def export(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="lm, post_training (full weights) or lora_merge "
                                                                  "artifact id, or a unique prefix.")],
    output: Annotated[Path, typer.Argument(metavar="OUT_DIR", help="New (or empty) folder to write.")],
    fmt: Annotated[str, typer.Option("--format", help="Output format, as the model's family declares it (its "
                                                      "spec's exporters): hf (a GPT as a transformers "
                                                      "GPT2LMHeadModel checkpoint with its tokenizer).")] = "hf",
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Export a trained LM with its tokenizer in a format its family declares (hf: transformers).

    The artifact's files (and its tokenizer's) are checked against their digests first. A variant the format
    cannot express (a GPT with rope positions, say) is refused with the field that rules it out.
    """
    from corpusforge.models.family import family, load_ref
    from corpusforge.storage.store import MANIFEST, ArtifactStore, TamperedArtifact
    from corpusforge.tasks.encoded import model_tokenizer_dir

    root = _store(store)
    found = _find_lm(artifact_id, root, MODEL_STEPS)
    if not (found.path / "model.safetensors").is_file():
        _fail(f"{found.manifest['id'][:12]} holds LoRA adapters only: merge them first (corpusforge lm merge "
              f"{found.manifest['id'][:12]}), then export the merged model", 2)
    artifact_store = ArtifactStore(root)
    try:
        artifact_store.check_intact(found.path, found.manifest)
    except TamperedArtifact as exc:
        _fail(str(exc), 1)
    spec = json.loads((found.path / "config.json").read_text(encoding="utf-8"))
    try:
        fam = family(str(spec.get("family")))
    except ValueError as exc:
        _fail(f"{found.manifest['id'][:12]}: {exc}", 2)
    ref = fam.exporters.get(fmt)
    if ref is None:
        _fail(f"lm export --format {fmt}: a {fam.name} model exports to "
              f"{', '.join(sorted(fam.exporters)) or 'no format'}", 2)
    tokenizer_dir = None
    if (spec.get("tokenizer") or {}).get("path"):
        try:
            tokenizer_dir = model_tokenizer_dir(found.path)
            tok_manifest = tokenizer_dir / MANIFEST
            if tok_manifest.is_file():  # the tokenizer is an artifact of the same store: check it too
                artifact_store.check_intact(tokenizer_dir, json.loads(tok_manifest.read_text(encoding="utf-8")))
        except TamperedArtifact as exc:
            _fail(str(exc), 1)
        except ValueError as exc:
            _fail(str(exc), 2)
    target = _export_target(output)
    partial = target.parent / f".{target.name}.partial-{os.getpid()}"
    try:  # written beside the target and renamed into place: a killed export leaves no half folder under its name
        summary = load_ref(ref)(found.path, partial, tokenizer_dir=tokenizer_dir)
        _files_by_umask(partial)
        if target.is_dir():
            target.rmdir()  # the empty folder the user named
        os.rename(partial, target)
    except ValueError as exc:
        _fail(str(exc), 2)
    except OSError as exc:
        _fail(f"{output}: cannot write the export: {exc.strerror or exc}", 2)
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)
    summary["path"] = str(target)
    summary["files"] = sorted(p.name for p in target.iterdir())
    summary["id"] = found.manifest["id"]
    if as_json:
        print_json(summary, ensure_ascii=False)
        return
    tokens = ", ".join(f"{role} {v['token']!r}" for role, v in summary["tokens"].items() if v)
    out.print(f"exported {found.manifest['name']} ({summary['id'][:12]}, {summary['family']}) to {summary['path']} "
              f"as {summary['architecture']}: {', '.join(summary['files'])}", soft_wrap=True)
    if tokens:
        out.print(f"special tokens: {tokens}", soft_wrap=True, highlight=False)
    for note in summary["notes"]:
        out.print(f"note: {note}", soft_wrap=True, highlight=False)
    out.print(f"open it with: transformers.AutoModelForCausalLM.from_pretrained({str(output)!r}) and "
              f"AutoTokenizer.from_pretrained({str(output)!r})", soft_wrap=True, highlight=False)


@app.command("evaluate")
def evaluate(
    artifact_id: Annotated[str, typer.Argument(metavar="ID", help="lm, post_training or lora_merge artifact id (or a "
                                                                  "unique prefix).")],
    files: Annotated[list[str], typer.Argument(  # str: the JSON's keys are the paths as given
        metavar="FILES...", help="Text files to score.")],
    documents: Annotated[Optional[str], typer.Option(
        "--documents", metavar="line|paragraph|file",
        help="How a file is cut into documents (each followed by the end-of-text token); default: as the model's "
             "training corpus read its files.")] = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Perplexity of a trained LM on FILES, encoded with its own tokenizer (beside `ngram evaluate`).

    Scored as the lm stage scores its valid/test split: the figure it reported for a held-out file is the one
    this gives for that file. Per file: documents, tokens (predictions scored), nll (mean, nats), perplexity.
    """
    from corpusforge.api import _lm_evaluate

    for given in files:
        if not Path(given).is_file():
            _fail(f"no such file: {given}", 2)
    _find_lm(artifact_id, store, MODEL_STEPS)  # an unknown id or another kind of artifact: exit 2
    from corpusforge.storage.store import TamperedArtifact

    try:
        report = _lm_evaluate(artifact_id, files, _store(store), documents)
    except TamperedArtifact as exc:
        _fail(str(exc), 1)
    except ValueError as exc:
        _fail(str(exc), 2)
    if as_json:
        print_json(report)
        return
    for path, r in report["results"].items():
        out.print(f"{path}: perplexity {r['perplexity']:.4f} (nll {r['nll']:.4f} nats/token), {r['documents']:,} "
                  f"documents, {r['tokens']:,} scored tokens", soft_wrap=True, highlight=False)

"""``corpusforge lm finetune`` and ``corpusforge lm merge``: post-training (the post_training stage).

``lm finetune PARENT_ID DATA...`` runs the pipeline flow (corpus of the new data -> post_training from PARENT), so
the corpus step is reused when it exists; the data is encoded with PARENT's tokenizer. ``lm merge ADAPTER_ID`` folds
a LoRA adapter artifact into plain weights (a lora_merge artifact) without Prefect.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from corpusforge.api import METHOD_PRESETS, preset_names
from corpusforge.api import finetune_config as build_config
from corpusforge.api import resolve_parent
from corpusforge.cli.common import JsonOpt, SetOpt, StoreOpt, _fail, _print_result, _run_flow, _store, out, print_json, ProcessesOpt, with_processes


def finetune(
    parent: Annotated[str, typer.Argument(metavar="PARENT_ID", help=(
        "The model to start from: an lm, post_training or lora_merge artifact id (or unique prefix), or a model "
        "registered from one: models:/NAME/latest, models:/NAME/VERSION, models:/NAME@ALIAS."))],
    data: Annotated[list[Path], typer.Argument(metavar="DATA...", help=(
        "full/lora: text files or folders (any format the corpus stage reads). sft: JSONL/TSV/CSV records with the "
        "fields the prompt and response templates read (default: prompt, response). dpo: prompt, chosen, rejected."))],
    method: Annotated[Optional[str], typer.Option("--method", metavar="full|lora|sft|dpo", help=(
        "full: all weights, next-token loss on the text; lora: LoRA adapters only; sft: supervised fine-tuning, "
        "loss on the responses; dpo: preference optimisation against the frozen start model. Default: the "
        "preset's (sft without a preset)."))] = None,
    preset: Annotated[Optional[str], typer.Option("--preset", metavar="NAME|FILE.yaml", help=(
        f"One of {', '.join(preset_names('post_training'))} (configs/post_training/NAME.yaml), or a YAML of that "
        "shape. Default: the method's own."))] = None,
    valid: Annotated[Optional[Path], typer.Option("--valid", metavar="FILE", help=(
        "Validation records (else the preset's held-out fraction of DATA)."))] = None,
    set_: SetOpt = None,
    processes: ProcessesOpt = None,
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Train PARENT further on DATA: continue pre-training (all weights or LoRA), SFT on prompt/response records,
    or DPO on preference triplets.

    --set keys address the post_training section by default (train.max_iters=500, lora.r=4, beta=0.2,
    values.label.0=negative); prefix corpus., runner. or tracking. to reach the others. The templates are taken
    verbatim, with \\n and \\t read as a newline and a tab: --set 'prompt=Q: {question}\\nA:' --set
    'response= {answer}'. The result's metrics hold the trainable and total parameters, the losses, and
    for sft/dpo the held-out answer accuracy before and after (and dpo's reward margin, preference accuracy and
    KL to the reference). A LoRA result holds only the adapters: `corpusforge lm merge ID` folds them in.
    """
    from corpusforge.tasks.config import ConfigError

    if method is not None and method not in METHOD_PRESETS:
        _fail(f"--method: one of {', '.join(METHOD_PRESETS)}, got {method!r}", 2)
    try:
        config = build_config(resolve_parent(parent, _store(store)), data, method, preset, valid, with_processes(set_, processes))
    except ConfigError as exc:
        _fail(str(exc), 2)
    except LookupError as exc:
        _fail(str(exc.args[0]), 2)
    summary = _run_flow(config, _store(store), Path.cwd(), as_json)
    model = summary["stages"]["post_training"]
    steps = {s["step"]: s for s in summary["steps"] if s["step"] != "corpus_shard"}
    from corpusforge.tasks.track import registered_model_fields

    payload = {"id": model["id"], "path": model["path"], "name": model["name"], "reused": model["reused"],
               "method": config["post_training"].get("method"), "parent": parent,
               "parent_id": config["post_training"]["init"],
               "metrics": model.get("metrics") or {},
               "accounting": (summary.get("corpus") or {}).get("accounting"),
               **registered_model_fields(summary, "post_training"),
               "steps": {step: s["id"] for step, s in steps.items()}}
    _print_result(summary, as_json, payload)


def merge(
    adapter_id: Annotated[str, typer.Argument(metavar="ADAPTER_ID", help=(
        "A post_training artifact made with LoRA adapters (id or unique prefix)."))],
    store: StoreOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Fold LoRA adapters into their base's weights (W + alpha/r * B A): a plain model (a lora_merge artifact) that
    generates, exports and fine-tunes like an lm, with no inference overhead."""
    import corpusforge as cf
    from corpusforge.storage.store import TamperedArtifact
    from corpusforge.tasks.config import ConfigError

    try:
        merged = cf.lm.merge(adapter_id, store=_store(store))
    except LookupError as exc:
        _fail(str(exc.args[0]), 2)
    except ConfigError as exc:
        _fail(str(exc), 2)
    except TamperedArtifact as exc:
        _fail(str(exc), 1)
    payload = {"id": merged.id, "path": str(merged.path), "name": merged.name, "reused": merged.reused,
               "adapter": merged.manifest["inputs"][0]["id"] if merged.manifest.get("inputs") else None,
               "metrics": merged.metrics}
    if as_json:
        print_json(payload)
        return
    out.print(f"{'reused' if merged.reused else 'merged'} {merged.name} ({merged.id[:12]}): {merged.path}",
              soft_wrap=True)

"""What every training stage shares around the trainer (corpusforge.models.training): where its checkpoints wait,
what it writes next to the weights, and how it reports while it trains.

- :func:`training_step`: the head of every training stage's step (its references resolved, its identity with the
  family's version, its scratch, run_step), and :func:`training_task`: its Prefect task (progress, log, MLflow);
- :func:`training_scratch`: the step's scratch folder ``<store>/.scratch/<step>/<key>/``, keyed by the step's
  version, config and inputs (what its artifact id is made of), so a run killed half way resumes from its last
  checkpoint when the same step is started again; removed once the artifact is published;
- :class:`MetricsLog`: the trainer's ``on_metrics`` callback that keeps the history and forwards it (to the
  task's progress bar, log and MLflow), then writes ``metrics.json`` (what training computed, the same bytes on
  every rebuild: speeds and durations go to the manifest and MLflow only) and ``loss_curve.png``;
- :func:`training_report`: a training task's reporter: a progress bar on a terminal, the Prefect task log, and
  the caller's callback (the flow's live MLflow run, corpusforge.tasks.track.LiveRuns);
- :func:`fit`: the trainer run the way every training step runs it (checkpoints in the scratch, resumed);
- :func:`refuse_non_finite`: the rule every training step applies before its artifact is published: weights with a
  NaN or an infinity, or a non-finite final loss, are never published; the step fails with
  :class:`TrainingDiverged`, one line saying which and what to change.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from corpusforge.storage.hashing import config_hash
from corpusforge.tasks.progress import note
from corpusforge.storage.store import ArtifactStore

# Figures that vary from run to run (speed, duration, the processes it ran on): in the manifest's metrics and MLflow,
# never in a file
TIMING_KEYS = frozenset({"train_seconds", "tokens_per_s", "mfu", "seconds", "processes", "resumed_from_step"})
Report = Callable[[int, dict[str, float]], None]


@contextlib.contextmanager
def training_scratch(store: ArtifactStore, step: str, version: int, config: Any,
                     input_ids: Sequence[str]) -> Iterator[Path]:
    """The step's checkpoint folder, kept while it trains (a killed run resumes from it) and removed once the
    ``with`` block ends without an error (the artifact is published, or was already), or with
    :class:`TrainingDiverged` (its checkpoints hold the diverged weights: nothing to resume from)."""
    scratch = scratch_dir(store, step, version, config, input_ids)
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        yield scratch
    except TrainingDiverged:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    shutil.rmtree(scratch, ignore_errors=True)


def scratch_dir(store: ArtifactStore, step: str, version: int, config: Any, input_ids: Sequence[str]) -> Path:
    """``<store>/.scratch/<step>/<key>``: keyed by what the step's artifact id is made of."""
    inputs: Any = input_ids[0] if len(input_ids) == 1 else list(input_ids)  # one input: the key the lm always had
    key = config_hash({"config": config, "input": inputs, "version": version})
    return store.root / ".scratch" / step / key[:16]


class TrainingDiverged(ValueError):
    """A training step's result has non-finite weights or a non-finite final loss: it is not published. The
    message is one line (the CLI prints it as its error, with exit code 1; Prefect logs it without a traceback)."""


def is_loss_metric(key: str) -> bool:
    """``loss``, ``final_loss``, ``val_loss``, ``best_val_loss``, ``test_loss`` ...: what a diverged fit makes NaN."""
    return key == "loss" or key.endswith("_loss")


def refuse_non_finite(what: str, *, change: str, metrics: Mapping[str, Any] | None = None,
                      weights: Mapping[str, Any] | None = None) -> None:
    """Raise :class:`TrainingDiverged` when a loss in ``metrics`` (:func:`is_loss_metric`) or any value of
    ``weights`` (name -> numpy array or torch tensor; integer ones are skipped) is NaN or infinite. Called by
    each training step's build, before it writes or returns its files, so a diverged fit is never published.
    ``what`` names the artifact ("embeddings p-glove"), ``change`` the settings to change ("lower
    embeddings.learning_rate (now 0.05)")."""
    problems = []
    for key, value in (metrics or {}).items():
        if is_loss_metric(key) and isinstance(value, (int, float)) and not math.isfinite(value):
            problems.append(f"{key} is {value}")
    bad = total = 0
    for value in (weights or {}).values():
        count, size = _non_finite(value)
        bad, total = bad + count, total + size
    if bad:
        problems.append(f"{bad:,} of {total:,} weight values are NaN or infinite")
    if problems:
        raise TrainingDiverged(f"{what}: training diverged ({'; '.join(problems)}), so nothing was published; "
                               f"{change}")


def diverged_advice(section: str, train: Any) -> str:
    """What to change when a torch-trained step (models.training.train, ``train``: its TrainConfig) diverged."""
    advice = [f"lower {section}.train.lr (now {train.lr:g})"]
    if not train.grad_clip:
        advice.append(f"set {section}.train.grad_clip (now 0: off)")
    if not train.warmup_iters:
        advice.append(f"raise {section}.train.warmup_iters (now 0)")
    return " or ".join(advice)


def _non_finite(value: Any) -> tuple[int, int]:
    """(non-finite values, values) of a floating numpy array or torch tensor; (0, n) for integer ones."""
    if hasattr(value, "detach"):  # a torch tensor, without importing torch here
        if not value.is_floating_point() and not value.is_complex():
            return 0, value.numel()
        import torch

        return int((~torch.isfinite(value.detach())).sum()), value.numel()
    import numpy as np

    array = np.asarray(value)
    if not np.issubdtype(array.dtype, np.inexact):
        return 0, array.size
    return int(array.size - np.isfinite(array).sum()), array.size


class MetricsLog:
    """The trainer's metric callback: keeps every report (``history``) and forwards it to ``forward``."""

    def __init__(self, forward: Report | None = None, unit: str = "nats/token"):
        self.history: list[dict[str, Any]] = []
        self.forward = forward
        self.unit = unit  # what the loss is a mean over (the objective's loss_unit): the curve's axis

    def __call__(self, step: int, metrics: dict[str, float]) -> None:
        self.history.append({"step": step, **metrics})
        if self.forward:
            self.forward(step, metrics)

    def write(self, out: Path, final: dict[str, float], title: str = "") -> None:
        """``metrics.json`` ({"final": ..., "history": [...]}, timings left out) and ``loss_curve.png``."""
        kept = {k: v for k, v in final.items() if k not in TIMING_KEYS}
        points = [{k: v for k, v in point.items() if k not in TIMING_KEYS} for point in self.history]
        (out / "metrics.json").write_text(json.dumps({"final": kept, "history": points}, indent=2) + "\n",
                                          encoding="utf-8")
        plot_loss_curve(self.history, out / "loss_curve.png", title=title, unit=self.unit)


def fit(model: Any, objective: Any, train_cfg: Any, scratch: Path,
        on_metrics: Report | None = None) -> tuple[Any, MetricsLog, dict[str, float], float]:
    """Train ``model`` with the shared trainer (corpusforge.models.training.train) on ``objective``, checkpointing
    into the step's scratch and resuming from it when a killed run left one; on ``train.processes`` processes
    (corpusforge.tasks.launch) when that is more than one. Returns (the trainer's result, the :class:`MetricsLog`
    that kept the history (its ``write`` makes metrics.json and the loss curve), the final numeric metrics, the
    seconds it took)."""
    import time

    from corpusforge.models.training import train
    from corpusforge.tasks import launch

    record = MetricsLog(on_metrics, unit=getattr(objective, "loss_unit", "nats/token"))
    if launch.in_rank():  # a training process: train (and end the process) or take an earlier launch's weights
        result, seconds = launch.rank_fit(model, objective, train_cfg, scratch)
        return result, record, _numeric(result.metrics), seconds
    n = launch.processes(train_cfg)
    if launch.has_result(scratch):  # ranks that finished before this task's process died: their weights
        result, seconds = launch.fit_on_processes(model, objective, train_cfg, scratch, record, n)
        return result, record, _numeric(result.metrics), seconds
    ckpt = Path(scratch) / "checkpoint.safetensors"
    resume = ckpt if ckpt.is_file() else None
    if resume is not None:  # a checkpoint changed since it was written is not resumed (issue 44, item 8)
        from corpusforge.models.checkpoint import checkpoint_problem, digest_path

        problem = checkpoint_problem(resume)
        if problem is not None:
            note(on_metrics, f"warning: not resuming from {ckpt}: {problem}; training starts over")
            ckpt.unlink(missing_ok=True)
            digest_path(ckpt).unlink(missing_ok=True)
            resume = None
    if resume is not None:  # said before the replayed curve (the earlier run's reports, up to its checkpoint)
        from corpusforge.models.checkpoint import checkpoint_meta

        note(on_metrics, f"resuming from step {checkpoint_meta(resume)['step']} of {train_cfg.max_iters}: the "
                         f"checkpoint a stopped run of this step left in {ckpt.parent}")
    if n > 1:
        result, seconds = launch.fit_on_processes(model, objective, train_cfg, scratch, record, n)
        return result, record, _numeric(result.metrics), seconds
    started = time.perf_counter()
    result = train(model, objective, train_cfg, on_metrics=record, checkpoint_path=ckpt, resume_from=resume)
    seconds = time.perf_counter() - started
    return result, record, _numeric(result.metrics), seconds


def _numeric(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}


def plot_loss_curve(history: list[dict[str, Any]], path: Path, title: str = "", unit: str = "nats/token") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    train_pts = [(h["step"], h["train_loss"]) for h in history if "train_loss" in h and "lr" in h]
    val_pts = [(h["step"], h["val_loss"]) for h in history if "val_loss" in h]
    if train_pts:
        ax.plot(*zip(*train_pts), label="train loss", lw=1)
    if val_pts:
        ax.plot(*zip(*val_pts), "o-", label="val loss", lw=1.5)
    ax.set_xlabel("step")
    ax.set_ylabel(f"cross-entropy ({unit})")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


@contextlib.contextmanager
def training_progress(description: str, total: int) -> Iterator[Report]:
    """A rich progress bar on stderr (step / max_iters, losses, tokens/s, ETA), fed by the trainer's metric
    callback. Silent when stderr is not a terminal (CI, logs, pipes): the task log has the same numbers."""
    if not sys.stderr.isatty():
        yield lambda step, metrics: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("loss {task.fields[loss]}  val {task.fields[val]}  {task.fields[speed]}"),
                  TimeRemainingColumn(), console=Console(stderr=True), transient=True) as progress:
        task_id = progress.add_task(description, total=total, loss="-", val="-", speed="")

        def advance(step: int, metrics: dict[str, float]) -> None:
            fields = {}
            if "train_loss" in metrics:
                fields["loss"] = f"{metrics['train_loss']:.3f}"
            if "val_loss" in metrics:
                extra = f" (ppl {metrics['val_ppl']:.1f})" if "val_ppl" in metrics else ""
                fields["val"] = f"{metrics['val_loss']:.3f}{extra}"
            if "tokens_per_s" in metrics:
                fields["speed"] = f"{metrics['tokens_per_s']:,.0f} tok/s"
            progress.update(task_id, completed=step, **fields)

        yield advance


@contextlib.contextmanager
def training_report(description: str, total: int, logger, forward: Report | None = None) -> Iterator[Report]:
    """A training task's reporter: the progress bar, one log line per evaluation and per logged step, and the
    caller's callback (the flow's live MLflow run). Its ``note(message)`` logs what is not a metric (:func:`fit`'s
    "resuming from step 400")."""

    def log(step: int, metrics: dict[str, float]) -> None:
        if "val_loss" in metrics:
            shown = ", ".join(f"{k[4:]} {v:.4g}" for k, v in metrics.items() if k.startswith("val_") and k != "val_loss")
            logger.info("step %d: val loss %.4f%s", step, metrics["val_loss"], f" ({shown})" if shown else "")
        elif "tokens_per_s" in metrics:
            logger.info("step %d: train loss %.4f, lr %.3g, %.0f tokens/s", step, metrics["train_loss"], metrics["lr"],
                        metrics["tokens_per_s"])

    with training_progress(description, total) as advance:
        def report(step: int, metrics: dict[str, float]) -> None:
            advance(step, metrics)
            log(step, metrics)
            if forward:
                forward(step, metrics)

        report.note = logger.info  # type: ignore[attr-defined] - what fit says that is no metric ("resuming ...")
        yield report


# --- the head of a training step and its Prefect task ------------------------------------------------------------


def save_trained(out: Path, model: Any, *, stage: str, name: str, train_cfg: Any, device: Any,
                 metrics: Mapping[str, Any], extra: Mapping[str, Any], objective: Any = None) -> dict[str, Any]:
    """The tail of every training step: weights or metrics that are not finite are refused (:func:`refuse_non_finite`,
    one line saying what to change), then ``model.safetensors`` and ``config.json`` are written once: the family and
    model config, the stage's ``extra`` (its tokenizer, data, its own section, ``input``), the objective's settings
    (corpusforge.models.objectives: what ``lm evaluate`` scores an encoder with), the training config and the
    device. Returns what config.json holds beyond the family and model."""
    import dataclasses

    from corpusforge.models.zoo import save_model

    refuse_non_finite(f"{stage} {name}", metrics=metrics, weights=model.state_dict(),
                      change=diverged_advice(stage, train_cfg))
    spec = {**extra, **({"objective": dataclasses.asdict(objective)} if objective is not None else {}),
            "train": dataclasses.asdict(train_cfg), "device": str(device)}
    save_model(model, out, spec)
    return spec


def training_step(upstream: Any, cfg: Any, store: ArtifactStore, *, step: str, version: int,
                  build: Callable[[Path, Path, Path, Mapping[str, Any]], Mapping[str, Any] | None],
                  libraries: Sequence[str], section: str | None = None, family: str | None = None,
                  config: dict[str, Any] | None = None, refs: Mapping[str, Any] | None = None) -> Any:
    """Train (or reuse) one model step: ``cfg``'s artifact references resolved (``section``: the config section
    they are named in; None: the step has none), its identity (``config``, default ``identity(cfg)``; with
    ``family``, that family's version when it trains other weights than it used to: a new id for it alone), the
    scratch its checkpoints wait in (a killed run resumes), and ``run_step`` publishing what
    ``build(out, upstream_dir, scratch, references)`` writes (``references``: dotted field -> the artifact)."""
    from corpusforge.tasks.config import identity
    from corpusforge.tasks.step import artifact_input, resolve_references, run_step

    found = resolve_references(cfg, store, section=section, given=refs) if section else {}
    config = identity(cfg) if config is None else config
    if family is not None:
        from corpusforge.models.family import family as family_spec

        if family_spec(family).version > 1:
            config["family_version"] = family_spec(family).version
    inputs = [upstream.id] + [r.id for r in found.values()]
    from corpusforge.tasks import launch

    if launch.in_rank():  # a training process repeats the build up to its fit, which ends it: nothing is published
        with tempfile.TemporaryDirectory(prefix="corpusforge-rank-") as out:
            build(Path(out), Path(upstream.path), scratch_dir(store, step, version, config, inputs), found)
        raise launch.RankFailed(f"{step}: the build returned without training on this rank")
    with training_scratch(store, step, version, config, inputs) as scratch:
        return run_step(store, step=step, version=version, name=cfg.name, config=config,
                        inputs=[artifact_input(upstream)],
                        build=lambda out: build(out, Path(upstream.path), scratch, found),
                        libraries=libraries, references=found if section else None)


def training_task(name: str, parse: Callable[[dict], Any], build: Callable[..., Any],
                  iterations: Callable[[Any], int] = lambda cfg: cfg.train.max_iters) -> Callable[..., Any]:
    """The Prefect task of a training stage: ``parse`` its config dict, ``build(upstream, cfg, store,
    on_metrics=..., refs=...)`` under a training report (a progress bar on a terminal, the task log, and the flow's
    ``on_metrics``: its live MLflow run), each step's outcome logged; the StepResult dict, or a list of them when
    ``build`` returns a list (the stage's main output last). ``refs`` reaches ``build`` when it takes them."""
    import inspect

    from corpusforge.tasks.orchestration import prefect_task

    takes_refs = "refs" in inspect.signature(build).parameters

    def task(upstream: dict, config: dict, store_root: str,
             on_metrics: Callable[[int, dict[str, float]], None] | None = None,
             refs: dict[str, dict[str, Any]] | None = None) -> dict | list[dict]:
        from prefect import get_run_logger

        from corpusforge.tasks.step import StepResult, log_step_outcome

        from corpusforge.tasks.launch import stage_call

        cfg = parse(config)
        more = {"refs": {k: StepResult.from_dict(v) for k, v in (refs or {}).items()}} if takes_refs else {}
        with (training_report(f"{name} {cfg.name}", iterations(cfg), get_run_logger(), on_metrics) as report,
              stage_call(build, parse, config, upstream, store_root, (refs or {}) if takes_refs else None)):
            out = build(StepResult.from_dict(upstream), cfg, ArtifactStore(store_root), on_metrics=report, **more)
        for result in out if isinstance(out, list) else [out]:
            log_step_outcome(result)
        return [r.to_dict() for r in out] if isinstance(out, list) else out.to_dict()

    task.__name__ = task.__qualname__ = f"{name}_task"
    task.__module__ = build.__module__
    task.__doc__ = f"Train (or reuse) the {name} step's model ({build.__module__}.{build.__name__}) as a Prefect task."
    return prefect_task(name=name)(task)

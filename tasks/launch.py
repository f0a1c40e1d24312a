"""Training on N processes (``train.processes``): every training stage, through its Prefect task.

A stage's training is code inside its build (corpusforge.tasks.training.training_step): the model, the objective
and the data are made there, then :func:`corpusforge.tasks.training.fit` trains. With ``train.processes: N > 1``,
``fit`` does not train in the task's process; it starts N ranks, and each rank runs this module as its entry point
(``python -m corpusforge.tasks.launch SPEC``, no pickled closure): it parses the stage's config again, calls the
stage's build with the same upstream, references and store (the call :func:`stage_call` recorded, written to
``SPEC``), and so rebuilds the same model, objective and data; its ``fit`` trains under torch.distributed and then
ends the rank (:class:`RankDone`) before the build would publish anything. Rank 0 alone reports (a JSON line per
report, which the task's process forwards to its progress bar, log and MLflow run as they come), checkpoints into
the step's scratch, and writes the trained weights there; the task's process loads them into its own model and the
build goes on as after any fit (evaluation, ``save_trained``, publish). The artifact id does not depend on N (the
model does not, within float rounding: corpusforge.models.training); the manifest records it (``processes``).

Who starts the ranks:

- torch's elastic launch (``torch.distributed.launcher.api.elastic_launch``: what ``torchrun --standalone`` runs),
  N processes on this host, a c10d rendezvous on 127.0.0.1; nccl when each rank has its own GPU, gloo otherwise;
- Ray Train's ``TorchTrainer`` (``ScalingConfig(num_workers=N, use_gpu=...)``) when the task runs on a Ray worker
  (``runner.kind: ray``): the ranks may span the nodes of the Ray cluster, which must see the store at the same path.

A rank that dies (killed, out of memory, an error) fails the step with :class:`RankFailed`: one line naming the
rank, the reason and its log; nothing is published, and the step's scratch keeps the last checkpoint, so running
the step again resumes from it. A rank that hangs makes the others time out at their next collective after
``train.timeout`` seconds, which fails the step the same way.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from corpusforge.storage.hashing import sha256_file

# the stage task's call that a rank repeats: set by corpusforge.tasks.training.training_task
_CALL: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("corpusforge_stage_call", default=None)
_RANK: dict[str, Any] | None = None  # in a rank process: its spec


class RankDone(BaseException):
    """Raised by ``fit`` in a rank once it has trained: the rest of the stage's build (scoring, publishing) is the
    task process's. A BaseException, so no ``except Exception`` of a build swallows it."""


class RankFailed(RuntimeError):
    """A training process failed (died, raised, or timed out waiting for the others). One line: which rank, why, and
    where its log is; the step published nothing and resumes from its last checkpoint when run again."""


@contextlib.contextmanager
def stage_call(build: Any, parse: Any, config: Mapping[str, Any], upstream: Mapping[str, Any], store_root: str,
               refs: Mapping[str, Any] | None) -> Iterator[None]:
    """Record the stage task's call (its build and parse functions by import path, the raw config, the upstream and
    reference StepResult dicts, the store) for the ranks ``fit`` may start while it runs."""
    token = _CALL.set({"build": f"{build.__module__}:{build.__name__}", "parse": f"{parse.__module__}:{parse.__name__}",
                       "config": dict(config), "upstream": dict(upstream), "store": str(store_root),
                       "refs": None if refs is None else {k: dict(v) for k, v in refs.items()}})
    try:
        yield
    finally:
        _CALL.reset(token)


def in_rank() -> bool:
    """Whether this process is a training rank started by :func:`fit_on_processes`."""
    return _RANK is not None


def processes(train_cfg: Any) -> int:
    """How many processes ``train_cfg`` asks for: ``auto`` is one per visible GPU (1 without one), lowered to the
    largest count that divides ``grad_accum`` (a step's micro-batches are split evenly)."""
    n = train_cfg.processes
    if n == "auto":
        import torch

        n = max(1, torch.cuda.device_count()) if train_cfg.device != "cpu" else 1
        while train_cfg.grad_accum % n:
            n -= 1
    return int(n)


# --- what a launch leaves in the step's scratch ---------------------------------------------------------------------

def _launch_dir(scratch: Path) -> Path:
    return Path(scratch) / "launch"


def _trained(scratch: Path) -> tuple[Path, Path]:
    return Path(scratch) / "trained.safetensors", Path(scratch) / "trained.json"


def _save_trained(tensors: dict[str, Any], result: Any, scratch: Path, world: int,
                  reports: list[dict[str, Any]]) -> None:
    """Rank 0's end: the weights it ends with and the trainer's result, beside the checkpoints (written to a
    temporary name, then renamed: a half-written result is never read)."""
    from safetensors.torch import save_file

    weights, meta = _trained(scratch)
    tensors = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}
    tmp = weights.with_suffix(".tmp")
    save_file(tensors, str(tmp))
    os.replace(tmp, weights)
    body = {"step": result.step, "best_val": result.best_val_loss, "metrics": result.metrics, "history": result.history,
            "stopped_early": result.stopped_early, "processes": world, "reports": reports,
            "sha256": sha256_file(weights)}
    tmp = meta.with_suffix(".tmp")
    tmp.write_text(json.dumps(body), encoding="utf-8")
    os.replace(tmp, meta)


def has_result(scratch: Path) -> bool:
    """Whether a finished launch left its weights for this fit (a task that died after its ranks had finished)."""
    return all(p.is_file() for p in _trained(scratch))


def _load_trained(model: Any, scratch: Path) -> dict[str, Any] | None:
    """The result a finished launch left for this fit, its weights loaded into ``model``; None when there is none,
    or it does not match its digest (it is then removed: the step trains again, from its checkpoint)."""
    from safetensors.torch import load_file

    from corpusforge.models.zoo import load_state

    weights, meta = _trained(scratch)
    if not (weights.is_file() and meta.is_file()):
        return None
    body = json.loads(meta.read_text(encoding="utf-8"))
    if sha256_file(weights) != body.get("sha256"):
        weights.unlink(missing_ok=True)
        meta.unlink(missing_ok=True)
        return None
    load_state(model, load_file(str(weights)))
    return body


def _result(body: Mapping[str, Any]) -> Any:
    from corpusforge.models.training import TrainResult

    return TrainResult(int(body["step"]), float(body["best_val"]), dict(body["metrics"]), list(body["history"]),
                       bool(body["stopped_early"]))


# --- the task's side ------------------------------------------------------------------------------------------------

def fit_on_processes(model: Any, objective: Any, train_cfg: Any, scratch: Path, record: Any,
                     n: int) -> tuple[Any, float]:
    """Train ``model`` on ``n`` ranks (or take the result a finished launch of this fit left), report through
    ``record`` (the fit's MetricsLog), and load the trained weights into ``model``, on the device the in-process
    trainer would have left it. Returns (the trainer's result, seconds)."""
    from corpusforge.models.training import pick_device

    started = time.perf_counter()
    body = _load_trained(model, scratch)
    if body is not None:
        for report in body["reports"]:
            record(int(report["step"]), report["metrics"])
    else:
        call = _CALL.get()
        if call is None:
            raise RankFailed(f"train.processes {n}: training on several processes runs through the stage's Prefect "
                             "task (a pipeline run, or a corpusforge train command); this call has none")
        launch = _launch_dir(scratch)
        launch.mkdir(parents=True, exist_ok=True)
        reports = launch / "reports.jsonl"
        reports.write_text("", encoding="utf-8")
        spec = {**call, "scratch": str(Path(scratch).resolve()), "reports": str(reports),
                "threads": train_cfg.cpu_threads or max(1, (os.cpu_count() or 1) // n)}
        spec_path = launch / "spec.json"
        spec_path.write_text(json.dumps(spec, indent=1), encoding="utf-8")
        from corpusforge.tasks.progress import note

        ray = _on_ray()
        note(record.forward, f"training on {n} processes: " + (
            "Ray Train workers (TorchTrainer)" if ray else "torch's elastic launch on this host") +
            f"; their logs: {launch / ('ray' if ray else 'logs')}")
        with _tail(reports, record):
            if ray:
                _ray_launch(spec_path, n, train_cfg, launch)
            else:
                _elastic_launch(spec_path, n, train_cfg, launch)
        body = _load_trained(model, scratch)
        if body is None:
            raise RankFailed(f"train: the {n} processes ended without leaving their weights in {scratch}")
    model.to(pick_device(train_cfg.device))
    result = _result(body)
    result.metrics["processes"] = float(body["processes"])
    return result, time.perf_counter() - started


@contextlib.contextmanager
def _tail(path: Path, record: Any) -> Iterator[None]:
    """Forward rank 0's reports (JSON lines in ``path``) to ``record`` as they come, from a thread, until the block
    ends (then the rest)."""
    from corpusforge.tasks.progress import note

    done = threading.Event()

    def follow() -> None:
        at = 0
        while True:
            finished = done.is_set()
            with open(path, encoding="utf-8") as f:
                f.seek(at)
                chunk = f.read()
            complete = chunk[:chunk.rfind("\n") + 1]
            at += len(complete.encode("utf-8"))
            for line in complete.splitlines():
                item = json.loads(line)
                if "note" in item:
                    note(record.forward, item["note"])
                else:
                    record(int(item["step"]), item["metrics"])
            if finished:
                return
            done.wait(0.25)

    thread = threading.Thread(target=follow, name="corpusforge-rank0-reports", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _elastic_launch(spec_path: Path, n: int, train_cfg: Any, launch: Path) -> None:
    """N ranks on this host with torch's elastic launch; a failed rank raises :class:`RankFailed`."""
    import uuid

    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    logs = launch / "logs"
    config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=n, run_id=f"corpusforge-{uuid.uuid4().hex[:12]}",
                          rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0", max_restarts=0, monitor_interval=0.2,
                          logs_specs=DefaultLogsSpecs(log_dir=str(logs), redirects=Std.ALL, tee=Std.NONE),
                          shutdown_timeout=5)
    try:
        elastic_launch(config, sys.executable)("-m", "corpusforge.tasks.launch", str(spec_path))
    except ChildFailedError as exc:
        raise RankFailed(_why(exc.failures, n, train_cfg, spec_path)) from None


def _why(failures: Mapping[int, Any], n: int, train_cfg: Any, spec_path: Path) -> str:
    """One line for the rank that failed for a reason of its own: an error it raised, then a wait that timed out (a
    hung peer, which the launcher then kills), then a death by a signal, before a rank that lost its peers or was
    stopped by the launcher (what the first failure causes in the others)."""
    def rank_of(item: tuple[int, Any]) -> tuple[int, float]:
        rank, failure = item
        message = _message(failure)
        if failure.exitcode < 0:  # SIGTERM is how the launcher stops the others once one failed; SIGKILL after that
            order = 5 if failure.signal_name() == "SIGTERM" else 2
        elif _timed_out(_text(failure)):  # a rank that waited for a hung one (which the launcher then kills)
            order = 1
        elif any(s in message for s in LOST):  # a rank whose peer died
            order = 4
        else:
            order = 0 if message else 3
        return order, failure.timestamp

    rank, failure = min(failures.items(), key=rank_of)
    message = _message(failure)
    if failure.exitcode < 0:
        why = f"killed by {failure.signal_name()}"
    elif _timed_out(_text(failure)):
        why = (f"it waited longer than train.timeout ({train_cfg.timeout:g} s) for the other processes at a "
               "collective: another rank hung or died")
    else:
        why = message or f"exit code {failure.exitcode}"
    log = _rank_log(spec_path, rank)
    return (f"train: rank {rank} of {n} failed ({why}); nothing was published: run the step again to resume from "
            f"its last checkpoint" + (f" (rank {rank}'s log: {log})" if log else ""))


LOST = ("Connection closed by peer", "Connection reset", "Broken pipe", "connection refused", "Socket closed")


def _timed_out(message: str) -> bool:
    """gloo says "Timed out waiting 8000ms for recv" or "Application timeout caused pair closure"; nccl "Watchdog
    caught collective operation timeout"."""
    text = message.lower()
    return "timed out" in text or "timeout" in text


def _text(failure: Any) -> str:
    """All a failed rank's error file says (empty when it wrote none)."""
    data = getattr(failure, "error_file_data", None) or {}
    message = data.get("message") if isinstance(data, dict) else None
    if isinstance(message, dict):
        message = message.get("message")
    text = str(message or failure.message or "")
    return "" if "To enable traceback" in text else text


def _message(failure: Any) -> str:
    text = _text(failure)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    first = lines[0]  # the exception's own line ("RuntimeError: ..."), not a traceback's tail
    return first if len(first) <= 300 else first[:297] + "..."


def _rank_log(spec_path: Path, rank: int) -> str | None:
    found = sorted((spec_path.parent / "logs").glob(f"*/attempt_*/{rank}/stderr.log"), key=lambda p: p.stat().st_mtime)
    return str(found[-1]) if found else None


def _on_ray() -> bool:
    """Whether this task runs where Ray is set up (a Ray worker of ``runner.kind: ray``)."""
    ray = sys.modules.get("ray")
    return bool(ray is not None and ray.is_initialized())


def _ray_launch(spec_path: Path, n: int, train_cfg: Any, launch: Path) -> None:
    """N ranks as Ray Train workers (``TorchTrainer``), on whatever nodes of the Ray cluster have room."""
    import torch
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    use_gpu = torch.cuda.is_available() and train_cfg.device != "cpu"
    scaling = ScalingConfig(num_workers=n, use_gpu=use_gpu, resources_per_worker=None if use_gpu else {"CPU": 0.01})
    trainer = TorchTrainer(_ray_worker, train_loop_config={"spec": str(spec_path)}, scaling_config=scaling,
                           torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo",
                                                    timeout_s=int(train_cfg.timeout)),
                           run_config=RunConfig(name=f"corpusforge-{spec_path.parent.parent.name}",
                                                storage_path=str(launch / "ray"),
                                                failure_config=FailureConfig(max_failures=0)))
    try:
        trainer.fit()
    except Exception as exc:  # noqa: BLE001 - Ray wraps the rank's error: its last line says what it was
        text = str(exc).strip().splitlines()
        raise RankFailed(f"train: a Ray Train worker failed ({text[-1] if text else type(exc).__name__}); nothing was "
                         "published: run the step again to resume from its last checkpoint") from None


def _ray_worker(config: Mapping[str, Any]) -> None:
    """A Ray Train worker: the process group is Ray's; the rest is :func:`main`'s."""
    from ray import train

    os.environ["LOCAL_RANK"] = str(train.get_context().get_local_rank())
    run(Path(config["spec"]))


# --- the rank's side ------------------------------------------------------------------------------------------------

class _Reports:
    """Rank 0's reporter: a JSON line per report, flushed at once (the task's process follows the file)."""

    def __init__(self, path: Path, rank: int):
        self.path, self.rank, self.kept = Path(path), rank, []

    def __call__(self, step: int, metrics: dict[str, float]) -> None:
        self.kept.append({"step": step, "metrics": metrics})
        self._write({"step": step, "metrics": metrics})

    def note(self, message: str) -> None:
        self._write({"note": message})

    def _write(self, item: dict[str, Any]) -> None:
        if self.rank == 0:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(item) + "\n")


def rank_fit(model: Any, objective: Any, train_cfg: Any, scratch: Path) -> tuple[Any, float]:
    """``fit`` in a rank. The fit this launch is for trains under torch.distributed (resuming from the step's
    checkpoint when there is one), rank 0 saves what it ends with, and the rank ends (:class:`RankDone`). An earlier
    fit of the same build (cross-validation folds), which an earlier launch trained, loads that launch's weights."""
    from corpusforge.models.training import _ddp_env, train

    assert _RANK is not None
    if Path(scratch).resolve() != Path(_RANK["scratch"]):
        started = time.perf_counter()
        body = _load_trained(model, scratch)
        if body is None:
            raise RankFailed(f"train: an earlier training of this step ({scratch}) left no weights")
        return _result(body), time.perf_counter() - started
    _, rank, _ = _ddp_env()
    reports = _Reports(Path(_RANK["reports"]), rank)
    ckpt = Path(scratch) / "checkpoint.safetensors"
    result = train(model, objective, train_cfg, on_metrics=reports, checkpoint_path=ckpt,
                   resume_from=ckpt if ckpt.is_file() else None)
    import torch.distributed as dist

    world, rank, _ = _ddp_env()
    if train_cfg.strategy == "fsdp" and world > 1:  # every rank joins the gathers of the sharded layers
        from corpusforge.models.sharding import gathered_state

        tensors = gathered_state(model)
    else:
        from corpusforge.models.zoo import unique_state_dict

        tensors = unique_state_dict(model)
    if rank == 0:
        _save_trained(tensors, result, scratch, world, reports.kept)
    if dist.is_initialized():
        dist.barrier()
    raise RankDone


def run(spec_path: Path) -> None:
    """A rank: repeat the stage task's call recorded in ``spec_path`` until its ``fit`` has trained."""
    global _RANK
    import torch

    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.stage import load
    from corpusforge.tasks.step import StepResult

    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    _RANK = spec
    torch.set_num_threads(int(spec["threads"]))
    build, parse = load(spec["build"]), load(spec["parse"])
    more = {} if spec["refs"] is None else {"refs": {k: StepResult.from_dict(v) for k, v in spec["refs"].items()}}
    try:
        build(StepResult.from_dict(spec["upstream"]), parse(spec["config"]), ArtifactStore(spec["store"]), **more)
    except RankDone:
        import torch.distributed as dist

        if dist.is_initialized() and "RAY_TRAIN_V2_ENABLED" not in os.environ and not _on_ray():
            dist.destroy_process_group()
        return
    raise RankFailed("train: the stage's build ended without reaching its training (nothing to do on a rank)")


def main(argv: list[str] | None = None) -> None:
    from torch.distributed.elastic.multiprocessing.errors import record

    args = sys.argv[1:] if argv is None else argv
    record(run)(Path(args[0]))


if __name__ == "__main__":  # run as corpusforge.tasks.launch, not __main__: fit reads that module's _RANK
    from corpusforge.tasks.launch import main as _main

    _main()

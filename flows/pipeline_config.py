"""The pipeline's config: the stages present, MLflow tracking and the task runner. No Prefect imported here,
so a config can be validated (and a fully published run answered from the store) without it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from corpusforge.stages import STAGES, Stage, check_references, downstream
from corpusforge.tasks.config import ConfigError, from_dict


@dataclass(frozen=True)
class TrackingConfig:
    """MLflow tracking. The URI comes from CORPUSFORGE_TRACKING_URI / MLFLOW_TRACKING_URI or the store."""

    enabled: bool = field(default=True, metadata={"doc": "Log runs, metrics and artifacts to MLflow."})
    register_models: bool = field(default=True, metadata={
        "doc": "Register each newly trained lm in the MLflow model registry (name = lm.name, a text-generating "
               "pyfunc; models:/NAME@latest is the newest version)."})


DASK_SCHEMES = ("tcp://", "tls://", "ucx://", "ws://", "wss://")


@dataclass(frozen=True)
class RunnerConfig:
    """Where shard-parallel tasks run."""

    kind: Literal["threads", "processes", "dask", "ray"] = field(
        default="threads", metadata={"doc": "Prefect task runner: thread pool, process pool, prefect-dask or prefect-ray."}
    )
    workers: int = field(default=0, metadata={
        "doc": "Parallel workers; 0 means one per CPU core. For dask/ray without an address: the processes (dask) "
               "or CPUs (ray) of the local cluster started for the run."})
    address: str = field(default="", metadata={
        "doc": "dask/ray only: join an existing cluster instead of starting a local one: a Dask scheduler "
               "address (tcp://host:8786) or a Ray address (ray://host:10001, host:6379, or auto). Its workers "
               "must see the store and the sources at the same paths and reach the Prefect API (docs: Operations, 'Clusters')."})
    verify_inputs: bool = field(default=False, metadata={
        "doc": "Re-hash every file of a published artifact before reusing it (default: check sizes and the file "
               "stats recorded when the files were last hashed; re-hash only files whose stats changed)."})

    def __post_init__(self) -> None:
        if self.workers < 0:
            raise ValueError(f"workers: must be >= 0, got {self.workers}")
        address = self.address.strip()
        object.__setattr__(self, "address", address)
        if address and self.kind not in ("dask", "ray"):
            raise ValueError(f"address: joins a dask or ray cluster; runner.kind is {self.kind!r}")
        if address and self.kind == "dask" and address == "auto":
            raise ValueError("address: 'auto' is Ray's; a Dask scheduler address looks like tcp://host:8786")
        if address and self.kind == "dask" and "://" in address and not address.startswith(DASK_SCHEMES):
            raise ValueError(f"address: {address!r} is not a Dask scheduler address; use one of "
                             f"{', '.join(s + 'host:port' for s in DASK_SCHEMES)}")
        if address and self.kind == "ray" and "://" in address and not address.startswith("ray://"):
            raise ValueError(f"address: {address!r} is not a Ray address; use ray://host:10001, host:6379 or auto")


def _post_init(self) -> None:
    if self.corpus is None:
        raise ValueError("corpus: the pipeline needs a corpus section (sources, reader, clean ...)")
    if not self.name or not self.name.strip():
        raise ValueError("name: must be a non-empty string")
    present = set()
    for stage in STAGES:
        value = getattr(self, stage.section)
        if value is None:
            continue
        if stage.after is not None and stage.after not in present:
            raise ConfigError(f"{stage.section}: needs a {stage.after} section in the same pipeline")
        if not isinstance(value, stage.config):
            object.__setattr__(self, stage.section, stage.from_dict(value))
        present.add(stage.section)
    for stage in STAGES:  # what a stage needs of its upstream (the roles its model family derives ids from)
        if stage.adjust_upstream and getattr(self, stage.section) is not None:
            from corpusforge.tasks.stage import load

            upstream = getattr(self, stage.after)
            object.__setattr__(self, stage.after, load(stage.adjust_upstream)(getattr(self, stage.section), upstream))
    check_references({s.section: getattr(self, s.section) for s in STAGES})  # a section named: before this one
    if self.lm is not None and not getattr(self.tokenizer, "encode", True):
        raise ConfigError("lm: trains on encoded token shards; set tokenizer.encode: true")


def _stages(self, base_dir: str | Path | None = None) -> list[tuple[Stage, Any]]:
    """(stage, its config) for every section present after the corpus, in run order; relative paths in path
    fields (ngram.eval, embeddings.analogies/similarity) resolved against ``base_dir``, the config file's
    directory."""
    from corpusforge.tasks.config import resolve_paths

    return [(s, resolve_paths(getattr(self, s.section), base_dir)) for s in downstream()
            if getattr(self, s.section) is not None]


# A whole pipeline: one MLflow experiment, stages run in order. One typed section per registered stage
# (corpusforge.stages.STAGES), so a new stage needs no edit here.
PipelineConfig = dataclasses.make_dataclass(
    "PipelineConfig",
    [("name", str, field(default="corpusforge", metadata={"doc": "Pipeline name; also the MLflow experiment."})),
     *[(s.section, s.config | None, field(default=None, metadata={"doc": s.doc})) for s in STAGES],
     ("tracking", TrackingConfig, field(default_factory=TrackingConfig, metadata={"doc": "MLflow settings."})),
     ("runner", RunnerConfig, field(default_factory=RunnerConfig, metadata={"doc": "Task runner settings."}))],
    frozen=True,
    namespace={"__post_init__": _post_init, "stages": _stages,
               "__doc__": "A whole pipeline: one MLflow experiment, stages run in order."},
)
PipelineConfig.__module__ = __name__


def pipeline_config_from_dict(data: dict[str, Any]) -> PipelineConfig:
    return from_dict(PipelineConfig, data)

"""The step mechanism shared by every step: identity, publish-or-reuse, and what a step returns.

A step's core function calls :func:`run_step` with its name, version, config and inputs and a
``build(tmp_dir)`` callback. The id is content-derived (corpusforge.storage.hashing.artifact_id); if it is already
published the step returns at once with ``reused=True``. Between tasks only the small
:class:`StepResult` travels: ids and paths, never data.

Inside :func:`lookup_only`, :func:`run_step` never builds: a published step returns as usual and an
unpublished one raises :class:`NotPublished`. Running a pipeline's stage functions in that mode derives
every id exactly as a real run would (same code, no second copy of the identity rules), which is how a
run whose every step is already published is answered from the store without starting Prefect or MLflow.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from corpusforge.storage.hashing import artifact_id
from corpusforge.storage.store import ArtifactStore, read_manifest

BASE_LIBRARIES = ("corpusforge",)
_LOOKUP_ONLY = contextvars.ContextVar("corpusforge_lookup_only", default=False)


class NotPublished(LookupError):
    """Raised by :func:`run_step` inside :func:`lookup_only` for a step whose artifact is not in the store."""

    def __init__(self, step: str, name: str, artifact_id: str):
        super().__init__(f"{step} {name} ({artifact_id[:12]}) is not published yet")
        self.step, self.name, self.artifact_id = step, name, artifact_id


@contextlib.contextmanager
def lookup_only() -> Iterator[None]:
    """Within this block steps are looked up, never built (see the module docstring)."""
    token = _LOOKUP_ONLY.set(True)
    try:
        yield
    finally:
        _LOOKUP_ONLY.reset(token)


@dataclass(frozen=True)
class StepResult:
    id: str
    step: str
    name: str
    path: str
    reused: bool
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepResult:
        return cls(**{k: data[k] for k in ("id", "step", "name", "path", "reused", "seconds")})


def artifact_input(result: StepResult | Mapping[str, Any]) -> dict[str, Any]:
    """How a step lists an upstream artifact among its inputs."""
    r = result if isinstance(result, StepResult) else StepResult.from_dict(result)
    return {"id": r.id, "kind": "artifact", "step": r.step, "name": r.name}


def resolve_references(cfg: Any, store: ArtifactStore, *, section: str,
                       given: Mapping[str, StepResult | Mapping[str, Any]] | None = None,
                       sections: Mapping[str, Sequence[StepResult]] | None = None,
                       ids_only: bool = False) -> dict[str, StepResult]:
    """The artifacts ``cfg``'s reference fields name (corpusforge.tasks.config.artifact_ref), by dotted field
    path, in field order: ``given`` (what the pipeline resolved) first; a section name from ``sections`` (the
    steps each stage of this run ran: the last one of an allowed step); an id or unique prefix from the store.
    A reference that names nothing, or an artifact of another step, is a one-line ConfigError. ``ids_only``:
    only the references by id are resolved (a check before a run; section names were checked with the config)."""
    from corpusforge.tasks.config import ConfigError, is_artifact_id, references

    out: dict[str, StepResult] = {}
    for dotted, value, steps in references(cfg):
        where, what = f"{section}.{dotted}", " or ".join(steps)
        if given is not None and dotted in given:
            r = given[dotted]
            found = r if isinstance(r, StepResult) else StepResult.from_dict(r)
        elif not is_artifact_id(value):
            if ids_only:
                continue
            ran = (sections or {}).get(value)
            if ran is None:
                raise ConfigError(f"{where}: {value!r} names a pipeline section; only a pipeline that runs it can "
                                  "resolve it (give an artifact id instead)")
            found = next((r for r in reversed(ran) if r.step in steps), None)
            if found is None:
                raise ConfigError(f"{where}: the {value} section made no {what} artifact in this run")
        else:
            found = _published(store, value, where)
        if found.step not in steps:
            raise ConfigError(f"{where}: {found.id[:12]} is a {found.step} artifact ({found.name}), not a {what}")
        if dotted == "init":
            _check_start_family(cfg, found, where)
        out[dotted] = found
    return out


def _check_start_family(cfg: Any, found: StepResult, where: str) -> None:
    """A checkpoint of a family the stage's family cannot start from (FamilySpec.starts_from) is a ConfigError
    before anything runs: "3f0a12345678 is a gpt lm; a bert_classifier starts from a bert, ..." (issue 50), not a
    message about a missing special token after the corpus and tokenizer steps."""
    import json

    from corpusforge.models.family import family
    from corpusforge.tasks.config import ConfigError

    name = getattr(cfg, "family", None)
    if not isinstance(name, str):
        return
    try:
        spec = family(name)
    except ValueError:
        return  # an unknown family is the config's own error
    if not spec.starts_from:
        return
    try:
        parent = json.loads((Path(found.path) / "config.json").read_text(encoding="utf-8")).get("family")
    except (OSError, ValueError, AttributeError):
        return  # no model config to read (an adapter names its base): the step loads and checks it
    if parent and parent not in spec.starts_from:
        allowed = ", ".join(f"a {f}" for f in sorted(spec.starts_from))
        raise ConfigError(f"{where}: {found.id[:12]} is a {parent} {found.step} ({found.name}); a {name} starts "
                          f"from {allowed}")


def _published(store: ArtifactStore, ref: str, where: str) -> StepResult:
    from corpusforge.storage.catalog import Catalog
    from corpusforge.tasks.config import ConfigError

    try:
        found = Catalog(store).get(ref)
    except LookupError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if found.problem:
        raise ConfigError(f"{where}: {found.problem}")
    m = found.manifest
    return StepResult(id=m["id"], step=str(m.get("step")), name=str(m.get("name")), path=str(found.path),
                      reused=True, seconds=0.0)


def slug(text: str, limit: int = 64) -> str:
    """A safe artifact name from free text: 'sample/a b.txt' -> 'sample__a_b.txt'."""
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", text.replace("/", "__")).lstrip("._-")
    return (s[:limit].rstrip("._-") or "source") if s else "source"


def library_versions(names: Sequence[str]) -> dict[str, str]:
    return {name: _library_version(name) for name in (*BASE_LIBRARIES, *names)}


@functools.lru_cache(maxsize=None)
def _library_version(name: str) -> str:
    """One distribution's version, looked up once per process (each lookup scans sys.path: ~1-2 ms, paid by
    every step's manifest). A local server that imported the packages restarts when they change."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


@functools.lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the corpusforge checkout this code runs from, if it is one."""
    here = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def run_step(
    store: ArtifactStore,
    *,
    step: str,
    version: int,
    name: str,
    config: Mapping[str, Any],
    inputs: list[Mapping[str, Any]],
    build: Callable[[Path], Mapping[str, Any] | None],
    libraries: Sequence[str] = (),
    references: Mapping[str, StepResult] | None = None,
) -> StepResult:
    """Publish the step's artifact, or reuse it when its id is already in the store. ``references`` (what
    :func:`resolve_references` gave the core) join ``inputs`` after the others, in field order: each artifact's
    id is part of the step's id, and the artifact is part of its lineage."""
    inputs = [*inputs, *(artifact_input(r) for r in (references or {}).values())]
    if _LOOKUP_ONLY.get():
        aid = artifact_id(step, version, config, [str(i["id"]) for i in inputs])
        manifest = store.lookup(step, name, aid)
        if manifest is None:
            raise NotPublished(step, name, aid)
        store.check_intact(store.artifact_dir(step, name, aid), manifest)
        return StepResult(id=aid, step=step, name=name, path=str(store.artifact_dir(step, name, aid)), reused=True,
                          seconds=0.0)
    published = store.publish(
        step=step,
        name=name,
        version=version,
        config=config,
        inputs=list(inputs),
        build=_reading_checked(store, step, inputs, build),
        # computed only when the step builds (a reuse pays for neither the metadata scan nor `git`)
        extra=lambda: {"library_versions": library_versions(libraries), "git_commit": git_commit()},
    )
    seconds = 0.0 if published.reused else float(published.manifest["timings"]["seconds"])
    return StepResult(
        id=published.manifest["id"],
        step=step,
        name=name,
        path=str(published.path),
        reused=published.reused,
        seconds=seconds,
    )


def _recorded_tokenizers(store: ArtifactStore, upstream: Sequence[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """(step, name, id) of the tokenizer artifacts the upstream models' config.json files record: a step that
    starts from a model reads its tokenizer too (`lm finetune` encodes with the parent's), so its files are
    checked as the direct inputs' are (issue 44, item 7)."""
    import json

    from corpusforge.storage.store import resolve_recorded

    found = []
    for step, name, aid in upstream:
        config = store.artifact_dir(step, name, aid) / "config.json"
        try:
            spec = json.loads(config.read_text(encoding="utf-8"))
            recorded = (spec.get("tokenizer") or {}).get("path") if isinstance(spec, dict) else None
            if not recorded:
                continue
            manifest = read_manifest(resolve_recorded(recorded, config.parent)) or {}
        except (OSError, ValueError, AttributeError):
            continue  # no such file, or not a model's: the build reports what it cannot read
        if manifest.get("step") and manifest.get("name") and manifest.get("id"):
            found.append((str(manifest["step"]), str(manifest["name"]), str(manifest["id"])))
    return found


def _reading_checked(store: ArtifactStore, step: str, inputs: Sequence[Mapping[str, Any]],
                     build: Callable[[Path], Mapping[str, Any] | None]) -> Callable[[Path], Mapping[str, Any] | None]:
    """``build``, run only after every file of its upstream artifacts was re-hashed against their manifests,
    and failed when one of them changed while it ran (ArtifactStore.hash_upstream: the step reads those files
    anyway, and is about to publish what it makes of them under an id that names the clean ones). A reuse
    never gets here, so it costs nothing there."""
    upstream = [(str(i["step"]), str(i["name"]), str(i["id"])) for i in inputs
                if i.get("kind") == "artifact" and i.get("step") and i.get("name")]
    upstream += [u for u in _recorded_tokenizers(store, upstream) if u not in upstream]
    if not upstream:
        return build

    def checked(out: Path) -> Mapping[str, Any] | None:
        snapshots = [s for s in (store.hash_upstream(*u, reader=step) for u in upstream) if s is not None]
        fields = build(out)
        for snapshot in snapshots:
            store.check_upstream_unchanged(snapshot, step)
        return fields

    return checked


def log_step_outcome(result: StepResult) -> None:
    """Make reuse visible in the Prefect UI's task logs (called from @task wrappers)."""
    if _LOOKUP_ONLY.get():
        return
    from prefect import get_run_logger

    logger = get_run_logger()
    if result.reused:
        logger.info("reused %s %s (id %s) from the store: nothing recomputed", result.step, result.name, result.id[:12])
    else:
        logger.info("computed %s %s (id %s) in %.2fs", result.step, result.name, result.id[:12], result.seconds)

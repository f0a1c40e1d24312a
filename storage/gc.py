"""Store hygiene: ``artifacts du`` (what the store holds, per step and name, and what depends on what) and
``artifacts gc`` (remove the artifacts that no kept artifact depends on).

What is kept is chosen by a policy: the ``keep_latest`` newest artifacts of each (step, name), every artifact
newer than ``keep_newer_than`` seconds, and always every artifact a registered MLflow model was made from (the
store's registry, and its ledger ``.tracking/registry.json``) and every artifact a pipeline's latest run used
(``.runs/``, :func:`record_run`: two pipelines whose word2vec sections are both named ``embeddings`` each keep
theirs under ``--keep-latest 1``); then, transitively, every artifact a kept one
depends on (its manifest's artifact inputs, and any artifact folder its manifest or top-level JSON files name,
such as a model's tokenizer path). Everything else goes. Without a policy nothing is an artifact to remove, and
gc only sweeps what killed writers left (``ArtifactStore.sweep_leftovers``).

Removal takes the store's lock exclusively (``storage.locks.store_alone``: every pipeline run holds it shared,
so gc never removes what a run reads), removes dependents before their inputs, and removes each artifact with
one rename to a trash name first (``ArtifactStore.remove_published``; an object store deletes the manifest, its
commit point, first): a crash leaves every artifact whole or wholly gone, and a trash folder (an upload no
manifest names) that the next gc removes. A dry run is the default; it reads only and takes no lock.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from corpusforge.storage.locks import StoreBusy, store_alone
from corpusforge.storage.manifests import misplaced
from corpusforge.storage.store import MANIFEST, ArtifactStore, Leftover, StoreError

__all__ = ["GcError", "StoreBusy", "DuReport", "GcReport", "Entry", "parse_age", "du", "gc"]

_AGE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
# "<step>/<name>-<id12>" anywhere in a JSON text (a store-relative or absolute path to an artifact folder)
_FOLDER_RE = re.compile(r"(?<![A-Za-z0-9._-])([A-Za-z0-9][A-Za-z0-9._-]{0,63}/"
                        r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}-[0-9a-f]{12})(?![0-9a-f])")
SCAN_JSON_BYTES = 4 * 2**20  # an artifact's top-level JSON files up to this size are read for folder references
# What the store holds besides artifacts (``du``'s "other" rows).
_OTHER = {"mlflow.db": "MLflow's database (runs, registered models)",
          "mlartifacts": "MLflow's run files and registered model copies",
          ".verified": "reuse records (file stats last hashed)", ".locks": "locks", ".tracking": "registry ledger",
          ".remote.json": "this cache's object-store URL", "_static": "shared Data Docs assets",
          ".scratch": "training scratch (checkpoints, caches)",
          "prefect": "PREFECT_HOME of CLI runs, the local server's state", "logs": "the local server's log",
          ".runs": "each pipeline's latest run: the artifacts it used (gc keeps them)"}
RUNS = ".runs"


SCRATCH = ".scratch"
_SCRATCH_KINDS = {"sentence_index": "a search-vector cache of `embed search` (remade on the next search)",
                  "bm25_index": "a BM25 index cache of `embed search --mode bm25|hybrid` (remade on the next search)"}


@dataclass(frozen=True)
class ScratchEntry:
    """One entry of the store's scratch: a stopped training's checkpoint folder or a search-vector cache."""

    path: Path
    kind: str
    what: str
    modified: float  # the newest mtime in it
    bytes: int


def scratch_entries(root: Path) -> list[ScratchEntry]:
    """Everything under ``<store>/.scratch/<kind>/``: a training step's scratch (the checkpoint a stopped run left
    for its resume) or a cache, with its age and size. A finished run removes its own scratch, so what is here was
    left by runs that stopped (issue 44, item 14)."""
    base = Path(root) / SCRATCH
    if not base.is_dir():
        return []
    found = []
    for kind_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        what = _SCRATCH_KINDS.get(kind_dir.name) or (f"the scratch of a stopped {kind_dir.name} training (the "
                                                     "checkpoint its rerun would resume from)")
        for entry in sorted(kind_dir.iterdir()):
            files = [entry] if entry.is_file() else [f for f in entry.rglob("*") if f.is_file() and not f.is_symlink()]
            try:
                modified = max((f.stat().st_mtime for f in files), default=entry.stat().st_mtime)
            except OSError:
                continue
            found.append(ScratchEntry(entry, kind_dir.name, what, modified, _tree_bytes(entry)))
    return found


def plan_scratch(entries: list[ScratchEntry], keep_latest: int | None, keep_newer_than: float | None,
                 now: float | None = None) -> list[ScratchEntry]:
    """The scratch entries gc removes under the artifacts' rules: the ``keep_latest`` newest of each kind and
    everything newer than ``keep_newer_than`` seconds stay (both given: an entry goes only when both let it go);
    no rule given: nothing goes."""
    if keep_latest is None and keep_newer_than is None:
        return []
    now = time.time() if now is None else now
    remove = []
    by_kind: dict[str, list[ScratchEntry]] = defaultdict(list)
    for e in entries:
        by_kind[e.kind].append(e)
    for group in by_kind.values():
        group.sort(key=lambda e: e.modified, reverse=True)
        for rank, e in enumerate(group):
            kept_by_count = keep_latest is not None and rank < keep_latest
            kept_by_age = keep_newer_than is not None and now - e.modified < keep_newer_than
            if not (kept_by_count or kept_by_age):
                remove.append(e)
    return remove


class GcError(RuntimeError):
    """gc cannot decide safely (the registry cannot be read) or a removal failed: one line, nothing half-done."""


def parse_age(value: str | float | int | None, flag: str = "--keep-newer-than") -> float | None:
    """``7d``, ``12h``, ``30m``, ``45s``, ``2w`` or a number of seconds -> seconds (None stays None)."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        match = _AGE_RE.match(str(value))
        if match is None:
            raise ValueError(f"{flag} {value!r}: give an age such as 7d, 12h, 30m, 45s, 2w, or seconds")
        seconds = float(match.group(1)) * _UNITS[match.group(2).lower()]
    if seconds < 0:
        raise ValueError(f"{flag} {value!r}: an age is not negative")
    return seconds


def age_text(seconds: float) -> str:
    for unit, size in (("w", _UNITS["w"]), ("d", _UNITS["d"]), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _ago(seconds: float) -> str:
    """A rounded age for people: '3 days', '5 hours', '12 minutes', '40 seconds'."""
    for unit, size in (("week", _UNITS["w"]), ("day", _UNITS["d"]), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = int(seconds // size)
            return f"{n} {unit}{'s' if n > 1 else ''}"
    return f"{max(0, int(seconds))} seconds"


# ----------------------------------------------------------------------------------------------- inventory


@dataclass
class Entry:
    """One published artifact as du and gc see it."""

    id: str
    step: str
    name: str
    path: Path
    created_at: str | None
    created: float  # seconds since the epoch
    bytes: int
    inputs: list[str]  # the ids of its artifact inputs
    manifest: dict[str, Any] = field(repr=False)
    used_by: list[str] = field(default_factory=list)  # ids of the artifacts that name it as an input
    registered: list[str] = field(default_factory=list)  # "NAME vN" of the registered models made from it
    problem: str | None = None  # its folder is not its place (misplaced): never removed
    why: str = ""  # why gc keeps or removes it

    def to_dict(self) -> dict[str, Any]:
        data = {"id": self.id, "step": self.step, "name": self.name, "bytes": self.bytes,
                "created_at": self.created_at, "path": str(self.path), "inputs": self.inputs,
                "used_by": self.used_by, "registered": self.registered}
        if self.why:
            data["why"] = self.why
        if self.problem:
            data["problem"] = self.problem
        return data


def _created(manifest: Mapping[str, Any], directory: Path) -> float:
    text = manifest.get("created_at")
    if isinstance(text, str):
        try:
            stamp = datetime.fromisoformat(text)
            return (stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)).timestamp()
        except ValueError:
            pass
    try:
        return (directory / MANIFEST).stat().st_mtime
    except OSError:
        return 0.0


def inventory(store: ArtifactStore, registered: Mapping[str, list[str]] | None = None) -> list[Entry]:
    """Every published artifact with its size, its artifact inputs and what names it as an input."""
    entries = []
    for directory, manifest in store.iter_published():
        inputs = [str(i["id"]) for i in manifest.get("inputs") or []
                  if isinstance(i, Mapping) and i.get("kind", "artifact") == "artifact" and i.get("id")]
        entries.append(Entry(str(manifest["id"]), str(manifest.get("step")), str(manifest.get("name")), directory,
                             manifest.get("created_at"), _created(manifest, directory),
                             store.published_bytes(directory, manifest), inputs, manifest,
                             problem=misplaced(directory, manifest)))
    by_id = {e.id: e for e in entries}
    for e in entries:
        for aid in dict.fromkeys(e.inputs):
            if aid in by_id:
                by_id[aid].used_by.append(e.id)
        e.registered = list((registered or {}).get(e.id, []))
    entries.sort(key=lambda e: (e.step, e.name, e.created, e.id))
    return entries


def _tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for sub in path.rglob("*"):
        try:
            if sub.is_file() and not sub.is_symlink():
                total += sub.stat().st_size
        except OSError:
            pass
    return total


# ---------------------------------------------------------------------------------------------------- du


@dataclass
class DuReport:
    store: str
    artifacts: list[Entry]
    other: list[dict[str, Any]]  # {"where", "what", "bytes"}: what the store holds besides artifacts

    @property
    def artifact_bytes(self) -> int:
        return sum(e.bytes for e in self.artifacts)

    @property
    def total_bytes(self) -> int:
        return self.artifact_bytes + sum(o["bytes"] for o in self.other)

    def groups(self) -> list[dict[str, Any]]:
        """Bytes and count per (step, name), the largest first."""
        grouped: dict[tuple[str, str], list[Entry]] = defaultdict(list)
        for e in self.artifacts:
            grouped[(e.step, e.name)].append(e)
        rows = [{"step": step, "name": name, "count": len(es), "bytes": sum(e.bytes for e in es),
                 "newest": max((e.created_at or "" for e in es), default="") or None}
                for (step, name), es in grouped.items()]
        return sorted(rows, key=lambda r: (-r["bytes"], r["step"], r["name"]))

    def roots(self) -> list[Entry]:
        """The artifacts nothing in the store depends on: the tops of the dependency trees."""
        return [e for e in self.artifacts if not e.used_by]

    def to_dict(self) -> dict[str, Any]:
        return {"store": self.store, "total_bytes": self.total_bytes, "artifact_bytes": self.artifact_bytes,
                "groups": self.groups(), "artifacts": [e.to_dict() for e in self.artifacts], "other": self.other}


def _other(store: ArtifactStore, entries: list[Entry]) -> list[dict[str, Any]]:
    root = store.root
    if not root.is_dir():
        return []
    from corpusforge.storage.object_store import REMOTE_MARKER

    if (root / REMOTE_MARKER).is_file():  # the artifacts are on the bucket; this is the local cache
        return [{"where": str(root), "what": "the local cache (verified copies, locks, Prefect's and MLflow's "
                 "databases)", "bytes": _tree_bytes(root)}]
    artifact_dirs = {e.path for e in entries}
    steps = {e.path.parent for e in entries}
    rows = []
    for child in sorted(root.iterdir()):
        if child in steps:  # what a step folder holds besides artifacts: temp dirs, gc trash, unreadable manifests
            for sub in sorted(child.iterdir()):
                if sub not in artifact_dirs:
                    what = ("a temp dir (a writer's, or a dead writer's)" if sub.name.startswith(".tmp-") else
                            "an interrupted gc's trash" if sub.name.startswith(".gc-") else "not an artifact")
                    rows.append({"where": f"{child.name}/{sub.name}", "what": what, "bytes": _tree_bytes(sub)})
        elif child.name == SCRATCH and child.is_dir():  # each stopped training and cache, with its age
            now = time.time()
            rows += [{"where": e.path.relative_to(root).as_posix(), "what": f"{e.what}, {_ago(now - e.modified)} "
                      "old", "bytes": e.bytes} for e in scratch_entries(root)]
        else:
            rows.append({"where": child.name, "what": _OTHER.get(child.name, ""), "bytes": _tree_bytes(child)})
    return rows


def du(store: ArtifactStore) -> DuReport:
    """What the store holds: every artifact's bytes, inputs and dependents, and what else takes room. Reads
    manifests and the registry ledger only (no MLflow import)."""
    entries = inventory(store, _ledger_registered(store.root))
    return DuReport(store.uri_for_humans, entries, _other(store, entries))


# ---------------------------------------------------------------------------------------------------- gc


@dataclass
class GcReport:
    store: str
    dry_run: bool
    policy: dict[str, Any]
    removed: list[Entry]  # removed, or (dry run) what would be removed
    kept: list[Entry]
    leftovers: list[Leftover]
    mlflow_runs: list[dict[str, str]] = field(default_factory=list)  # runs that logged a removed artifact
    notes: list[str] = field(default_factory=list)

    @property
    def bytes_freed(self) -> int:
        """Bytes freed (a dry run: that would be freed): the removed artifacts and leftovers."""
        return sum(e.bytes for e in self.removed) + sum(item.size for item in self.leftovers)

    def to_dict(self) -> dict[str, Any]:
        return {"store": self.store, "dry_run": self.dry_run, "policy": self.policy,
                "removed": [_brief(e) for e in self.removed], "kept": [_brief(e) for e in self.kept],
                "leftovers": [item.to_dict() for item in self.leftovers], "bytes_freed": self.bytes_freed,
                "mlflow_runs": self.mlflow_runs, "notes": self.notes}


def _brief(e: Entry) -> dict[str, Any]:
    data = {"id": e.id, "step": e.step, "name": e.name, "bytes": e.bytes, "created_at": e.created_at,
            "path": str(e.path), "why": e.why}
    if e.registered:
        data["registered"] = e.registered
    return data


def _ledger_registered(root: Path, skip_uri: str | None = None) -> dict[str, list[str]]:
    """Artifact id -> ["NAME vN", ...] from the store's registry ledger (every registry it names but
    ``skip_uri``)."""
    from corpusforge.storage.tracking import RegistryLedger

    found: dict[str, list[str]] = defaultdict(list)
    for uri, entries in RegistryLedger(root)._read().items():
        if uri == skip_uri or not isinstance(entries, dict):
            continue
        for aid, info in entries.items():
            if isinstance(info, dict):
                found[aid].append(f"{info.get('name', '?')} v{info.get('version', '?')}")
    return dict(found)


def registered_artifacts(root: Path) -> dict[str, list[str]]:
    """Artifact id -> ["NAME vN", ...]: the store's MLflow registry (its corpusforge.artifact_id tags), and the
    ledger's entries for other registries. A GcError when the registry exists but cannot be read."""
    from corpusforge.storage.tracking import default_tracking_uri, registry_artifact_versions

    uri = default_tracking_uri(root)
    local_db = uri == f"sqlite:///{Path(root) / 'mlflow.db'}"
    if local_db and not (Path(root) / "mlflow.db").is_file():
        return _ledger_registered(root)  # no registry here: the ledger alone (it is empty, or names others)
    try:
        versions = registry_artifact_versions(root, uri)
    except Exception as exc:  # noqa: BLE001 - any failure to read the registry stops gc before it removes
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise GcError(f"cannot read the MLflow registry at {uri} ({type(exc).__name__}: {first}): gc removes "
                      "nothing it cannot check against the registered models") from None
    merged: dict[str, list[str]] = defaultdict(list)
    for source in (versions, _ledger_registered(root, skip_uri=uri)):
        for aid, names in source.items():
            merged[aid] += [n for n in names if n not in merged[aid]]
    return dict(merged)


def _json_texts(e: Entry) -> Iterable[tuple[str, str]]:
    """(file, text) of the artifact's manifest and its top-level JSON files (those in the local folder)."""
    yield MANIFEST, json.dumps(e.manifest, ensure_ascii=False)
    if not e.path.is_dir():
        return
    for path in sorted(e.path.glob("*.json")):
        try:
            if path.name != MANIFEST and path.is_file() and path.stat().st_size <= SCAN_JSON_BYTES:
                yield path.name, path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue


def record_run(root: Path, pipeline: str, ids: Sequence[str]) -> None:
    """Remember the artifacts a pipeline's run used or made (its latest run replaces the one before):
    ``<store>/.runs/<digest of the name>.json``. gc keeps them whatever its policy, so a pipeline whose artifacts
    share a (step, name) with another's (two pipelines' word2vec both named ``embeddings``) never loses the ones its
    latest run stands on."""
    import hashlib

    folder = Path(root) / RUNS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(pipeline.encode('utf-8')).hexdigest()[:16]}.json"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"pipeline": pipeline, "finished": time.time(), "ids": list(dict.fromkeys(ids))},
                              indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def latest_runs(root: Path) -> dict[str, list[str]]:
    """pipeline -> the artifact ids its latest run used (:func:`record_run`); a file that cannot be read is
    skipped (it protects nothing, which gc's report then does not claim)."""
    out: dict[str, list[str]] = {}
    folder = Path(root) / RUNS
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            out[str(data["pipeline"])] = [str(i) for i in data["ids"]]
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def plan(entries: list[Entry], keep_latest: int | None, keep_newer_than: float | None,
         now: float | None = None, runs: Mapping[str, Sequence[str]] | None = None) -> tuple[list[Entry], list[Entry]]:
    """(to remove, in removal order: dependents before their inputs; kept), each with ``why``. ``runs``: each
    pipeline's latest run's artifact ids (:func:`latest_runs`), kept whatever the policy."""
    now = time.time() if now is None else now
    by_id = {e.id: e for e in entries}
    kept: dict[str, str] = {}
    for e in entries:
        if e.registered:
            kept[e.id] = "referenced by registered model " + ", ".join(e.registered)
        elif e.problem:
            kept[e.id] = f"left alone: {e.problem}"
    for pipeline, ids in (runs or {}).items():
        for aid in ids:
            if aid in by_id:
                kept.setdefault(aid, f"used by pipeline {pipeline}'s latest run")
    if keep_latest is None and keep_newer_than is None:
        for e in entries:
            kept.setdefault(e.id, "no policy given (--keep-latest N, --keep-newer-than AGE)")
    if keep_latest is not None:
        grouped: dict[tuple[str, str], list[Entry]] = defaultdict(list)
        for e in entries:
            grouped[(e.step, e.name)].append(e)
        for (step, name), es in grouped.items():
            for e in sorted(es, key=lambda x: (x.created, x.id))[-keep_latest:] if keep_latest > 0 else []:
                kept.setdefault(e.id, f"one of the {keep_latest} newest {step} {name}")
    if keep_newer_than is not None:
        for e in entries:
            if now - e.created < keep_newer_than:
                kept.setdefault(e.id, f"newer than {age_text(keep_newer_than)}")
    # everything a kept artifact depends on: its inputs, and any artifact folder its JSON names
    folders = {f"{e.path.parent.name}/{e.path.name}": e.id for e in entries}
    todo = list(kept)
    while todo:
        holder = by_id[todo.pop()]
        named = [(aid, "an input") for aid in holder.inputs]
        for fname, text in _json_texts(holder):
            named += [(folders[rel], f"named in {fname}") for rel in dict.fromkeys(_FOLDER_RE.findall(text))
                      if rel in folders and folders[rel] != holder.id]
        for aid, how in named:
            if aid in by_id and aid not in kept:
                kept[aid] = f"{how} of kept {holder.step} {holder.name} {holder.id[:12]}"
                todo.append(aid)
    remove = [e for e in entries if e.id not in kept]
    for e in entries:
        e.why = kept.get(e.id, "")
    for e in remove:
        reasons = []
        if keep_newer_than is not None:
            reasons.append(f"older than {age_text(keep_newer_than)}")
        if keep_latest is not None:
            reasons.append(f"not among the {keep_latest} newest {e.step} {e.name}")
        e.why = ", ".join(reasons + ["no kept artifact depends on it"])
    return _removal_order(remove), [e for e in entries if e.id in kept]


def _removal_order(remove: list[Entry]) -> list[Entry]:
    """Dependents before their inputs: at any moment of a removal every artifact left has its inputs."""
    ids = {e.id: e for e in remove}
    order: list[Entry] = []
    seen: set[str] = set()

    def visit(e: Entry) -> None:  # inputs first, then the artifact; reversed below
        if e.id in seen:
            return
        seen.add(e.id)
        for aid in e.inputs:
            if aid in ids:
                visit(ids[aid])
        order.append(e)

    for e in remove:
        visit(e)
    return order[::-1]


def gc(store: ArtifactStore, keep_latest: int | None = None, keep_newer_than: str | float | None = None,
       dry_run: bool = True, wait: bool = False, older_than: str | float | None = None) -> GcReport:
    """Remove (``dry_run=False``) or list the artifacts the policy does not keep, and what killed writers left.

    ``keep_latest``: keep the N newest artifacts of each (step, name); ``keep_newer_than``: keep every artifact
    newer than this age (``"7d"``, ``"12h"``, seconds); both: an artifact goes only when both let it go.
    ``older_than`` is only the age a leftover (a dead writer's upload or temp dir) must have to go, as before
    (object stores: default $CORPUSFORGE_OBJECT_STORE_STALE_SECONDS, else 3600); it never selects artifacts. Artifacts a
    registered MLflow model was made from, and everything a kept artifact depends on, are always kept. Removal
    holds the store's lock exclusively: StoreBusy while a pipeline runs on the store (``wait``: until it ends).
    """
    if keep_latest is not None and (isinstance(keep_latest, bool) or int(keep_latest) < 1):
        raise ValueError(f"--keep-latest {keep_latest!r}: keep at least 1 (--keep-newer-than 0s selects every age)")
    seconds = parse_age(keep_newer_than, flag="--keep-newer-than")
    stale = parse_age(older_than, flag="--older-than")
    policy = {"keep_latest": keep_latest, "keep_newer_than": None if seconds is None else age_text(seconds)}
    if dry_run or not store.root.is_dir():  # no store: nothing to remove, and no lock folder to make
        return _run(store, keep_latest, seconds, stale, policy, dry_run=dry_run)
    with store_alone(store.root, wait=wait):
        return _run(store, keep_latest, seconds, stale, policy, dry_run=False)


def _run(store: ArtifactStore, keep_latest: int | None, seconds: float | None, stale: float | None,
         policy: dict[str, Any], dry_run: bool) -> GcReport:
    registered = registered_artifacts(store.root) if (keep_latest is not None or seconds is not None) else \
        _ledger_registered(store.root)
    entries = inventory(store, registered)
    remove, kept = plan(entries, keep_latest, seconds, runs=latest_runs(store.root))
    report = GcReport(store.uri_for_humans, dry_run, policy, [], kept, [])
    if keep_latest is None and seconds is None and entries:
        report.notes.append("no artifact policy given: only what killed writers left was looked at (give "
                            "--keep-latest N and/or --keep-newer-than AGE to remove artifacts)")
    if dry_run:
        report.removed = remove
    else:
        for e in remove:
            try:
                store.remove_published(e.path, e.manifest)
            except (OSError, StoreError) as exc:
                report.notes.append(f"stopped: {e.step} {e.name} {e.id[:12]} could not be removed ({exc}); it "
                                    "and everything it depends on are still whole")
                break
            report.removed.append(e)
    report.leftovers = store.sweep_leftovers(apply=not dry_run, max_age=stale)
    now = time.time()
    for e in plan_scratch(scratch_entries(store.root), keep_latest, seconds, now):  # stopped trainings, caches
        report.leftovers.append(Leftover(str(e.path), f"{e.what}, {_ago(now - e.modified)} old", e.bytes))
        if not dry_run:
            import shutil

            if e.path.is_dir():
                shutil.rmtree(e.path, ignore_errors=True)
            else:
                e.path.unlink(missing_ok=True)
    if report.removed:
        report.mlflow_runs = _runs_of(store.root, {e.id for e in report.removed})
        if report.mlflow_runs:
            report.notes.append(f"{len(report.mlflow_runs)} MLflow run(s) logged "
                                f"{'an artifact that would be removed' if dry_run else 'a removed artifact'}: "
                                "their params, metrics and logged files stay; their corpusforge.uri tag names a "
                                "folder that is gone")
    if any(n.startswith("stopped:") for n in report.notes):
        raise GcFailed(report)
    return report


class GcFailed(GcError):
    """A removal failed part-way: the report says what was removed before it (the rest is whole)."""

    def __init__(self, report: GcReport):
        super().__init__(next(n for n in report.notes if n.startswith("stopped:")))
        self.report = report


def _runs_of(root: Path, ids: set[str]) -> list[dict[str, str]]:
    """The MLflow runs in the store's tracking database whose corpusforge.artifact_id is one of ``ids``."""
    from corpusforge.storage.tracking import default_tracking_uri, runs_with_artifacts

    uri = default_tracking_uri(root)
    if uri == f"sqlite:///{Path(root) / 'mlflow.db'}" and not (Path(root) / "mlflow.db").is_file():
        return []
    try:
        return runs_with_artifacts(root, uri, ids)
    except Exception:  # noqa: BLE001 - naming the runs is a courtesy; it never stops a gc that is safe
        return []

"""The content-addressed artifact store.

Layout (docs: Internals, "The artifact store"): ``<root>/<step>/<name>-<id[:12]>/`` holding the step's files and ``manifest.json``.

Publishing is atomic: the step writes into a hidden temp dir beside the final one, every file and the
directory are fsynced, the manifest is written last, and one ``rename`` makes the artifact visible.
A directory without a complete manifest is therefore never an artifact. Two processes computing the
same id serialise on an ``flock`` (the second one waits and then reuses the first one's output); where
locks are unavailable, the first rename wins and the loser discards its copy.

A root may also be an object-store URL (``s3://bucket/prefix``): :func:`resolve_store_root` then answers a
local cache directory keyed by the URL, and ``ArtifactStore`` on that directory (or on the URL) is an
:class:`corpusforge.storage.object_store.ObjectArtifactStore`, which keeps the same promises on the bucket
(docs: Operations, "Object storage").
"""

from __future__ import annotations

import errno
import json
import os
import platform
import re
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from corpusforge.storage.cards import CARD, card
from corpusforge.storage.hashing import artifact_id as compute_artifact_id
from corpusforge.storage.hashing import sha256_file
from corpusforge.storage.locks import HAVE_FLOCK, file_lock
from corpusforge.storage.manifests import DIGEST_FIELD, MANIFEST_SCHEMA, manifest_digest, manifest_problems, misplaced

MANIFEST = "manifest.json"
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_TMP_PREFIX = ".tmp-"
TRASH_PREFIX = ".gc-"  # an artifact `artifacts gc` is removing: renamed out of every listing first

class StoreError(RuntimeError):
    """A store operation that cannot succeed (bad name, corrupt manifest, unwritable root)."""


class TamperedArtifact(StoreError):
    """A published artifact's files no longer match its manifest: it must not be reused."""


def verify_inputs_fully() -> bool:
    """``CORPUSFORGE_VERIFY_INPUTS=1`` (set by ``--verify-inputs`` / ``runner.verify_inputs``): re-hash every
    file of every artifact before it is reused, instead of the cheap check."""
    return os.environ.get("CORPUSFORGE_VERIFY_INPUTS", "").lower() in ("1", "true", "yes", "on")


def check_name(kind: str, value: str) -> str:
    """Step and artifact names become path components, so they are restricted to a safe alphabet."""
    if not isinstance(value, str) or not _NAME_RE.match(value) or value in {".", ".."}:
        raise StoreError(
            f"invalid {kind} name {value!r}: use 1-64 characters from letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )
    return value


@dataclass(frozen=True)
class UpstreamSnapshot:
    """An upstream artifact's files as a building step found them: their stats right after they were hashed."""

    directory: Path
    where: str
    stats: dict[str, list[int]]


@dataclass(frozen=True)
class Leftover:
    """Something a killed writer left in a store (a temp dir, an upload no manifest names): never an artifact."""

    where: str  # a path, or an object-store URL
    why: str
    size: int  # bytes

    def to_dict(self) -> dict[str, Any]:
        return {"where": self.where, "why": self.why, "bytes": self.size}


@dataclass(frozen=True)
class PublishResult:
    path: Path
    manifest: dict[str, Any]
    reused: bool


# Manifest fields written by the store itself; a step's build() may not return them (a step's own "files"
# once replaced the sha256 table, so its artifacts could not be verified).
RESERVED_FIELDS = frozenset({"schema", "id", "step", "name", "version", "config", "inputs", "files", "timings",
                             "created_at", "environment", "object_prefix", DIGEST_FIELD})


def store_relative(path: str | os.PathLike[str], store_root: Path) -> str:
    """How an artifact records a path inside its store: relative to the store root (``tokenizer/<dir>``), so
    the same inputs give the same bytes in any store, and a copied or moved store resolves its own files."""
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(Path(store_root).resolve()).as_posix()
    except ValueError:
        return str(resolved)  # outside the store (a user's file): kept as it is


def resolve_recorded(recorded: str | os.PathLike[str], artifact_dir: Path) -> Path:
    """A path recorded by the artifact in ``artifact_dir``: store-relative (resolved against that artifact's
    own store, never outside it) or absolute (older artifacts; when the store was moved or copied, the same
    ``<step>/<dir>`` in this artifact's store is used)."""
    root = Path(artifact_dir).resolve().parent.parent
    path = Path(recorded)
    if not path.is_absolute():
        full = (root / path).resolve()
        if not full.is_relative_to(root):
            raise StoreError(f"{artifact_dir}: recorded path {recorded!r} leaves the store")
        if not full.exists() and _is_object_store(root):  # an object store's artifact not in the local cache yet
            from corpusforge.storage.object_store import ObjectArtifactStore

            ObjectArtifactStore(root).materialize_dir(full)
        return full
    if path.exists():
        return path
    here = root / path.parent.name / path.name
    return here if here.exists() else path


def resolve_store_root(explicit: str | os.PathLike[str] | None = None) -> Path:
    """``--store`` first, then ``CORPUSFORGE_STORE``, then ``./.corpusforge``.

    An object-store URL (``s3://bucket/prefix``) answers its local cache directory (docs: Operations, "Object storage"),
    where the artifacts' verified copies, the locks, Prefect's state and MLflow's database live; an
    ``ArtifactStore`` on that directory publishes to and reads from the URL.
    """
    root = explicit or os.environ.get("CORPUSFORGE_STORE") or ".corpusforge"
    from corpusforge.storage.object_store import as_url

    url = as_url(root)
    if url is not None:
        from corpusforge.storage.object_store import attach

        return attach(url)
    return Path(root).expanduser().resolve()


def _is_object_store(root: str | os.PathLike[str]) -> bool:
    from corpusforge.storage.object_store import REMOTE_MARKER, as_url

    return as_url(root) is not None or (Path(root).expanduser() / REMOTE_MARKER).is_file()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _fsync_path(path: Path, directory: bool = False) -> None:
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0)
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_manifest(directory: Path) -> dict[str, Any] | None:
    """The manifest in ``directory``, or None if there is none or it is incomplete/corrupt."""
    try:
        with open(directory / MANIFEST, encoding="utf-8") as fh:
            manifest = json.load(fh)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or "id" not in manifest or "files" not in manifest:
        return None
    return manifest


def input_dir(artifact_dir: Path, step: str) -> Path:
    """The folder of the ``step`` artifact that ``artifact_dir``'s manifest names as an input, in the same store
    (an encoding's corpus). A ValueError when it names none."""
    artifact_dir = Path(artifact_dir).resolve()
    found = next((i for i in (read_manifest(artifact_dir) or {}).get("inputs") or [] if i.get("step") == step), None)
    if found is None:
        raise ValueError(f"{artifact_dir}: its manifest names no {step} input")
    return ArtifactStore(artifact_dir.parent.parent).artifact_dir(step, found["name"], found["id"])


class ArtifactStore:
    """A local directory of published artifacts (an object-store URL, or its cache directory, gives an
    :class:`corpusforge.storage.object_store.ObjectArtifactStore`)."""

    def __new__(cls, root: str | os.PathLike[str] | None = None, *args: Any, **kwargs: Any):
        if cls is ArtifactStore and root is not None and _is_object_store(root):
            from corpusforge.storage.object_store import ObjectArtifactStore

            return super().__new__(ObjectArtifactStore)
        return super().__new__(cls)

    def __init__(self, root: str | os.PathLike[str]):
        self.root = Path(root).expanduser().resolve()

    def __repr__(self) -> str:
        return f"ArtifactStore({str(self.root)!r})"

    @property
    def uri(self) -> str:
        return self.root.as_uri()

    @property
    def uri_for_humans(self) -> str:
        """How messages name this store: its directory (an object store: its URL)."""
        return str(self.root)

    def artifact_dir(self, step: str, name: str, artifact_id: str) -> Path:
        return self.root / check_name("step", step) / f"{check_name('artifact', name)}-{artifact_id[:12]}"

    def lookup(self, step: str, name: str, artifact_id: str) -> dict[str, Any] | None:
        """The manifest of a published artifact with exactly this id, else None."""
        manifest = read_manifest(self.artifact_dir(step, name, artifact_id))
        if manifest is not None and manifest.get("id") != artifact_id:
            raise StoreError(
                f"{self.artifact_dir(step, name, artifact_id)} holds artifact {manifest.get('id')}, "
                f"not {artifact_id} (12-hex prefix collision or a hand-edited store)"
            )
        return manifest

    def _lock(self, artifact_id: str):
        return file_lock(self.root / ".locks" / f"{artifact_id}.lock")

    def publish(
        self,
        *,
        step: str,
        name: str,
        version: int,
        config: Mapping[str, Any],
        inputs: list[Mapping[str, Any]],
        build: Callable[[Path], Mapping[str, Any] | None],
        extra: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
    ) -> PublishResult:
        """Return the artifact for (step, version, config, inputs), building it with ``build`` if needed.

        ``build(tmp_dir)`` writes the step's files into ``tmp_dir`` and returns extra manifest fields
        (``accounting``, ``metrics``, ...). ``inputs`` are dicts with at least an ``id``. ``extra``: more manifest
        fields, or a function returning them (called only when the artifact is built).
        """
        check_name("step", step)
        check_name("artifact", name)
        input_ids = [str(i["id"]) for i in inputs]
        aid = compute_artifact_id(step, version, config, input_ids)
        final = self.artifact_dir(step, name, aid)
        existing = self.lookup(step, name, aid)
        if existing is not None:
            self.check_intact(final, existing)
            return PublishResult(final, existing, reused=True)

        final.parent.mkdir(parents=True, exist_ok=True)
        with self._lock(aid):
            existing = self.lookup(step, name, aid)  # someone may have published while we waited
            if existing is not None:
                self.check_intact(final, existing)
                return PublishResult(final, existing, reused=True)
            self._remove_stale_temps(final.parent, aid)
            tmp = final.parent / f"{_TMP_PREFIX}{aid[:12]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            tmp.mkdir()
            try:
                manifest = self._build_manifest(tmp, aid=aid, step=step, name=name, version=version, config=config,
                                                inputs=inputs, build=build, extra=extra)
                return self._commit(tmp, final, manifest)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise

    def _store_fields(self) -> dict[str, Any]:
        """Manifest fields the store itself adds (an object store: where the files' objects are)."""
        return {}

    def _build_manifest(self, tmp: Path, *, aid: str, step: str, name: str, version: int,
                        config: Mapping[str, Any], inputs: list[Mapping[str, Any]],
                        build: Callable[[Path], Mapping[str, Any] | None],
                        extra: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None) -> dict[str, Any]:
        """Run ``build(tmp)``, describe its files and write ``tmp/manifest.json`` (fsynced); the manifest."""
        started, t0 = _now(), time.perf_counter()
        fields = dict(build(tmp) or {})
        seconds = time.perf_counter() - t0
        clash = sorted(RESERVED_FIELDS & set(fields))
        if clash:  # the file table, identity and timings belong to the store alone
            raise StoreError(f"step {step!r} returned manifest fields the store owns: {', '.join(clash)}")
        if not (tmp / CARD).exists():  # the artifact's card (corpusforge.storage.cards), listed like any file
            (tmp / CARD).write_text(card({"id": aid, "step": step, "name": name, "version": version,
                                          "config": dict(config), "inputs": [dict(i) for i in inputs],
                                          **fields}), encoding="utf-8")
        files = _describe_files(tmp)
        # Files a step declares not byte-reproducible (with why); every other file is the same bytes
        # whenever the same inputs and config are built again (tests/flows/test_reproducible.py).
        unknown = sorted(set(fields.get("nondeterministic") or {}) - set(files))
        if unknown:
            raise StoreError(f"step {step!r} declared nondeterministic files it did not write: {unknown}")
        manifest = {
            "schema": MANIFEST_SCHEMA,
            "id": aid,
            "step": step,
            "name": name,
            "version": version,
            "config": dict(config),
            "inputs": [dict(i) for i in inputs],
            "files": files,
            **fields,
            "timings": {"started_at": started, "finished_at": _now(), "seconds": round(seconds, 4)},
            "created_at": _now(),
            "environment": {"python": sys.version.split()[0], "platform": platform.platform()},
            **dict((extra() if callable(extra) else extra) or {}),
            **self._store_fields(),
        }
        manifest[DIGEST_FIELD] = manifest_digest(manifest)
        manifest_tmp = tmp / (MANIFEST + ".partial")
        with open(manifest_tmp, "w", encoding="utf-8") as fh:
            json.dump(manifest, fh, indent=2, sort_keys=False, ensure_ascii=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(manifest_tmp, tmp / MANIFEST)
        _fsync_path(tmp, directory=True)
        return manifest

    def _commit(self, tmp: Path, final: Path, manifest: dict[str, Any]) -> PublishResult:
        """Make the complete artifact in ``tmp`` visible as ``final`` (one rename), or adopt a winner's."""
        step, name, aid = manifest["step"], manifest["name"], manifest["id"]
        try:
            os.rename(tmp, final)
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            # Lost a race with a writer that had no lock: keep the first, drop ours.
            shutil.rmtree(tmp, ignore_errors=True)
            winner = self.lookup(step, name, aid)
            if winner is None:
                raise StoreError(f"{final} exists but holds no complete manifest") from exc
            return PublishResult(final, winner, reused=True)
        _fsync_path(final.parent, directory=True)
        self._record_stats(final, manifest)
        return PublishResult(final, manifest, reused=False)

    # --- reuse checks --------------------------------------------------------------------------------------
    # A published artifact is checked before every reuse. The cheap check: every listed file exists, is no
    # symlink, has its recorded size, and has the (size, mtime, inode, ctime) it had when it was last hashed,
    # which <root>/.verified/<id>.json records (written at publish). A file whose stat differs (edited, or the
    # store was copied) is re-hashed against the manifest's sha256, and the record is renewed when it matches.
    # The ctime is what `touch`/utime cannot set back: any write, chmod or rename moves it to "now", so an edit
    # that restores the size and mtime is still re-hashed. With verify_inputs_fully() every file is re-hashed.
    # A mismatch raises TamperedArtifact naming the file.
    def _stats_path(self, aid: str) -> Path:
        return self.root / ".verified" / f"{aid}.json"

    def _record_stats(self, final: Path, manifest: Mapping[str, Any]) -> None:
        stats = {}
        for rel in manifest.get("files", {}):
            stats[rel] = stat_key(os.lstat(final / rel))
        path = self._stats_path(str(manifest["id"]))
        try:
            path.parent.mkdir(exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}.tmp")
            tmp.write_text(json.dumps(stats), encoding="utf-8")
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only store: the next reuse re-hashes instead

    def check_manifest(self, final: Path, manifest: Mapping[str, Any]) -> None:
        """Raise TamperedArtifact if the manifest was edited since it was published: its id re-derived from its
        config, inputs and version, and its digest (manifest_problems). Reads no file but the manifest."""
        problems = [p for p in (misplaced(final, manifest),) if p] + manifest_problems(manifest)
        if problems:
            aid = str(manifest.get("id", ""))
            raise TamperedArtifact(f"artifact {aid[:12]} ({manifest.get('step')} {manifest.get('name')}, {final}): "
                                   f"{problems[0]}; `corpusforge artifacts verify {aid[:12]}` lists every "
                                   f"difference, and removing {final} makes the next run rebuild it")

    def check_intact(self, final: Path, manifest: Mapping[str, Any], full: bool | None = None) -> None:
        full = verify_inputs_fully() if full is None else full
        self.check_manifest(final, manifest)
        aid = str(manifest["id"])
        try:
            recorded = {} if full else json.loads(self._stats_path(aid).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            recorded = {}
        where = f"artifact {aid[:12]} ({manifest.get('step')} {manifest.get('name')}, {final})"
        hint = (f"; `corpusforge artifacts verify {aid[:12]}` lists every difference, and removing {final} "
                "makes the next run rebuild it")
        rehashed = False
        for rel, meta in manifest.get("files", {}).items():
            path = final / rel
            try:
                st = os.lstat(path)
            except OSError:
                raise TamperedArtifact(f"{where}: file {rel} is missing{hint}") from None
            if path.is_symlink() or not path.is_file():
                raise TamperedArtifact(f"{where}: {rel} is not a regular file (symlinks are refused){hint}")
            if st.st_size != meta.get("size"):
                raise TamperedArtifact(f"{where}: {rel} changed size ({meta.get('size')} -> {st.st_size} bytes)"
                                       f" since it was published{hint}")
            if recorded.get(rel) == stat_key(st):
                continue
            if sha256_file(path) != meta.get("sha256"):
                raise TamperedArtifact(f"{where}: {rel} changed (sha256 differs from the manifest) since it was "
                                       f"published{hint}")
            rehashed = True
        if rehashed or (not recorded and not full):
            self._record_stats(final, manifest)

    # --- what a step that builds reads ----------------------------------------------------------------------
    # A step that builds re-hashes every file of each upstream artifact it reads (tasks/step.py), whatever the
    # cheap check said when that artifact was reused: it is about to make a new artifact from those bytes, under
    # an id that names the clean upstream. The files are hashed just before the build (then in the page cache,
    # where the step's own read finds them) and their stats are compared again after it, so a file rewritten
    # while the step read it fails the step too. A mismatch raises TamperedArtifact naming the file.
    def hash_upstream(self, step: str, name: str, artifact_id: str, reader: str) -> UpstreamSnapshot | None:
        """Re-hash the files of the published artifact (step, name, id) against its manifest for the step
        ``reader``; the stats seen, for :meth:`check_upstream_unchanged`. None when no such artifact is here."""
        directory = self.artifact_dir(step, name, artifact_id)
        manifest = read_manifest(directory)
        if manifest is None or manifest.get("id") != artifact_id:  # an object store's artifact not in the cache
            manifest = self.lookup(step, name, artifact_id)
            if manifest is None:
                return None
            self.check_intact(directory, manifest)
        self.check_manifest(directory, manifest)
        where = f"artifact {artifact_id[:12]} ({step} {name}, {directory})"
        hint = f"; step {reader!r} reads it and was not built. `corpusforge artifacts verify {artifact_id[:12]}` " \
               f"lists every difference, and removing {directory} makes the next run rebuild it"
        stats: dict[str, list[int]] = {}
        for rel, meta in manifest.get("files", {}).items():
            path = directory / rel
            try:
                before = os.lstat(path)
            except OSError:
                raise TamperedArtifact(f"{where}: file {rel} is missing{hint}") from None
            if path.is_symlink() or not path.is_file():
                raise TamperedArtifact(f"{where}: {rel} is not a regular file (symlinks are refused){hint}")
            digest = sha256_file(path)
            after = os.lstat(path)
            if digest != meta.get("sha256") or after.st_size != meta.get("size") or \
                    stat_key(before) != stat_key(after):
                raise TamperedArtifact(f"{where}: {rel} changed (sha256 differs from the manifest) since it was "
                                       f"published{hint}")
            stats[rel] = stat_key(after)
        return UpstreamSnapshot(directory, where, stats)

    @staticmethod
    def check_upstream_unchanged(snapshot: UpstreamSnapshot, reader: str) -> None:
        """After the build: every upstream file still has the stats it had when it was hashed."""
        for rel, key in snapshot.stats.items():
            try:
                now = stat_key(os.lstat(snapshot.directory / rel))
            except OSError:
                now = None
            if now != key:
                raise TamperedArtifact(f"{snapshot.where}: {rel} changed while step {reader!r} read it; nothing "
                                       "was published")

    def _dead_writers_temps(self) -> Iterator[Path]:
        """Temp dirs whose writer is gone (a temp dir's name carries its writer's pid; a live writer, such as a
        long training run, keeps its own)."""
        if not self.root.is_dir():
            return
        for step_dir in sorted(self.root.iterdir()):
            if step_dir.name.startswith(".") or not step_dir.is_dir():
                continue
            for stale in sorted(step_dir.glob(f"{_TMP_PREFIX}*")):
                parts = stale.name.split("-")
                if len(parts) >= 4 and parts[2].isdigit() and not _pid_alive(parts[2]):
                    yield stale

    def sweep_stale_temps(self) -> list[str]:
        """Remove the temp dirs of writers that died mid-publish (any id; a killed shard's ``.tmp-*`` would
        otherwise stay forever); called at the start of every run. Returns the removed paths."""
        removed: list[str] = []
        for stale in self._dead_writers_temps():
            shutil.rmtree(stale, ignore_errors=True)
            removed.append(str(stale))
        return removed

    def sweep_leftovers(self, apply: bool = False, max_age: float | None = None) -> list[Leftover]:
        """What writers that died mid-publish left in the whole store, never an artifact (``artifacts gc``):
        here the temp dirs of dead writers (an object store adds its uploads that no manifest names, older than
        ``max_age`` seconds). Listed only, unless ``apply``; returns what was (or would be) removed."""
        found = []
        for stale in self._dead_writers_temps():
            size = sum(f.stat().st_size for f in stale.rglob("*") if f.is_file() and not f.is_symlink())
            found.append(Leftover(str(stale), f"the temp dir of writer pid {stale.name.split('-')[2]}, which is gone",
                                  size))
            if apply:
                shutil.rmtree(stale, ignore_errors=True)
        for trash in self._gc_trash():
            size = sum(f.stat().st_size for f in trash.rglob("*") if f.is_file() and not f.is_symlink())
            found.append(Leftover(str(trash), "what an interrupted `artifacts gc` was removing (the artifact was "
                                  "already gone from the store)", size))
            if apply:
                shutil.rmtree(trash, ignore_errors=True)
        return found

    def _gc_trash(self) -> list[Path]:
        """Folders an ``artifacts gc`` renamed an artifact to and did not finish deleting (it was killed)."""
        if not self.root.is_dir():
            return []
        return sorted(p for step_dir in self.root.iterdir() if step_dir.is_dir() and not step_dir.name.startswith(".")
                      for p in step_dir.glob(f"{TRASH_PREFIX}*") if p.is_dir())

    # --- removal (``artifacts gc``, with the store's lock held exclusively: corpusforge.storage.gc) -----------
    def published_bytes(self, directory: Path, manifest: Mapping[str, Any]) -> int:
        """Bytes the artifact takes in the store: every file in its folder, the manifest included."""
        total = 0
        for base, _, files in os.walk(directory):
            for name in files:
                try:
                    total += os.lstat(os.path.join(base, name)).st_size
                except OSError:
                    pass
        return total

    def remove_published(self, directory: Path, manifest: Mapping[str, Any]) -> None:
        """Remove a published artifact: one rename to a trash name takes it out of every listing at once (a
        reader finds it whole or not at all), then its reuse record and its files go. A crash leaves the artifact
        whole, or gone with a trash folder that the next ``artifacts gc`` removes."""
        if read_manifest(directory) != dict(manifest):
            raise StoreError(f"{directory} no longer holds artifact {str(manifest.get('id'))[:12]} as listed: "
                             "not removed")
        self._trash_local(directory)
        self._forget(str(manifest["id"]))

    def _trash_local(self, directory: Path) -> None:
        if not directory.exists():
            return
        trash = directory.parent / f"{TRASH_PREFIX}{directory.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.rename(directory, trash)
        _fsync_path(directory.parent, directory=True)
        shutil.rmtree(trash, ignore_errors=True)

    def _forget(self, aid: str) -> None:
        """Drop the reuse records of a removed artifact."""
        for record in (self._stats_path(aid), self.root / ".verified" / f"{aid}.objects.json"):
            record.unlink(missing_ok=True)

    def _remove_stale_temps(self, step_dir: Path, aid: str) -> None:
        """Remove temp dirs of writers that died mid-publish.

        Called with the id's lock held, so with flock any temp dir for this id is a dead writer's.
        Without flock, only dirs whose writer pid is gone are removed (a live writer keeps its own).
        """
        for stale in step_dir.glob(f"{_TMP_PREFIX}{aid[:12]}-*"):
            if not HAVE_FLOCK and _pid_alive(stale.name.split("-")[2]):
                continue
            shutil.rmtree(stale, ignore_errors=True)

    def iter_artifact_dirs(self) -> Iterator[Path]:
        """Every published artifact dir (visible entries with a manifest), in path order."""
        if not self.root.is_dir():
            return
        for step_dir in sorted(self.root.iterdir()):
            if step_dir.name.startswith(".") or not step_dir.is_dir():
                continue
            for art_dir in sorted(step_dir.iterdir()):
                if not art_dir.name.startswith(".") and (art_dir / MANIFEST).is_file():
                    yield art_dir

    # --- what the catalog reads (corpusforge.storage.catalog); an object store answers from the bucket ------
    def iter_published(self, step: str | None = None) -> Iterator[tuple[Path, dict[str, Any]]]:
        """(artifact dir, manifest) of every published artifact (of ``step``, if given), in path order."""
        for directory in self.iter_artifact_dirs():
            if step is not None and directory.parent.name != step:
                continue
            manifest = read_manifest(directory)
            if manifest is not None:
                yield directory, manifest

    def find_by_prefix(self, prefix: str) -> list[tuple[Path, dict[str, Any]]]:
        """(artifact dir, manifest) of the artifacts whose id starts with ``prefix`` (lowercase hex)."""
        hits = []
        if self.root.is_dir():
            # Directory names end with id[:12]: a glob narrows the search without reading every manifest.
            pattern = f"*/*-{prefix[:12]}" + ("" if len(prefix) >= 12 else "*")
            for directory in sorted(self.root.glob(pattern)):
                if directory.parent.name.startswith(".") or directory.name.startswith("."):
                    continue
                manifest = read_manifest(directory)
                if manifest is not None and manifest["id"].startswith(prefix):
                    hits.append((directory, manifest))
        return hits

    def verify_files(self, directory: Path, manifest: Mapping[str, Any]) -> tuple[list[str], int]:
        """Re-hash every listed file; (problems, files checked). Unlisted files and symlinks are problems."""
        problems: list[str] = []
        checked = 0
        listed = manifest.get("files", {})
        for rel, meta in sorted(listed.items()):
            path = directory / rel
            checked += 1
            if path.is_symlink():
                problems.append(f"symlink refused: {rel}")
                continue
            if not path.is_file():
                problems.append(f"missing file: {rel}")
                continue
            size = path.stat().st_size
            if size != meta.get("size"):
                problems.append(f"size changed: {rel} ({meta.get('size')} -> {size} bytes)")
                continue
            if sha256_file(path) != meta.get("sha256"):
                problems.append(f"content changed: {rel} (sha256 differs)")
        for path in sorted(directory.rglob("*")):
            rel = path.relative_to(directory).as_posix()
            if path.is_symlink() and rel not in listed:
                problems.append(f"symlink refused: {rel}")
            elif path.is_file() and rel != MANIFEST and rel not in listed:
                problems.append(f"unlisted file: {rel}")
        return problems, checked


def stat_key(st: os.stat_result) -> list[int]:
    """What the cheap reuse check compares: size, mtime, inode and ctime (a record of an older version, without
    the ctime, never matches: the file is re-hashed once and the record renewed)."""
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]


def _pid_alive(pid_text: str) -> bool:
    try:
        os.kill(int(pid_text), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not reaped yet) is dead
        return Path(f"/proc/{int(pid_text)}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _describe_files(directory: Path) -> dict[str, dict[str, Any]]:
    """Size and sha256 of every file under ``directory``; fsyncs each one so the rename publishes data."""
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(directory.rglob("*")):
        if path.is_symlink():
            raise StoreError(f"artifacts may not contain symlinks: {path.relative_to(directory)}")
        if not path.is_file():
            continue
        rel = path.relative_to(directory).as_posix()
        if rel == MANIFEST:
            continue
        _fsync_path(path)
        files[rel] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    return files

"""The artifact store on object storage: ``--store s3://bucket/prefix`` through fsspec (docs: Operations, "Object storage").

The promises are the local store's: nothing is visible until it is complete, two writers of one id end with
one intact artifact, every reuse is checked against the manifest's digests. Object stores have no rename, so
the manifest is the commit:

* On the bucket, ``<url>/<step>/<name>-<id12>/manifest.json`` is written last, with a conditional put
  (``If-None-Match: *``: only if no object has that key). The files go first, under a prefix of their own
  writer, ``<url>/<step>/<name>-<id12>/.data-<token>/<file>``, and the manifest names that prefix
  (``"object_prefix"``). An artifact without a manifest does not exist for any reader; a writer that loses
  the race (its conditional put is refused) deletes its own uploads and adopts the winner's manifest. Since
  each writer's files sit under its own prefix, a loser never overwrites the winner's objects.
* Where the backend ignores or refuses conditional writes (``CORPUSFORGE_OBJECT_STORE_CONDITIONAL=off``
  chooses this), the manifest is written after a look, then read back: the last writer's manifest stays,
  and it names that writer's own complete upload, so the store still holds one intact artifact; an earlier
  writer may have used its own (equally valid) copy meanwhile, and its upload is left behind unreferenced.
* Readers need local paths (steps read ``Path(result.path) / "train.parquet"``), so an artifact's ``path``
  is its copy in a local cache: ``resolve_store_root(url)`` answers a directory keyed by the URL and the
  endpoint (under ``$CORPUSFORGE_CACHE_DIR``, else ``~/.cache/corpusforge/stores``), marked by
  ``.remote.json``. An artifact is downloaded there on first use, each file checked against the manifest's
  sha256, and appears by one rename, like a local artifact. Locks, stat records, Prefect's state and MLflow's
  database live in that directory too (the bucket holds only artifacts).
* Before every reuse, one listing of the artifact's objects is compared with the manifest (every object
  present, sizes equal) and with the ETags recorded when the objects were last hashed; an object whose ETag
  changed is hashed again, and a mismatch raises TamperedArtifact. The local copy gets the local store's
  check; a changed local copy is fetched again (the cache is not the store).

Locks (``flock`` in the cache directory) serialise writers on one machine; writers on different machines
may both compute an artifact, and the conditional put keeps one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from corpusforge.storage.hashing import sha256_file
from corpusforge.storage.locks import file_lock
from corpusforge.storage.store import (
    _TMP_PREFIX,
    MANIFEST,
    ArtifactStore,
    Leftover,
    PublishResult,
    StoreError,
    TamperedArtifact,
    _fsync_path,
    read_manifest,
    verify_inputs_fully,
)

REMOTE_MARKER = ".remote.json"
DATA_PREFIX = ".data-"
_DATA_RE = re.compile(r"^\.data-[0-9a-f]{8,64}$")
_URL_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")
# Path("s3://bucket/key") reads back as "s3:/bucket/key": accepted for the usual object-store schemes.
_MANGLED_RE = re.compile(r"^(s3|s3a|gs|gcs|az|abfs|abfss):/([^/].*)$")


def as_url(value: str | os.PathLike[str] | None) -> str | None:
    """The object-store URL ``value`` names (``s3://bucket/prefix``, no trailing slash), or None for a path."""
    if value is None:
        return None
    text = os.fspath(value) if isinstance(value, os.PathLike) else str(value)
    match = _URL_RE.match(text) or _MANGLED_RE.match(text)
    if match is None or match.group(1).lower() == "file":
        return None
    rest = match.group(2).strip("/")
    if not rest:
        raise StoreError(f"store URL {text!r} names no bucket (use s3://bucket or s3://bucket/prefix)")
    return f"{match.group(1).lower()}://{rest}"


def stale_upload_seconds() -> float:
    """``CORPUSFORGE_OBJECT_STORE_STALE_SECONDS`` (default 3600): an upload no manifest names is a dead writer's
    once it is this old (a live writer on another machine may still be uploading a younger one)."""
    return float(os.environ.get("CORPUSFORGE_OBJECT_STORE_STALE_SECONDS", "3600"))


def _endpoint(protocol: str) -> str | None:
    if protocol in ("s3", "s3a"):
        return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    return None


def cache_root(url: str) -> Path:
    """The local directory of the store at ``url``: one per URL and endpoint, in the user's corpusforge cache."""
    from corpusforge.storage.db_templates import cache_home

    home = cache_home()
    endpoint = _endpoint(url.split("://", 1)[0]) or ""
    digest = hashlib.sha256(f"{url}\n{endpoint}".encode()).hexdigest()[:12]
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", url.split("://", 1)[1]).strip("._-")[:48] or "store"
    return (home / "stores" / f"{slug}-{digest}").expanduser().resolve()


def attach(url: str) -> Path:
    """Create (or find) the cache directory for ``url`` and mark it as that store's; return it."""
    root = cache_root(url)
    marker = root / REMOTE_MARKER
    wanted = {"url": url, "endpoint": _endpoint(url.split("://", 1)[0])}
    if _read_marker(root) == wanted:
        return root
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = marker.with_name(f"{marker.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}.tmp")
        tmp.write_text(json.dumps(wanted) + "\n", encoding="utf-8")
        os.replace(tmp, marker)
    except OSError as exc:
        raise StoreError(f"cannot create the local cache {root} for {url}: {exc} (set CORPUSFORGE_CACHE_DIR)") from exc
    return root


def _read_marker(root: Path) -> dict[str, Any] | None:
    try:
        info = json.loads((root / REMOTE_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and isinstance(info.get("url"), str) else None


def _safe_rel(rel: str, where: str) -> str:
    parts = PurePosixPath(rel).parts
    if not rel or rel.startswith("/") or ".." in parts or "\\" in rel or rel == MANIFEST:
        raise StoreError(f"{where}: the manifest lists an unsafe file name {rel!r}")
    return rel


def _version(info: Mapping[str, Any]) -> str:
    """What changes when an object is rewritten: its ETag (S3), else its modification time."""
    for key in ("ETag", "etag", "LastModified", "mtime", "last_modified"):
        if info.get(key) is not None:
            return str(info[key])
    return ""


def _modified(info: Mapping[str, Any]) -> float | None:
    value = info.get("LastModified") or info.get("mtime") or info.get("last_modified")
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
    if isinstance(value, (int, float)):
        return float(value)
    return None


class ObjectArtifactStore(ArtifactStore):
    """An artifact store whose artifacts live on an fsspec object store (S3), read through a local cache."""

    def __init__(self, root: str | os.PathLike[str]):
        url = as_url(root)
        if url is None:
            cache = Path(root).expanduser().resolve()
            info = _read_marker(cache)
            if info is None:
                raise StoreError(f"{cache} is not an object store's cache (no {REMOTE_MARKER})")
            url = info["url"]
        else:
            cache = attach(url)
        self.root = cache
        self.url = url
        self.protocol, self._base = url.split("://", 1)
        self._fs = None
        self._fs_guard = threading.Lock()

    def __repr__(self) -> str:
        return f"ObjectArtifactStore({self.url!r}, cache={str(self.root)!r})"

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root, "url": self.url}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.root, self.url = state["root"], state["url"]
        self.protocol, self._base = self.url.split("://", 1)
        self._fs, self._fs_guard = None, threading.Lock()

    @property
    def uri(self) -> str:
        return self.url

    @property
    def uri_for_humans(self) -> str:
        return self.url

    @property
    def fs(self):
        """The fsspec filesystem (s3fs for s3://), made on first use; no listing cache (others write too)."""
        with self._fs_guard:
            if self._fs is None:
                import fsspec

                kwargs: dict[str, Any] = {}
                if self.protocol in ("s3", "s3a"):
                    try:
                        import s3fs  # noqa: F401
                    except ImportError:
                        raise StoreError(f"the store {self.url} needs s3fs: pip install 'corpusforge[s3]'") from None
                    kwargs["use_listings_cache"] = False
                    endpoint = _endpoint(self.protocol)
                    if endpoint:
                        kwargs["endpoint_url"] = endpoint
                try:
                    self._fs = fsspec.filesystem(self.protocol, **kwargs)
                except (ImportError, ValueError) as exc:
                    raise StoreError(f"no fsspec filesystem for {self.url}: {exc}") from exc
            return self._fs

    def check_reachable(self) -> None:
        """Raise StoreError saying why, if the bucket cannot be listed (no bucket, no credentials, no server)."""
        bucket = self._base.split("/", 1)[0]
        try:
            self.fs.ls(bucket, detail=False)
        except FileNotFoundError:
            raise StoreError(f"the store {self.url}: bucket {bucket!r} does not exist") from None
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001 - botocore/aiohttp raise many kinds
            raise StoreError(f"cannot reach the store {self.url}: {type(exc).__name__}: {exc}") from exc

    # --- keys ----------------------------------------------------------------------------------------------
    def _key(self, *parts: str) -> str:
        return "/".join((self._base, *parts))

    def _where(self, step: str, dirname: str) -> str:
        return f"{self.url}/{step}/{dirname}"

    def _names(self, path: str) -> list[str]:
        try:
            entries = self.fs.ls(path, detail=False)
        except FileNotFoundError:
            return []
        itself = self.fs._strip_protocol(path).rstrip("/")
        return sorted({str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries if str(e).rstrip("/") != itself} - {""})

    def _parse(self, raw: bytes, where: str, strict: bool) -> dict[str, Any] | None:
        try:
            manifest = json.loads(raw)
        except ValueError:
            manifest = None
        if (not isinstance(manifest, dict) or "id" not in manifest or not isinstance(manifest.get("files"), dict)
                or not _DATA_RE.match(str(manifest.get("object_prefix", "")))):
            if strict:
                raise StoreError(f"{where}/{MANIFEST} is corrupt or was not written by corpusforge "
                                 "(remove that object to rebuild the artifact)")
            return None
        return manifest

    def _remote_manifest(self, step: str, dirname: str, strict: bool = True) -> dict[str, Any] | None:
        try:
            raw = self.fs.cat_file(self._key(step, dirname, MANIFEST))
        except FileNotFoundError:
            return None
        return self._parse(raw, self._where(step, dirname), strict)

    def _list_data(self, step: str, dirname: str, object_prefix: str) -> dict[str, dict[str, Any]]:
        prefix = self._key(step, dirname, object_prefix)
        try:
            found = self.fs.find(prefix, detail=True)
        except FileNotFoundError:
            return {}
        stripped = self.fs._strip_protocol(prefix).rstrip("/") + "/"
        return {str(name)[len(stripped):]: dict(info) for name, info in found.items()
                if str(name).startswith(stripped) and info.get("type", "file") == "file"}

    def _sha256_object(self, key: str) -> str:
        digest = hashlib.sha256()
        with self.fs.open(key, "rb", block_size=8 * 2**20) as fh:
            for chunk in iter(lambda: fh.read(2**20), b""):
                digest.update(chunk)
        return digest.hexdigest()

    # --- lookup --------------------------------------------------------------------------------------------
    def lookup(self, step: str, name: str, artifact_id: str) -> dict[str, Any] | None:
        """The manifest of the committed artifact with exactly this id on the bucket, else None."""
        dirname = self.artifact_dir(step, name, artifact_id).name
        manifest = self._remote_manifest(step, dirname)
        if manifest is not None and manifest.get("id") != artifact_id:
            raise StoreError(f"{self._where(step, dirname)} holds artifact {manifest.get('id')}, not {artifact_id} "
                             "(12-hex prefix collision or a hand-edited store)")
        return manifest

    def iter_artifact_dirs(self) -> Iterator[Path]:
        for directory, _ in self.iter_published():
            yield directory

    def _artifact_names(self, step: str | None) -> list[tuple[str, str]]:
        steps = [step] if step is not None else self._names(self._base)
        return [(s, d) for s in steps if not s.startswith(".")
                for d in self._names(self._key(s)) if not d.startswith(".")]

    def _manifests(self, pairs: list[tuple[str, str]]) -> Iterator[tuple[Path, dict[str, Any]]]:
        keys = {self.fs._strip_protocol(self._key(s, d, MANIFEST)): (s, d) for s, d in pairs}
        if not keys:
            return
        raws = self.fs.cat(list(keys), on_error="omit")  # concurrent GETs; uncommitted dirs have none
        raws = {self.fs._strip_protocol(k): v for k, v in raws.items()}
        for key, (s, d) in sorted(keys.items(), key=lambda kv: kv[1]):
            if isinstance(raws.get(key), bytes):
                manifest = self._parse(raws[key], self._where(s, d), strict=False)
                if manifest is not None:
                    yield self.root / s / d, manifest

    def iter_published(self, step: str | None = None) -> Iterator[tuple[Path, dict[str, Any]]]:
        """Committed artifacts on the bucket (one listing per step, then their manifests); paths are the cache's."""
        yield from self._manifests(self._artifact_names(step))

    def find_by_prefix(self, prefix: str) -> list[tuple[Path, dict[str, Any]]]:
        short = prefix[:12]
        pairs = [(s, d) for s, d in self._artifact_names(None)
                 if "-" in d and (d.rsplit("-", 1)[1] == short if len(prefix) >= 12
                                  else d.rsplit("-", 1)[1].startswith(short))]
        return [(p, m) for p, m in self._manifests(pairs) if str(m["id"]).startswith(prefix)]

    # --- the local copy ------------------------------------------------------------------------------------
    def _cache_lock(self, artifact_id: str):
        # not _lock(): publish holds that one while it checks a winner, and flock does not nest
        return file_lock(self.root / ".locks" / f"{artifact_id}.cache.lock")

    def _materialize(self, final: Path, manifest: Mapping[str, Any]) -> bool:
        """Make ``final`` a verified local copy of the artifact; True if it was downloaded now."""
        if read_manifest(final) == manifest:
            return False
        step, dirname, aid = final.parent.name, final.name, str(manifest["id"])
        where = self._where(step, dirname)
        with self._cache_lock(aid):
            if read_manifest(final) == manifest:
                return False
            final.parent.mkdir(parents=True, exist_ok=True)
            # ".tmp-<id12>c-<pid>-": a publisher's stale-temp removal for this id leaves it alone, the sweep of
            # dead writers' temps does not
            tmp = final.parent / f"{_TMP_PREFIX}{aid[:12]}c-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            tmp.mkdir()
            try:
                data = self._key(step, dirname, str(manifest["object_prefix"]))
                for rel, meta in manifest["files"].items():
                    dest = tmp / _safe_rel(rel, where)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    try:
                        self.fs.get_file(f"{data}/{rel}", str(dest))
                    except FileNotFoundError:
                        raise TamperedArtifact(f"artifact {aid[:12]} ({where}): object {rel} is missing"
                                               f"{self._hint(aid, where)}") from None
                    if dest.stat().st_size != meta.get("size") or sha256_file(dest) != meta.get("sha256"):
                        raise TamperedArtifact(f"artifact {aid[:12]} ({where}): object {rel} changed (size or sha256"
                                               f" differs from the manifest) since it was published"
                                               f"{self._hint(aid, where)}")
                    _fsync_path(dest)
                with open(tmp / MANIFEST, "w", encoding="utf-8") as fh:
                    json.dump(manifest, fh, indent=2, ensure_ascii=False)
                    fh.write("\n")
                    fh.flush()
                    os.fsync(fh.fileno())
                if final.exists():  # a copy of an artifact that was removed from the bucket and rebuilt
                    shutil.rmtree(final)
                os.rename(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        self._record_stats(final, manifest)
        return True

    def materialize_dir(self, final: Path) -> None:
        """Fetch the artifact whose cache dir is ``final`` (``<cache>/<step>/<name>-<id12>``), if committed."""
        manifest = self._remote_manifest(final.parent.name, final.name)
        if manifest is not None:
            self.check_intact(final, manifest)

    # --- reuse checks --------------------------------------------------------------------------------------
    @staticmethod
    def _hint(aid: str, where: str) -> str:
        return (f"; `corpusforge artifacts verify {aid[:12]}` lists every difference, and removing {where}/ "
                "makes the next run rebuild it")

    def _remote_stats_path(self, aid: str) -> Path:
        return self.root / ".verified" / f"{aid}.objects.json"

    def _record_versions(self, aid: str, versions: Mapping[str, str]) -> None:
        path = self._remote_stats_path(aid)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:6]}.tmp")
            tmp.write_text(json.dumps(dict(versions)), encoding="utf-8")
            os.replace(tmp, path)
        except OSError:
            pass

    def check_intact(self, final: Path, manifest: Mapping[str, Any], full: bool | None = None) -> None:
        """The bucket's objects against the manifest (listing, ETags, re-hash of changed ones), then the local
        copy (downloaded if missing or stale; fetched again if it was changed locally)."""
        full = verify_inputs_fully() if full is None else full
        self.check_manifest(final, manifest)
        step, dirname, aid = final.parent.name, final.name, str(manifest["id"])
        where = self._where(step, dirname)
        listing = self._list_data(step, dirname, str(manifest["object_prefix"]))
        try:
            recorded = {} if full else json.loads(self._remote_stats_path(aid).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            recorded = {}
        versions, stale = {}, []
        for rel, meta in manifest["files"].items():
            obj = listing.get(rel)
            if obj is None:
                raise TamperedArtifact(f"artifact {aid[:12]} ({where}): object {rel} is missing{self._hint(aid, where)}")
            if obj.get("size") != meta.get("size"):
                raise TamperedArtifact(f"artifact {aid[:12]} ({where}): object {rel} changed size "
                                       f"({meta.get('size')} -> {obj.get('size')} bytes) since it was published"
                                       f"{self._hint(aid, where)}")
            versions[rel] = _version(obj)
            if recorded.get(rel) != versions[rel] or not versions[rel]:
                stale.append(rel)
        downloaded = self._materialize(final, manifest)  # hashes every object it fetches
        if not downloaded:
            data = self._key(step, dirname, str(manifest["object_prefix"]))
            for rel in stale:
                if self._sha256_object(f"{data}/{rel}") != manifest["files"][rel].get("sha256"):
                    raise TamperedArtifact(f"artifact {aid[:12]} ({where}): object {rel} changed (sha256 differs "
                                           f"from the manifest) since it was published{self._hint(aid, where)}")
        if stale or downloaded:
            self._record_versions(aid, versions)
        try:
            super().check_intact(final, manifest, full=full and not downloaded)
        except TamperedArtifact:  # the local copy changed, not the store: fetch it again
            shutil.rmtree(final, ignore_errors=True)
            self._materialize(final, manifest)
            super().check_intact(final, manifest, full=False)

    def verify_files(self, directory: Path, manifest: Mapping[str, Any]) -> tuple[list[str], int]:
        """Re-hash every object of the artifact on the bucket; unlisted objects under its prefix are problems."""
        step, dirname = directory.parent.name, directory.name
        object_prefix = str(manifest.get("object_prefix", ""))
        if not _DATA_RE.match(object_prefix):
            return [f"manifest names no object prefix ({object_prefix!r})"], 0
        listing = self._list_data(step, dirname, object_prefix)
        data = self._key(step, dirname, object_prefix)
        problems: list[str] = []
        checked = 0
        listed = manifest.get("files", {})
        for rel, meta in sorted(listed.items()):
            checked += 1
            obj = listing.get(rel)
            if obj is None:
                problems.append(f"missing object: {rel}")
                continue
            if obj.get("size") != meta.get("size"):
                problems.append(f"size changed: {rel} ({meta.get('size')} -> {obj.get('size')} bytes)")
                continue
            if self._sha256_object(f"{data}/{rel}") != meta.get("sha256"):
                problems.append(f"content changed: {rel} (sha256 differs)")
        problems += [f"unlisted object: {rel}" for rel in sorted(set(listing) - set(listed))]
        return problems, checked

    # --- publishing ----------------------------------------------------------------------------------------
    def _store_fields(self) -> dict[str, Any]:
        return {"object_prefix": f"{DATA_PREFIX}{uuid.uuid4().hex}"}

    def _commit(self, tmp: Path, final: Path, manifest: dict[str, Any]) -> PublishResult:
        """Upload the files under this writer's prefix, then the manifest with a conditional put (the commit)."""
        step, name, aid = manifest["step"], manifest["name"], str(manifest["id"])
        dirname = final.name
        data = self._key(step, dirname, manifest["object_prefix"])
        self._sweep_uploads(step, dirname)
        try:
            for rel in manifest["files"]:
                self.fs.put_file(str(tmp / rel), f"{data}/{rel}")
            won = self._put_manifest(step, dirname, (tmp / MANIFEST).read_bytes(), manifest)
        except BaseException:
            self._discard_upload(step, dirname, manifest["object_prefix"])
            raise
        if not won:  # another writer committed this id first: keep theirs
            self._discard_upload(step, dirname, manifest["object_prefix"])
            shutil.rmtree(tmp, ignore_errors=True)
            winner = self.lookup(step, name, aid)
            if winner is None:
                raise StoreError(f"{self._where(step, dirname)}: the manifest write was refused, yet no manifest "
                                 "can be read there")
            self.check_intact(final, winner)
            return PublishResult(final, winner, reused=True)
        with self._cache_lock(aid):
            if final.exists():  # a stale copy of an earlier artifact with this id (removed from the bucket)
                shutil.rmtree(final)
            os.rename(tmp, final)
        self._record_stats(final, manifest)
        listing = self._list_data(step, dirname, manifest["object_prefix"])
        self._record_versions(aid, {rel: _version(listing.get(rel, {})) for rel in manifest["files"]})
        return PublishResult(final, manifest, reused=False)

    def _put_manifest(self, step: str, dirname: str, raw: bytes, manifest: Mapping[str, Any]) -> bool:
        """Write the manifest only if none exists; True if ours is the committed one."""
        key = self._key(step, dirname, MANIFEST)
        conditional = os.environ.get("CORPUSFORGE_OBJECT_STORE_CONDITIONAL", "on").lower()
        for attempt in range(6) if conditional not in ("off", "0", "no", "false") else ():
            try:
                self.fs.pipe_file(key, raw, mode="create")  # s3fs: PutObject with If-None-Match: *
                return True
            except FileExistsError:  # 412 PreconditionFailed: a manifest is there already
                return False
            except (TypeError, NotImplementedError):
                break  # this filesystem has no exclusive create: look, write, read back (below)
            except OSError as exc:
                text = str(exc)
                if "ConditionalRequestConflict" in text or "(409)" in text:
                    time.sleep(0.2 * (attempt + 1))  # S3: a concurrent conditional write is in flight; ask again
                    continue
                if "NotImplemented" in text or "(501)" in text:
                    break  # the backend refuses the header: look, write, read back (below)
                raise
        else:
            if conditional not in ("off", "0", "no", "false"):
                raise StoreError(f"{self._where(step, dirname)}: the manifest's conditional write kept conflicting")
        # No conditional write: the last manifest written stays, and it names its writer's complete upload.
        if self._remote_manifest(step, dirname, strict=False) is not None:
            return False
        self.fs.pipe_file(key, raw)
        back = self._remote_manifest(step, dirname, strict=False)
        return back is not None and back.get("object_prefix") == manifest["object_prefix"]

    def _discard_upload(self, step: str, dirname: str, object_prefix: str) -> None:
        """Delete this writer's uploaded objects, unless a committed manifest names them (best effort)."""
        try:
            committed = self._remote_manifest(step, dirname, strict=False)
            if committed is not None and committed.get("object_prefix") == object_prefix:
                return
            self.fs.rm(self._key(step, dirname, object_prefix), recursive=True)
        except Exception:  # noqa: BLE001 - leftovers are invisible; the next publish of this id sweeps them
            pass

    def _sweep_uploads(self, step: str, dirname: str, apply: bool = True,
                       max_age: float | None = None) -> list[Leftover]:
        """Delete (``apply``) uploads in this artifact's prefix that no manifest names and that are older than
        ``max_age`` (default stale_upload_seconds(): a live writer on another machine may still be uploading):
        what writers that died before their commit left behind. Called when an id is published; a killed writer
        whose id was committed by a rerun meanwhile is swept by ``sweep_leftovers`` (``artifacts gc``)."""
        max_age = stale_upload_seconds() if max_age is None else max_age
        found = []
        committed = self._remote_manifest(step, dirname, strict=False)
        for entry in self._names(self._key(step, dirname)):
            if not _DATA_RE.match(entry) or (committed and committed.get("object_prefix") == entry):
                continue
            prefix = self._key(step, dirname, entry)
            try:
                objects = self.fs.find(prefix, detail=True)
                newest = max((_modified(i) or time.time() for i in objects.values()), default=0.0)
                age = time.time() - newest
                if age >= max_age:
                    size = sum(int(i.get("size") or 0) for i in objects.values())
                    found.append(Leftover(f"{self.protocol}://{prefix}", f"an upload no manifest names, its newest "
                                          f"object {age:.0f} s old", size))
                    if apply:
                        self.fs.rm(prefix, recursive=True)
            except FileNotFoundError:
                continue
        return found

    def published_bytes(self, directory: Path, manifest: Mapping[str, Any]) -> int:
        """Bytes the artifact takes on the bucket: its files as the manifest lists them (no listing needed)."""
        return sum(int(meta.get("size") or 0) for meta in (manifest.get("files") or {}).values())

    def remove_published(self, directory: Path, manifest: Mapping[str, Any]) -> None:
        """Remove a committed artifact from the bucket: its manifest first (the commit point: from then on no
        reader on any machine finds it), then its objects, then the local copy. A crash after the first delete
        leaves an upload no manifest names, which the next ``artifacts gc`` sweeps."""
        step, dirname, aid = directory.parent.name, directory.name, str(manifest["id"])
        committed = self._remote_manifest(step, dirname, strict=False)
        if committed is not None:
            if committed.get("id") != aid or committed.get("object_prefix") != manifest.get("object_prefix"):
                raise StoreError(f"{self._where(step, dirname)} no longer holds artifact {aid[:12]} as listed: "
                                 "not removed")
            self.fs.rm(self._key(step, dirname, MANIFEST))
        object_prefix = str(manifest.get("object_prefix", ""))
        if _DATA_RE.match(object_prefix):
            try:
                self.fs.rm(self._key(step, dirname, object_prefix), recursive=True)
            except FileNotFoundError:
                pass
        with self._cache_lock(aid):
            self._trash_local(directory)
        self._forget(aid)

    def sweep_leftovers(self, apply: bool = False, max_age: float | None = None) -> list[Leftover]:
        """The local cache's dead writers' temp dirs, and every upload on the bucket that no manifest names and
        that is older than ``max_age`` (default stale_upload_seconds()); one listing per step and per artifact
        folder. Removed only with ``apply``."""
        found = super().sweep_leftovers(apply=apply)
        for step, dirname in self._artifact_names(None):
            found += self._sweep_uploads(step, dirname, apply=apply, max_age=max_age)
        return found

"""Artifact lookup: find, show (with the lineage tree) and verify.

Everything here reads manifests only, with the standard library, so the CLI answers in milliseconds. The store
lists and reads them (an object store from its bucket: corpusforge.storage.object_store).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from corpusforge.storage.manifests import DIGEST_FIELD, INFORMATIONAL_FIELDS, manifest_problems, misplaced
from corpusforge.storage.store import ArtifactStore


class ArtifactNotFound(LookupError):
    pass


class AmbiguousArtifactId(LookupError):
    pass


@dataclass
class Found:
    manifest: dict[str, Any]
    path: Path

    @property
    def problem(self) -> str | None:
        """Why this folder is not this artifact's place (its name says another id, step or name), or None."""
        return misplaced(self.path, self.manifest)

    def summary(self) -> dict[str, Any]:
        m = self.manifest
        summary = {
            "id": m["id"],
            "step": m.get("step"),
            "name": m.get("name"),
            "version": m.get("version"),
            "created_at": m.get("created_at"),
            "path": str(self.path),
            "inputs": [i.get("id") for i in m.get("inputs", [])],
        }
        problem = self.problem
        return {**summary, "problem": problem} if problem else summary


@dataclass
class VerifyReport:
    id: str
    path: Path
    problems: list[str] = field(default_factory=list)
    files_checked: int = 0
    notes: list[str] = field(default_factory=list)  # what the check could not cover (not problems)

    @property
    def ok(self) -> bool:
        return not self.problems


_MISSING = object()


def _dotted(config: Mapping[str, Any], dotted: str) -> Any:
    node: Any = config
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def _subset(config: Mapping[str, Any], wanted: Mapping[str, Any], step: str | None = None,
            sections: Mapping[str, tuple[str, ...]] | None = None) -> bool:
    """True if every dotted key in ``wanted`` has that value in ``config``. With ``sections`` (a pipeline section ->
    the steps it makes), a key may start with the section, as ``--set`` keys do (``corpus.split.valid``): it then
    matches the artifacts of that section's steps whose config has the rest of the key (``split.valid``)."""
    for dotted, value in wanted.items():
        found = _dotted(config, dotted)
        head, _, rest = dotted.partition(".")
        if found is _MISSING and rest and step in (sections or {}).get(head, ()):
            found = _dotted(config, rest)
        if found is _MISSING or found != value:
            return False
    return True


class Catalog:
    def __init__(self, store: ArtifactStore):
        self.store = store

    def all(self, step: str | None = None) -> list[Found]:
        return [Found(manifest, directory) for directory, manifest in self.store.iter_published(step)]

    def find(
        self,
        step: str | None = None,
        name: str | None = None,
        config: Mapping[str, Any] | None = None,
        input_id: str | None = None,
        latest: bool = False,
        sections: Mapping[str, tuple[str, ...]] | None = None,
    ) -> list[Found]:
        """Artifacts matching every given filter, oldest first (or only the newest with ``latest``). ``sections``:
        pipeline section -> its steps, for ``config`` keys that start with a section (see :func:`_subset`)."""
        hits = []
        for found in self.all(step):
            m = found.manifest
            if step is not None and m.get("step") != step:
                continue
            if name is not None and m.get("name") != name:
                continue
            if config and not _subset(m.get("config", {}), config, m.get("step"), sections):
                continue
            if input_id is not None and not any(
                str(i.get("id", "")).startswith(input_id) for i in m.get("inputs", [])
            ):
                continue
            hits.append(found)
        hits.sort(key=lambda f: (f.manifest.get("created_at") or "", f.manifest["id"]))
        return hits[-1:] if latest else hits

    def get(self, id_or_prefix: str) -> Found:
        """Resolve a full id or a unique prefix (at least 4 hex characters)."""
        prefix = id_or_prefix.strip().lower()
        if len(prefix) < 4 or any(c not in "0123456789abcdef" for c in prefix):
            raise ArtifactNotFound(f"{id_or_prefix!r} is not an artifact id (give at least 4 hex characters)")
        candidates = [Found(manifest, directory) for directory, manifest in self.store.find_by_prefix(prefix)]
        if not candidates:  # not where its name says: a folder renamed or swapped by hand (verify then says so)
            candidates = [f for f in self.all() if str(f.manifest["id"]).startswith(prefix)]
        if not candidates:
            raise ArtifactNotFound(f"no artifact with id {id_or_prefix!r} in {self.store.uri_for_humans}")
        if len({c.manifest["id"] for c in candidates}) > 1:
            ids = ", ".join(c.manifest["id"][:16] for c in candidates)
            raise AmbiguousArtifactId(f"id prefix {id_or_prefix!r} matches several artifacts: {ids}")
        return candidates[0]

    def nearest(self, manifest: dict[str, Any], step: str) -> dict[str, Any] | None:
        """The manifest of the nearest artifact of ``step`` among ``manifest``'s inputs, breadth first (an lm's
        encode artifact, that encode's corpus shard), or None; inputs missing from the store are passed over."""
        queue, seen = [manifest], set()
        while queue:
            current = queue.pop(0)
            for inp in current.get("inputs", []):
                if inp.get("kind") != "artifact" or inp["id"] in seen:
                    continue
                seen.add(inp["id"])
                try:
                    found = self.get(inp["id"]).manifest
                except LookupError:
                    continue
                if found.get("step") == step:
                    return found
                queue.append(found)
        return None

    def lineage(self, id_or_prefix: str, _seen: frozenset[str] = frozenset()) -> dict[str, Any]:
        """The tree of inputs: artifacts recursively, raw sources as leaves."""
        found = self.get(id_or_prefix)
        m = found.manifest
        node: dict[str, Any] = {"id": m["id"], "step": m.get("step"), "name": m.get("name"), "inputs": []}
        for inp in m.get("inputs", []):
            if inp.get("kind") == "artifact" and inp["id"] not in _seen:
                try:
                    node["inputs"].append(self.lineage(inp["id"], _seen | {m["id"]}))
                except LookupError:
                    node["inputs"].append({**inp, "missing": True})
            else:
                node["inputs"].append(dict(inp))
        return node

    def verify(self, id_or_prefix: str) -> VerifyReport:
        """Re-hash every file, re-derive the id from the manifest's own step/version/config/inputs and check the
        manifest's digest (every field but the informational ones: storage.store.INFORMATIONAL_FIELDS)."""
        found = self.get(id_or_prefix)
        m = found.manifest
        report = VerifyReport(id=m["id"], path=found.path)
        if found.problem:
            report.problems.append(found.problem)
        report.problems += manifest_problems(m)
        if DIGEST_FIELD in m:
            report.notes.append("not covered by the manifest digest (informational): "
                                + ", ".join(INFORMATIONAL_FIELDS))
        else:
            report.notes.append(f"the manifest has no digest (written before manifest schema 2): its id was "
                                "re-derived and its files re-hashed, its other fields (metrics, accounting) cannot "
                                "be checked")
        problems, report.files_checked = self.store.verify_files(found.path, m)
        report.problems += problems
        if self.store.root.is_dir():  # its MLflow copies, whatever the stage, are checked too (issue 44, item 6):
            # MLflow would load (and import) them
            from corpusforge.storage.tracking import check_registered_copy, rebase_before_check

            # a moved or copied store: its MLflow paths rebased first, as its first tracked run would
            not_rebased = rebase_before_check(self.store.root)
            report.problems.extend(check_registered_copy(self.store.root, m, not_rebased))
        return report

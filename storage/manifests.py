"""What a manifest vouches for, checked without reading any other file (docs: Internals, "The artifact store").

A manifest's identity follows from its content: its id is ``artifact_id(step, version, config, input ids)``, so
an edited config, version or input list no longer gives the id it records. Everything else it says (the file
table, metrics, accounting, ...) is covered by ``manifest_sha256``, a digest of every field except the
informational ones below, written by the store when it publishes. Both are checked before every reuse (cheap:
the manifest's bytes only) and by ``artifacts verify``. A manifest from before the digest (schema 1) gets the
identity check only. Neither is a signature: whoever can rewrite a manifest can recompute its digest; they catch
an edit made by hand or by a tool that does not know them, as the drill's forged perplexity was.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from corpusforge.storage.hashing import artifact_id as compute_artifact_id

MANIFEST_SCHEMA = 2  # 2: the manifest records its own digest (manifest_sha256); artifact ids did not change
# A manifest's digest covers every field except these, which describe one build of the id (when, where, with
# which library versions) and are read by nothing that decides what an artifact is or what `run` reports.
INFORMATIONAL_FIELDS = ("timings", "created_at", "environment", "library_versions", "git_commit")
DIGEST_FIELD = "manifest_sha256"


def misplaced(directory: Path, manifest: Mapping[str, Any]) -> str | None:
    """Why ``directory`` is not the place of the artifact its manifest describes (folders swapped or renamed by
    hand: a run would refuse it), or None. An artifact's place is ``<root>/<step>/<name>-<id[:12]>``."""
    step, name, aid = manifest.get("step"), manifest.get("name"), manifest.get("id")
    if not all(isinstance(v, str) and v for v in (step, name, aid)):
        return f"{directory} holds a manifest without a valid step, name or id"
    place = (step, f"{name}-{aid[:12]}")
    if (directory.parent.name, directory.name) == place:
        return None
    return (f"{directory} holds artifact {aid[:12]} ({step} {name}), but its name says "
            f"{directory.parent.name}/{directory.name}: folders were swapped or renamed (its place is "
            f"{directory.parent.parent / place[0] / place[1]}; a run refuses it there)")


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """sha256 of the manifest's canonical JSON (sorted keys, no whitespace, UTF-8), its informational fields and
    the digest itself left out. Taken of the JSON it reads back as, so a tuple or an int key digests as the list
    or string key a reader finds."""
    covered = {k: v for k, v in manifest.items() if k not in INFORMATIONAL_FIELDS and k != DIGEST_FIELD}
    canonical = json.dumps(json.loads(json.dumps(covered)), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def manifest_problems(manifest: Mapping[str, Any]) -> list[str]:
    """Why a manifest is not the one its artifact was published with (empty when it is): its id must follow
    from its step, version, config and inputs (an edited config, version or input), and its recorded digest must
    match its fields (any other edit: metrics, accounting, the file table...). A manifest written before the
    digest (schema 1) gets the first check only."""
    problems = []
    try:
        derived = compute_artifact_id(manifest["step"], manifest["version"], manifest["config"],
                                      [str(i["id"]) for i in manifest.get("inputs", [])])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        problems.append(f"manifest.json was edited: it lacks identity fields ({type(exc).__name__}: {exc})")
    else:
        if derived != manifest.get("id"):
            problems.append(f"manifest.json was edited: its config, inputs or version do not give its id "
                            f"{manifest.get('id')} (they give {derived})")
    recorded = manifest.get(DIGEST_FIELD)
    if recorded is None and isinstance(manifest.get("schema"), int) and manifest["schema"] >= 2:
        problems.append(f"manifest.json was edited: its {DIGEST_FIELD} was removed")
    elif recorded is not None and recorded != manifest_digest(manifest):
        problems.append(f"manifest.json was edited since it was published (its fields, all but the informational "
                        f"{', '.join(INFORMATIONAL_FIELDS)}, no longer give the {DIGEST_FIELD} it records)")
    return problems

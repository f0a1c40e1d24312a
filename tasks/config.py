"""Turn YAML/dicts into the frozen config dataclasses that live next to the code they configure.

- Unknown keys are errors that list the allowed ones (a typo must never be silently ignored).
- Values are checked against the field's type; nested dataclasses recurse with a dotted path.
- ``--set a.b=c`` overrides are parsed as YAML scalars (``true``, ``3``, ``0.5``, ``[a, b]``).
- Every error names the field by its dotted path and says what is allowed.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value or key that is not allowed. The message names the dotted field path."""


def field_doc(cls: type, name: str) -> str:
    """A field's documentation: ``metadata={"doc": ...}`` on the dataclass field."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return str(f.metadata.get("doc", ""))
    return ""


def _describe(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if dataclasses.is_dataclass(tp):
        return f"a mapping ({tp.__name__})"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(tp))
    if origin in (tuple, list, Sequence):
        args = [a for a in get_args(tp) if a is not Ellipsis]
        return f"a list of {_describe(args[0])}" if args else "a list"
    if origin in (dict, Mapping):
        return "a mapping"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def _coerce(tp: Any, value: Any, path: str) -> Any:
    origin = get_origin(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected {_describe(tp)}, got {type(value).__name__} {value!r}")
        return from_dict(tp, value, path)
    if origin is Literal:
        if value not in get_args(tp):
            raise ConfigError(f"{path}: {value!r} is not allowed; use {_describe(tp)}")
        return value
    if origin in (typing.Union, types.UnionType):
        members = [a for a in get_args(tp) if a is not type(None)]
        if value is None and len(members) < len(get_args(tp)):
            return None
        if len(members) == 1:  # Optional[X]: X's own, more precise error
            return _coerce(members[0], value, path)
        errors = []
        for arg in get_args(tp):
            if arg is type(None):
                if value is None:
                    return None
                continue
            try:
                return _coerce(arg, value, path)
            except ConfigError as exc:
                errors.append(str(exc))
        # Each member's own complaint, so a nested mistake is named (not only "expected A or B").
        why = "; ".join(dict.fromkeys(e.removeprefix(f"{path}: ") for e in errors))
        raise ConfigError(f"{path}: expected {_describe(tp)}, got {value!r}" + (f" ({why})" if why else ""))
    if origin in (tuple, list, Sequence):
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise ConfigError(f"{path}: expected {_describe(tp)}, got {type(value).__name__} {value!r}")
        args = [a for a in get_args(tp) if a is not Ellipsis]
        item_tp = args[0] if args else Any
        return tuple(_coerce(item_tp, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping, got {type(value).__name__} {value!r}")
        key_tp, val_tp = get_args(tp) or (Any, Any)
        return {_coerce(key_tp, k, path): _coerce(val_tp, v, f"{path}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {type(value).__name__} {value!r}")
        return value
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"{path}: expected {_describe(tp)}, got {value!r}")
    return value


def from_dict(cls: type[T], data: Mapping[str, Any] | None, path: str = "") -> T:
    """Build the frozen dataclass ``cls`` from ``data``; unknown or ill-typed keys raise ConfigError."""
    data = dict(data or {})
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    prefix = f"{path}." if path else ""
    data = _renamed_keys(cls, data, prefix)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(
            f"{prefix}{unknown[0]}: unknown key; allowed keys under {path or 'the top level'} are: "
            + ", ".join(sorted(n for n, f in fields.items() if "derived" not in f.metadata))
        )
    for name, f in fields.items():  # a training stage's objective section (and its keys still under model)
        if "objective" in f.metadata:
            data = _objective_section(data, name, fields, prefix)
    kwargs = {}
    for name, value in data.items():
        meta = fields[name].metadata
        if "derived" in meta:  # e.g. a model's vocab_size, which the tokenizer sets
            raise ConfigError(f"{prefix}{name}: {meta['derived']}; leave it out")
        if "artifact" in meta:  # a reference: its shape only here (cheap, no store); the pipeline resolves it
            kwargs[name] = check_reference(value, meta["artifact"], f"{prefix}{name}")
            continue
        variants = meta.get("variants")
        if variants is not None and value is not None and not dataclasses.is_dataclass(value):
            # a tagged union: the sibling field ``variants[0]`` names the dataclass (lm.family -> lm.model)
            tag_field, choices = variants
            tag = data.get(tag_field, fields[tag_field].default)
            if tag not in choices:
                raise ConfigError(f"{prefix}{tag_field}: {tag!r} is not allowed; use one of "
                                  + ", ".join(repr(c) for c in choices))
            kwargs[name] = _coerce(choices[tag], value, f"{prefix}{name}")
            continue
        kwargs[name] = _coerce(hints[name], value, f"{prefix}{name}")
    try:
        return cls(**kwargs)
    except ValueError as exc:  # __post_init__ checks: "field: message"
        msg = str(exc)
        raise ConfigError(msg if msg.startswith(prefix) or not prefix else f"{prefix}{msg}") from None
    except TypeError as exc:  # a required field is missing
        raise ConfigError(f"{path or cls.__name__}: {exc}") from None


def to_dict(obj: Any) -> Any:
    """A config dataclass as plain JSON-able data (tuples become lists)."""
    if dataclasses.is_dataclass(obj):  # a derived field (set by the code, not the config) is left out
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj) if "derived" not in f.metadata}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    return obj


# --- artifact identity, declared by the config -----------------------------------------------------------------
# A config field's metadata says whether it is part of the artifact id (one mechanism for every step):
#   "identity": False                       never (a setting that cannot change the output: threads, memory,
#                                           where scratch files go, a sample written by another step)
#   "identity": lambda cfg: <bool>          only when it matters (add-k's k only for add-k smoothing)
#   "identity_value": lambda cfg, value: v  the value that enters the id (a path made absolute, a tokenizer
#                                           reference replaced by "input" because its id is an input)
# Everything else is in the id, nested dataclasses field by field. `identity(cfg)` builds the dict.
# Two more field metadata keys, read by from_dict/to_dict/identity:
#   "derived": "why"                        set by the code from an input, never by a config (left out of to_dict
#                                           and of the id; a config that sets it is an error saying why)
#   "variants": (tag_field, {tag: cls})     a tagged union: the sibling field tag_field picks the dataclass
#   "steps": (step, ...)                    a config that feeds several steps: the ones this field changes
#   "artifact": (step, ...)                 an artifact reference (artifact_ref below): in the id as "input" when
#                                           set, since the artifact's full id is among the step's inputs
#   "identity_name": "old"                  the name a renamed field keeps in the id (lm.init was lm.init_from)
# A config class may map old key names to new ones in RENAMED_KEYS ({"init_from": "init"}): the old key is read,
# with a warning naming the new one.

NOT_IN_ID: dict[str, Any] = {"identity": False}


def identity(cfg: Any, step: str | None = None) -> dict[str, Any]:
    """The part of a config dataclass that forms its step's artifact id (see the field metadata above). A config
    that feeds several steps (embeddings) names them per field, ``"steps": (...)``; ``step`` picks one."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        if step is not None and "steps" in f.metadata and step not in f.metadata["steps"]:
            continue
        rule = f.metadata.get("identity", True)
        if "artifact" in f.metadata and rule is True:  # the resolved artifact's id is an input, not what was typed
            if getattr(cfg, f.name):
                out[f.metadata.get("identity_name", f.name)] = "input"
            continue
        if "derived" in f.metadata:  # set from an input (a model's vocab_size from the tokenizer, whose id is one)
            continue
        if rule is False or (callable(rule) and not rule(cfg)):
            continue
        value = getattr(cfg, f.name)
        transform = f.metadata.get("identity_value")
        if transform is not None:
            value = transform(cfg, value)
        out[f.name] = identity(value, step) if dataclasses.is_dataclass(value) else to_dict(value)
    return out


# --- artifact references: a stage with several inputs ------------------------------------------------------------
# A field made with artifact_ref(steps, doc) names an artifact the step reads besides its upstream: either the
# section of an earlier stage in the same pipeline ("tokenizer": that stage's artifact of one of ``steps``), or the
# id (or a unique prefix of at least 4 hex characters) of a published artifact of one of ``steps``. The config
# checks only the shape; the pipeline and the planner resolve it (corpusforge.tasks.step.resolve_references) and
# hand the step core ``refs={field: StepResult}``; run_step adds each to the step's inputs, so the artifact's full
# id is part of the step's id (a prefix and the full id give the same artifact) and of its lineage.

_SECTION_RE = re.compile(r"[a-z][a-z0-9_]{0,63}")
_ID_RE = re.compile(r"[0-9a-f]{4,64}")


def artifact_ref(steps: tuple[str, ...], doc: str, **metadata: Any) -> dict[str, Any]:
    """Field metadata of an artifact reference to an artifact of one of ``steps`` (see above)."""
    return {"artifact": tuple(steps), "doc": doc, **metadata}


def is_artifact_id(value: str) -> bool:
    """A reference that is an id or id prefix (lowercase hex, 4..64), not a section name."""
    return bool(_ID_RE.fullmatch(value))


def check_reference(value: Any, steps: tuple[str, ...], path: str) -> str | None:
    """An artifact reference's shape: null or "" (none), a section name or an id prefix; a ConfigError else."""
    if value is None or value == "":
        return value
    what = " or ".join(steps)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ConfigError(f"{path}: got the number {value!r}; an id prefix of digits only reads as a number in "
                          f"YAML: quote it, e.g. '{value}'")
    if not isinstance(value, str):
        raise ConfigError(f"{path}: expected a {what} artifact (a section of this pipeline, or an artifact id), "
                          f"got {type(value).__name__} {value!r}")
    ref = value.strip()
    if ref.lower() != ref and is_artifact_id(ref.lower()):
        ref = ref.lower()
    if not (is_artifact_id(ref) or _SECTION_RE.fullmatch(ref)):
        raise ConfigError(f"{path}: {value!r} is neither a section name nor an artifact id (at least 4 hex "
                          f"characters); give the section that makes the {what} artifact, or its id")
    return ref


def references(cfg: Any, prefix: str = "") -> list[tuple[str, str, tuple[str, ...]]]:
    """(dotted field path, value, allowed steps) of every reference that ``cfg`` sets, nested dataclasses
    included, in field order: the order in which their artifacts join the step's inputs."""
    found: list[tuple[str, str, tuple[str, ...]]] = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if "artifact" in f.metadata:
            if value:
                found.append((prefix + f.name, value, tuple(f.metadata["artifact"])))
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            found += references(value, f"{prefix}{f.name}.")
    return found


def reference_fields(cls: type, prefix: str = "") -> list[tuple[str, tuple[str, ...]]]:
    """(dotted field path, allowed steps) of every reference field a config class declares, nested
    dataclasses (a plain or optional dataclass field) included."""
    hints = typing.get_type_hints(cls)
    found: list[tuple[str, tuple[str, ...]]] = []
    for f in dataclasses.fields(cls):
        if "artifact" in f.metadata:
            found.append((prefix + f.name, tuple(f.metadata["artifact"])))
            continue
        tp = hints.get(f.name)
        members = get_args(tp) if get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
        for member in members:
            if dataclasses.is_dataclass(member):
                found += reference_fields(member, f"{prefix}{f.name}.")
    return found


PATH_FIELD: dict[str, Any] = {"path": True}  # field metadata: a file path, relative to the config file's directory


def resolve_paths(cfg: Any, base_dir: str | Path | None) -> Any:
    """``cfg`` with every relative path in a field marked ``PATH_FIELD`` (a string or a tuple of strings)
    resolved against ``base_dir`` (the config file's directory), nested dataclasses included."""
    if base_dir is None or not dataclasses.is_dataclass(cfg):
        return cfg
    changes = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if f.metadata.get("path") and value:
            fix = (lambda p: p if Path(p).is_absolute() else str((Path(base_dir) / p).resolve()))
            changes[f.name] = tuple(fix(v) for v in value) if isinstance(value, (tuple, list)) else fix(value)
        elif dataclasses.is_dataclass(value):
            changes[f.name] = resolve_paths(value, base_dir)
    return dataclasses.replace(cfg, **changes) if changes else cfg


def check_artifact_name(name: str, field_name: str = "name") -> None:
    """A config's artifact name, checked as the store checks it: a bad one is a ValueError on the field (which
    from_dict reports with its dotted path). The one place every stage config calls."""
    from corpusforge.storage.store import StoreError, check_name

    try:
        check_name("artifact", name)
    except StoreError as exc:
        raise ValueError(f"{field_name}: {exc}") from None


def one_line(exc: BaseException) -> str:
    """A parser's message (PyYAML's spans several lines, with a caret drawing) as one line."""
    return "; ".join(line.strip() for line in str(exc).splitlines() if line.strip() and line.strip() != "^")


def parse_override(item: str) -> tuple[list[str], Any]:
    """``a.b=c`` -> (["a", "b"], yaml-parsed c)."""
    import yaml

    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set corpus.split.valid=0.1")
    key, _, raw = item.partition("=")
    parts = [p for p in key.strip().split(".")]
    if not all(parts):
        raise ConfigError(f"--set {item!r}: the key must be dotted names like corpus.split.valid")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {item!r}: cannot parse the value: {one_line(exc)}") from None
    except RecursionError:
        raise ConfigError(f"--set {key}=...: the value is nested too deeply") from None
    if isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string; users mean a number
        try:
            value = float(value) if any(c in value.lower() for c in ".e") and value.strip() not in ("", ".") else value
        except ValueError:
            pass
    return parts, value


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Return a deep copy of ``data`` with each ``a.b=c`` override applied (creating mappings as needed)."""
    import copy

    out = copy.deepcopy(dict(data))
    for item in overrides:
        parts, value = parse_override(item)
        node = out
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise ConfigError(f"--set {item!r}: {where} is {child!r}, not a mapping")
            node = child
        node[parts[-1]] = value
    return out


def load_yaml(path: str | Path) -> dict[str, Any]:
    import yaml

    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    raw = p.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save the "
                          "config as UTF-8") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {one_line(exc)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a pipeline config") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping, got {type(data).__name__}")
    return data


def derived_model_config(family_name: str, model: Any, vocab_size: int, special_ids: Mapping[str, int] | None,
                         example: Callable[[str], str] | None = None) -> Any:
    """A stage's model config with what the tokenizer sets: its vocabulary size and the ids the family derives
    from special-token roles (corpusforge.models.family ``derived``: an encoder's mask_id, a translation model's
    pad/bos/eos ids). A missing role is a ConfigError naming the key to set (``example(role)``: a token for it;
    default: the family's own, ``FamilySpec.role_token``)."""
    from corpusforge.models.family import families

    example = example or families()[family_name].role_token

    derived: dict[str, int] = {"vocab_size": vocab_size}
    for name, roles in families()[family_name].derived.items():
        found = next((special_ids[r] for r in roles if special_ids and special_ids.get(r) is not None), None)
        if found is None:
            raise ConfigError(f"family {family_name} needs the tokenizer's {' or '.join(roles)} token for "
                              f"model.{name}: set tokenizer.roles.{roles[0]} (e.g. {example(roles[0])})")
        derived[name] = int(found)
    try:
        return dataclasses.replace(model, **derived)
    except ValueError as exc:
        raise ConfigError(f"model.{exc}") from None


# --- a training stage's family, model and objective sections (one helper for every stage) ------------------------

OBJECTIVE_DOC = ("What the model is trained to do (corpusforge.models.objectives): a section keyed by kind, as model "
                 "is keyed by family, e.g. {kind: seq2seq, label_smoothing: 0.1}; null: the family's default kind "
                 "with its defaults. A kind's settings: masked_lm and bert_pretraining mask_prob; seq2seq "
                 "label_smoothing; contrastive scale and symmetric; the others none.")


def objective_field(**metadata: Any) -> Any:
    """The ``objective`` field of a training stage's config (its id sees it through the model field's
    :func:`model_identity`: the settings under the names they had as model fields, the kind when not the family's)."""
    return dataclasses.field(default=None, metadata={"doc": OBJECTIVE_DOC, "objective": ("family", "model"),
                                                     **NOT_IN_ID, **metadata})


def settle_family(cfg: Any, choices: Mapping[str, type]) -> None:
    """What every training stage's ``__post_init__`` checks of its ``family``/``model`` (and ``objective``)
    sections: the family is one the stage trains, ``model`` is that family's config (its defaults when null),
    ``objective`` is a kind the family trains with (the family's default when null)."""
    if cfg.family not in choices:
        raise ValueError(f"family: one of {', '.join(choices)}, got {cfg.family!r}")
    wanted = choices[cfg.family]
    if cfg.model is None:
        object.__setattr__(cfg, "model", wanted())
    elif type(cfg.model) is not wanted:
        raise ValueError(f"model: family {cfg.family!r} takes a {wanted.__name__}, got a {type(cfg.model).__name__}")
    if any(f.name == "objective" for f in dataclasses.fields(cfg)):
        from corpusforge.models.family import family
        from corpusforge.models.objectives import settle

        try:
            object.__setattr__(cfg, "objective", settle(family(cfg.family), cfg.objective))
        except ValueError as exc:
            msg = str(exc)
            raise ValueError(msg if msg.startswith("objective") else f"objective.{msg}") from None


def model_identity(cfg: Any, model: Any) -> dict[str, Any]:
    """The ``identity_value`` of a training stage's ``model`` field: the model's fields, and its objective's
    settings under the names they had as model fields (so moving them changed no artifact id), with the kind when
    it is not the family's default (corpusforge.models.objectives.identity_of)."""
    out = identity(model)
    settings = getattr(cfg, "objective", None)
    if settings is not None:
        from corpusforge.models.family import family
        from corpusforge.models.objectives import identity_of

        out.update(identity_of(family(cfg.family), settings))
    return out


def roles_to_add(family_name: str, tokenizer_cfg: Any) -> dict[str, str]:
    """The special-token roles a training stage adds to the run's tokenizer section (its ``adjust_upstream``): for
    each model field the family derives from roles (corpusforge.models.family ``derived``) of which the section has
    none, the first role with the family's token for it (``FamilySpec.role_token``); the section's own win."""
    from corpusforge.models.family import family

    spec = family(family_name)
    have = set(tokenizer_cfg.roles or {}) | ({"unk"} if tokenizer_cfg.unk_token else set()) | (
        {"eot"} if tokenizer_cfg.eot_token else set())
    return {alts[0]: spec.role_token(alts[0]) for alts in spec.derived.values() if not set(alts) & have}


def _objective_section(data: dict[str, Any], name: str, fields: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """``data`` with the stage's objective section read: an objective setting written under ``model`` (where it was
    before objectives were configuration) moved into the section, with a warning; the section made settings of the
    family's kinds (its ``kind`` defaulting to the family's)."""
    import warnings

    from corpusforge.models.family import families
    from corpusforge.models.objectives import allowed, settings_class, settings_fields

    tag_field, model_field = fields[name].metadata["objective"]
    spec = families().get(data.get(tag_field, fields[tag_field].default))
    section = data.get(name)
    if spec is None or dataclasses.is_dataclass(section):
        return data  # an unknown family (the checks after say so) or settings already made
    if isinstance(section, str):  # the kind alone: objective: causal_lm
        section = {"kind": section}
    if section is not None and not isinstance(section, Mapping):
        raise ConfigError(f"{prefix}{name}: expected a mapping such as {{kind: {spec.objective}}} or a kind's name, "
                          f"got {type(section).__name__} {section!r}")
    section = dict(section or {})
    model = data.get(model_field)
    if isinstance(model, Mapping):
        try:
            movable = set(settings_fields(section.get("kind", spec.objective)))
        except ValueError:
            movable = set()  # an unknown kind: said below
        moved = {k: v for k, v in model.items() if k in movable}
        for key, value in moved.items():
            if key in section and section[key] != value:
                raise ConfigError(f"{prefix}{model_field}.{key}: also set as {prefix}{name}.{key} with another value; "
                                  f"keep {prefix}{name}.{key}")
            warnings.warn(f"{prefix}{model_field}.{key} is an objective setting now: write {prefix}{name}.{key} "
                          "(the old key is read, for now)", FutureWarning, stacklevel=4)
            section.setdefault(key, value)
        if moved:
            data = {**data, model_field: {k: v for k, v in model.items() if k not in moved}}
    if not section and data.get(name) is None:
        return data
    kind = section.get("kind", spec.objective)
    if kind not in allowed(spec):
        raise ConfigError(f"{prefix}{name}.kind: family {spec.name} trains with {' or '.join(allowed(spec))}, "
                          f"not {kind!r}")
    cls = settings_class(kind)
    defaults = dict(spec.objective_defaults) if kind == spec.objective else {}
    return {**data, name: from_dict(cls, {**defaults, **section, "kind": kind}, f"{prefix}{name}")}


def _renamed_keys(cls: type, data: dict[str, Any], prefix: str) -> dict[str, Any]:
    """``data`` with the keys ``cls.RENAMED_KEYS`` maps from an old name read under the new one, with a warning (both
    given with different values: a ConfigError)."""
    import warnings

    for old, new in getattr(cls, "RENAMED_KEYS", {}).items():
        if old not in data:
            continue
        value = data.pop(old)
        if new in data and data[new] != value:
            raise ConfigError(f"{prefix}{old}: the old name of {prefix}{new}, which is also set with another value; "
                              f"keep {prefix}{new}")
        warnings.warn(f"{prefix}{old} is {prefix}{new} now (the old key is read, for now)", FutureWarning, stacklevel=3)
        data.setdefault(new, value)
    return data

"""The Python API: what the ``corpusforge`` CLI does, as functions that return typed results.

    import corpusforge as cf

    result = cf.run("configs/demo.yaml", overrides=["ngram.order=3"])
    lm = result["ngram"].load()                       # the n-gram model, with its query methods
    tok = cf.tokenizer.train(["data/sample/tinyshakespeare.txt"], kind="byte-bpe", vocab_size=500)
    tok.load().encode("To be, or not to be").tokens   # a tokenizers.Tokenizer
    cf.artifacts.find(step="corpus")                   # [Artifact(...), ...]
    cf.artifacts.verify(tok.id).ok                     # re-hash every file

Each command-group function builds the same pipeline config its CLI command builds (the CLI calls these
builders), so the API and the CLI give the same artifact ids and reuse each other's results. Runs happen in
this process against the store's Prefect API (the local server's, started if needed, like the CLI) and are
answered from the store without starting orchestration when every step is already published. Errors are
exceptions: ``ConfigError`` (bad config), ``SourceError`` (bad sources), ``LookupError`` (unknown id).
Everything loaded from the store is checked against its recorded digests first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

PathLike = str | Path


# --------------------------------------------------------------------------------------------- results


@dataclass
class Artifact:
    """One published artifact: its id, folder, manifest and metrics; ``load()`` gives the working object."""

    id: str
    step: str
    name: str
    path: Path
    manifest: dict[str, Any] = field(repr=False)
    reused: bool | None = None

    @property
    def metrics(self) -> dict[str, Any]:
        return self.manifest.get("metrics") or {}

    @classmethod
    def from_dir(cls, path: PathLike, reused: bool | None = None) -> Artifact:
        from corpusforge.storage.store import read_manifest

        manifest = read_manifest(Path(path))
        if manifest is None:
            raise LookupError(f"{path}: no published artifact (no complete manifest.json)")
        return cls(manifest["id"], manifest["step"], manifest["name"], Path(path), manifest, reused)

    def verify(self):
        """Re-hash every file and re-derive the id (``corpusforge artifacts verify``)."""
        from corpusforge.storage.catalog import Catalog
        from corpusforge.storage.store import ArtifactStore

        return Catalog(ArtifactStore(self.path.parents[1])).verify(self.id)

    def load(self) -> Any:
        """The working object, after checking the files against their recorded digests:

        corpus: ``{split: polars.DataFrame}``; tokenizer: ``tokenizers.Tokenizer`` (classic-bpe: our
        ``ClassicBPETokenizer``); embeddings/glove: gensim ``KeyedVectors``; ngram: the n-gram model
        (``prob``, ``score_sentence``, ``perplexity``, ...); lm: ``(torch module, tokenizer)``; seq2seq: a
        translator (``.translate(texts)``); classify: a classifier (``.predict(texts)``: labels and probabilities).
        """
        from corpusforge.storage.store import ArtifactStore

        from corpusforge.stages import step_outputs
        from corpusforge.tasks.stage import load

        from corpusforge.storage.locks import store_in_use

        with store_in_use(self.path.parents[1]):  # `artifacts gc` waits while the files are read
            ArtifactStore(self.path.parents[1]).check_intact(self.path, self.manifest)
            declared = step_outputs(self.step)  # the stage that makes this step declares its loader
            if declared is None or declared.loader is None:
                raise TypeError(f"{self.step} artifacts have no loader; read the files under {self.path}")
            return load(declared.loader)(self.path, self.manifest)


@dataclass
class RunResult:
    """A pipeline run: every step in run order, the last artifact of each stage, and the raw summary."""

    steps: list[Artifact]
    stages: dict[str, Artifact]
    summary: dict[str, Any] = field(repr=False)

    @property
    def computed(self) -> int:
        return int(self.summary.get("steps_computed", sum(1 for s in self.steps if s.reused is False)))

    def __getitem__(self, stage: str) -> Artifact:
        try:
            return self.stages[stage]
        except KeyError:
            raise KeyError(f"no {stage!r} stage in this run; stages: {', '.join(self.stages)}") from None


def _result(summary: Mapping[str, Any]) -> RunResult:
    steps = [Artifact.from_dir(s["path"], s.get("reused")) for s in summary["steps"]]
    by_id = {a.id: a for a in steps}
    stages: dict[str, Artifact] = {}
    if summary.get("corpus"):
        c = summary["corpus"]
        stages["corpus"] = by_id.get(c["id"]) or Artifact.from_dir(c["path"], c.get("reused"))
    for stage, info in (summary.get("stages") or {}).items():
        # A stage's own artifact (the tokenizer, not the encoded shards that follow it), else its last step.
        own = [a for a in steps if a.step == stage or (stage == "embeddings" and a.step == "glove")]
        stages[stage] = own[-1] if own else (by_id.get(info["id"]) or Artifact.from_dir(info["path"],
                                                                                        info.get("reused")))
    for a in steps:  # every other step by its name too (encode, embeddings_eval, ...), shards aside
        if a.step != "corpus_shard":
            stages.setdefault(a.step, a)
    return RunResult(steps, stages, dict(summary))


# --------------------------------------------------------------------------------------------- running


def store_root(store: PathLike | None = None) -> Path:
    """``store``, else ``$CORPUSFORGE_STORE``, else ``./.corpusforge`` (as the CLI). An object-store URL
    (``"s3://bucket/prefix"``) gives its local cache directory, on which the store reads and writes the bucket
    (docs: Operations, "Object storage")."""
    from corpusforge.storage.store import resolve_store_root

    return resolve_store_root(store)


def run_config(config: Mapping[str, Any], store: PathLike | None = None, base_dir: PathLike | None = None,
               verify_inputs: bool = False) -> dict[str, Any]:
    """Run a pipeline config dict; return the flow's summary dict (what ``--json`` prints)."""
    import os

    from corpusforge.pipeline_config import pipeline_config_from_dict
    from corpusforge.plan import answer_from_store, plan_pipeline
    from corpusforge.settings import configure_environment

    root = store_root(store)
    configure_environment(root)
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    cfg = pipeline_config_from_dict(dict(config))  # fail fast, before any server starts
    if verify_inputs or cfg.runner.verify_inputs:
        os.environ["CORPUSFORGE_VERIFY_INPUTS"] = "1"
    summary = answer_from_store(cfg, root, plan_pipeline(cfg, root, base))
    if summary is not None:
        return summary
    from corpusforge.server.client import ensure_prefect_api
    from corpusforge.pipeline import run_pipeline

    ensure_prefect_api(root)
    return run_pipeline(dict(config), store=root, base_dir=base)


def load_config(config: PathLike | Mapping[str, Any], overrides: Sequence[str] = ()) -> tuple[dict, Path]:
    """(config dict with ``overrides`` applied, the directory its relative paths resolve against)."""
    from corpusforge.tasks.config import apply_overrides, load_yaml

    if isinstance(config, Mapping):
        return apply_overrides(dict(config), list(overrides)), Path.cwd()
    path = Path(config)
    return apply_overrides(load_yaml(path), list(overrides)), path.resolve().parent


def run(config: PathLike | Mapping[str, Any], overrides: Sequence[str] = (), store: PathLike | None = None,
        verify_inputs: bool = False) -> RunResult:
    """``corpusforge run``: every stage in ``config`` (a YAML path or a dict); finished steps are reused.

    ``overrides`` are ``--set`` strings (``"ngram.order=3"``). Relative paths in a YAML file resolve
    against its directory.
    """
    data, base = load_config(config, overrides)
    return _result(run_config(data, store, base, verify_inputs))


# ------------------------------------------------------------------------------- command-group configs
# The CLI commands build their configs with these, so the API and the CLI give the same artifact ids.


def _section(overrides: Sequence[str], pipeline_keys: tuple[str, ...], section: str) -> list[str]:
    """``--set`` strings: those without a pipeline prefix address ``section``."""
    return [s if s.startswith(pipeline_keys) else f"{section}.{s}" for s in overrides]


def pipeline_keys(section: str, name: bool = True) -> tuple[str, ...]:
    """The ``--set`` prefixes that reach past a one-stage command's own section: the stages it runs (the
    section and its upstream chain, from the stage registry), ``runner.``, ``tracking.`` and (``name``) the
    pipeline's ``name=``."""
    from corpusforge.stages import stage_for

    chain, at = [], stage_for(section)
    while at is not None:
        chain.append(f"{at.section}.")
        at = stage_for(at.after) if at.after else None
    return (*chain, "runner.", "tracking.", *(("name=",) if name else ()))


def corpus_config(sources: Sequence[PathLike], name: str, preset: str = "lm", overrides: Sequence[str] = ()) -> dict:
    from corpusforge.tasks.config import apply_overrides

    base = {"name": name, "corpus": {"name": name, "sources": [str(s) for s in sources],
                                     "clean": {"preset": preset}}}
    return apply_overrides(base, _section(overrides, pipeline_keys("corpus"), "corpus"))


def ngram_config(sources: Sequence[PathLike], order: int = 3, smoothing: str = "modified-kneser-ney",
                 k: float = 1.0, eval_files: Sequence[PathLike] = (), overrides: Sequence[str] = ()) -> dict:
    from corpusforge.tasks.config import apply_overrides

    base = {
        "name": "ngram",
        "corpus": {"name": "ngram-train", "sources": [str(s) for s in sources], "reader": {"txt_mode": "line"},
                   "clean": {"preset": "raw"}, "dedup": {"exact": False}, "split": {"valid": 0, "test": 0},
                   "validate": {"min_chars": 1, "max_chars": 100_000_000}},
        "ngram": {"order": order, "smoothing": smoothing, "k": k, "eval_splits": [],
                  "eval": [str(Path(p).resolve()) for p in eval_files]},
    }
    return apply_overrides(base, _section(overrides, pipeline_keys("ngram"), "ngram"))


def embed_config(sources: Sequence[PathLike], kind: str = "word2vec", overrides: Sequence[str] = ()) -> dict:
    from corpusforge.tasks.config import apply_overrides
    from corpusforge.tasks.step import slug

    stem = slug(Path(sources[0]).resolve().stem if sources else "corpus")
    base = {
        "name": "embed",
        "corpus": {"name": stem, "sources": [str(s) for s in sources], "reader": {"txt_mode": "line"},
                   "split": {"valid": 0.0, "test": 0.0}},
        "embeddings": {"kind": kind, "name": slug(f"{stem}-{kind}")},
    }
    data = apply_overrides(base, _section(overrides, pipeline_keys("embeddings"), "embeddings"))
    section = data["embeddings"]
    if isinstance(section.get("analogies"), str):
        section["analogies"] = str(Path(section["analogies"]).resolve())
    if isinstance(section.get("similarity"), str):
        section["similarity"] = [section["similarity"]]
    if isinstance(section.get("similarity"), list):
        section["similarity"] = [str(Path(p).resolve()) for p in section["similarity"]]
    return data


TOKENIZER_PIPELINE_KEYS = pipeline_keys("tokenizer", name=False)  # name=... is the tokenizer's name


def tokenizer_config(sources: list[str], kind: str, vocab_size: int | None, merges: int | None, trace: bool,
                 overrides: list[str]) -> dict:
    """The pipeline config dict ``tokenizer train`` runs (``--set`` applied)."""
    from corpusforge.tasks.config import apply_overrides
    from corpusforge.tasks.step import slug

    corpus_name = slug(Path(sources[0]).stem if sources else "corpus", 40)
    section: dict = {"name": f"{corpus_name}-{kind}", "kind": kind, "encode": False}
    if vocab_size is not None:
        section["vocab_size"] = vocab_size
    if merges is not None:
        section["merges"] = merges
    if trace:
        section["trace"] = True
    base = {
        "name": "tokenizer",
        "corpus": {"name": corpus_name, "sources": sources, "reader": {"txt_mode": "line"},
                   "clean": {"preset": "raw"}, "dedup": {"exact": False}, "split": {"valid": 0.0, "test": 0.0}},
        "tokenizer": section,
    }
    return apply_overrides(base, [s if s.startswith(TOKENIZER_PIPELINE_KEYS) else f"tokenizer.{s}" for s in overrides])


LM_PIPELINE_KEYS = pipeline_keys("lm")


def preset_dir(kind: str = "lm") -> Path:
    """Where a command's presets are: ``<kind>/`` in the package's presets (configs/ in the repository, package
    data in the wheel: corpusforge.presets)."""
    from importlib.resources import files

    return Path(str(files("corpusforge.presets") / kind))


def preset_names(kind: str = "lm") -> list[str]:
    return sorted(p.stem for p in preset_dir(kind).glob("*.yaml"))


def load_preset(name: str, kind: str = "lm") -> dict:
    """A preset by name (``configs/<kind>/NAME.yaml``, shipped with the package) or a path to a YAML file of the
    same shape."""
    from corpusforge.tasks.config import ConfigError, load_yaml

    path = Path(name)
    if not (path.suffix in (".yaml", ".yml") and path.is_file()):
        path = preset_dir(kind) / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"--preset {name!r}: no such preset; choose one of {', '.join(preset_names(kind))}")
    return load_yaml(path)


def pin_held_out(split: Mapping[str, Any], names: Mapping[str, str | None]) -> dict[str, Any]:
    """A corpus.split section with each given held-out source pinned to its split (``names``: split -> the source's
    name, None when not given): a by_source glob matching the name literally, ahead of the preset's globs (the first
    match wins, so the file given for a split goes there), and that split's fraction 0 (the file is the split:
    nothing of the train sources joins it). A name the preset's globs already send to that split adds no glob, so
    naming a preset's own files (ptb.valid.txt) gives the same config, and ids, as passing them as sources."""
    import glob

    from corpusforge.tasks.corpus.split import SplitConfig

    split = dict(split)
    given = dict(split.get("by_source") or {})
    pins = {}
    for part, name in names.items():
        if not name:
            continue
        split[part] = 0.0
        if SplitConfig(valid=0, test=0, by_source=given).split_for_source(name) != part:
            pins[glob.escape(name)] = part
    by_source = {**pins, **{k: v for k, v in given.items() if k not in pins}}
    if by_source:
        split["by_source"] = by_source
    return split


def lm_config(sources: list[Path], preset: str, overrides: list[str], valid: PathLike | None = None,
              test: PathLike | None = None) -> dict:
    """The pipeline config for ``lm train``: ``sources`` to train on, the ``--valid``/``--test`` files (each one
    source, pinned to its split) and the preset's sections. --set keys without a section prefix address the lm
    section. Whether the corpus will hold a split out for the lm is checked when the run is planned
    (corpusforge.plan.check_held_out_splits), where the source names are known."""
    from corpusforge.tasks.config import ConfigError, apply_overrides

    data = load_preset(preset)
    name = Path(preset).stem
    given = {"valid": valid, "test": test}
    names = {part: Path(p).name for part, p in given.items() if p is not None}
    taken = [Path(s).name for s in sources]
    if len(set(names.values())) < len(names) or set(names.values()) & set(taken):
        raise ConfigError("lm train: the --valid and --test files need names of their own (each source is named "
                          f"after its file: {', '.join([*taken, *names.values()])})")
    corpus_name = "-".join(sorted({Path(s).stem.split(".")[0] for s in sources}))[:40] or "corpus"
    corpus = dict(data.get("corpus") or {})
    if names:
        corpus["split"] = pin_held_out(corpus.get("split") or {}, names)
    base = {
        "name": f"lm-{name}",
        "corpus": {"name": corpus_name, "sources": [str(s) for s in [*sources, *(p for p in given.values() if p)]],
                   **corpus},
        "tokenizer": {"name": f"{name}-tok", **data.get("tokenizer", {})},
        "lm": data.get("lm", {}),
        "runner": data.get("runner", {"kind": "threads", "workers": 2}),
    }
    for key in ("tracking",):
        if key in data:
            base[key] = data[key]
    fixed = [s if s.startswith(LM_PIPELINE_KEYS) else f"lm.{s}" for s in overrides]
    return apply_overrides(base, fixed)


SEQ2SEQ_PIPELINE_KEYS = pipeline_keys("seq2seq")
PairPaths = tuple[PathLike, PathLike]


def seq2seq_config(src: PathLike, tgt: PathLike | None, preset: str, valid: PairPaths | PathLike | None = None,
                   test: PairPaths | PathLike | None = None, overrides: Sequence[str] = ()) -> dict:
    """The pipeline config for ``seq2seq train``: the line-aligned files as pairs (fields ``src``/``tgt``), the
    ``--valid``/``--test`` pairs pinned to their splits (the preset's fractions then hold out nothing more), the
    preset's tokenizer and seq2seq sections. --set keys without a section prefix address the seq2seq section. A
    preset that holds out no validation pairs, run without ``valid``, is a ConfigError (the model needs them).

    A preset that reads records (its ``corpus.reader.fields``, as the summarization presets: a JSONL file whose
    ``source`` and ``target`` are lists of sentences and of reference summaries) takes one file each: ``src`` the
    train file, ``tgt`` None, ``valid``/``test`` a path each.

    A preset with a ``pretrain`` section (scitldr-bart-cpu) gives the config of its pre-training run under the key
    ``pretrain`` (:func:`split_pretraining` takes it out): the same corpus and tokenizer, the seq2seq section's
    family and model with the pretrain section's settings (``task: denoise``); ``--set pretrain.KEY=V`` reaches it.
    The pre-trained model's id becomes the main run's ``seq2seq.init``."""
    from corpusforge.tasks.config import ConfigError, apply_overrides

    data = load_preset(preset, "seq2seq")
    name = Path(preset).stem
    records = bool(((data.get("corpus") or {}).get("reader") or {}).get("fields"))
    if records and tgt is not None:
        raise ConfigError(f"--preset {name}: reads one file of records (JSONL with its reader.fields), not line-aligned "
                          f"files: give `seq2seq train FILE.jsonl [--valid FILE.jsonl]`")
    if not records and tgt is None:
        raise ConfigError(f"--preset {name}: reads line-aligned pairs: give SRC_FILE TGT_FILE (and --valid SRC TGT)")
    for split, part in (("--valid", valid), ("--test", test)):
        if part is not None and records != (not isinstance(part, (tuple, list))):
            raise ConfigError(f"{split}: --preset {name} takes {'one file' if records else 'two files, SRC TGT'}")
    if records:
        given, names = _split_files("seq2seq train", src, valid, test)
        stem = Path(src).stem.split(".")[0][:40] or "records"
        sources: list[Any] = [str(p) for p in given.values() if p]
    else:
        given = {"train": (src, tgt), "valid": valid, "test": test}
        names = {split: f"{Path(pair[0]).name}+{Path(pair[1]).name}" for split, pair in given.items() if pair}
        if len(set(names.values())) < len(names):
            raise ConfigError("seq2seq train: the train, --valid and --test files need names of their own (each pair "
                              f"of files is one source named after them: {', '.join(names.values())})")
        stem = "-".join(sorted({Path(p).stem.split(".")[0] for p in (src, tgt)}))[:40] or "pairs"
        sources = [{"fields": {"src": str(p[0]), "tgt": str(p[1])}} for p in given.values() if p]
    corpus = {k: v for k, v in (data.get("corpus") or {}).items()}
    split = pin_held_out(corpus.pop("split", None) or {}, {part: names.get(part) for part in ("valid", "test")})
    base = {
        "name": f"seq2seq-{name}",
        "corpus": {"name": stem, **corpus, "split": split, "sources": sources},
        "tokenizer": {"name": f"{name}-tok", **(data.get("tokenizer") or {})},
        "seq2seq": data.get("seq2seq") or {},
        "runner": data.get("runner", {"kind": "threads", "workers": 2}),
    }
    if "tracking" in data:
        base["tracking"] = data["tracking"]
    pretraining = [s for s in overrides if s.startswith("pretrain.")]
    fixed = [s if s.startswith(SEQ2SEQ_PIPELINE_KEYS) else f"seq2seq.{s}" for s in overrides if s not in pretraining]
    if pretraining and "pretrain" not in data:
        raise ConfigError(f"--set {pretraining[0]}: --preset {name} has no pre-training step (a pretrain section)")
    config = apply_overrides(base, fixed)
    if "pretrain" in data:  # its own run (seq2seq_pretrain_config); its model becomes seq2seq.init
        pre = dict(data["pretrain"] or {})
        section = {**{k: v for k, v in config["seq2seq"].items() if k in ("family", "model", "max_source_len")},
                   "name": f"{config['seq2seq'].get('name', name)}-denoise", **(pre.get("seq2seq") or {})}
        pre_config = apply_overrides({**config, "name": f"{config['name']}-pretrain", "seq2seq": section},
                                     [f"seq2seq.{s.removeprefix('pretrain.')}" for s in pretraining])
        config = {**config, "pretrain": pre_config}
    held_out = (config.get("corpus") or {}).get("split") or {}
    if not valid and not float(held_out.get("valid", 0.05) or 0):
        raise ConfigError(f"--preset {name}: holds out no validation pairs (corpus.split.valid: 0) and no --valid "
                          "SRC TGT was given; the model is scored on them: give --valid, or --set corpus.split.valid=0.05")
    return config


def split_pretraining(config: dict) -> tuple[dict | None, dict]:
    """(the pre-training run's config or None, the main config without it): :func:`seq2seq_config`'s ``pretrain``."""
    config = dict(config)
    return config.pop("pretrain", None), config


def with_init(config: dict, model_id: str) -> dict:
    """The main config of a preset with pre-training, starting from the pre-trained model ``model_id``."""
    return {**config, "seq2seq": {**config["seq2seq"], "init": model_id}}


CLASSIFY_PIPELINE_KEYS = (*pipeline_keys("classify"), "embeddings.")
TEXT_COLUMNS = ("text", "sentence", "review", "content", "document", "body")
LABEL_COLUMNS = ("label", "labels", "class", "category", "sentiment", "target", "y")


def _header(path: Path) -> tuple[list[str], list[dict[str, Any]]]:
    """The columns of a TSV/CSV/JSONL file and its first rows (up to 1,000), to find the text and label columns;
    read as the corpus readers read it (corpusforge.storage.labelled: a .tsv has no quoting)."""
    import itertools

    from corpusforge.storage.labelled import LabelledError, labelled_rows
    from corpusforge.tasks.config import ConfigError

    try:
        columns, rows = labelled_rows(Path(path))
        return columns, [row for _, row, _ in itertools.islice(rows, 1000) if row is not None]
    except LabelledError as exc:
        raise ConfigError(str(exc)) from exc


def _split_files(command: str, train: PathLike, valid: PathLike | None,
                 test: PathLike | None) -> tuple[dict[str, PathLike | None], dict[str, str]]:
    """A one-file command's train, --valid and --test files (split -> path) and the names of those given, each one
    source named after its file: a ConfigError of one line when a file is missing or two share a name."""
    from corpusforge.tasks.config import ConfigError

    given = {"train": train, "valid": valid, "test": test}
    for split, path in given.items():
        if path is not None and not Path(path).is_file():
            raise ConfigError(f"{path}: no such file ({split})")
    names = {split: Path(p).name for split, p in given.items() if p}
    if len(set(names.values())) < len(names):
        raise ConfigError(f"{command}: the train, --valid and --test files need names of their own (each is one "
                          f"source named after its file: {', '.join(names.values())})")
    return given, names


def classify_config(train: PathLike, preset: str, valid: PathLike | None = None, test: PathLike | None = None,
                    init: str | None = None, overrides: Sequence[str] = (), text_column: str | None = None,
                    label_column: str | None = None) -> dict:
    """The pipeline config for ``classify train``: a labelled TSV/CSV/JSONL file (its text column and its label
    column found by name unless given: text/sentence/..., label/class/...; integer labels stay integers), the
    ``--valid``/``--test`` files pinned to their splits, the preset's tokenizer, embeddings and classify sections,
    and ``init`` (a pre-trained checkpoint to fine-tune) as ``classify.init``. --set keys without a section prefix
    address the classify section. A preset that says ``requires: [init]`` without one is a ConfigError, as is a
    file without the columns."""
    from corpusforge.tasks.config import ConfigError, apply_overrides

    data = load_preset(preset, "classify")
    name = Path(preset).stem
    required = list(data.pop("requires", None) or [])
    if "init" in required and not init and not any(s.startswith(("init=", "classify.init=")) for s in overrides):
        raise ConfigError(f"--preset {name}: fine-tunes a pre-trained encoder; give --init ID (a bert lm artifact, "
                          "e.g. one `corpusforge lm train ... --preset bert-mlm-small` made)")
    given, names = _split_files("classify train", train, valid, test)
    columns, rows = _header(Path(train))
    text = text_column or next((c for c in TEXT_COLUMNS if c in columns), None)
    label = label_column or next((c for c in LABEL_COLUMNS if c in columns), None)
    for what, found, flag, options in (("text", text, "--text-column", TEXT_COLUMNS),
                                       ("label", label, "--label-column", LABEL_COLUMNS)):
        if found is None or found not in columns:
            raise ConfigError(f"{train}: no {what} column ({found or ' or '.join(options[:3])}); its columns are "
                              f"{', '.join(columns) or 'none'}: name it with {flag}")
    values = [r.get(label) for r in rows if r.get(label) not in (None, "")]
    integers = bool(values) and all(isinstance(v, int) or (isinstance(v, str) and v.strip().lstrip("-").isdigit())
                                    for v in values)
    corpus = dict(data.get("corpus") or {})
    split = pin_held_out(corpus.pop("split", None) or {}, {part: names.get(part) for part in ("valid", "test")})
    reader = {**(corpus.pop("reader", None) or {}), "text_field": text,
              "labels": {"label": {"column": label, "type": "int" if integers else "str"}}}
    classify = dict(data.get("classify") or {})
    if init:
        classify["init"] = init
    base = {
        "name": f"classify-{name}",
        "corpus": {"name": Path(train).stem.split(".")[0][:40] or "labelled", **corpus, "split": split,
                   "reader": reader, "sources": [str(p) for p in given.values() if p]},
        "tokenizer": {"name": f"{name}-tok", **(data.get("tokenizer") or {})},
        "classify": classify,
        "runner": data.get("runner", {"kind": "threads", "workers": 2}),
    }
    for key in ("embeddings", "tracking"):
        if key in data:
            base[key] = data[key]
    config = apply_overrides(base, [s if s.startswith(CLASSIFY_PIPELINE_KEYS) else f"classify.{s}" for s in overrides])
    check_labels(given, text, label, (config.get("classify") or {}).get("labels") or {},
                 exact_dedup=((config.get("corpus") or {}).get("dedup") or {}).get("exact", True))
    held_out = (config.get("corpus") or {}).get("split") or {}
    if not valid and not float(held_out.get("valid", 0.05) or 0):
        raise ConfigError(f"--preset {name}: holds out no validation records (corpus.split.valid: 0) and no --valid "
                          "FILE was given; the model is scored on them: give --valid, or --set corpus.split.valid=0.1")
    return config


def check_labels(files: dict[str, PathLike | None], text: str, label: str, relabel: dict, exact_dedup: bool = True
                 ) -> None:
    """The labelled files' labels and encodings, checked before any work (issue 44, item 4): each file is UTF-8
    with its columns; the training labels are two or more classes, none differing from another only in case or
    spacing (unless ``relabel``, classify.labels, maps them), and not numbers with a value per record (a
    regression target); every --valid/--test label is a training class; a --valid file is not all repeats of
    training records (exact dedup would leave it empty). A ConfigError of one line otherwise."""
    from collections import Counter

    from corpusforge.storage.labelled import LabelledError, read_labelled
    from corpusforge.tasks.config import ConfigError

    relabel = {str(k).strip(): str(v).strip() for k, v in relabel.items()}
    read = {}
    for split, path in files.items():
        if path is None:
            continue
        try:
            read[split] = read_labelled(Path(path), (text,), (label,))
        except LabelledError as exc:
            raise ConfigError(f"{exc} ({split})") from exc

    def classes(rows) -> Counter:
        return Counter(relabel.get(str(v), str(v)) for v in rows.labels)

    train = read["train"]
    counts = classes(train)
    where = files["train"]
    if not counts:
        raise ConfigError(f"{where}: no labelled records ({train.summary()})")
    if len(counts) < 2:
        (only, n), = counts.items()
        raise ConfigError(f"{where}: one class only ({only!r}, {n:,} records): a classifier needs two or more")
    near: dict[str, list[str]] = {}
    for value in counts:
        near.setdefault(" ".join(value.split()).casefold(), []).append(value)
    clashes = [sorted(group) for group in near.values() if len(group) > 1]
    if clashes:
        shown = "; ".join(", ".join(f"{v!r} ({counts[v]:,})" for v in group) for group in clashes[:5])
        first = clashes[0]
        raise ConfigError(f"{where}: labels that differ only in case or spacing would be classes of their own: "
                          f"{shown}; map them to one with classify.labels, e.g. --set 'labels.{first[1]}={first[0]}'")
    numeric = all(_is_number(v) for v in counts)
    if numeric and not all(v.lstrip("-").isdigit() for v in counts) and len(counts) > 50:
        sample = ", ".join(list(counts)[:3])
        raise ConfigError(f"{where}: the labels are numbers with {len(counts):,} distinct values ({sample}, ...): a "
                          "classifier needs classes (a regression target is not one)")
    for split in ("valid", "test"):
        if split not in read:
            continue
        unseen = Counter({v: n for v, n in classes(read[split]).items() if v not in counts})
        if unseen:
            shown = ", ".join(f"{v!r} ({n:,})" for v, n in unseen.most_common(5))
            raise ConfigError(f"{files[split]} (--{split}): labels the training file does not have: {shown}; the "
                              f"classes are {', '.join(map(repr, sorted(counts)[:10]))}")
    if exact_dedup and "valid" in read and read["valid"].texts:
        seen = set(train.texts)
        repeats = sum(t in seen for t in read["valid"].texts)
        if repeats == len(read["valid"].texts):
            raise ConfigError(f"{files['valid']} (--valid): all {repeats:,} records repeat training records; exact "
                              "dedup keeps the first copy, so no validation record would be left: give held-out "
                              "records, or --set corpus.dedup.exact=false")


TAG_PIPELINE_KEYS = pipeline_keys("tag")
TAGGED_SUFFIXES = (".conllu", ".conll", ".bio", ".iob")


def tag_config(train: PathLike, preset: str, valid: PathLike | None = None, test: PathLike | None = None,
               init: str | None = None, overrides: Sequence[str] = ()) -> dict:
    """The pipeline config for ``tag train``: a tagged file (CoNLL-U, or a CoNLL column file: a word and its tags on
    each line, a blank line between sentences), the ``--valid``/``--test`` files pinned to their splits, the
    preset's corpus reader (which tag column: ``corpus.reader.tags``) and tag section, and ``init`` (a pre-trained
    BERT to fine-tune: bert_tagger presets) as ``tag.init``. --set keys without a section prefix address the tag
    section. Every file is read before any work (:func:`check_tagged`): a file that is not
    tagged, a tag column it lacks, BIO mixed with BIOES or an empty sentence is a ConfigError of one line."""
    from corpusforge.tasks.config import ConfigError, apply_overrides

    data = load_preset(preset, "tag")
    name = Path(preset).stem
    required = list(data.pop("requires", None) or [])
    if "init" in required and not init and not any(s.startswith(("init=", "tag.init=")) for s in overrides):
        raise ConfigError(f"--preset {name}: fine-tunes a pre-trained BERT; give --init ID (a bert lm artifact, e.g. "
                          "one `corpusforge lm train ... --preset bert-mlm-small` made)")
    given, names = _split_files("tag train", train, valid, test)
    corpus = dict(data.get("corpus") or {})
    split = pin_held_out(corpus.pop("split", None) or {}, {part: names.get(part) for part in ("valid", "test")})
    base = {
        "name": f"tag-{name}",
        "corpus": {"name": Path(train).stem.split(".")[0][:40] or "tagged", **corpus, "split": split,
                   "sources": [str(p) for p in given.values() if p]},
        "tag": {**(data.get("tag") or {}), **({"init": init} if init else {})},
        "runner": data.get("runner", {"kind": "threads", "workers": 2}),
    }
    if "tracking" in data:
        base["tracking"] = data["tracking"]
    config = apply_overrides(base, [s if s.startswith(TAG_PIPELINE_KEYS) else f"tag.{s}" for s in overrides])
    reader = (config.get("corpus") or {}).get("reader") or {}
    check_tagged(given, dict(reader.get("tags") or {}), tuple(reader.get("columns") or ()),
                 (config.get("tag") or {}).get("tags", "upos"))
    held_out = (config.get("corpus") or {}).get("split") or {}
    if not valid and not float(held_out.get("valid", 0.05) or 0):
        raise ConfigError(f"--preset {name}: holds out no validation sentences (corpus.split.valid: 0) and no --valid "
                          "FILE was given; the model is scored on them: give --valid, or --set corpus.split.valid=0.1")
    return config


def check_tagged(files: Mapping[str, PathLike | None], tags: Mapping[str, Any], columns: Sequence[str] = (),
                 field: str = "upos") -> dict[str, int]:
    """Each tagged file read before any work, as the corpus stage will read it (corpusforge.storage.tagged): the
    good sentences per split, or a ConfigError of one line: a file that is not CoNLL-U or a CoNLL column file, a
    tag column it lacks (or one column only: no tags), BIO mixed with BIOES, an empty sentence, a file in which no
    sentence or fewer than half its sentences are good (it is not tagged as the preset says)."""
    from corpusforge.storage.compression import inner_suffix
    from corpusforge.storage.tagged import TagColumns, TaggedError, read_columns, read_conllu
    from corpusforge.tasks.config import ConfigError

    if not tags:
        raise ConfigError("tag train: the preset names no tag column (corpus.reader.tags, e.g. {upos: upos} or "
                          "{ner: -1})")
    if field not in tags:
        raise ConfigError(f"tag.tags: {field!r} is not one of the tag columns read (corpus.reader.tags: "
                          f"{', '.join(tags)})")
    good: dict[str, int] = {}
    for split, path in files.items():
        if path is None:
            continue
        path = Path(path)
        suffix = inner_suffix(path)
        if suffix not in TAGGED_SUFFIXES:
            raise ConfigError(f"{path}: not a tagged file: tag train reads CoNLL-U (.conllu) and CoNLL column files "
                              f"({', '.join(TAGGED_SUFFIXES[1:])}: a word and its tags on each line), not "
                              f"{suffix or 'a file without a suffix'}")
        if path.suffix != suffix:
            continue  # compressed: the corpus stage reads it (and quarantines what it must); not read twice here
        try:
            records = (read_conllu(path, TagColumns(dict(tags))) if suffix == ".conllu"
                       else read_columns(path, TagColumns(dict(tags)), names=columns or None))
            ok, bad = 0, []
            for r in records:
                if r.ok:
                    ok += 1
                else:
                    bad.append(r)
                    if r.reason == "empty_sentence":
                        raise ConfigError(f"{path} ({split}): {r.detail}")
        except TaggedError as exc:
            raise ConfigError(f"{exc} ({split})") from None
        if not ok or len(bad) > ok:
            why = f"; first: {bad[0].reason} at {bad[0].detail}" if bad else ""
            raise ConfigError(f"{path} ({split}): {ok} of {ok + len(bad)} sentences read as tagged (tags "
                              f"{dict(tags)}){why}: is it tagged as the preset says?")
        good[split] = ok
    return good


QA_PIPELINE_KEYS = pipeline_keys("qa")


def qa_config(train: PathLike, preset: str, valid: PathLike | None = None, init: str | None = None,
              overrides: Sequence[str] = ()) -> dict:
    """The pipeline config for ``qa train``: a SQuAD-format file (v1.1: articles, paragraphs, questions and their
    answers' character offsets), ``--valid`` pinned to its split, the preset's corpus reader (``reader.squad``,
    cleaning off so the offsets hold) and qa section, and ``init`` (the pre-trained BERT the reader starts from) as
    ``qa.init``. --set keys without a section prefix address the qa section. Every file is read before any work: a
    file that is not SQuAD-shaped, or an answer whose offset does not point at its text, is a ConfigError of one line
    naming the question."""
    from corpusforge.storage.squad import SquadError, load_squad
    from corpusforge.tasks.config import ConfigError, apply_overrides

    data = load_preset(preset, "qa")
    name = Path(preset).stem
    required = list(data.pop("requires", None) or [])
    if "init" in required and not init and not any(s.startswith(("init=", "qa.init=")) for s in overrides):
        raise ConfigError(f"--preset {name}: the reader starts from a pre-trained BERT; give --init ID (a bert lm "
                          "artifact, e.g. one `corpusforge lm train ... --preset bert-mlm-small` made)")
    given, names = _split_files("qa train", train, valid, None)
    for split, path in given.items():
        if path is None:
            continue
        try:
            paragraphs = load_squad(Path(path))
        except SquadError as exc:
            raise ConfigError(str(exc)) from None
        if not any(p.get("qas") for p in paragraphs):
            raise ConfigError(f"{path}: holds no question ({split}); a reader learns from questions with answers")
    corpus = dict(data.get("corpus") or {})
    split = pin_held_out(corpus.pop("split", None) or {}, {"valid": names.get("valid")})
    base = {
        "name": f"qa-{name}",
        "corpus": {"name": Path(train).stem.split(".")[0][:40] or "squad", **corpus, "split": split,
                   "sources": [str(p) for p in given.values() if p]},
        "qa": {**(data.get("qa") or {}), **({"init": init} if init else {})},
        "runner": data.get("runner", {"kind": "threads", "workers": 2}),
    }
    if "tracking" in data:
        base["tracking"] = data["tracking"]
    return apply_overrides(base, _section(overrides, QA_PIPELINE_KEYS, "qa"))


def _is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


POST_TRAINING_PIPELINE_KEYS = pipeline_keys("post_training")
METHOD_PRESETS = ("full", "lora", "sft", "dpo")


def finetune_config(parent: str, data: Sequence[PathLike], method: str | None = None, preset: str | None = None,
                    valid: PathLike | None = None, overrides: Sequence[str] = ()) -> dict:
    """The pipeline config for ``lm finetune``: ``data`` read into a corpus (text files for full/lora; JSONL/TSV/CSV
    records for sft/dpo, the fields the templates read kept: a column named like a label (label, class, ...)
    as a label, the others as text fields), ``--valid FILE`` pinned to the validation split, and the preset's
    post_training section (the method's own preset, configs/post_training/METHOD.yaml, unless ``preset`` names
    another) starting from ``parent``. --set keys without a section prefix address the post_training section."""
    import glob

    from corpusforge.tasks.config import ConfigError, apply_overrides
    from corpusforge.tasks.post_training.config import METHODS, PostTrainingConfig, template_fields
    from corpusforge.tasks.post_training.methods import METHOD

    if method is not None and method not in METHODS:
        raise ConfigError(f"--method: one of {', '.join(METHODS)}, got {method!r}")
    name = Path(preset).stem if preset else (method or "sft")
    data_cfg = load_preset(preset or method or "sft", "post_training")
    section = dict(data_cfg.get("post_training") or {})
    if method:
        section["method"] = method
    section["init"] = parent
    paths = [Path(p) for p in data] + ([Path(valid)] if valid else [])
    for path in paths:
        if not path.exists():
            raise ConfigError(f"{path}: no such file or directory")
    corpus = dict(data_cfg.get("corpus") or {})
    split = dict(corpus.pop("split", None) or {})
    if valid:
        if Path(valid).name in {Path(p).name for p in data}:
            raise ConfigError("lm finetune: the --valid file needs a name of its own (each source is named after "
                              "its file)")
        split["by_source"] = {**(split.get("by_source") or {}), glob.escape(Path(valid).name): "valid"}
        split["valid"] = 0.0
    reader = dict(corpus.pop("reader", None) or {})
    base = {
        "name": f"finetune-{name}",
        "corpus": {"name": Path(data[0]).stem.split(".")[0][:40] or "finetune", **corpus, "split": split,
                   "reader": reader, "sources": [str(p) for p in paths]},
        "post_training": section,
        "runner": data_cfg.get("runner", {"kind": "threads", "workers": 2}),
    }
    if "tracking" in data_cfg:
        base["tracking"] = data_cfg["tracking"]
    templates = {}  # prompt=..., response=..., rejected=...: taken verbatim (YAML would read "{x}" as a mapping)
    rest = []
    for item in overrides:
        key, eq, value = item.partition("=")
        key = key.strip().removeprefix("post_training.")
        if eq and key in ("prompt", "response", "rejected"):
            templates[key] = None if value.strip() in ("null", "~") else value.replace("\\n", "\n").replace("\\t", "\t")
        else:
            rest.append(item)
    config = apply_overrides(base, [s if s.startswith(POST_TRAINING_PIPELINE_KEYS) else f"post_training.{s}"
                                    for s in rest])
    config["post_training"].update(templates)
    post, reader = config["post_training"], config["corpus"]["reader"]
    templates_read = METHOD[post.get("method", "sft")].templates if post.get("method", "sft") in METHOD else ()
    if templates_read and not reader.get("fields") and Path(data[0]).is_file():
        wanted: list[str] = []
        for key in templates_read:
            template = post.get(key, PostTrainingConfig.__dataclass_fields__[key].default)
            if template is not None and not isinstance(template, str):
                raise ConfigError(f"post_training.{key}: a template string, got {template!r} (in YAML, quote it)")
            try:
                wanted += template_fields(template) if template else []
            except ValueError as exc:
                raise ConfigError(f"post_training.{key}: {exc}") from None
        wanted = list(dict.fromkeys(wanted))
        columns, _ = _header(Path(data[0]))
        missing = [w for w in wanted if w not in columns]
        if missing:
            raise ConfigError(f"{data[0]}: no {', '.join(missing)} column for the post_training templates; its "
                              f"columns are {', '.join(columns) or 'none'} (give prompt=... and response=... "
                              "templates over them with --set)")
        labels = {w: {"column": w, "type": "str"} for w in wanted if w in LABEL_COLUMNS}
        fields = {w: w for w in wanted if w not in labels}
        if fields:
            reader["fields"] = fields
        if labels:
            reader.setdefault("labels", labels)
    return config


# ------------------------------------------------------------------------------------ command groups


def corpus(sources: Sequence[PathLike], name: str, preset: str = "lm", overrides: Sequence[str] = (),
           store: PathLike | None = None) -> Artifact:
    """``corpusforge corpus``: read, clean, dedup, split and validate ``sources`` into a corpus artifact."""
    return _result(run_config(corpus_config(sources, name, preset, overrides), store))["corpus"]


def _tokenizer_train(sources: Sequence[PathLike], kind: str, vocab_size: int | None = None,
                     merges: int | None = None, overrides: Sequence[str] = (),
                     store: PathLike | None = None) -> Artifact:
    """``corpusforge tokenizer train``: train (or reuse) a tokenizer of ``kind`` on ``sources``."""
    config = tokenizer_config([str(s) for s in sources], kind, vocab_size, merges, False, list(overrides))
    return _result(run_config(config, store))["tokenizer"]


def _ngram_estimate(sources: Sequence[PathLike], order: int = 3, smoothing: str = "modified-kneser-ney",
                    k: float = 1.0, eval_files: Sequence[PathLike] = (), overrides: Sequence[str] = (),
                    store: PathLike | None = None) -> Artifact:
    """``corpusforge ngram estimate``: count n-grams in DuckDB and estimate a smoothed LM."""
    return _result(run_config(ngram_config(sources, order, smoothing, k, eval_files, overrides), store))["ngram"]


def _embed_train(sources: Sequence[PathLike], kind: str = "word2vec", overrides: Sequence[str] = (),
                 store: PathLike | None = None) -> Artifact:
    """``corpusforge embed train``: TF-IDF, word2vec, fastText or GloVe on ``sources``."""
    return _result(run_config(embed_config(sources, kind, overrides), store))["embeddings"]


def _embed_import(path: PathLike, name: str | None = None, format: str = "auto", lowercase: bool = False,
                  limit: int | None = None, store: PathLike | None = None) -> Artifact:
    """``corpusforge embed import``: word vectors trained elsewhere (word2vec text or binary, GloVe text) as an
    embeddings artifact of the store (corpusforge.tasks.embeddings.import_vectors): ``.load()`` gives gensim
    ``KeyedVectors``, and its id starts a classifier's embedding (``--set embeddings=ID``). ConfigError (a
    ValueError) for a missing or unreadable file."""
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.embeddings.import_vectors import import_vectors

    result = import_vectors(path, ArtifactStore(store_root(store)), name=name, fmt=format, lowercase=lowercase,
                            limit=limit)
    return Artifact.from_dir(result.path, result.reused)


def _lm_train(sources: Sequence[PathLike], preset: str, overrides: Sequence[str] = (),
              store: PathLike | None = None, valid: PathLike | None = None, test: PathLike | None = None) -> Artifact:
    """``corpusforge lm train``: corpus, tokenizer, encoding and the preset's neural LM (``valid``/``test``: files
    held out as those splits, ``--valid``/``--test``)."""
    return _result(run_config(lm_config([Path(s) for s in sources], preset, list(overrides), valid, test),
                              store))["lm"]


def _seq2seq_train(src: PathLike, tgt: PathLike | None, preset: str, valid: PairPaths | PathLike | None = None,
                   test: PairPaths | PathLike | None = None, overrides: Sequence[str] = (),
                   store: PathLike | None = None) -> Artifact:
    """``corpusforge seq2seq train``: pairs from two line-aligned files (or, with a summarization preset, one JSONL
    file of records and ``tgt`` None: ``cf.seq2seq.train("train.jsonl", None, "scitldr-transformer-cpu",
    valid="dev.jsonl")``), the joint tokenizer and the preset's encoder-decoder, then its evaluation. Returns the model (its metrics: loss and perplexity); ``.load()`` gives a
    translator (``.translate(texts, beam=...)``). BLEU and chrF are the evaluation's, an artifact of its own (editing
    the decoding re-scores without retraining): ``cf.artifacts.find(step="seq2seq_eval", input_id=model.id)``."""
    pretraining, config = split_pretraining(seq2seq_config(src, tgt, preset, valid, test, overrides))
    if pretraining is not None:  # the preset's denoising pre-training first; the model starts from it
        config = with_init(config, _result(run_config(pretraining, store))["seq2seq"].id)
    return _result(run_config(config, store))["seq2seq"]


def _classify_train(train: PathLike, preset: str, valid: PathLike | None = None, test: PathLike | None = None,
                    init: str | None = None, overrides: Sequence[str] = (), store: PathLike | None = None,
                    text_column: str | None = None, label_column: str | None = None) -> Artifact:
    """``corpusforge classify train``: a labelled file, the preset's tokenizer (and word vectors) and classifier,
    fine-tuned from ``init`` when given. Returns the classifier (its metrics: accuracy, f1, per split);
    ``.load()`` gives something that predicts (``.predict(texts)``: labels and probabilities; ``.evaluate``)."""
    config = classify_config(train, preset, valid, test, init, overrides, text_column, label_column)
    return _result(run_config(config, store))["classify"]


def _tag_train(train: PathLike, preset: str, valid: PathLike | None = None, test: PathLike | None = None,
               init: str | None = None, overrides: Sequence[str] = (), store: PathLike | None = None) -> Artifact:
    """``corpusforge tag train``: a tagged file (CoNLL-U or CoNLL columns) and the preset's tagger. Returns the
    tagger (its metrics: accuracy, and f1/precision/recall for entity tags); ``.load()`` gives something that tags
    (``.tag(texts)``: words, tags and entity spans with character offsets; ``.evaluate(words, tags)``)."""
    return _result(run_config(tag_config(train, preset, valid, test, init, overrides), store))["tag"]


def _qa_train(train: PathLike, preset: str, valid: PathLike | None = None, init: str | None = None,
              overrides: Sequence[str] = (), store: PathLike | None = None) -> Artifact:
    """``corpusforge qa train``: a SQuAD-format file and the preset's reader, started from ``init`` (a bert lm
    artifact). Returns the reader (its metrics: exact_match, f1, baseline_f1, retrieval_*); ``.load()`` gives
    something that answers (``.answer(question, passages)``)."""
    return _result(run_config(qa_config(train, preset, valid, init, overrides), store))["qa"]


def _loaded(artifact_id: str, step: str, what: str, store: PathLike | None) -> Any:
    """The working object of the published ``step`` artifact ``artifact_id`` (its files checked first); another
    step's artifact is a ConfigError of one line (``what`` names what was wanted)."""
    from corpusforge.tasks.config import ConfigError

    found = _show(artifact_id, store)
    if found.step != step:
        raise ConfigError(f"{artifact_id}: is a {found.step!r} artifact, not {what}")
    return found.load()


def _qa_retriever(passages: Sequence[str], mode: str, encoder: str | None, weights: Sequence[float] | None,
                  store: PathLike | None, chunk_words: int = 0, overlap: int = 0):
    """A search over ``passages`` (tasks.qa.data.PassageSearch: by passage, or by chunks of ``chunk_words`` words
    overlapping by ``overlap``): BM25, dense (the sentence encoder ``encoder``, a sentence_embeddings artifact) or
    hybrid (both, fused by reciprocal rank with ``weights``: bm25, dense)."""
    from corpusforge.models.retrieval import Retriever
    from corpusforge.tasks.config import ConfigError
    from corpusforge.tasks.qa.data import PassageSearch

    if mode not in ("bm25", "dense", "hybrid"):
        raise ConfigError(f"--mode: bm25, dense or hybrid, got {mode!r}")
    embedder = None
    if mode != "bm25":
        if not encoder:
            raise ConfigError(f"--mode {mode}: needs a sentence encoder; give --encoder ID (a sentence_embeddings "
                              "artifact)")
        embedder = _loaded(encoder, "sentence_embeddings", "a sentence encoder (sentence_embeddings)", store)
    try:
        return PassageSearch(list(passages), lambda units: Retriever(
            units, mode=mode, embedder=embedder, **({"weights": tuple(weights)} if weights else {})),
            chunk_words, overlap)
    except ValueError as exc:
        raise ConfigError(f"--chunk-words {chunk_words} --overlap {overlap}: {exc}" if chunk_words or overlap
                          else str(exc)) from None


def _qa_ask(artifact_id: str, question: str, corpus: PathLike, top: int = 5, mode: str = "bm25",
            encoder: str | None = None, weights: Sequence[float] | None = None, max_new_tokens: int = 32,
            chunk_words: int = 0, overlap: int = 0, store: PathLike | None = None) -> dict[str, Any]:
    """``corpusforge qa ask``: retrieve the ``top`` passages of ``corpus`` (a SQuAD .json, a .jsonl with context or
    text, or text with a blank line between passages) nearest ``question``, and answer from them: ``artifact_id`` a
    qa reader (extractive: the best span of any passage) or a model that generates (an lm or post_training
    artifact: the passages and the question in a prompt, its greedy answer; tasks/qa/generate.py). ``chunk_words``:
    retrieve and read chunks of that many words (``overlap`` shared) instead of whole passages. Returns the answer,
    its score, its source passage (with the answer's characters in it), the retrieval mode and what was
    retrieved."""
    from corpusforge.tasks.config import ConfigError
    from corpusforge.tasks.qa.data import passages_from_file

    if not question.strip():
        raise ConfigError("the question is empty")
    try:
        passages = passages_from_file(Path(corpus))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    found_artifact = _show(artifact_id, store)
    if found_artifact.step not in ("qa", "lm", "post_training", "lora_merge"):
        raise ConfigError(f"{artifact_id}: is a {found_artifact.step!r} artifact, not a reader (qa) or a model that "
                          "generates (lm, post_training)")
    search = _qa_retriever(passages, mode, encoder, weights, store, chunk_words, overlap)
    found_search = search.search([question], top)[0]
    read = found_search["read"]  # (passage index, start there, text) best first
    retrieved = [text for _, _, text in read]
    if found_artifact.step == "qa":
        found = found_artifact.load().answer(question, retrieved)
        kind, extra = "extractive", {}
    else:
        import json

        from corpusforge.tasks.qa.generate import generative_answer

        model, tok = found_artifact.load()
        spec = json.loads((found_artifact.path / "config.json").read_text(encoding="utf-8"))
        try:
            found = generative_answer(model, tok, question, retrieved, (spec.get("tokenizer") or {}).get("eot_id"),
                                      max_new_tokens)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        kind = "generative"
        extra = {"passages_read": found["passages_read"], "passages_left_out": found["passages_left_out"]}
        found.update(start=None, end=None)
        if found["passage"] is not None:
            a = retrieved[found["passage"]].casefold().find(found["answer"].casefold())
            found.update(start=a, end=a + len(found["answer"]))
    at, start, end = None, found["start"], found["end"]
    if found["passage"] is not None:  # the answer's characters in the whole passage its chunk was cut from
        at, offset, _ = read[found["passage"]]
        start, end = start + offset, end + offset
    return {"id": artifact_id, "question": question, "answer": found["answer"], "score": found["score"],
            "passage": passages[at] if at is not None else None, "passage_index": at, "start": start, "end": end,
            "mode": mode, "top": top, "reader": kind, **extra,
            **({"chunk_words": chunk_words, "overlap": overlap} if chunk_words else {}),
            "retrieved": [{"rank": r + 1, "passage_index": i, "start": a, "end": a + len(text), "score": score}
                          for r, ((i, a, text), score) in enumerate(zip(read, found_search["scores"]))]}


def _qa_evaluate(artifact_id: str, file: PathLike, mode: str = "bm25", encoder: str | None = None,
                 top: int = 5, weights: Sequence[float] | None = None, chunk_words: int = 0, overlap: int = 0,
                 store: PathLike | None = None) -> dict[str, Any]:
    """``corpusforge qa evaluate``: every question of a SQuAD-format ``file`` answered by retrieving from that
    file's own paragraphs (``mode``) and reading the ``top`` passages: SQuAD ``exact_match`` and ``f1`` (0-100),
    ``retrieval_top1``/``top5``/``mrr`` against each question's own paragraph, and the reader on that paragraph
    (``exact_match_gold_paragraph``, ``f1_gold_paragraph``) beside the sliding-window baseline. ``chunk_words``:
    retrieve and read chunks of paragraphs (a paragraph ranks by its best chunk)."""
    from corpusforge.storage.squad import SquadError, load_squad
    from corpusforge.tasks.config import ConfigError
    from corpusforge.tasks.qa.data import paragraphs_from
    from corpusforge.tasks.qa.inference import score

    try:
        paragraphs = paragraphs_from(load_squad(Path(file)))
    except SquadError as exc:
        raise ConfigError(str(exc)) from None
    if not any(p.questions for p in paragraphs):
        raise ConfigError(f"{file}: holds no question to answer")
    reader = _loaded(artifact_id, "qa", "a reader (qa)", store)
    retriever = _qa_retriever([p.context for p in paragraphs], mode, encoder, weights, store, chunk_words, overlap)
    found = score(reader, paragraphs, top, retriever=retriever)
    return {"id": artifact_id, "file": str(file), "mode": mode, "top": top,
            **({"chunk_words": chunk_words, "overlap": overlap} if chunk_words else {}), "questions": found["questions"],
            "paragraphs": found["paragraphs"], "exact_match": found["exact_match_retrieved"],
            "f1": found["f1_retrieved"], "retrieval_top1": found["retrieval_top1"],
            "retrieval_top5": found["retrieval_top5"], "retrieval_mrr": found["retrieval_mrr"],
            "exact_match_gold_paragraph": found["exact_match"], "f1_gold_paragraph": found["f1"],
            "baseline_exact_match": found["baseline_exact_match"], "baseline_f1": found["baseline_f1"]}


def _lm_finetune(parent: str, data: Sequence[PathLike], method: str | None = None, preset: str | None = None,
                 valid: PathLike | None = None, overrides: Sequence[str] = (),
                 store: PathLike | None = None) -> Artifact:
    """``corpusforge lm finetune``: train ``parent`` (an lm, post_training or lora_merge id) further on ``data``
    with ``method`` (full, lora, sft, dpo). Returns the post_training artifact (metrics: losses, trainable
    parameters, answer accuracy for sft/dpo); ``.load()`` gives (model, tokenizer), adapters merged."""
    config = finetune_config(resolve_parent(parent, store), data, method, preset, valid, overrides)
    return _result(run_config(config, store))["post_training"]


def resolve_parent(parent: str, store: PathLike | None = None) -> str:
    """An artifact id as given, or the artifact a registered model (``models:/NAME/latest``, ``/VERSION``,
    ``@ALIAS``) was made from, read from the store's MLflow registry."""
    if not parent.startswith("models:/"):
        return parent
    from corpusforge.storage.tracking import registered_artifact_id

    return registered_artifact_id(store_root(store), parent)


def _lm_merge(adapter_id: str, store: PathLike | None = None) -> Artifact:
    """``corpusforge lm merge``: fold a LoRA adapter artifact into plain weights (a lora_merge artifact)."""
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.post_training.build import build_merge
    from corpusforge.tasks.step import StepResult

    from corpusforge.storage.locks import store_in_use

    artifact_store = ArtifactStore(store_root(store))
    with store_in_use(artifact_store.root):  # `artifacts gc` waits for it
        found = Catalog(artifact_store).get(adapter_id)
        artifact_store.check_intact(found.path, found.manifest)
        result = build_merge(StepResult(id=found.manifest["id"], step=found.manifest["step"],
                                        name=found.manifest["name"], path=str(found.path), reused=True,
                                        seconds=0.0),
                             artifact_store)
        return Artifact.from_dir(result.path, result.reused)


LM_MODEL_STEPS = ("lm", "post_training", "lora_merge")  # the steps whose artifacts are language models


def _lm_evaluate(artifact_id: str, files: Sequence[PathLike], store: PathLike | None = None,
                 documents: str | None = None, batch_size: int | None = None, device: str = "cpu") -> dict[str, Any]:
    """``corpusforge lm evaluate``: the perplexity of a neural LM (an lm, post_training or lora_merge artifact) on
    text files, encoded with its own tokenizer and scored as the lm stage scores its valid/test split
    (corpusforge.tasks.lm.evaluate). ``documents`` (line, paragraph, file) overrides how the files are cut into
    documents (default: as the model's training corpus read its files). Returns ``{"id", "step", "family",
    "results": {file as given: {"documents", "tokens", "nll" (mean, nats), "perplexity"}}}``; LookupError for an
    unknown id, ValueError for another kind of artifact or an unusable file."""
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore
    from corpusforge.tasks.lm.evaluate import DOCUMENT_MODES, evaluate_files, text_settings

    if documents is not None and documents not in DOCUMENT_MODES:
        raise ValueError(f"documents: use one of {', '.join(DOCUMENT_MODES)}, not {documents!r}")
    keys = [str(f) for f in files]
    missing = [k for k in keys if not Path(k).is_file()]
    if missing:
        raise ValueError(f"no such file: {missing[0]}")
    artifact_store = ArtifactStore(store_root(store))
    catalog = Catalog(artifact_store)
    found = catalog.get(artifact_id)
    step = found.manifest.get("step")
    if step not in LM_MODEL_STEPS:
        raise ValueError(f"{artifact_id}: is a {step!r} artifact, not a language model ({', '.join(LM_MODEL_STEPS)})")
    artifact_store.check_intact(found.path, found.manifest)  # an adapter's base is checked as it is loaded
    if step == "lm":
        from corpusforge.tasks.lm.inference import load_trained

        model, tok, spec = load_trained(found.path)
    else:  # adapters come merged into their base
        from corpusforge.tasks.post_training.inference import load_post_trained

        model, tok, spec = load_post_trained(found.path)
    settings = text_settings(catalog, found.manifest)
    if documents is not None:  # the corpus's reader settings and clean preset still apply
        settings["txt_mode"] = documents
    from corpusforge.tasks.corpus.reading import as_loaded

    # the files are cleaned as the corpus was (settings), so the tokenizer is not asked to clean them again
    results = evaluate_files(model, as_loaded(tok), spec, {k: k for k in keys}, settings, batch_size, device)
    return {"id": found.manifest["id"], "step": step, "family": spec.get("family"), "results": results}


tokenizer = SimpleNamespace(train=_tokenizer_train)
ngram = SimpleNamespace(estimate=_ngram_estimate)
embed = SimpleNamespace(train=_embed_train, import_vectors=_embed_import)
lm = SimpleNamespace(train=_lm_train, finetune=_lm_finetune, merge=_lm_merge, evaluate=_lm_evaluate)
seq2seq = SimpleNamespace(train=_seq2seq_train)
classify = SimpleNamespace(train=_classify_train)
tag = SimpleNamespace(train=_tag_train)
qa = SimpleNamespace(train=_qa_train, ask=_qa_ask, evaluate=_qa_evaluate)


# --------------------------------------------------------------------------------------------- artifacts


def _find(step: str | None = None, name: str | None = None, config: Mapping[str, Any] | None = None,
          input_id: str | None = None, latest: bool = False, store: PathLike | None = None) -> list[Artifact]:
    """``corpusforge artifacts find``: published artifacts, newest last. ``config`` keys are dotted, a key of the
    artifact's config (``"split.valid"``) or one with its section first (``"corpus.split.valid"``)."""
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    from corpusforge.stages import section_steps

    hits = Catalog(ArtifactStore(store_root(store))).find(step=step, name=name, config=dict(config or {}),
                                                          input_id=input_id, latest=latest, sections=section_steps())
    return [Artifact(h.manifest["id"], h.manifest["step"], h.manifest["name"], h.path, h.manifest) for h in hits]


def _show(artifact_id: str, store: PathLike | None = None) -> Artifact:
    """``corpusforge artifacts show``: the artifact with this id (or unique prefix)."""
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    found = Catalog(ArtifactStore(store_root(store))).get(artifact_id)
    return Artifact(found.manifest["id"], found.manifest["step"], found.manifest["name"], found.path,
                    found.manifest)


def _verify(artifact_id: str, store: PathLike | None = None):
    """``corpusforge artifacts verify``: a report with ``ok``, ``problems`` and ``files_checked``."""
    from corpusforge.storage.catalog import Catalog
    from corpusforge.storage.store import ArtifactStore

    return Catalog(ArtifactStore(store_root(store))).verify(artifact_id)


def _load(artifact_id: str, store: PathLike | None = None) -> Any:
    """The working object of an artifact (see :meth:`Artifact.load`)."""
    return _show(artifact_id, store).load()


def _du(store: PathLike | None = None):
    """``corpusforge artifacts du``: every artifact's bytes, inputs and dependents (``used_by``), bytes per
    (step, name) (``.groups()``), the dependency trees' tops (``.roots()``) and what else the store holds
    (``.other``: MLflow's database and files, temp dirs, ...). Reads manifests only."""
    from corpusforge.storage.gc import du
    from corpusforge.storage.store import ArtifactStore

    return du(ArtifactStore(store_root(store)))


def _gc(keep_latest: int | None = None, keep_newer_than: str | float | None = None, dry_run: bool = True,
        wait: bool = False, store: PathLike | None = None, older_than: str | float | None = None):
    """``corpusforge artifacts gc``: a dry run unless ``dry_run=False``. Keeps the ``keep_latest`` newest
    artifacts of each (step, name) and those newer than ``keep_newer_than`` (``"7d"``, ``"12h"``, seconds), every
    artifact a registered MLflow model was made from, and everything a kept artifact depends on; removes the rest
    and what killed writers left. A report with ``removed``, ``kept`` (each with ``why``), ``leftovers``,
    ``bytes_freed``, ``mlflow_runs`` (runs that logged a removed artifact). ``StoreBusy`` while a pipeline runs on
    the store (``wait=True`` waits), ``GcError`` when the registry cannot be read, ``ValueError`` on a bad policy.
    ``older_than``: how old a leftover must be to go (never selects artifacts)."""
    from corpusforge.storage.gc import gc
    from corpusforge.storage.store import ArtifactStore

    return gc(ArtifactStore(store_root(store)), keep_latest=keep_latest, keep_newer_than=keep_newer_than,
              dry_run=dry_run, wait=wait, older_than=older_than)


artifacts = SimpleNamespace(find=_find, show=_show, verify=_verify, load=_load, du=_du, gc=_gc)

__all__ = ["Artifact", "RunResult", "run", "corpus", "tokenizer", "ngram", "embed", "lm", "seq2seq", "classify", "tag", "qa",
           "artifacts",
           "load_config", "run_config"]

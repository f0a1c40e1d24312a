"""The corpus stage: sources -> shards of one file or a pack of small ones (read, clean, filter, dedup, validate) -> the merged corpus."""

from corpusforge.tasks.corpus.config import CorpusConfig
from corpusforge.tasks.stage import Stage, StepOutputs

STAGE = Stage(
    section="corpus", config=CorpusConfig, after=None,
    doc="The corpus stage (required): sources, reading, cleaning, filters, dedup, split, validation.",
    task=None, core=None,  # the root stage: the pipeline maps corpus.shard over the sources, then corpus.merge
    steps={
        "corpus_shard": StepOutputs(mlflow=("validation.json",),
                                    mlflow_dirs=(("gx/uncommitted/data_docs/local_site", "data_docs"),)),
        "corpus": StepOutputs(mlflow=("doc_lengths.png", "reasons.png", "report.md", "data_docs.html"),
                              plots=(("doc_lengths.png", "Document length histogram"),
                                     ("reasons.png", "Why records were not kept")),
                              loader="corpusforge.tasks.corpus.export:load_corpus",
                              exports={"hf-datasets": "corpusforge.tasks.corpus.export:export_hf_datasets"}),
    },
)

"""The embeddings stage: TF-IDF or dense word vectors (word2vec, fastText, GloVe) and their evaluation."""

from corpusforge.tasks.embeddings.config import EmbeddingsConfig
from corpusforge.tasks.stage import Stage, StepOutputs

STAGE = Stage(
    section="embeddings", config=EmbeddingsConfig, after="corpus",
    doc="Train word embeddings / TF-IDF.",
    task="corpusforge.tasks.embeddings.build:embeddings_task", core="corpusforge.tasks.embeddings.build:build_embeddings",
    steps={
        "embeddings": StepOutputs(mlflow=("embeddings.json", "training.json", "vectors.bin"),
                                  loader="corpusforge.tasks.embeddings.eval:load_vectors"),
        "glove": StepOutputs(loader="corpusforge.tasks.embeddings.eval:load_vectors"),
        "embeddings_eval": StepOutputs(mlflow=("eval.json", "pca.png"),
                                       plots=(("pca.png", "Embedding map (PCA of the plotted word groups)"),),
                                       highlights="corpusforge.tasks.embeddings.eval:highlights"),
        "sparse_vectors": StepOutputs(mlflow=("sparse.json",)),
    },
)

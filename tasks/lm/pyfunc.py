"""The MLflow pyfunc flavor of a trained lm: ``mlflow.pyfunc.load_model(uri).predict(prompts, params)`` writes text.

MLflow imports this module by name (the model's ``loader_module``; every registered lm records it) and calls
``_load_pyfunc(data_path)``. The generator is corpusforge.tasks.textgen's, shared with post-trained models; an lm
reads its prompts as its corpus was cleaned.
"""

from pathlib import Path

from corpusforge.tasks.textgen import DEFAULT_PARAMS, TextGenerator  # noqa: F401 (DEFAULT_PARAMS: register.py)


class LMTextGenerator(TextGenerator):
    """The shared generator, reading each prompt as the lm's corpus was cleaned (tasks/corpus/reading.py)."""

    def __init__(self, data_path: str | Path):
        from corpusforge.tasks.corpus.reading import reading_as_trained

        super().__init__(data_path, reading=reading_as_trained)


def _load_pyfunc(data_path: str) -> LMTextGenerator:
    return LMTextGenerator(data_path)

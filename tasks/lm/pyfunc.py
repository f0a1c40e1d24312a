"""The MLflow pyfunc flavor of a trained lm: ``mlflow.pyfunc.load_model(uri).predict(prompts, params)`` writes text.

MLflow imports this module by name (the model's ``loader_module``; every registered lm records it) and calls
``_load_pyfunc(data_path)``. The generator is corpusforge.tasks.textgen's, shared with post-trained models.
"""

from corpusforge.tasks.textgen import DEFAULT_PARAMS, TextGenerator, _load_pyfunc  # noqa: F401

LMTextGenerator = TextGenerator

"""Where bytes live: source readers, Parquet, the content-addressed artifact store, the catalog, tracking.

Nothing here imports prefect, torch models or (except :mod:`corpusforge.storage.tracking`) mlflow.
"""

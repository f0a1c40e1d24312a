-- Postgres starts with the `prefect` database; MLflow gets its own.
CREATE DATABASE mlflow;

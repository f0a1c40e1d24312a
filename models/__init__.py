"""What is learned and how. Pure: no prefect, no mlflow, no knowledge of the artifact store."""

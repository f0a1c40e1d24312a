"""The pipeline's steps: each one pure core function plus one thin Prefect @task wrapper."""

"""Prefect @flow entrypoints and the typer CLI. Importing this package must stay cheap."""

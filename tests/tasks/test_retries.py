"""Shard tasks retry transient I/O errors only."""

from __future__ import annotations

from prefect.states import Failed

from corpusforge.tasks.corpus.shard import _retry_on_io_error, corpus_shard_task
from corpusforge.tasks.corpus.validate import DatasetValidationError


def test_retry_condition_accepts_io_errors_only():
    assert _retry_on_io_error(None, None, Failed(data=OSError("NFS hiccup"))) is True
    assert _retry_on_io_error(None, None, Failed(data=TimeoutError("slow disk"))) is True  # an OSError
    assert _retry_on_io_error(None, None, Failed(data=DatasetValidationError("schema"))) is False
    assert _retry_on_io_error(None, None, Failed(data=ValueError("bad config"))) is False


def test_shard_task_is_configured_to_retry():
    assert corpus_shard_task.retries == 2
    assert corpus_shard_task.retry_condition_fn is _retry_on_io_error

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



def test_retry_condition_answers_where_state_result_would_be_a_coroutine():
    """Prefect's ``State.result()`` returns a coroutine where it thinks it runs async (a running event loop with
    no run context; a MemoryError run of the corpus stage logged "coroutine 'get_state_result' was never
    awaited" from this function): the condition then said False to every error, an I/O error included."""
    import asyncio
    import warnings

    async def ask(error: BaseException) -> bool:
        return _retry_on_io_error(None, None, Failed(data=error))

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a coroutine never awaited
        assert asyncio.run(ask(OSError("NFS hiccup"))) is True
        assert asyncio.run(ask(ValueError("bad config"))) is False

"""The thin Prefect layer of every step: ``@prefect_task(...)`` builds the Prefect task on first use.

A step module holds its pure core function and one thin task wrapper (the project's rule: "one pure core function +
one thin @task wrapper in the same module"). Importing ``prefect`` costs about 1 CPU-s, and much of the
code that imports step modules never orchestrates anything: ``corpusforge artifacts ...``, the planner
that answers a fully cached run from the store, the Python API's loaders, tests of the core functions.
So the decorator keeps the plain function and builds the real ``prefect.task`` the first time the task
is called, mapped, submitted or inspected. Every task defaults to ``cache_policy=NO_CACHE``: the artifact
store is the cache (a step whose id is published returns at once), so Prefect keeps no second copy.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

_BUILD_LOCK = threading.Lock()


class LazyTask:
    """A Prefect task that is created on first use; until then it is only the wrapped function."""

    def __init__(self, fn: Callable[..., Any], options: dict[str, Any]):
        self.fn = fn
        self._options = options
        self._task = None
        functools.update_wrapper(self, fn)

    @property
    def task(self):
        if self._task is None:
            with _BUILD_LOCK:
                if self._task is None:
                    from prefect import task
                    from prefect.cache_policies import NO_CACHE

                    self._task = task(**{"cache_policy": NO_CACHE, **self._options})(self.fn)
        return self._task

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.task(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # map, submit, with_options, name, ...
        if name.startswith("__") or name in ("fn", "_options", "_task"):
            raise AttributeError(name)
        return getattr(self.task, name)

    def __repr__(self) -> str:
        return f"<prefect_task {self._options.get('name', self.fn.__name__)} (built: {self._task is not None})>"


def prefect_task(**options: Any) -> Callable[[Callable[..., Any]], LazyTask]:
    """``@prefect_task(name="ngram")``: like ``@prefect.task(...)``, built lazily, ``NO_CACHE`` by default."""

    def decorate(fn: Callable[..., Any]) -> LazyTask:
        return LazyTask(fn, options)

    return decorate

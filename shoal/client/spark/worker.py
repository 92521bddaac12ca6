"""What the source does to the PySpark worker process its executor tasks run in.

A reused Python worker (``spark.python.worker.reuse``, on by default) runs
one task after another, and PySpark's daemon makes it run a full
``gc.collect()`` after each. A full collection walks every container object
the process holds; once pyspark, pyarrow and this client are imported that is
some 50,000 objects and 10-25 ms of CPU, paid between two tasks, on the
path of every micro-batch (a stream's task reads about 10,000 records, so
this was a third of the worker's CPU per row).

``settle_worker`` moves the objects alive at a process's first read -- the
imported modules, classes and functions, which live as long as the process
-- to the collector's permanent generation (``gc.freeze``), once per process,
so that each later collection walks only what tasks created. Nothing frozen
stops being freed by reference counting; only a reference cycle among
frozen objects would outlive its use, and at a worker's first read there
are hardly any. A process that froze objects already (``gc.get_freeze_count``)
is left as it is.
"""

from __future__ import annotations

import gc

__all__ = ["settle_worker"]


def settle_worker() -> None:
    """Freeze what the worker process holds now, the first time it reads (see module doc)."""
    if not gc.get_freeze_count():
        gc.freeze()

"""The Python daemon Spark forks its Python workers from (spark.python.daemon.module), with
the `headwater` source's reader imported and its compiled record walk loaded before the
first fork.

Spark's own daemon imports only pyspark, so each new worker paid for importing the
reader (numba, pyarrow, the protocol codec: ~0.8 s here) and for loading numba's cached
machine code on its first fetch (~0.7 s), inside the task that needed it. A streaming
query met that on its first micro-batches, once per worker, which held window updates
back by seconds. Forked from here, a task worker starts with all of it in memory.

That memory is frozen out of the cyclic garbage collector (gc.freeze): Spark's daemon
runs a full gc.collect() in a worker after every task, and walking the ~190,000 objects
the reader's imports leave took 0.1-0.3 s of CPU per task on the 2-core machine, twice
per micro-batch, competing with the batch for the cores. Frozen, it takes none, and the
forked workers keep sharing those pages with the daemon instead of copying them on the
collector's writes.
"""

from __future__ import annotations

import gc
import importlib
import sys

from pyspark import daemon

# Spark starts one daemon per worker module (its first argument); only the task workers'
# (pyspark.worker, the default) read records. The others, which plan and look up data
# sources on the driver, start as Spark's own.
TASK_WORKER = "pyspark.worker"


def preload() -> None:
    """Load the reader and Spark's task worker (which each forked worker would otherwise
    import on its first task), then freeze everything loaded so far out of the collector."""
    importlib.import_module(TASK_WORKER)
    from headwater.spark import partition_reader  # noqa: F401 (imported for the forked workers)
    from headwater.spark.record_columns import load_compiled_walk

    load_compiled_walk()
    gc.freeze()


if __name__ == "__main__":
    if sys.argv[1:2] in ([], [TASK_WORKER]):
        preload()
    daemon.manager()

"""Storage engine: partitioned append-only logs of Kafka record batches on disk.

A topic-partition is a ``Log`` (partition.py): segments (segment.py) of batches with sparse
offset and time indexes (index.py), recovered after a crash. ``LogManager`` (manager.py)
is the data directory's topic catalog; ``LogConfig`` (config.py) the per-topic settings.
Old data goes by retention (retention.py) and, for compacted topics, the log cleaner
(cleaner.py; the compaction itself in compaction.py, run in the process of cleaner_worker.py
at the pace of throttle.py), whose interrupted swaps recovery.py finishes. Every file name in the data
directory, and the durable replace of a small file, are spelled in layout.py.
"""
from .cleaner import CleanerStats
from .config import LogConfig
from .manager import (InvalidTopicError, LogManager, PartitionCountError, PartitionLimitError, Topic,
                      TopicExistsError, UnknownTopicError)
from .partition import Log, OffsetOutOfRangeError

__all__ = ["CleanerStats", "InvalidTopicError", "Log", "LogConfig", "LogManager", "OffsetOutOfRangeError",
           "PartitionCountError", "PartitionLimitError", "Topic", "TopicExistsError", "UnknownTopicError"]

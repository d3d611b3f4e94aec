"""Headwater as a Spark Structured Streaming source and sink (format "headwater")."""

from headwater.spark.session import register, session
from headwater.spark.source import HeadwaterDataSource

__all__ = ["HeadwaterDataSource", "register", "session"]

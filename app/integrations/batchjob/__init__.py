"""batch/v1 Job (``KIND``)."""

from app.integrations.batchjob.job import KIND

__all__ = ["KIND"]

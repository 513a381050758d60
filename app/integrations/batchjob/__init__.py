"""batch/v1 Job: the kind (``KINDS``) and its webhook routes (``ROUTES``)."""

from app.integrations.batchjob.job import KIND
from app.integrations.batchjob.webhook_rules import ROUTES

KINDS = (KIND,)

__all__ = ["KIND", "KINDS", "ROUTES"]

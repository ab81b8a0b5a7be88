"""A thin client for the Tileplan service: `TileplanClient(url, token).schedule(hardware, layers)`.

Depends on httpx only (and PyYAML for the CLI's workload files); never on the solver.
"""

from tileplan_client.client import (
    BadInput,
    JobFailed,
    ServiceError,
    TileplanClient,
    TileplanError,
)
from tileplan_client.models import Baseline, Evaluation, Job, Metrics, Plan, ScheduleResult, Summary

__all__ = [
    "BadInput", "Baseline", "Evaluation", "Job", "JobFailed", "Metrics", "Plan", "ScheduleResult", "ServiceError",
    "Summary", "TileplanClient", "TileplanError",
]
__version__ = "0.1.0"

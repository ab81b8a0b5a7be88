"""A thin client for the Tileplan service: `TileplanClient(url, token).schedule(hardware, layers)`,
`.compile(hardware, "model.onnx")` for a whole model, and
`AsyncTileplanClient` for asyncio.

Depends on httpx only (and PyYAML for the CLI's workload files); never on the solver.
"""

from tileplan_client.client import AsyncTileplanClient, TileplanClient
from tileplan_client.errors import (
    AuthError,
    BadInput,
    CompileFailed,
    JobFailed,
    NotFound,
    ServiceError,
    TileplanError,
    WaitTimeout,
)
from tileplan_client.models import (
    Baseline,
    Compile,
    CompiledOp,
    Evaluation,
    Hardware,
    Job,
    Metrics,
    Module,
    Plan,
    ScheduleResult,
    Summary,
)
from tileplan_client.nest import loop_nest_text

__all__ = [
    "AsyncTileplanClient", "AuthError", "BadInput", "Baseline", "Compile", "CompileFailed", "CompiledOp", "Evaluation", "Hardware", "Job", "JobFailed",
    "Metrics", "Module", "NotFound", "Plan", "ScheduleResult", "ServiceError", "Summary", "TileplanClient",
    "TileplanError", "WaitTimeout", "loop_nest_text",
]
__version__ = "0.2.0"

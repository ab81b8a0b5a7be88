"""Hardware descriptors: what the accelerator is (PE array, memory hierarchy, constraints)."""

from tileplan.hardware.model import (
    AccessEnergy,
    Architecture,
    Dataflow,
    HardwareDescriptor,
    MemoryLevel,
    PEArray,
    ResolvedLevel,
)

__all__ = [
    "AccessEnergy",
    "Architecture",
    "Dataflow",
    "HardwareDescriptor",
    "MemoryLevel",
    "PEArray",
    "ResolvedLevel",
]

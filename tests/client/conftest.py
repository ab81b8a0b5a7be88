from __future__ import annotations

import sys
from pathlib import Path

# The real-process helpers live with the service tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

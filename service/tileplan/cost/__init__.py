"""Cost model: cycles, energy, utilisation and traffic of a legal mapping."""

from tileplan.cost.model import Metrics, evaluate_mapping

__all__ = ["Metrics", "evaluate_mapping"]

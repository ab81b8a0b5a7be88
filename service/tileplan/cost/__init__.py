"""Cost model: cycles, energy, utilisation and traffic of a legal mapping."""

from tileplan.cost.model import Metrics, evaluate_mapping, first_order_metrics
from tileplan.cost.params import CostParams

__all__ = ["CostParams", "Metrics", "evaluate_mapping", "first_order_metrics"]

"""The GPU cost model: a pure function from a step's batch to its time, FLOPs, bytes and bound."""

from servesim.cost.roofline import CostModel, OpCost, StepCost

__all__ = ["CostModel", "OpCost", "StepCost"]

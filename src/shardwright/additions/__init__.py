"""What is added to a dataset that exists, ours or another tool's, in place: its plan
(`plan`: `plan_addition`, `AdditionPlan`), every refusal before anything is written
(`checks`), the levels added to a precomputed volume or an OME-Zarr group (`levels`). Its
record and its one conditional write of the root are `lifecycle/addition.py`'s; what verify
checks of it, `verification/additions.py`'s. It sits above the formats' drivers: an OME-Zarr
group's levels are planned by its format's layout.
"""

from __future__ import annotations

from shardwright.additions.plan import AdditionPlan, plan_addition

__all__ = ["AdditionPlan", "plan_addition"]

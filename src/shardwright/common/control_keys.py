"""The keys a job keeps beside what it writes in a destination: named here, below every layer,
because the planner refuses a dataset whose own names would take them (`planning/checks.py`)
and the lifecycle writes them (`lifecycle/runs.py`, `lifecycle/manifest.py`)."""

CONTROL_PREFIX = ".shardwright/"  # a job's own objects in its destination (lifecycle/)
MANIFEST_KEY = "shardwright-manifest.json"  # the completion record, written last

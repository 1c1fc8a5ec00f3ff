"""The Python API: plan, convert and verify, exactly what the command line calls."""

from __future__ import annotations

import json
from typing import Any

from dask.delayed import Delayed

from shardwright.graph import build_graph, execute, scheduler_address
from shardwright.options import ConvertOptions
from shardwright.plan import ConversionPlan, PlanError, make_plan
from shardwright.sources import Source
from shardwright.store import Store
from shardwright.verify import verify

__all__ = ["ConvertOptions", "PlanError", "convert", "plan", "verify"]


def plan(
    source: str | Source, dest: str, options: ConvertOptions | None = None, **option_values: Any
) -> ConversionPlan:
    """Decide everything about a conversion and write nothing; `print(plan.report())`."""
    return make_plan(source, dest, _options(options, option_values))


def convert(
    source: str | Source | ConversionPlan,
    dest: str | None = None,
    options: ConvertOptions | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    scheduler: str | None = None,
    workers: int | None = None,
    client: Any = None,
    compute: bool = True,
    progress: bool = True,
    **option_values: Any,
) -> dict[str, Any] | Delayed:
    """Convert a volume to sharded output; returns the manifest (or a lazy Dask object)."""
    if isinstance(source, ConversionPlan):
        the_plan = source
    else:
        if dest is None:
            raise PlanError("convert needs a destination")
        the_plan = make_plan(source, dest, _options(options, option_values))
    gpu = the_plan.options.engine == "gpu"
    if gpu and client is None and scheduler_address(scheduler) is None:
        from shardwright.engine.gpu import cupy_module

        cupy_module()  # this machine runs the GPU workers: it must have a GPU
    store = Store(the_plan.dest, the_plan.options.storage_options)
    before = store.requests.snapshot()
    check_destination(
        the_plan,
        store,
        resume=resume,
        overwrite=overwrite,
        other_processes=client is not None
        or scheduler == "processes"
        or scheduler_address(scheduler) is not None,
    )
    store.check_writable()
    if overwrite:
        store.clear()
    if resume:
        store.remove_stale_temporaries()
    graph = build_graph(
        the_plan, store, resume=resume, preflight_requests=store.requests.since(before)
    )
    if not compute:
        return graph
    return execute(
        graph,
        scheduler=scheduler,
        workers=workers,
        client=client,
        progress=progress,
        gpu=gpu,
    )


def check_destination(
    plan: ConversionPlan, store: Store, *, resume: bool, overwrite: bool, other_processes: bool
) -> None:
    """Refuse, before writing anything, destinations this run must not touch."""
    if resume and overwrite:
        raise PlanError("--resume and --overwrite contradict each other; pass one")
    if store.is_process_local and other_processes:
        raise PlanError(
            f"{store.url} lives in this process; workers in other processes cannot write "
            "it: use --scheduler local, threads or sync with memory:// destinations"
        )
    if store.is_empty():
        return
    if not (resume or overwrite):
        raise PlanError(
            f"destination {store.url} is not empty; pass --resume to continue an "
            "earlier run into it or --overwrite to replace it"
        )
    if resume:
        for key, expected in plan.metadata_documents():
            try:
                existing = json.loads(store.read(key))
            except FileNotFoundError:
                continue
            if existing != json.loads(json.dumps(expected)):
                raise PlanError(
                    f"cannot resume into {store.url}: its {key} differs from this "
                    "plan's (different options or source?)"
                )


def _options(options: ConvertOptions | None, values: dict[str, Any]) -> ConvertOptions:
    if options is not None and values:
        raise TypeError("pass either a ConvertOptions or keyword options, not both")
    return options or ConvertOptions(**values)

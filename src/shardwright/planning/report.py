"""The plan report `shardwright plan` prints: a volume plan's `describe()` as text."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shardwright.planning import pyramid
from shardwright.planning.text import counted
from shardwright.planning.text import human_bytes as _bytes
from shardwright.planning.text import xyz as _xyz


def volume_report(
    d: dict[str, Any],
    epoch_bytes: int,
    companions: Sequence[str] = (),
    fill: str = "0",
    unit_written: str = "nanometer",
) -> str:
    """Lines of the report of a volume plan described by `d` (`ConversionPlan.describe()`),
    followed by the reports of its companion datasets; `fill`: what the source's absent
    chunks read as (`missing.fill_of`); `unit_written`: the length unit the output's
    metadata records (its layout's `records_unit`: else nanometres)."""
    scattered = d["shard_shape_chunks_xyz"] is None
    lines = [
        f"source       {d['source']}",
        f"destination  {d['destination']}  ({d['format']})",
        f"volume       {_xyz(d['size_xyz'])} voxels, {d['data_type']} x {d['channels']} "
        f"channel(s), {d['layer_type']}",
        f"chunks       {_xyz(d['chunk_size_xyz'])} voxels; grid {_xyz(d['grid_xyz'])} = "
        f"{counted(d['chunks'], 'chunk')}; sampled encoded/raw ratio {d['encoded_ratio_sampled']}",
    ]
    lines.append(_placement_line(d, unit_written))
    absent, looked_at = d.get("source_chunks_absent_sampled") or (0, 0)
    if absent:
        lines.append(
            f"absent       {100 * absent / looked_at:.0f} % of sampled source chunks ({absent} of "
            f"{looked_at}) are not stored: written as the source's fill value ({fill})"
        )
    if scattered:
        lines.append(
            f"shards       {d['shards']:,} hashed shards (chunks scattered in space), "
            f"~{d['chunks_per_shard']:,} chunks each"
        )
    else:
        lines.append(
            f"shards       {counted(d['shards'], 'shard')} of "
            f"{_xyz(d['shard_shape_chunks_xyz'])} chunks "
            f"({counted(d['chunks_per_shard'], 'chunk')})"
        )
    lines.append(f"bytes/shard  ~{_bytes(d['estimated_bytes_per_shard'])} encoded")
    lines += _format_lines(d)
    lines += _pyramid_lines(d)
    lines.append(
        f"memory       epoch {_xyz(d['epoch_shape_chunks_xyz'])} chunks "
        f"({_bytes(epoch_bytes)}); peak per task ~"
        f"{_bytes(d['estimated_peak_bytes_per_task'])} of "
        f"{_bytes(d['memory_budget_per_task'])} budget"
    )
    for companion in companions:
        lines += ["", companion]
    return "\n".join(lines)


def _format_lines(d: dict[str, Any]) -> list[str]:
    """The output format's lines: precomputed's sharding, indexes and scale, or zarr3's array."""
    lines: list[str] = []
    if "sharding" in d:
        spec = d["sharding"]
        lines.append(
            f"sharding     {spec['hash']}, preshift {spec['preshift_bits']}, minishard "
            f"{spec['minishard_bits']} ({2 ** spec['minishard_bits']} per shard), shard "
            f"{spec['shard_bits']}; data {spec['data_encoding']}, index "
            f"{spec['minishard_index_encoding']}"
        )
        minishard = d["minishard_index_bytes"]
        lines.append(
            f"indexes      shard index {_bytes(d['shard_index_bytes'])}"
            + (f", minishard index <= {_bytes(minishard)}" if minishard else "")
        )
        lines.append(f"scale        {d['scale_key']}, encoding {d['encoding']}")
    else:
        lines.append(
            f"zarr         axes {d['zarr_axes']}, shape {d['zarr_shape']}, shard "
            f"{d['zarr_shard_shape']}, chunk {d['zarr_chunk_shape']}; "
            f"shard index {_bytes(d['shard_index_bytes'])}"
        )
    return lines


def _pyramid_lines(d: dict[str, Any]) -> list[str]:
    """The pyramid's line and one per level (none without a pyramid)."""
    lines: list[str] = []
    if "pyramid" in d:
        pyr = d["pyramid"]
        why = pyr.get("factor_from", "as given")
        steps = pyramid.steps_of(pyr)
        lines.append(
            f"pyramid      {pyr['levels']} levels, factors {why}, downsample "
            f"{pyr['method']}; source read once, levels chained"
        )
        for row in d["levels"]:
            k = row["level"]
            by = f" (level {k - 1} by {_xyz(steps[k - 1])})" if k else ""
            lines.append(
                f"level {k:<6} {row['key']}: {_xyz(row['size_xyz'])} voxels of "
                f"{_xyz(row['resolution_xyz'])} nm{by}, "
                f"chunk {_xyz(row['chunk_size_xyz'])}, {counted(row['shards'], 'shard')} of "
                f"{_xyz(row['shard_shape_chunks_xyz'])} chunks, "
                f"~{_bytes(row['estimated_bytes_per_shard'])}/shard, peak per task ~"
                f"{_bytes(row['estimated_peak_bytes_per_task'])}"
            )
    return lines


def _placement_line(d: dict[str, Any], unit: str) -> str:
    """Voxel size, offset and the unit written (where not nm), and where each came from (the
    plan's `placement`)."""
    placed = d["placement"]
    offset = d["voxel_offset_xyz"]
    corner = [_round(o * r) for o, r in zip(offset, d["resolution_xyz"], strict=True)]
    voxel = f"voxel {_xyz(d['resolution_xyz'])} nm"
    at = f"offset {_xyz(offset)} voxels ({_xyz(corner)} nm)"
    size_from, offset_from = placed["resolution_from"], placed["voxel_offset_from"]
    if size_from == offset_from and "source_placed_by" not in placed:  # nothing replaced
        text = f"{voxel}, {at}: both {_origin(size_from)}"
    else:
        size_origin = _origin(size_from, placed, "resolution", " nm")
        text = f"{voxel} ({size_origin}), {at} ({_origin(offset_from, placed, 'voxel_offset')})"
    return f"placement    {text}" + (f"; written in {unit}s" if unit != "nanometer" else "")


def _origin(
    where: str, placed: dict[str, Any] | None = None, field: str = "", unit: str = ""
) -> str:
    """How the plan words where a voxel size or offset came from; a value given where the
    source records one, beside the source's."""
    own = (placed or {}).get(f"source_{field}_xyz")
    if where == "option" and own is not None and placed is not None:
        return f"as given; the source's: {_xyz(own)}{unit}, from {placed.get('source_placed_by')}"
    if where == "option":
        return "as given"
    if where == "default":
        return "none recorded in the source"
    return f"from {where}"


def _round(value: float) -> int | float:
    return int(value) if float(value).is_integer() else round(value, 6)

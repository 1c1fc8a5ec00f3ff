"""What a source is planned as: a mesh or skeleton directory, a volume, or a precomputed
volume with the meshes and skeletons its info names converted in the same job; and the
combinations refused."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest

from shardwright.errors import PlanError
from shardwright.options import ConvertOptions
from shardwright.planning import ConversionPlan, ObjectPlan, plan_conversion, with_companions

MESH_INFO = {
    "@type": "neuroglancer_multilod_draco",
    "vertex_quantization_bits": 16,
    "transform": [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0],
    "lod_scale_multiplier": 1.0,
}


def _volume(root: pathlib.Path, names: dict[str, str]) -> str:
    """A precomputed segmentation whose info names `names` (no chunk stored: read as zeros)."""
    info = {
        "@type": "neuroglancer_multiscale_volume", "type": "segmentation",
        "data_type": "uint32", "num_channels": 1,
        "scales": [{"key": "1_1_1", "size": [16, 16, 16], "resolution": [1, 1, 1],
                    "chunk_sizes": [[8, 8, 8]], "encoding": "raw", "voxel_offset": [0, 0, 0]}],
    } | names  # fmt: skip
    root.mkdir(parents=True)
    (root / "info").write_text(json.dumps(info))
    (root / "mesh").mkdir()
    (root / "mesh" / "info").write_text(json.dumps(MESH_INFO))
    for name in ("5", "5.index", "9", "9.index"):
        (root / "mesh" / name).write_bytes(b"x")
    return str(root)


def test_a_directory_of_meshes_gets_an_object_plan(tmp_path: pathlib.Path) -> None:
    volume = _volume(tmp_path / "v", {"mesh": "mesh"})
    plan = plan_conversion(volume + "/mesh", str(tmp_path / "out"), ConvertOptions())
    assert isinstance(plan, ObjectPlan) and plan.object_count == 2
    assert plan.dest == str(tmp_path / "out")
    for asked in ("with_meshes", "generate_skeletons"):
        flag: dict[str, Any] = {asked: True}
        with pytest.raises(PlanError, match="go with a segmentation volume"):
            plan_conversion(volume + "/mesh", str(tmp_path / "o"), ConvertOptions(**flag))


def test_a_volume_converts_the_meshes_its_info_names_beside_it(tmp_path: pathlib.Path) -> None:
    volume = _volume(tmp_path / "v", {"mesh": "mesh"})
    options = ConvertOptions(with_meshes=True, fill_missing=True)
    plan = plan_conversion(volume, str(tmp_path / "out"), options)
    assert isinstance(plan, ConversionPlan)
    (meshes,) = plan.companions
    assert isinstance(meshes, ObjectPlan)
    assert meshes.source == volume + "/mesh" and meshes.dest == str(tmp_path / "out" / "mesh")
    assert meshes.object_count == 2
    assert plan.metadata_documents()[-1][1]["mesh"] == "mesh"


@pytest.mark.parametrize(
    ("names", "asked", "message"),
    [
        ({}, "with_meshes", "with_meshes: .*/info names no mesh directory"),
        ({"mesh": "mesh"}, "with_skeletons", "with_skeletons: .*/info names no skeletons"),
        ({"mesh": "../elsewhere"}, "with_meshes", "names no mesh directory"),
        ({"mesh": "/abs"}, "with_meshes", "names no mesh directory"),
        ({"mesh": "nothing"}, "with_meshes", "nothing has no mesh or skeleton info"),
    ],
)
def test_a_companion_the_info_does_not_name_well_is_refused(
    tmp_path: pathlib.Path, names: dict[str, str], asked: str, message: str
) -> None:
    volume = _volume(tmp_path / "v", names)
    options = ConvertOptions(fill_missing=True, **{asked: True})  # type: ignore[arg-type]
    with pytest.raises(PlanError, match=message):
        plan_conversion(volume, str(tmp_path / "out"), options)


def test_converting_and_generating_the_same_objects_is_refused(tmp_path: pathlib.Path) -> None:
    volume = _volume(tmp_path / "v", {"mesh": "mesh"})
    both = ConvertOptions(with_meshes=True, generate_meshes=True, fill_missing=True)
    with pytest.raises(PlanError, match="both would write the same directory; choose one"):
        plan_conversion(volume, str(tmp_path / "out"), both)


def test_companions_need_a_precomputed_volume_source(tmp_path: pathlib.Path) -> None:
    labels: Any = np.zeros((8, 8, 8), np.uint32)
    options = ConvertOptions(with_meshes=True, resolution=(1, 1, 1))
    with pytest.raises(PlanError, match="need a precomputed volume source"):
        plan_conversion(labels, str(tmp_path / "out"), options)
    plain = plan_conversion(labels, str(tmp_path / "out"), ConvertOptions(resolution=(1, 1, 1)))
    assert isinstance(plain, ConversionPlan) and plain.companions == ()
    npy = tmp_path / "v.npy"
    np.save(npy, labels)
    with pytest.raises(PlanError, match="has no info: only precomputed volumes name meshes"):
        with_companions(plain, str(npy.parent), str(tmp_path / "out"), options)

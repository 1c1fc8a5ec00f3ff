"""Tables converted to precomputed annotations by the job, read back by neuroglancer's own
reader (`AnnotationReader`): every row in by_id, each relationship's rows per segment, the
spatial index whole and in sub-boxes; from CSV, Parquet, pandas and Dask inputs; refusals
before anything is written; a killed job resumed exactly."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from neuroglancer.read_precomputed_annotations import AnnotationReader

from shardwright import api
from shardwright.common.control_keys import MANIFEST_KEY
from shardwright.errors import OptionError, PlanError, SourceError
from tests.support.tables import FORMS, table_as

DRIVER = pathlib.Path(__file__).parents[1] / "support" / "lifecycle_driver.py"
RUN: dict[str, Any] = dict(scheduler="sync", progress=False)
OPTIONS: dict[str, Any] = dict(
    annotation_type="point", resolution=(8, 8, 40), annotation_limit=50,
    relationships=[("pre", "pre"), ("post", "post")],
)  # fmt: skip


def _synapses(rows: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "id": rng.permutation(np.arange(1, rows + 1, dtype=np.uint64) * np.uint64(7919)),
        "x": rng.uniform(0, 300, rows).astype(np.float32),
        "y": rng.uniform(0, 200, rows).astype(np.float32),
        "z": rng.uniform(0, 40, rows).astype(np.float32),
        "pre": rng.integers(1, 30, rows).astype(np.uint64),
        "post": rng.integers(0, 30, rows).astype(np.uint64),
        "score": rng.random(rows).astype(np.float32),
        "kind": rng.integers(0, 3, rows),
    })  # fmt: skip


def _check(dest: pathlib.Path | dict[str, Any], frame: pd.DataFrame, every: int = 1) -> None:
    """Every reader query against the table: `dest` a local folder or a kvstore spec; by_id
    looked up for every `every`-th row (each lookup is a few requests)."""
    reader = AnnotationReader(f"file://{dest}/" if isinstance(dest, pathlib.Path) else dest)
    ids = frame["id"].to_numpy(np.uint64)
    xyz = frame[["x", "y", "z"]].to_numpy(np.float32)
    for n in range(0, len(frame), every):
        got = reader.by_id[int(ids[n])].to_json()
        np.testing.assert_array_equal(got["point"], xyz[n])
        post = int(frame["post"].iloc[n])
        assert got["segments"] == [[int(frame["pre"].iloc[n])], [post] if post else []]
        assert [float(v) for v in got["props"]] == pytest.approx(
            [float(frame["score"].iloc[n]), float(frame["kind"].iloc[n])])  # fmt: skip
    for segment in range(1, 30):
        for name in ("pre", "post"):
            rows = ids[frame[name].to_numpy() == segment]
            index = reader.relationships[name]
            # AnnotationMap.get returns a TensorStore future: look the key up first
            found = sorted(int(a.id) for a in (index[segment] if segment in index else []))  # noqa: SIM401
            assert found == sorted(rows.tolist())
    everything = [int(a.id) for a in reader.get_within_spatial_bounds()]
    assert sorted(everything) == sorted(ids.tolist())  # every row once
    low, high = np.array([50, 20, 5]), np.array([170, 150, 30])
    inside = ((xyz >= low) & (xyz < high)).all(axis=1)
    found = [int(a.id) for a in reader.get_within_spatial_bounds(lower_bound=low,
                                                                   upper_bound=high)]  # fmt: skip
    assert sorted(found) == sorted(ids[inside].tolist())
    info = reader.metadata
    assert info["dimensions"] == {"x": [8e-9, "m"], "y": [8e-9, "m"], "z": [4e-8, "m"]}
    assert len(info["spatial"]) > 1 and info["spatial"][0]["grid_shape"] == [1, 1, 1]


@pytest.mark.parametrize("form", FORMS)
def test_a_table_of_synapses_becomes_annotations_every_reader_query_exact(
    tmp_path: pathlib.Path, form: str
) -> None:
    frame = _synapses(1500, seed=len(form))
    dest = tmp_path / "synapses"
    manifest = api.convert(table_as(form, frame, tmp_path, "synapses"), str(dest), **OPTIONS, **RUN)
    assert manifest.dataset == "annotations"
    _check(dest, frame)
    assert not (dest / ".shardwright" / "exchange").exists() or not any(
        (dest / ".shardwright" / "exchange").iterdir())  # fmt: skip
    assert (dest / MANIFEST_KEY).exists()


def test_bad_tables_and_options_are_refused_before_anything_is_written(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch = tmp_path / "scratch"  # where the plan keeps the table's ids and boxes
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    frame = _synapses(20)
    dest = tmp_path / "out"
    with pytest.raises(PlanError, match="annotation_type|annotation-type"):
        api.convert(frame, str(dest), resolution=(8, 8, 40), **RUN)
    with pytest.raises(PlanError, match="resolution"):
        api.convert(frame, str(dest), annotation_type="point", **RUN)
    np.save(tmp_path / "volume.npy", np.zeros((4, 4, 4), np.uint8))
    with pytest.raises(PlanError, match="describe a table's annotations"):
        api.convert(str(tmp_path / "volume.npy"), str(dest), relationships=[("pre", "pre")],
                    **RUN)  # fmt: skip
    nan = frame.copy()
    nan.loc[4, "x"] = np.nan
    with pytest.raises(SourceError, match="row 5: column 'x' is empty"):
        api.convert(nan, str(dest), **OPTIONS, **RUN)
    repeated = frame.copy()
    repeated.loc[9, "id"] = repeated.loc[3, "id"]
    with pytest.raises(SourceError, match="rows 4 and 10 share the id"):
        api.convert(repeated, str(dest), **OPTIONS, **RUN)
    assert not dest.exists()
    assert not list(scratch.iterdir())


def test_verify_decodes_every_index_and_names_a_damaged_shard(tmp_path: pathlib.Path) -> None:
    frame = _synapses(800)
    dest = tmp_path / "synapses"
    api.convert(frame, str(dest), **OPTIONS, **RUN)
    report = api.verify(str(dest))
    assert report.ok, report.summary()
    assert report.objects_checked == 800 and report.format == "precomputed annotations"
    damaged = sorted((dest / "rel_post").glob("*.shard"))[0]
    data = damaged.read_bytes()
    damaged.write_bytes(data[: len(data) // 2])
    report = api.verify(str(dest))
    assert not report.ok
    assert any(f"rel_post/{damaged.name}" in p for p in report.problems), report.problems


def test_a_job_killed_after_a_few_shards_resumes_to_exact_annotations(
    tmp_path: pathlib.Path,
) -> None:
    """Killed (SIGKILL of its process group) once its four partition tasks and two shard
    tasks have journaled their receipts, then `--resume`: the kept spools and shards are
    proven, the rest written; the result is exact and verifies."""
    frame = _synapses(3000, seed=9)
    table = tmp_path / "synapses.parquet"
    dd.from_pandas(frame, npartitions=4).to_parquet(table, write_index=False)
    dest = tmp_path / "synapses"
    flags = ["--annotation-type", "point", "--resolution", "8,8,40", "--annotation-limit", "50",
             "--relationship", "pre=pre", "--relationship", "post=post"]  # fmt: skip
    marker = tmp_path / "paused"
    proc = subprocess.Popen(
        [sys.executable, str(DRIVER), "shards:6", str(marker), "convert", str(table), str(dest),
         *flags], start_new_session=True,
    )  # fmt: skip
    deadline = time.time() + 120
    while not marker.exists():
        assert proc.poll() is None and time.time() < deadline, "the job never paused"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (dest / MANIFEST_KEY).exists()
    done = subprocess.run(
        [sys.executable, "-m", "shardwright", "convert", str(table), str(dest), *flags,
         "--resume", "--scheduler", "sync", "--quiet"], capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    manifest = json.loads((dest / MANIFEST_KEY).read_text())
    assert manifest["totals"]["resumed_shards"] == 2
    _check(dest, frame)
    assert api.verify(str(dest)).ok


@pytest.mark.parametrize("kind", ["line", "axis_aligned_bounding_box", "ellipsoid"])
def test_lines_boxes_and_ellipsoids_from_a_table(tmp_path: pathlib.Path, kind: str) -> None:
    """The other kinds: every row by id with its geometry, every id in the spatial index
    (an annotation spanning cells is stored in each), a verify that counts them."""
    rng = np.random.default_rng(4)
    rows = 900
    centres = rng.uniform(0, [300, 200, 40], (rows, 3))
    frame = pd.DataFrame(centres, columns=["x", "y", "z"] if kind == "ellipsoid" else
                         ["ax", "ay", "az"])  # fmt: skip
    if kind == "ellipsoid":
        for axis in "xyz":
            frame[f"r{axis}"] = rng.uniform(0.5, 9, rows)
    else:
        for axis, column in zip("xyz", ("ax", "ay", "az"), strict=True):
            frame[f"b{axis}"] = frame[column] + rng.uniform(-20, 20, rows)
    dest = tmp_path / kind
    api.convert(frame, str(dest), annotation_type=kind, resolution=(4, 4, 40),
                annotation_limit=40, **RUN)  # fmt: skip
    reader = AnnotationReader(f"file://{dest}/")
    geometry = frame.to_numpy(np.float32)
    for n in range(0, rows, 7):
        got = reader.by_id[n + 1].to_json()  # ids: row number + 1
        pair = ("center", "radii") if kind == "ellipsoid" else ("pointA", "pointB")
        np.testing.assert_array_equal(got[pair[0]] + got[pair[1]], geometry[n])
    assert {int(a.id) for a in reader.get_within_spatial_bounds()} == set(range(1, rows + 1))
    assert len(reader.metadata["spatial"]) > 1
    report = api.verify(str(dest))
    assert report.ok and report.objects_checked == rows, report.summary()


def test_a_table_in_s3_becomes_annotations_in_gcs(
    tmp_path: pathlib.Path, s3: Any, gcs: Any
) -> None:
    """CSV read from an S3 bucket (moto's server), annotations written to a GCS bucket (the
    emulator), read back by AnnotationReader through TensorStore's gcs driver."""
    import s3fs

    frame = _synapses(700, seed=3)
    s3.make_bucket("tables")
    fs = s3fs.S3FileSystem(**s3.options(), skip_instance_cache=True)
    with fs.open("tables/synapses.csv", "w") as f:
        frame.to_csv(f, index=False)
    gcs.make_bucket("annotations")
    api.convert("s3://tables/synapses.csv", "gs://annotations/synapses", **OPTIONS, **RUN,
                source_storage_options=s3.options(), storage_options=gcs.options())  # fmt: skip
    _check({"driver": "gcs", "bucket": "annotations", "path": "synapses/"}, frame, every=10)
    report = api.verify("gs://annotations/synapses", storage_options=gcs.options())
    assert report.ok, report.summary()


def test_the_plan_reads_the_table_here_not_on_a_default_dask_client(client: Any) -> None:
    """With a Dask client the process's default (as a notebook has), planning a table runs
    its passes on this process's threads: that cluster's workers may not reach the table
    (they lacked the S3 credentials of this process, once), and the job may run elsewhere."""
    from distributed import get_task_stream

    with get_task_stream(client) as stream:
        api.plan(_synapses(300), "memory://planned", **OPTIONS)
    assert stream.data == []


@pytest.mark.parametrize("form", ["csv", "parquet"])
def test_text_and_labelled_number_columns_become_named_properties(
    tmp_path: pathlib.Path, form: str
) -> None:
    """`--enum nt` names a text column's values by its texts (sorted, numbered from 0);
    `--enum kind=0:...` names a column of whole numbers; Neuroglancer's reader shows both."""
    frame = _synapses(400, seed=3)
    transmitters = np.array(["gaba", "acetylcholine", "glutamate", "dopamine"])
    frame["nt"] = transmitters[np.random.default_rng(4).integers(0, 4, len(frame))]
    kinds = "0:excitatory,1:inhibitory,2:modulatory,9:unknown"
    dest = tmp_path / "named"
    api.convert(table_as(form, frame, tmp_path, "named"), str(dest), **OPTIONS, **RUN,
                enums=["nt", f"kind={kinds}"])  # fmt: skip
    reader = AnnotationReader(f"file://{dest}/")
    specs = {p.id: p for p in reader.properties}
    assert list(specs["nt"].enum_labels) == sorted(transmitters.tolist())
    assert list(specs["nt"].enum_values) == [0, 1, 2, 3] and specs["nt"].type == "uint8"
    assert list(specs["kind"].enum_values) == [0, 1, 2, 9]
    assert list(specs["kind"].enum_labels) == ["excitatory", "inhibitory", "modulatory", "unknown"]
    order = [p.id for p in reader.properties]
    for n in range(0, len(frame), 7):
        props = dict(zip(order, reader.by_id[int(frame["id"].iloc[n])].to_json()["props"],
                         strict=True))  # fmt: skip
        assert specs["nt"].enum_labels[int(props["nt"])] == frame["nt"].iloc[n]
        assert int(props["kind"]) == int(frame["kind"].iloc[n])
    source = str(tmp_path / f"named.{form}")
    assert api.verify(str(dest), against=source).ok  # texts compared through their names
    if form == "csv":  # without --enum a text column is no property (and no error)
        plain = tmp_path / "plain"
        api.convert(str(tmp_path / "named.csv"), str(plain), **OPTIONS, **RUN)
        assert [p.id for p in AnnotationReader(f"file://{plain}/").properties] == ["score", "kind"]


def test_enums_that_cannot_be_written_are_refused_in_one_line(tmp_path: pathlib.Path) -> None:
    frame = _synapses(30)
    frame["nt"] = "gaba"
    dest = tmp_path / "out"
    cases = [
        (dict(enums=["kind"]), "column 'kind' holds numbers: name them with --enum kind="),
        (dict(enums=["kind=0:a,1:b"]), "column 'kind' holds 2, which --enum does not name"),
        (dict(enums=["score=0:a"]), "column 'score' holds float32; --enum score=VALUE:NAME"),
        (dict(enums=["nt"], properties=["score"]), "column 'nt' has --enum but is no --property"),
        (dict(enums=["gone"]), "no column 'gone'"),
    ]
    for given, message in cases:
        with pytest.raises(SourceError, match=re.escape(message)):
            api.convert(frame, str(dest), **OPTIONS, **RUN, **given)
    empty = frame.astype({"nt": object})
    empty.loc[11, "nt"] = None
    with pytest.raises(SourceError, match="row 12: column 'nt' is empty"):
        api.convert(empty, str(dest), **OPTIONS, **RUN, enums=["nt"])
    with pytest.raises(OptionError, match="expected VALUE:NAME|expected VALUE:LABEL"):
        api.convert(frame, str(dest), **OPTIONS, **RUN, enums=["kind=0:a,b"])
    assert not dest.exists()
    done = subprocess.run(
        [sys.executable, "-m", "shardwright", "convert", "t.csv", str(dest), "--enum", "kind=x"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2 and "expected VALUE:LABEL" in done.stderr


def test_verify_against_the_table_compares_every_entry_of_every_index(
    tmp_path: pathlib.Path,
) -> None:
    frame = _synapses(600, seed=5)
    dest = tmp_path / "synapses"
    api.convert(frame, str(dest), **OPTIONS, **RUN)
    report = api.verify(str(dest), against=frame)
    assert report.ok, report.summary()
    assert report.chunks_compared > len(frame)  # by_id's entries, the segments' and the cells'
    assert any("600 rows" in note for note in report.notes)
    frame.to_csv(tmp_path / "synapses.csv", index=False)
    command = ["verify", str(dest), "--against", str(tmp_path / "synapses.csv")]
    done = subprocess.run([sys.executable, "-m", "shardwright", *command], capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr

    moved = frame.copy()
    moved.loc[17, "score"] += 1
    problems = api.verify(str(dest), against=moved).problems
    moved_id = int(frame.loc[17, "id"])
    assert any(p.startswith("by_id/") and f"annotation {moved_id} differs" in p
               for p in problems), problems  # fmt: skip
    assert any(p.startswith("spatial") for p in problems)  # its record, in its cell's list
    fewer = frame.drop(index=[3])
    problems = api.verify(str(dest), against=fewer).problems
    assert any(f"annotation {int(frame.loc[3, 'id'])} is not in the table" in p
               for p in problems), problems  # fmt: skip
    problems = api.verify(str(dest), against=frame.drop(columns=["pre"])).problems
    assert problems == [
        "the table: cannot be compared: no column 'pre', which the dataset was made from"
    ]


def test_plan_reports_rows_and_each_indexs_shards_and_bytes_writing_nothing(
    tmp_path: pathlib.Path,
) -> None:
    frame = _synapses(1200)
    frame.to_parquet(tmp_path / "synapses.parquet")
    command = [sys.executable, "-m", "shardwright", "plan", str(tmp_path / "synapses.parquet"),
               str(tmp_path / "out"), "--annotation-type", "point", "--resolution", "8,8,40",
               "--relationship", "pre=pre", "--annotation-limit", "100"]  # fmt: skip
    text = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert "(1,200 rows, 1 partition)" in text and re.search(r"by_id \d+ \(~[\d.]+ KiB\)", text)
    described = json.loads(
        subprocess.run([*command, "--json"], capture_output=True, text=True, check=True).stdout
    )
    assert described["rows"] == 1200 and described["relationships"] == {"pre": "pre"}
    keys = ["by_id", "rel_pre", *(f"spatial{n}" for n in range(described["spatial_levels"]))]
    assert list(described["sharding"]) == keys == list(described["estimated_bytes"])
    record = 4 * 3 + 4 + 1 + 1 + 2  # x, y, z, score (float32), post, kind (uint8), padding
    assert described["estimated_bytes"]["by_id"] == 1200 * (record + 12)
    assert not (tmp_path / "out").exists()


def test_progress_of_a_table_counts_partitions_apart_from_shards(tmp_path: pathlib.Path) -> None:
    """A table's job runs its partitions before its shards: the progress line counts each
    apart (it said `tasks 3 / 3`), its shards as the closing line counts them, so the two
    never disagree about how many shards there are."""
    table = tmp_path / "points.csv"
    table.write_text("x,y,z,id\n1,2,3,1\n4,5,6,2\n")
    done = subprocess.run(
        [sys.executable, "-m", "shardwright", "convert", str(table), str(tmp_path / "out"),
         "--annotation-type", "point", "--resolution", "4,4,40", "--scheduler", "sync"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    said = r"^partitions 1 / 1, shards 2 / 2 estimated \(100\.0 %\), .* tasks/s$"
    assert re.search(said, done.stderr, re.M), done.stderr
    assert "wrote 2 shards, 3 chunks" in done.stdout

"""The command line's options are ConvertOptions' and RunOptions' fields: every field has its
flag, and what a flag parses to is exactly what the Python API gets for the same option."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from shardwright.cli.parser import build_parser, options_from, run_options_from
from shardwright.common.flags import command_line_fields, default_of
from shardwright.lifecycle.run_options import RunOptions
from shardwright.options import ConvertOptions
from shardwright.version import __version__

# Fields deliberately offered to the Python API alone (none today).
API_ONLY: tuple[str, ...] = ()

# For every field: words on the command line, and the value the API is given for them.
SKELETONS = "--generate-skeletons"  # a tracing option's samples come with it
SAMPLES: dict[str, tuple[list[str], Any]] = {
    "format": (["--format", "zarr3"], "zarr3"),
    "layer_type": (["--layer-type", "segmentation"], "segmentation"),
    "encoding": (["--encoding", "compressed_segmentation"], "compressed_segmentation"),
    "compression": (["--compression", "zstd"], "zstd"),
    "compression_level": (["--compression-level", "7"], 7),
    "chunk_size": (["--chunk-size", "32,16,8"], (32, 16, 8)),
    "resolution": (["--resolution", "4,4.5,40"], (4.0, 4.5, 40.0)),
    "voxel_offset": (["--voxel-offset=-3,0,5"], (-3, 0, 5)),
    "scale_key": (["--scale-key", "8_8_40"], "8_8_40"),
    "compressed_segmentation_block_size": (["--block-size", "4,4,2"], (4, 4, 2)),
    "jpeg_quality": (["--jpeg-quality", "90"], 90),
    "target_shard_bytes": (["--target-shard-bytes", "64K"], 64 * 1024),
    "memory_budget": (["--memory-budget", "1.5GiB"], 3 * 1024**3 // 2),
    "min_shards": (["--min-shards", "4"], 4),
    "preshift_bits": (["--preshift-bits", "2"], 2),
    "minishard_bits": (["--minishard-bits", "3"], 3),
    "shard_bits": (["--shard-bits", "1"], 1),
    "hash": (["--hash", "murmurhash3_x86_128"], "murmurhash3_x86_128"),
    "shard_shape": (["--shard-shape", "2,2,1"], (2, 2, 1)),
    "index_location": (["--index-location", "start"], "start"),
    "zarr_layout": (["--zarr-layout", "array"], "array"),
    "mips": (["--mips", "auto"], "auto"),
    "factor": (["--factor", "2,2,1"], (2, 2, 1)),
    "downsample": (["--downsample", "max"], "max"),
    "with_meshes": (["--with-meshes"], True),
    "with_skeletons": (["--with-skeletons"], True),
    "legacy_to_multires": (["--legacy-to-multires"], True),
    "generate_meshes": (["--generate-meshes"], True),
    "generate_skeletons": (["--generate-skeletons"], True),
    "mesh_max_error": (["--mesh-max-error", "12.5"], 12.5),
    "mesh_lods": (["--mesh-lods", "3"], 3),
    "mesh_level": (["--mesh-level", "1"], 1),
    "mesh_block": (["--mesh-block", "64,64,32"], (64, 64, 32)),
    "dust_threshold": (["--dust-threshold", "500"], 500),
    "teasar_scale": ([SKELETONS, "--teasar-scale", "6"], 6.0),
    "teasar_const": ([SKELETONS, "--teasar-const", "50"], 50.0),
    "soma_detection_threshold": ([SKELETONS, "--soma-detection-threshold", "900"], 900.0),
    "soma_acceptance_threshold": ([SKELETONS, "--soma-acceptance-threshold", "4000"], 4000.0),
    "soma_invalidation_scale": ([SKELETONS, "--soma-invalidation-scale", "2"], 2.0),
    "soma_invalidation_const": ([SKELETONS, "--soma-invalidation-const", "200"], 200.0),
    "tick_threshold": ([SKELETONS, "--tick-threshold", "3500"], 3500.0),
    "object_ids": (["--object-ids", "12,345"], (12, 345)),
    "annotation_type": (["--annotation-type", "line"], "line"),
    "relationships": (
        ["--relationship", "pre=pre_id", "--relationship", "post=post_id"],
        (("pre", "pre_id"), ("post", "post_id")),
    ),
    "properties": (["--property", "score", "--property", "kind"], ("score", "kind")),
    "enums": (["--enum", "nt", "--enum", "kind=0:a,1:b"], (("nt", ""), ("kind", "0:a,1:b"))),
    "annotation_limit": (["--annotation-limit", "500"], 500),
    "segment_properties": (["--segment-properties", "cells.csv"], "cells.csv"),
    "engine": (["--gpu"], "gpu"),
    "source_axes": (["--source-axes", "czyx"], "czyx"),
    "source_scale": (["--source-scale", "4_4_40"], "4_4_40"),
    "fill_missing": (["--fill-missing"], True),
    "timeout": (["--timeout", "90"], 90.0),
    "storage_options": (["--storage-options", '{"anon": true}'], {"anon": True}),
    "source_storage_options": (
        ["--source-storage-options", '{"endpoint_url": "http://s3"}'],
        {"endpoint_url": "http://s3"},
    ),
}


def _parse(command: str, *words: str) -> ConvertOptions:
    return options_from(build_parser().parse_args([command, "in.npy", "out", *words]))


# What a flag's sample is given with (a skeleton's tracing option is refused without them).
NEEDS: dict[str, dict[str, Any]] = {
    name: {"generate_skeletons": True}
    for name in ("teasar_scale", "teasar_const", "soma_detection_threshold",
                 "soma_acceptance_threshold", "soma_invalidation_scale",
                 "soma_invalidation_const", "tick_threshold")
}  # fmt: skip


def test_every_option_has_a_flag() -> None:
    fields = {f.name for f in dataclasses.fields(ConvertOptions)}
    offered = [f.name for f, _ in command_line_fields(ConvertOptions)]
    assert len(offered) == len(set(offered))
    assert set(offered) == fields - set(API_ONLY)
    assert set(SAMPLES) == set(offered), "each flag needs a sample here"


@pytest.mark.parametrize("command", ["plan", "convert"])
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_flag_gives_the_api_value(command: str, name: str) -> None:
    words, value = SAMPLES[name]
    field = next(f for f, _ in command_line_fields(ConvertOptions) if f.name == name)
    assert value != default_of(field)
    got = _parse(command, *words)
    assert got == ConvertOptions(**{name: value, **NEEDS.get(name, {})})
    assert repr(getattr(got, name)) == repr(value)  # the same types too (4, not 4.0)


@pytest.mark.parametrize("command", ["plan", "convert"])
def test_defaults_are_the_apis(command: str) -> None:
    assert _parse(command) == ConvertOptions()


def test_every_flag_at_once() -> None:
    words = [word for flag_words, _ in SAMPLES.values() for word in flag_words]
    assert _parse("convert", *words) == ConvertOptions(
        **{name: value for name, (_, value) in SAMPLES.items()}
    )


def test_a_default_dict_is_not_shared_between_parses() -> None:
    first, second = _parse("plan"), _parse("plan")
    assert first.storage_options == {} and first.storage_options is not second.storage_options


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--chunk-size", "1,2"], "argument --chunk-size: expected three values x,y,z, got '1,2'"),
        (["--resolution", "a,1,2"], "argument --resolution: bad x,y,z value 'a,1,2': could not "),
        (["--memory-budget", "lots"], "argument --memory-budget: bad size 'lots' (e.g. 512M, 2G)"),
        (["--mips", "-1"], "argument --mips: expected a number of levels or 'auto', got '-1'"),
        (["--format", "n5"], "argument --format: invalid choice: 'n5' (choose from "),
        (["--jpeg-quality", "high"], "argument --jpeg-quality: invalid int value: 'high'"),
        (["--storage-options", "{"], "argument --storage-options: not valid JSON"),
        (["--storage-options", "[1, 2]"], "--storage-options: expected a JSON object such as"),
        (
            ["--source-storage-options", '"x"'],
            "expected a JSON object such as '{\"anon\": true}', got str",
        ),
        (["--minishard-bits", "x"], "argument --minishard-bits: invalid int value: 'x'"),
    ],
)
def test_bad_values_are_refused_by_the_parser(
    words: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        _parse("plan", *words)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


RUN_SAMPLES: dict[str, tuple[list[str], Any]] = {
    "resume": (["--resume"], True),
    "overwrite": (["--overwrite"], True),
    "scheduler": (["--scheduler", "tcp://10.0.0.1:8786"], "tcp://10.0.0.1:8786"),
    "workers": (["--workers", "3"], 3),
    "wait_for_workers": (["--wait-for-workers", "30"], 30.0),
    "lease_timeout": (["--lease-timeout", "60"], 60.0),
    "lease_wait": (["--lease-wait", "300"], 300.0),
    "break_lease": (["--break-lease"], True),
    "progress": (["--quiet"], False),
    "dashboard": (["--dashboard", "on"], True),
}


def test_run_options_are_convert_flags_giving_the_api_values() -> None:
    offered = {f.name for f, _ in command_line_fields(RunOptions)}
    assert offered == {f.name for f in dataclasses.fields(RunOptions)} - {"client"}
    assert set(RUN_SAMPLES) == offered, "each flag needs a sample here"
    parse = build_parser().parse_args
    assert run_options_from(parse(["convert", "in.npy", "out"])) == RunOptions()
    for name, (words, value) in RUN_SAMPLES.items():
        got = run_options_from(parse(["convert", "in.npy", "out", *words]))
        assert got == RunOptions(**{name: value}) and repr(getattr(got, name)) == repr(value)
    with pytest.raises(SystemExit):  # run options are convert's, not plan's
        parse(["plan", "in.npy", "out", "--resume"])


def test_contradicting_run_options_are_one_error(capsys: pytest.CaptureFixture[str]) -> None:
    from shardwright import cli

    assert cli.main(["convert", "in.npy", "out", "--resume", "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "shardwright convert: error: --resume and --overwrite contradict each other; pass one"
    )


@pytest.mark.parametrize("scheduler", ["nonsense", "tcp://", "host:port", "8786"])
def test_a_scheduler_that_names_nothing_is_one_error_before_the_plan(
    scheduler: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A --scheduler that is no scheduler's address and no local one (it reached distributed,
    which raised a ValueError shown as our bug, after the plan was printed), from the flag,
    $DASK_SCHEDULER_ADDRESS or the API."""
    from shardwright import api
    from shardwright.errors import OptionError

    source = tmp_path / "v.npy"
    np.save(source, np.zeros((8, 8, 8), np.uint8))
    why = (
        f"'{scheduler}' is neither a scheduler's address (tcp://HOST:PORT or HOST:PORT) nor one "
        "of auto, local, processes, threads, sync (where none is named, $DASK_SCHEDULER_ADDRESS "
        "is read)"
    )
    done = subprocess.run(
        [sys.executable, "-m", "shardwright", "convert", str(source), str(tmp_path / "out"),
         "--scheduler", scheduler], capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [f"shardwright convert: error: --scheduler {why}"]
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", scheduler)
    done = subprocess.run(
        [sys.executable, "-m", "shardwright", "convert", str(source), str(tmp_path / "out")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2 and why in done.stderr and "Traceback" not in done.stderr
    with pytest.raises(OptionError, match="is neither a scheduler's address"):
        api.convert(str(source), str(tmp_path / "out"), scheduler=scheduler)
    assert not (tmp_path / "out").exists()
    for good in ("tcp://10.0.0.1:8786", "10.0.0.1:8786", "inproc://10.0.0.1/7/1", "threads"):
        assert RunOptions(scheduler=good).scheduler == good


@pytest.mark.parametrize("command", ["view", "serve"])
@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_a_port_out_of_range_is_refused(
    command: str, port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A port no socket can have was taken as 0 (any free one) by the server, silently."""
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([command, "somewhere", f"--port={port}"])
    assert exit_.value.code == 2
    assert f"argument --port: expected a port, 0 (any free one) to 65535, got '{port}'" in (
        capsys.readouterr().err
    )


def test_help_lists_every_flag_in_field_order(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["convert", "--help"])
    out = capsys.readouterr().out
    # A flag's entry starts its line (help text that names a flag is indented deeper).
    places = [out.index(f"\n  {flag.name}") for _, flag in command_line_fields(ConvertOptions)]
    assert places == sorted(places)


def _cli(*words: str) -> subprocess.CompletedProcess[str]:
    """The installed console script, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "shardwright.cli", *words], capture_output=True, text=True
    )


def test_version_names_the_package() -> None:
    run = _cli("--version")
    assert run.returncode == 0 and run.stdout.strip() == f"shardwright {__version__}"


@pytest.mark.parametrize("command", ["plan", "convert", "verify", "serve", "view", "demo"])
def test_every_option_of_every_command_shows_its_default(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every option that has a default says it in --help (switches and options whose absence
    means "no" aside)."""
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for action in sub.choices[command]._actions:
        if not action.option_strings or action.default in (None, False, {}, argparse.SUPPRESS):
            continue
        if isinstance(action, argparse._StoreConstAction | argparse._HelpAction):
            continue
        name = action.option_strings[0]
        described = text[text.index(f" {name} ") :]
        described = described[: described.index(" --", 3) if " --" in described[3:] else None]
        assert "default" in described, f"{command} {name}: {described!r}"
    assert "(default: 1G)" in text if command in ("plan", "convert") else True


@pytest.mark.parametrize(
    ("words", "suggestion"),
    [
        (["convert", "a", "b", "--compresion", "gzip"], "did you mean --compression?"),
        (["convert", "a", "b", "--chunksize=64,64,64"], "did you mean --chunk-size?"),
        (["conver", "a", "b"], "did you mean convert?"),
        (["plan", "a", "b", "--format", "zar3"], "did you mean zarr3?"),
        (["verify", "d", "--fulll"], "did you mean --full?"),
    ],
)
def test_a_typo_gets_a_suggestion_and_a_short_usage(words: list[str], suggestion: str) -> None:
    run = _cli(*words)
    assert run.returncode == 2 and run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 3, run.stderr  # usage, the error, where the full list is
    assert lines[0].startswith("usage: shardwright")
    assert suggestion in lines[1]
    assert "--help' lists every option" in lines[2]


def test_a_missing_argument_gets_a_short_usage() -> None:
    run = _cli("convert")
    assert run.returncode == 2
    assert run.stderr.splitlines() == [
        "usage: shardwright convert [options] SOURCE DEST",
        "shardwright convert: error: the following arguments are required: source",
        "('shardwright convert --help' lists every option)",
    ]
    for words in (["--chunk-size", "16,16,8"], ["--dry-run"]):  # DEST alone: an addition
        run = _cli("convert", "in.npy", *words)
        assert run.returncode == 2
        assert run.stderr.strip() == (
            "shardwright convert: error: convert takes SOURCE and DEST; DEST alone only with "
            "what it adds: --generate-meshes / --generate-skeletons, --segment-properties, --mips"
        )


def test_nonsense_gets_no_suggestion() -> None:
    run = _cli("convert", "a", "b", "--zzzzqqq")
    assert run.returncode == 2 and "did you mean" not in run.stderr
    assert "unrecognized arguments: --zzzzqqq" in run.stderr

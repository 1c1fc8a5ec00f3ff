"""A full disk, for real: a small tmpfs mounted in a mount namespace of the test's own (root
and `unshare` needed, as in CI). A local write reserves its bytes first, so it fails before
its first byte; a conversion onto the full disk ends in one line naming the disk's problem
and the object, leaves no torn object or temporary, and, once there is room, `--resume`
finishes it with the shards already written kept."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from shardwright.stores.base import TMP_MARKER
from tests.support import volumes

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"),
    reason="a tmpfs of the test's own needs root and unshare",
)


def _on_small_disk(folder: pathlib.Path, kib: int, script: str) -> dict:
    """Run a Python `script` with `folder` a tmpfs of `kib` KiB seen by it alone (gone when it
    ends); its last line of output is JSON, returned."""
    folder.mkdir(exist_ok=True)
    program = folder.parent / "on_small_disk.py"
    program.write_text(textwrap.dedent(script))
    mount = f'mount -t tmpfs -o size={kib}k tmpfs "{folder}" && exec "$@"'
    run = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", mount, "sh",
         sys.executable, str(program), str(folder)],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_a_write_fails_before_its_first_byte_when_the_disk_cannot_hold_it(
    tmp_path: pathlib.Path,
) -> None:
    seen = _on_small_disk(
        tmp_path / "disk",
        256,
        """
        import json, os, sys
        from shardwright.stores import open_store

        store = open_store(sys.argv[1])
        asked = []

        def pieces():
            asked.append(1)
            yield b"x" * (1 << 20)

        try:
            store.write_object("big.shard", pieces, size=1 << 20)
            error = None
        except OSError as exc:
            error = {"errno": exc.errno, "text": str(exc)}
        store.write_object("small", b"fits", size=4)
        print(json.dumps({"error": error, "asked": len(asked),
                          "left": sorted(os.listdir(sys.argv[1]))}))
        """,
    )
    assert seen["error"]["errno"] == 28 and "big.shard" in seen["error"]["text"]
    assert seen["asked"] == 0  # the pieces were never asked for: not a byte written
    assert seen["left"] == ["small"]  # no temporary left, and the disk still takes writes


def test_converting_onto_a_full_disk_then_resuming_once_there_is_room(
    tmp_path: pathlib.Path,
) -> None:
    zyx = volumes.noise((64, 128, 128), seed=5)  # 16 shards of 64 KiB, raw
    source = tmp_path / "v.npy"
    np.save(source, zyx)
    disk = tmp_path / "disk"
    seen = _on_small_disk(
        disk,
        512,
        f"""
        import json, os, subprocess, sys
        import numpy as np, tensorstore as ts

        disk = sys.argv[1]
        dest = os.path.join(disk, "out")
        convert = [sys.executable, "-m", "shardwright.cli", "convert", {str(source)!r}, dest,
                   "--chunk-size", "32,32,32", "--resolution", "4,4,40", "--quiet"]
        full = subprocess.run(convert, capture_output=True, text=True)
        files = [os.path.relpath(os.path.join(d, f), dest)
                 for d, _, names in os.walk(dest) for f in names]
        shards = [f for f in files if f.endswith(".shard")]
        receipts = [f for f in files if f.endswith(".shard.json")]
        whole = []  # a shard with a receipt is the size the receipt says
        for receipt_key in receipts:
            receipt = json.load(open(os.path.join(dest, receipt_key)))
            key = receipt_key[: -len(".json")].split(os.sep, 3)[3]  # .shardwright/journal/JOB/
            whole.append(os.path.getsize(os.path.join(dest, key)) == receipt["size"])
        subprocess.run(["mount", "-o", "remount,size=8m", disk], check=True)
        resumed = subprocess.run([*convert, "--resume"], capture_output=True, text=True)
        spec = {{"driver": "neuroglancer_precomputed", "kvstore": "file://" + dest + "/"}}
        got = np.asarray(ts.open(spec).result().read().result())[..., 0].transpose(2, 1, 0)
        want = np.load({str(source)!r})
        print(json.dumps({{
            "rc": full.returncode, "stderr": full.stderr, "shards": len(shards),
            "receipts": len(receipts), "whole": all(whole),
            "temporaries": [f for f in files if "{TMP_MARKER}" in f],
            "resumed_rc": resumed.returncode, "resumed_out": resumed.stdout,
            "equal": bool(np.array_equal(got, want)),
        }}))
        """,
    )
    lines = seen["stderr"].strip().splitlines()
    assert seen["rc"] == 2, seen["stderr"]
    assert len(lines) == 1 and "No space left on device" in lines[0] and ".shard" in lines[0]
    assert "Traceback" not in seen["stderr"]
    assert 0 < seen["shards"] < 16  # some shards fitted, not all
    # Each receipt proves a whole shard; a shard whose receipt found no room is not trusted:
    # the resumed job writes it again.
    assert 0 < seen["receipts"] <= seen["shards"] and seen["whole"]
    assert seen["temporaries"] == []
    assert seen["resumed_rc"] == 0, seen["resumed_out"]
    assert f"({seen['receipts']} kept from an earlier run)" in seen["resumed_out"]
    assert seen["equal"]
    assert not any(disk.iterdir())  # the tmpfs went with its namespace: nothing left here


def test_a_small_write_onto_a_full_disk_names_its_object(tmp_path: pathlib.Path) -> None:
    """A write that reserves nothing (a receipt, a job record: no size given) fails in the
    write itself, whose error names no file: the store names the object."""
    seen = _on_small_disk(
        tmp_path / "disk",
        64,
        """
        import json, os, sys
        from shardwright.stores import open_store

        with open(os.path.join(sys.argv[1], "filler"), "wb", buffering=0) as out:
            try:
                while True:
                    out.write(b"x" * 4096)
            except OSError:
                pass
        store = open_store(sys.argv[1])
        try:
            store.write_text(".shardwright/journal/job/0.shard.json", "x" * 65536)
            error = None
        except OSError as exc:
            error = {"errno": exc.errno, "text": str(exc)}
        left = [f for _, _, names in os.walk(sys.argv[1]) for f in names]
        print(json.dumps({"error": error, "left": sorted(left)}))
        """,
    )
    assert seen["error"]["errno"] == 28, seen
    assert "0.shard.json" in seen["error"]["text"], seen
    assert seen["left"] == ["filler"]  # no temporary left behind

"""What a destination holds (`lifecycle.destination.inspect`) while another job is creating
its lease beside this one: the other job's temporary under `.shardwright/` is looked at again
until its lease is in place, and only what stays there alone reads as foreign."""

from __future__ import annotations

import pathlib
import threading

from shardwright.lifecycle.destination import inspect
from shardwright.stores import open_store
from shardwright.stores.local import CREATING_MARKER


def _lease_being_created(dest: pathlib.Path) -> pathlib.Path:
    control = dest / ".shardwright"
    control.mkdir(parents=True)
    creating = control / f"{CREATING_MARKER}0123abcd"
    creating.write_bytes(b"{}")
    return creating


def test_a_lease_linked_a_while_later_reads_as_another_jobs(tmp_path: pathlib.Path) -> None:
    """A loaded machine took longer than one look between the temporary and the lease: the
    destination read as foreign, and the job refused it with the wrong message."""
    dest = tmp_path / "out"
    creating = _lease_being_created(dest)

    def link_the_lease() -> None:
        (creating.parent / "lease-000001.json").write_bytes(creating.read_bytes())
        creating.unlink()

    later = threading.Timer(0.4, link_the_lease)
    later.start()
    try:
        holding = inspect(open_store(str(dest)))
    finally:
        later.join()
    assert holding.kind == "ours" and not holding.dataset


def test_a_temporary_left_alone_still_reads_as_foreign(tmp_path: pathlib.Path) -> None:
    """No lease ever comes: after its looks the destination is not taken as ours."""
    dest = tmp_path / "out"
    creating = _lease_being_created(dest)
    holding = inspect(open_store(str(dest)))
    assert holding.kind == "foreign"
    assert holding.example == str(creating.relative_to(dest))


def test_a_job_begun_between_the_two_looks_reads_as_that_jobs(tmp_path: pathlib.Path) -> None:
    """Another job takes its lease and writes `info` after our marks were looked at and
    before the rest was: the destination read as foreign (`info` comes first in a folder's
    walk), and the job was refused with the wrong message (seen once in CI)."""
    dest = tmp_path / "out"
    dest.mkdir()
    store = open_store(str(dest))
    look_at_the_rest = store.first_entry

    def another_job_begins_first() -> str | None:
        (dest / ".shardwright").mkdir()
        (dest / ".shardwright" / "lease-000001.json").write_bytes(b"{}")
        (dest / "info").write_bytes(b"{}")
        return look_at_the_rest()

    store.first_entry = another_job_begins_first  # type: ignore[method-assign]
    holding = inspect(store)
    assert holding.kind == "ours" and not holding.dataset


def test_an_object_with_no_marks_after_it_reads_as_foreign(tmp_path: pathlib.Path) -> None:
    """The second look at our marks finds none: the user's file is foreign, named."""
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "info").write_bytes(b"{}")
    holding = inspect(open_store(str(dest)))
    assert holding.kind == "foreign" and holding.example == "info"

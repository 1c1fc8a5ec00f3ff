"""Every backend against a dict, stateful: hypothesis runs random sequences of writes (whole or
in pieces), exclusive creates, deletions, reads, ranged and batched reads and listings on a
store and on a plain dict, and after every step the store holds exactly what the dict does
(after zarr-python's stateful store tests). Keys nest folders (`d0/d1/k2`) but never use a
folder's name as an object's, which no local disk could hold."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from shardwright.stores import open_store
from tests.support.store_backends import BACKENDS, open_backend

FOLDERS = ["d0", "d1", "d0/d1"]
KEYS = ["k0", "k1", *(f"{folder}/{leaf}" for folder in FOLDERS for leaf in ("k0", "k1", "k2"))]
keys = st.sampled_from(KEYS)
data = st.binary(max_size=48)
# The GCS emulator's multipart parser drops a body's last byte when it is a CR (gcsfs's
# `pipe_file`, how an exclusive create uploads); real GCS keeps it, and no lease ends so.
created = data.map(lambda value: value + b"}" if value.endswith(b"\r") else value)
# Many short runs where a backend is in this process; a few on the servers, whose every
# step costs requests.
BUDGETS = {
    "local": settings(max_examples=50, stateful_step_count=25),
    "memory": settings(max_examples=50, stateful_step_count=25),
    "s3": settings(max_examples=6, stateful_step_count=15),
    "gcs": settings(max_examples=6, stateful_step_count=15),
}


class StoreMachine(RuleBasedStateMachine):
    open_root: Callable[[], tuple[str, dict[str, Any]]]

    def __init__(self) -> None:
        super().__init__()
        url, options = type(self).open_root()
        self.store = open_store(url, options)
        self.model: dict[str, bytes] = {}

    @rule(key=keys, value=data)
    def write(self, key: str, value: bytes) -> None:
        self.store.write_object(key, value)
        self.model[key] = value

    @rule(key=keys, pieces=st.lists(st.binary(max_size=16), max_size=4))
    def write_pieces(self, key: str, pieces: list[bytes]) -> None:
        self.store.write_object(key, lambda: iter(pieces))
        self.model[key] = b"".join(pieces)

    @rule(key=keys, value=created)
    def create_exclusive(self, key: str, value: bytes) -> None:
        if key in self.model:
            with pytest.raises(FileExistsError):
                self.store.create_exclusive(key, value)
        else:
            self.store.create_exclusive(key, value)
            self.model[key] = value

    @rule(key=keys)
    def delete(self, key: str) -> None:
        self.store.delete(key)
        self.model.pop(key, None)

    @rule(key=keys)
    def read(self, key: str) -> None:
        if key in self.model:
            assert self.store.read(key) == self.model[key]
        else:
            with pytest.raises(FileNotFoundError):
                self.store.read(key)
        assert self.store.exists(key) == (key in self.model)
        assert self.store.size(key) == (len(self.model[key]) if key in self.model else None)

    @rule(key=keys, start=st.integers(0, 50), length=st.integers(0, 50))
    def read_range(self, key: str, start: int, length: int) -> None:
        end = start + length
        if key in self.model:
            want = self.model[key][start:end] if end > start else b""
            assert self.store.read_range(key, start, end) == want
        elif end > start:
            with pytest.raises(FileNotFoundError):
                self.store.read_range(key, start, end)

    @rule(chosen=st.lists(keys, max_size=5))
    def read_many(self, chosen: list[str]) -> None:
        assert self.store.read_many(chosen) == {k: self.model.get(k) for k in chosen}

    @rule(folder=st.sampled_from(FOLDERS))
    def list_folder(self, folder: str) -> None:
        inside = {k: v for k, v in self.model.items() if k.startswith(folder + "/")}
        assert self.store.sizes_below(folder) == {k: len(v) for k, v in inside.items()}
        direct = {k[len(folder) + 1 :]: len(v) for k, v in inside.items()}
        assert self.store.list_sizes(folder) == {k: n for k, n in direct.items() if "/" not in k}

    @invariant()
    def holds_what_the_model_holds(self) -> None:
        assert self.store.sizes_below() == {k: len(v) for k, v in self.model.items()}
        assert self.store.is_empty() == (not self.model)

    def teardown(self) -> None:
        for key in self.model:  # memory:// outlives the test
            self.store.delete(key)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_store_holds_what_a_dict_would(
    backend: str, request: pytest.FixtureRequest, tmp_path: pathlib.Path
) -> None:
    machine = type(
        f"{backend.capitalize()}StoreMachine",
        (StoreMachine,),
        {"open_root": staticmethod(lambda: open_backend(backend, request, tmp_path))},
    )
    run_state_machine_as_test(machine, settings=BUDGETS[backend])

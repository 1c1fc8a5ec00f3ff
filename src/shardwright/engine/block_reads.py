"""A block group task's reads of its blocks: first the faces its blocks hand to the groups
before it, read and written before any block is made (so a group running beside its neighbour
finds them however far along it is); then each block's own group's voxels from the source
(one fetch per chunk for the group: sources/chunk_reuse.py keeps the faces' chunks, as stored,
for their blocks) and the layer where it meets the next groups from their blocks' faces
(generation/faces.py). Faces lie under the job's `.shardwright/exchange/faces/<job>/` beside
the block spools (removed with them): a job never takes another job's faces, and a face that is
not there yet, or does not prove itself, is read from the source instead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from shardwright.common.boxes import Box, within
from shardwright.generation import faces
from shardwright.generation.faces import Part
from shardwright.generation.grid import Triple
from shardwright.lifecycle.journal import EXCHANGE
from shardwright.lifecycle.runs import run_of
from shardwright.planning.generated import GeneratedPlan
from shardwright.stores import Store


class GroupReads:
    """The reads of one group's blocks (`positions`, in the order they are read)."""

    def __init__(self, plan: GeneratedPlan, positions: Sequence[Triple], store: Store) -> None:
        self.source, self.grid = plan.source, plan.generation.grid
        self.positions = list(positions)
        self.limit: Triple = plan.source.shape_xyz
        self.store = store
        run = run_of(store)
        self.prefix = None if run is None else f"{EXCHANGE}faces/{run.job}/"
        self.uses: Counter[str] = Counter()
        self.handing: list[tuple[Triple, int, Box]] = []  # (block, axis, box) of its faces
        if self.prefix is not None:
            for position in positions:
                for part in faces.parts(self.grid, position, self.limit):
                    self.uses[self._key(part.owner, part.axis)] += 1
                for axis, box in faces.published(self.grid, position, self.limit):
                    self.handing.append((position, axis, box))
        self.taken: dict[str, np.ndarray] = {}  # faces read that later blocks take again
        self.handed = 0  # parts taken from a face
        self.fetched = 0  # parts read from the source (their face was not there)

    def source_boxes(self) -> list[Box]:
        """The boxes the group reads from the source, in order: its faces, then its blocks'
        (what the group's chunk reuse counts)."""
        box = faces.own_box if self.prefix is not None else faces.read_box
        return [face for _, _, face in self.handing] + [box(self.grid, p, self.limit)
                                                        for p in self.positions]  # fmt: skip

    def hand_over(self) -> None:
        """Read and write every face the group's blocks hand over."""
        for position, axis, box in self.handing:
            data = faces.encode(self.source.read(*box), box)
            self.store.write_object(self._key(position, axis), data)

    def read(self, position: Triple) -> np.ndarray:
        """A block's read box, base voxels [x, y, z, c]."""
        box = faces.read_box(self.grid, position, self.limit)
        if self.prefix is None:
            return self.source.read(*box)
        own = self.source.read(*faces.own_box(self.grid, position, self.limit))
        parts = faces.parts(self.grid, position, self.limit)
        if not parts:
            return own
        shape = [b - a for a, b in zip(*box, strict=True)]
        block = np.empty((*shape, own.shape[3]), dtype=own.dtype, order="F")
        block[within(((0, 0, 0), own.shape[:3]), (0, 0, 0))] = own
        for part in parts:
            block[within(part.box, box[0])] = self._part(part, own.dtype, own.shape[3])
        return block

    def _part(self, part: Part, dtype: np.dtype, channels: int) -> np.ndarray:
        """A part's voxels from its owner's face, or from the source where that is not there."""
        key = self._key(part.owner, part.axis)
        face_box = faces.face_box(self.grid, part.owner, part.axis, self.limit)
        face = self.taken.get(key)
        if face is None:
            try:
                data = self.store.read(key, small=True)
            except FileNotFoundError:
                data = None
            face = None if data is None else faces.decode(data, face_box, dtype, channels)
        self.uses[key] -= 1
        if face is None:
            self.fetched += 1
            return self.source.read(*part.box)
        if self.uses[key] > 0:
            self.taken[key] = face
        else:
            self.taken.pop(key, None)
        self.handed += 1
        return face[within(part.box, face_box[0])]

    def _key(self, position: Triple, axis: int) -> str:
        return f"{self.prefix}{faces.face_name(position, axis)}"

"""What `verify` found: every problem, naming its object, and how it compared."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_SAMPLE = 64
JPEG_MEAN_ABS_TOLERANCE = 8.0
SHOWN_PROBLEMS = 50


@dataclass
class VerifyReport:
    dest: str
    format: str
    shards_checked: int = 0
    chunks_compared: int = 0
    chunks_decoded: int = 0  # decoded with no source to compare them with (no manifest)
    objects_checked: int = 0  # meshes and skeletons decoded and checked
    nonzero_compared: bool = False  # some compared source voxel was not 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # how the comparison was made

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        state = "OK" if self.ok else f"FAILED ({len(self.problems)} problem(s))"
        lines = [
            f"verify {self.dest} ({self.format}): {state}",
            f"  shards checked   {self.shards_checked:,}",
        ]
        if self.chunks_compared or not self.objects_checked:
            lines.append(f"  chunks compared  {self.chunks_compared:,}")
        if self.chunks_decoded:
            lines.append(f"  chunks decoded   {self.chunks_decoded:,}")
        if self.objects_checked:  # meshes and skeletons: objects, not chunks
            lines.append(f"  objects checked  {self.objects_checked:,}")
        lines += [f"  note: {n}" for n in self.notes]
        lines += [f"  problem: {p}" for p in self.problems[:SHOWN_PROBLEMS]]
        if len(self.problems) > SHOWN_PROBLEMS:
            lines.append(f"  ... and {len(self.problems) - SHOWN_PROBLEMS} more")
        return "\n".join(lines)

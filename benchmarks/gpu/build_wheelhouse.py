"""Build a wheelhouse for installing shardwright's GPU extra on an air-gapped GPU machine.

Run on a connected machine; copy the folder next to the repository on the GPU machine and run
`benchmarks/gpu/run_offline.sh WHEELHOUSE OUTDIR` there. The dependency closure of
`shardwright[gpu-cuXX]` is resolved for manylinux x86_64 and the target CPython without
installing anything; what the target already has (`target-has.txt` or `--have`) and what is not
needed on a GPU path (`--skip`, default imagecodecs) are left out, so that the folder stays
under the GPU machines' transfer limit (`--limit-mib`). The project itself travels as an sdist
(its C extensions build on the target), with the setuptools wheel its build needs offline.

    .venv/bin/python benchmarks/gpu/build_wheelhouse.py [--cuda 13] [--python 3.12] [--out .whl]
"""

from __future__ import annotations

import argparse
import datetime
import fnmatch
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
DEFAULT_HAVE = Path(__file__).resolve().parent / "target-has.txt"
DEFAULT_SKIP = ("imagecodecs",)  # png encoding only: not a GPU path, and a 28 MB wheel
EXTRAS = {"12": "gpu-cu12", "13": "gpu-cu13"}
# Newest first: pip takes the first tag a wheel matches; the GPU images run glibc >= 2.28.
MANYLINUX = (
    "manylinux_2_28",
    "manylinux_2_27",
    "manylinux_2_24",
    "manylinux_2_17",
    "manylinux2014",
    "manylinux_2_12",
    "manylinux2010",
    "manylinux_2_5",
    "manylinux1",
)
WRITTEN = ("*.whl", "*.tar.gz", "wheelhouse.json")  # what a rebuild may delete in --out
MIB = 1024 * 1024


@dataclass(frozen=True)
class Pick:
    """One distribution of the resolved closure and what the wheelhouse does with it."""

    name: str
    version: str
    status: str  # "ship" (downloaded), "have" (assumed on the target) or "skip" (left out)
    note: str = ""  # why a distribution the target has is shipped all the same


def normalise(name: str) -> str:
    """PEP 503 name, so `PyYAML`, `pyyaml` and `ml_dtypes`/`ml-dtypes` compare equal."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_have(text: str) -> dict[str, str | None]:
    """Names (or glob patterns such as `nvidia-cublas*`) from a have-file, with the version
    where a line pins one.

    Accepts plain names and `pip freeze` output (`name==1.2`, `name @ file:///...`), so that
    `pip freeze > have.txt` on the target is a valid list; `#` comments and option lines
    (`-e ...`, `--index-url ...`) are ignored.
    """
    have: dict[str, str | None] = {}
    for raw in text.splitlines():
        line = re.sub(r"(^|\s)#.*", "", raw).strip()
        match = re.match(r"([A-Za-z0-9*?][A-Za-z0-9._*?-]*)\s*(?:==\s*([^\s;,]+))?", line)
        if match and not line.startswith("-"):
            have[normalise(match.group(1))] = match.group(2)
    return have


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether `name` is one of `patterns` (PEP 503 names, `*`/`?` globs allowed)."""
    key = normalise(name)
    return any(fnmatch.fnmatchcase(key, normalise(p)) for p in patterns)


def requirements_on(report: Mapping[str, Any], python: str) -> dict[str, list[Requirement]]:
    """What the closure asks of each distribution, markers evaluated for the target."""
    env = {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "platform_machine": "x86_64",
        "os_name": "posix",
    }
    lines = [(item, Requirement(line)) for item in report["install"]
             for line in item["metadata"].get("requires_dist") or []]  # fmt: skip
    extras: dict[str, set[str]] = {}
    for item in report["install"]:
        extras.setdefault(normalise(item["metadata"]["name"]), set()).update(
            item.get("requested_extras") or []
        )
    for _, req in lines:
        extras.setdefault(normalise(req.name), set()).update(req.extras)
    wanted: dict[str, list[Requirement]] = {}
    for item, req in lines:
        active = [*extras.get(normalise(item["metadata"]["name"]), ()), ""]
        if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in active):
            wanted.setdefault(normalise(req.name), []).append(req)
    return wanted


def choose(
    report: Mapping[str, Any],
    have: Mapping[str, str | None],
    skip: Iterable[str],
    project: str,
    python: str = "3.12",
) -> list[Pick]:
    """Every distribution of a `pip install --report` except the project, marked ship/have/skip.

    Skip wins over have (a skipped package is not checked for on the target). A have-entry
    pinned to a version that the closure's requirements refuse is shipped all the same: in
    run_offline.sh's venv the shipped copy comes before the machine's.
    """
    skip = list(skip)
    wanted = requirements_on(report, python)
    picks = []
    for item in report["install"]:
        name, version = normalise(item["metadata"]["name"]), item["metadata"]["version"]
        if name == normalise(project):
            continue
        if matches(name, skip):
            picks.append(Pick(name, version, "skip"))
            continue
        pinned = [v for pattern, v in have.items() if v and fnmatch.fnmatchcase(name, pattern)]
        refused = [str(r.specifier) for r in wanted.get(name, []) for v in pinned
                   if not r.specifier.contains(v, prereleases=True)]  # fmt: skip
        if refused:
            note = f"the target's {pinned[0]} does not satisfy {', '.join(sorted(set(refused)))}"
            picks.append(Pick(name, version, "ship", note))
        else:
            picks.append(Pick(name, version, "have" if matches(name, have) else "ship"))
    return sorted(picks, key=lambda p: p.name)


def size_problem(sizes: Mapping[str, int], limit_mib: float) -> str | None:
    """None if the files fit in `limit_mib`, else one message naming the five largest."""
    total = sum(sizes.values())
    if total <= limit_mib * MIB:
        return None
    largest = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    listing = ", ".join(f"{name} {size / MIB:.1f} MiB" for name, size in largest)
    return (
        f"wheelhouse is {total / MIB:.1f} MiB, over the {limit_mib:g} MiB limit; largest: "
        f"{listing}. Leave out what the target has (--have FILE) or does not need (--skip NAME),"
        " or raise --limit-mib."
    )


def platform_flags(python: str) -> list[str]:
    """pip options selecting wheels for manylinux x86_64 CPython `python` (e.g. "3.12")."""
    flags = ["--python-version", python, "--implementation", "cp", "--only-binary=:all:"]
    for tag in MANYLINUX:
        flags += ["--platform", f"{tag}_x86_64"]
    return flags


def dist_of(filename: str) -> tuple[str, str]:
    """(normalised name, version) of a wheel or sdist file name."""
    stem = filename.removesuffix(".whl").removesuffix(".tar.gz")
    parts = stem.split("-") if filename.endswith(".whl") else stem.rsplit("-", 1)
    return normalise(parts[0]), parts[1]


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def _resolve(extra: str, python: str, work: Path) -> dict[str, Any]:
    """The closure of REPO[extra] for the target, as pip's installation report (no install)."""
    report = work / "report.json"
    _pip(
        "install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
        *platform_flags(python), "--target", str(work / "target"), f"{REPO}[{extra}]",
    )  # fmt: skip
    result: dict[str, Any] = json.loads(report.read_text())
    return result


def _build_sdist(out: Path, work: Path) -> Path:
    """The project's sdist, built from a copy of the tree with the setuptools wheel in `out`.

    No network and no writes into the repository (egg-info lands in the copy); the wheel's
    setuptools, not the venv's, so that the build-system requirement holds.
    """
    tree = work / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, tree / name)
    junk = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info", "*.pyc")
    shutil.copytree(REPO / "src", tree / "src", ignore=junk)
    backend = work / "backend"
    for wheel in out.glob("setuptools-*.whl"):
        zipfile.ZipFile(wheel).extractall(backend)
    code = (
        f"import sys; sys.path.insert(0, {str(backend)!r}); "
        f"from setuptools import build_meta; print(build_meta.build_sdist({str(out)!r}))"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=tree, check=True, capture_output=True, text=True
    )
    return out / done.stdout.strip().splitlines()[-1]


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(MIB), b""):
            digest.update(block)
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuda", choices=sorted(EXTRAS), default="13", help="CUDA major")
    parser.add_argument("--python", default="3.12", help="target CPython, e.g. 3.12")
    parser.add_argument("--out", type=Path, default=REPO / ".whl", help="wheelhouse folder")
    parser.add_argument(
        "--have", type=Path, default=DEFAULT_HAVE,
        help="distributions the target has: names, globs or `pip freeze` output",
    )  # fmt: skip
    parser.add_argument(
        "--skip", action="append", metavar="NAME",
        help="leave out (repeatable; replaces the default imagecodecs; --skip= for none)",
    )  # fmt: skip
    parser.add_argument("--limit-mib", type=float, default=64.0, help="size limit of the folder")
    args = parser.parse_args(argv)

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = pyproject["project"]["name"]
    build_requires = pyproject["build-system"]["requires"]
    extra = EXTRAS[args.cuda]
    have = parse_have(args.have.read_text())
    skip = [normalise(s) for s in (DEFAULT_SKIP if args.skip is None else args.skip) if s]
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for pattern in WRITTEN:
        for old in out.glob(pattern):
            old.unlink()

    with tempfile.TemporaryDirectory(prefix="wheelhouse-") as tmp:
        work = Path(tmp)
        print(f"resolving {project}[{extra}] for CPython {args.python} manylinux x86_64 ...")
        picks = choose(_resolve(extra, args.python, work), have, skip, project, args.python)
        ship = [p for p in picks if p.status == "ship"]
        flags = ["--no-deps", *platform_flags(args.python), "--dest", str(out), "--quiet"]
        if ship:
            _pip("download", *flags, *(f"{p.name}=={p.version}" for p in ship))
        _pip("download", *flags, *build_requires)  # for pip's build isolation, offline
        sdist = _build_sdist(out, work)

    shipped = {(p.name, p.version) for p in ship}
    files: list[dict[str, Any]] = []
    for path in sorted(out.glob("*.whl")) + [sdist]:
        name, version = dist_of(path.name)
        role = "dependency" if (name, version) in shipped else "build"
        role = "project" if path == sdist else role
        files.append(
            {"name": name, "version": version, "file": path.name, "role": role,
             "bytes": path.stat().st_size, "sha256": _sha256(path)}
        )  # fmt: skip
    missing = shipped - {(f["name"], f["version"]) for f in files}
    if missing:
        raise SystemExit(f"pip download did not produce: {sorted(missing)}")
    manifest = {
        "project": project,
        "extra": extra,
        "cuda": args.cuda,
        "python": args.python,
        "platform": "manylinux_2_28_x86_64 and older manylinux tags",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "files": files,
        "have": [{"name": p.name, "version": p.version} for p in picks if p.status == "have"],
        "have_list": str(args.have),
        "skipped": [{"name": p.name, "version": p.version} for p in picks if p.status == "skip"],
        "shipped_although_present": [
            {"name": p.name, "version": p.version, "why": p.note} for p in picks if p.note
        ],
    }
    (out / "wheelhouse.json").write_text(json.dumps(manifest, indent=2) + "\n")

    sizes = {f["file"]: f["bytes"] for f in files}
    total = sum(sizes.values()) / MIB
    print(f"{out}: {len(files)} files, {total:.1f} MiB, {project}[{extra}], CPython {args.python}")
    print(f"  assumed on the target: {len(manifest['have'])}; skipped: {', '.join(skip) or 'none'}")
    for p in picks:
        if p.note:
            print(f"  shipped although the target has it: {p.name} {p.version} ({p.note})")
    problem = size_problem(sizes, args.limit_mib)
    if problem:
        print(problem, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

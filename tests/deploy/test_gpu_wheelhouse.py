"""The offline GPU wheelhouse builder's pure logic (benchmarks/gpu/build_wheelhouse.py): what it
leaves out decides whether the air-gapped install succeeds, so it is checked without network."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType
from typing import Any

import pytest

BUILDER = pathlib.Path(__file__).parents[2] / "benchmarks" / "gpu" / "build_wheelhouse.py"


def _load() -> ModuleType:
    """benchmarks/ is not a package: load the script by path."""
    spec = importlib.util.spec_from_file_location("build_wheelhouse", BUILDER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while building
    spec.loader.exec_module(module)
    return module


bw = _load()


@pytest.mark.parametrize(
    ("name", "want"),
    [("PyYAML", "pyyaml"), ("ml_dtypes", "ml-dtypes"), ("zope.interface", "zope-interface"),
     ("Foo__Bar-.baz", "foo-bar-baz"), ("nvidia-nvcomp-cu13", "nvidia-nvcomp-cu13")],
)  # fmt: skip
def test_names_are_normalised_as_pep_503_says(name: str, want: str) -> None:
    assert bw.normalise(name) == want


def test_have_files_take_names_globs_and_pip_freeze_lines() -> None:
    text = """
    # what the GPU image has
    numpy
    PyYAML==6.0.3
    ml_dtypes==0.6.0  # a trailing comment
    cupy-cuda13x @ file:///wheels/cupy_cuda13x-14.2.0-cp312-cp312-manylinux2014_x86_64.whl#x=1
    -e git+https://example.org/repo.git#egg=editable
    --index-url https://example.org/simple
    nvidia-cublas*

    Typing_Extensions >= 4
    """
    assert bw.parse_have(text) == {
        "numpy": None,
        "pyyaml": "6.0.3",
        "ml-dtypes": "0.6.0",
        "cupy-cuda13x": None,
        "nvidia-cublas*": None,
        "typing-extensions": None,
    }


def test_the_default_have_list_reads_and_keeps_nvcomp_out() -> None:
    have = bw.parse_have(bw.DEFAULT_HAVE.read_text())
    assert {"numpy", "cupy-cuda13x", "tensorstore", "pytest", "hypothesis"} <= set(have)
    assert bw.matches("nvidia-cuda-runtime-cu12", have)
    assert not bw.matches("nvidia-nvcomp-cu13", have)
    assert not bw.matches("nvidia-libnvcomp-cu13", have)


def _report(*dists: tuple[str, str], requires: tuple[str, ...] = ()) -> dict[str, Any]:
    """A pip installation report: the first distribution requires `requires`."""
    items: list[dict[str, Any]] = [
        {"metadata": {"name": n, "version": v, "requires_dist": []}} for n, v in dists
    ]
    items[0]["metadata"]["requires_dist"] = list(requires)
    return {"install": items}


def test_selection_ships_only_what_the_target_lacks() -> None:
    report = _report(
        ("shardwright", "0.1.0"),
        ("numpy", "2.5.5"),
        ("PyYAML", "6.0.3"),
        ("imagecodecs", "2026.10.10"),
        ("nvidia-nvcomp-cu13", "6.0.0.12"),
        ("nvidia_libnvcomp_cu13", "6.0.0.12"),
        ("nvidia-cuda-runtime", "13.0.96"),
        ("dask", "2026.7.1"),
    )
    have = {"numpy": None, "pyyaml": None, "nvidia-cuda-*": None}
    picks = bw.choose(report, have, ["imagecodecs"], "shardwright")
    status = {p.name: p.status for p in picks}
    assert status == {
        "dask": "ship",
        "imagecodecs": "skip",
        "numpy": "have",
        "nvidia-cuda-runtime": "have",
        "nvidia-libnvcomp-cu13": "ship",
        "nvidia-nvcomp-cu13": "ship",
        "pyyaml": "have",
    }
    assert {p.version for p in picks if p.name == "dask"} == {"2026.7.1"}


def test_skip_wins_over_have() -> None:
    picks = bw.choose(_report(("numpy", "2.5.5")), {"numpy": None}, ["NumPy"], "shardwright")
    assert [(p.name, p.status) for p in picks] == [("numpy", "skip")]


def test_a_target_version_the_closure_refuses_is_shipped_all_the_same() -> None:
    report = _report(
        ("rapids-dask-dependency", "26.10.0"),
        ("dask", "2026.7.1"),
        ("numpy", "2.5.5"),
        ("click", "8.5.1"),
        requires=(
            "dask<2026.7.2,>=2026.7.1",
            "numpy>=1.26",
            'click>=9; python_version < "3.12"',  # not for the 3.12 target
            'numpy>=3; extra == "future"',  # an extra nobody asked for
        ),
    )
    have = {"dask": "2026.8.0", "numpy": "2.4.6", "click": "8.1.0"}
    picks = {p.name: p for p in bw.choose(report, have, [], "shardwright", "3.12")}
    assert picks["dask"].status == "ship" and "2026.8.0" in picks["dask"].note
    assert picks["numpy"].status == "have" and picks["click"].status == "have"
    assert picks["rapids-dask-dependency"].status == "ship" and not picks["numpy"].note


def test_the_size_check_names_the_largest_files() -> None:
    mib = bw.MIB
    sizes = {f"small{i}.whl": mib for i in range(10)}
    sizes |= {"nvcomp.whl": 30 * mib, "bokeh.whl": 6 * mib, "zstd.whl": 5 * mib}
    sizes |= {"dask.whl": 2 * mib, "cuda_core.whl": 7 * mib}
    assert bw.size_problem(sizes, 64) is None
    message = bw.size_problem(sizes | {"big.whl": 20 * mib}, 64)
    assert message is not None
    assert "80.0 MiB, over the 64 MiB limit" in message
    named = ["nvcomp.whl", "big.whl", "cuda_core.whl", "bokeh.whl", "zstd.whl"]
    assert [message.index(n) for n in named] == sorted(message.index(n) for n in named)
    assert "dask.whl" not in message and "small" not in message
    assert "--have" in message and "--skip" in message


def test_file_names_give_name_and_version() -> None:
    assert bw.dist_of("nvidia_nvcomp_cu13-6.0.0.12-py3-none-manylinux_2_28_x86_64.whl") == (
        "nvidia-nvcomp-cu13", "6.0.0.12"
    )  # fmt: skip
    assert bw.dist_of("shardwright-0.1.0.tar.gz") == ("shardwright", "0.1.0")


def test_platform_flags_name_the_python_and_every_manylinux_tag() -> None:
    flags = bw.platform_flags("3.12")
    assert flags[:4] == ["--python-version", "3.12", "--implementation", "cp"]
    assert "--only-binary=:all:" in flags
    platforms = [flags[i + 1] for i, f in enumerate(flags) if f == "--platform"]
    assert platforms[0] == "manylinux_2_28_x86_64" and "manylinux2014_x86_64" in platforms

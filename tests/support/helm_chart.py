"""The project's Helm chart as tests meet it: rendered through the `helm` binary when one is on
PATH, else the helm-python-sdk package (Helm's Go SDK in a shared library), and what its pods'
containers run, as a kubelet expands it."""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "shardwright"
RELEASE, NAMESPACE = "sw", "conversions"
FULLNAME = f"{RELEASE}-shardwright"


class Helm:
    """`helm lint --strict` and `helm template` through a helm binary or Helm's Go SDK."""

    def __init__(self) -> None:
        self.binary = shutil.which("helm")
        if self.binary is None:
            import helm_python

            self.sdk = helm_python

    def lint(self, values: dict[str, Any]) -> list[str]:
        """Warnings and errors (what --strict fails on)."""
        if self.binary:
            with _values_file(values) as path:
                run = subprocess.run(
                    [self.binary, "lint", "--strict", str(CHART), "-f", path],
                    capture_output=True,
                    text=True,
                )
            return [] if run.returncode == 0 else [run.stdout + run.stderr]
        report = self.sdk.lint(str(CHART), values, strict=True)
        return [m["error"] for m in report["messages"] if m["severity"] >= 2] + report["errors"]

    def template(self, values: dict[str, Any]) -> list[dict[str, Any]]:
        """The rendered manifests; raises ValueError when Helm refuses the values."""
        if self.binary:
            with _values_file(values) as path:
                run = subprocess.run(
                    [self.binary, "template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", path],
                    capture_output=True,
                    text=True,
                )
            if run.returncode:
                raise ValueError(run.stderr)
            texts = [run.stdout]
        else:
            with self.sdk.Chart.load(str(CHART)) as chart:
                try:
                    rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE)
                except self.sdk.HelmError as exc:
                    raise ValueError(str(exc)) from exc
            texts = [text for name, text in sorted(rendered.items()) if name.endswith(".yaml")]
        return [doc for text in texts for doc in yaml.safe_load_all(text) if doc]


class _values_file:
    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values

    def __enter__(self) -> str:
        import tempfile

        fd, self.path = tempfile.mkstemp(suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            yaml.safe_dump(self.values, f)
        return self.path

    def __exit__(self, *exc: object) -> None:
        os.unlink(self.path)


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def pod_specs(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if doc["kind"] in ("Deployment", "Job"):
        yield doc["spec"]["template"]["spec"]
    elif doc["kind"] == "DaskJob":
        yield doc["spec"]["job"]["spec"]
        yield doc["spec"]["cluster"]["spec"]["worker"]["spec"]
        yield doc["spec"]["cluster"]["spec"]["scheduler"]["spec"]


def containers(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for spec in pod_specs(doc):
        yield from spec.get("initContainers", [])
        yield from spec["containers"]


def local_command(words: list[str]) -> list[str]:
    """A container's command with the image's entry points (`dask`, `python`, `shardwright`)
    as this environment's."""
    programs = {"dask": [sys.executable, "-m", "dask"], "python": [sys.executable],
                "shardwright": [sys.executable, "-m", "shardwright.cli"]}  # fmt: skip
    return [*programs[words[0]], *words[1:]]


def expand(words: list[str], env: dict[str, str]) -> list[str]:
    """Kubernetes' $(VAR) expansion of command and args."""
    return [
        re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), w) for w in words
    ]


def env_of(container: dict[str, Any], **extra: str) -> dict[str, str]:
    env = {e["name"]: e.get("value", f"<{e['name']}>") for e in container.get("env", [])}
    env.update(extra)
    return env

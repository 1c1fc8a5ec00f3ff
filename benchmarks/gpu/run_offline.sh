#!/usr/bin/env bash
# Install shardwright from a wheelhouse on an air-gapped GPU machine, then run the GPU tests
# and the GPU benchmark: one command, no network.
#
#   bash benchmarks/gpu/run_offline.sh WHEELHOUSE OUTDIR [bench_gpu.py options, e.g. --quick]
#
# Run from the repository root. WHEELHOUSE comes from benchmarks/gpu/build_wheelhouse.py on a
# connected machine. The machine needs the driver, `python3` (or PYTHON=...) of the wheelhouse's
# CPython version with what the wheelhouse assumed present (benchmarks/gpu/target-has.txt or the
# build's --have list: CuPy, NumPy, TensorStore, pytest, hypothesis, ...), and a C compiler for
# the optional extensions. OUTDIR stays flat and small: install.log, environment.json,
# tests-gpu.xml/.log, tests.xml/.log, bench.log and the benchmark's JSON.
set -euo pipefail

die() { echo "run_offline.sh: $*" >&2; exit 1; }
[[ $# -ge 2 ]] || die "usage: run_offline.sh WHEELHOUSE OUTDIR [bench_gpu.py options]"
[[ -f $1/wheelhouse.json ]] || die "$1/wheelhouse.json not found: build it with build_wheelhouse.py"
[[ -f pyproject.toml && -d tests ]] || die "run from the repository root"
WHEELHOUSE=$(cd "$1" && pwd)
mkdir -p "$2"
OUTDIR=$(cd "$2" && pwd)
shift 2
PYTHON=${PYTHON:-python3}
"$PYTHON" -c '' 2>/dev/null || die "cannot run $PYTHON: set PYTHON to the machine's python"
export PYTHONUNBUFFERED=1
REBUILD="list what this machine has (\`$PYTHON -m pip freeze > have.txt\`) and rebuild on a \
connected machine with build_wheelhouse.py --have have.txt"

# pip sees the wheelhouse alone: this machine's pip configuration and PIP_* settings are ignored.
for var in $(compgen -e); do if [[ $var == PIP_* ]]; then unset "$var"; fi; done
export PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

# The manifest: extra and CPython version; its files checked against their sha256.
manifest=$("$PYTHON" - "$WHEELHOUSE" <<'EOF'
import hashlib, json, pathlib, platform, shlex, sys
home = pathlib.Path(sys.argv[1])
info = json.loads((home / "wheelhouse.json").read_text())
for f in info["files"]:
    path = home / f["file"]
    if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != f["sha256"]:
        sys.exit(f"run_offline.sh: {path} is missing or damaged: copy the wheelhouse again")
deps = " ".join(
    shlex.quote(str(home / f["file"])) for f in info["files"] if f["role"] == "dependency"
)
print(f"EXTRA={shlex.quote(info['extra'])} WH_PYTHON={shlex.quote(info['python'])}")
print(f"HERE_PYTHON={shlex.quote('.'.join(platform.python_version_tuple()[:2]))} DEPS=({deps})")
EOF
)
eval "$manifest"
[[ $WH_PYTHON == "$HERE_PYTHON" ]] || die "the wheelhouse is for CPython $WH_PYTHON but \
$PYTHON is $HERE_PYTHON: rebuild with build_wheelhouse.py --python $HERE_PYTHON, or set PYTHON"

# A throw-away venv that sees the machine's packages (NumPy, CuPy, TensorStore...). Where
# $PYTHON is itself a venv (as on many container images), --system-site-packages
# alone would show only its base interpreter's packages, and no venv shows the user's
# site-packages (pip install --user): a .pth file adds both, after the venv's own. Without
# ensurepip the venv has no pip of its own and runs the machine's.
VENV=$(mktemp -d /tmp/shardwright-gpu.XXXXXX)
[[ -n ${KEEP_VENV:-} ]] || trap 'rm -rf "$VENV"' EXIT
"$PYTHON" -m venv --system-site-packages "$VENV" >/dev/null 2>&1 \
  || "$PYTHON" -m venv --system-site-packages --without-pip --clear "$VENV"
PY=$VENV/bin/python
"$PYTHON" -c 'import os, site, sys
paths = site.getsitepackages() if sys.prefix != sys.base_prefix else []
user = site.getusersitepackages() if site.ENABLE_USER_SITE else ""
print("\n".join(paths + ([user] if os.path.isdir(user) else [])))' \
  >"$("$PY" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/_machine_python.pth"
"$PY" -m pip --version >/dev/null 2>&1 || die "$PYTHON has neither ensurepip nor pip"

# Install: the wheelhouse's files as they are (their closure was resolved when it was built),
# then the project from this working tree (the tests are its tests; setuptools for the build
# comes from the wheelhouse), then a check that every requirement is met.
install_ok=1
pip_install=("$PY" -m pip install --no-index --no-cache-dir --find-links "$WHEELHOUSE" --no-deps
  --ignore-installed --no-warn-script-location)
if ! {
  echo "venv $VENV from $PYTHON"
  if ((${#DEPS[@]})); then "${pip_install[@]}" "${DEPS[@]}"; fi && "${pip_install[@]}" .
} 2>&1 | tee "$OUTDIR/install.log"
then
  install_ok=0
  missing=$(sed -n 's/.*No matching distribution found for \([^ ]*\).*/\1/p' "$OUTDIR/install.log")
  if [[ -n $missing ]]; then
    echo "run_offline.sh: the wheelhouse lacks ${missing//$'\n'/, }: $REBUILD" \
      | tee -a "$OUTDIR/install.log" >&2
  else
    echo "run_offline.sh: pip failed, see $OUTDIR/install.log" >&2
  fi
fi
check=("$PY" - "$WHEELHOUSE/wheelhouse.json" "$REBUILD")
if ((install_ok)) && ! "${check[@]}" <<'EOF' 2>&1 | tee -a "$OUTDIR/install.log"
# Every requirement of shardwright[extra], transitively, plus what the tests import, must be
# installed at a version that satisfies it; what the build skipped is only reported. The
# machine's own packages (the have-list) are checked, not what they need in turn.
import importlib.metadata as md, json, re, sys
try:
    from packaging.requirements import Requirement
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
info, rebuild = json.load(open(sys.argv[1])), sys.argv[2]
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
skipped = {s["name"] for s in info["skipped"]}
assumed = {h["name"] for h in info["have"]}
todo = [(None, Requirement(f"{info['project']}[{info['extra']}]")),
        (None, Requirement("pytest")), (None, Requirement("hypothesis"))]
seen, problems = set(), []
while todo:
    parent, req = todo.pop()
    name, by = norm(req.name), f" (needed by {parent})" if parent else ""
    if name in skipped:
        print(f"left out by the wheelhouse build: {name}{by}")
        continue
    try:
        version = md.version(req.name)
    except md.PackageNotFoundError:
        where = "this machine lacks" if name in assumed else "the wheelhouse lacks"
        problems.append(f"{where} {req}{by}")
        continue
    if not req.specifier.contains(version, prereleases=True):
        problems.append(f"{name} {version} here does not satisfy {req}{by}")
    if name in assumed or (name, frozenset(req.extras)) in seen:
        continue
    seen.add((name, frozenset(req.extras)))
    for line in md.requires(req.name) or []:
        sub = Requirement(line)
        if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in req.extras or [""]):
            todo.append((name, sub))
for problem in problems:
    print(f"run_offline.sh: {problem}: {rebuild}", file=sys.stderr)
print(f"requirements of {info['project']}[{info['extra']}]: {len(seen)} checked, "
      f"{len(problems)} not met")
sys.exit(1 if problems else 0)
EOF
then
  install_ok=0
fi

# What ran where: the machine, its GPU and the versions that matter.
"$PY" - "$OUTDIR/environment.json" "$WHEELHOUSE/wheelhouse.json" <<'EOF' || true
import datetime, importlib, importlib.metadata as md, importlib.util, json, platform, socket
import subprocess, sys
def module_version(name):
    try:
        return importlib.import_module(name).__version__
    except Exception as e:  # absent or broken: say which
        return f"unavailable: {type(e).__name__}: {e}"[:300]
def built(name):
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False
def dist_version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "absent"
try:
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                          "--format=csv,noheader"], capture_output=True, text=True, timeout=60)
    gpus = smi.stdout.strip().splitlines() or [smi.stderr.strip()]
except (OSError, subprocess.SubprocessError) as e:
    gpus = [f"nvidia-smi unavailable: {e}"]
try:
    import cupy
    runtime = cupy.cuda.runtime.runtimeGetVersion()
    cuda = f"{runtime // 1000}.{runtime % 1000 // 10}"
except Exception as e:
    cuda = f"unavailable: {type(e).__name__}: {e}"[:300]
wheelhouse = json.load(open(sys.argv[2]))
record = {
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "hostname": socket.gethostname(),
    "gpus": gpus,
    "python": f"{platform.python_version()} ({sys.executable})",
    "cuda_runtime": cuda,
    "versions": {
        "cupy": module_version("cupy"),
        "numpy": module_version("numpy"),
        "tensorstore": dist_version("tensorstore"),
        "dask": dist_version("dask"),
        "distributed": dist_version("distributed"),
        "dask-cuda": dist_version("dask-cuda"),
        "nvidia-nvcomp": module_version("nvidia.nvcomp"),
        "shardwright": dist_version("shardwright"),
    },
    "c_extensions": {  # optional: built on this machine if it has a compiler
        name: built(name) for name in ("shardwright.common._reduce", "shardwright.codecs._cseg")
    },
    "wheelhouse": {k: wheelhouse[k] for k in ("extra", "cuda", "python", "date", "skipped")},
}
open(sys.argv[1], "w").write(json.dumps(record, indent=2) + "\n")
print(f"environment: {gpus[0]}; CUDA runtime {cuda}; Python {platform.python_version()}")
EOF

# The tests that need only shardwright's runtime dependencies and pytest/hypothesis, chosen by
# reading each test module's module-level imports: left out are those importing test-only
# packages (cloudvolume: codecs/test_codecs, e2e/test_meshes_skeletons, e2e/test_pipeline,
# formats/precomputed/test_precomputed_volume; the moto/GCS emulators through
# object_store_servers: e2e/test_object_stores, lifecycle/test_lifecycle_object_stores; jsonschema/
# kubernetes_validate: deploy/test_deploy; nbformat/nbclient: frontends/test_workflows).
# e2e/test_pyramids imports CloudVolume only in the helper that compares with it (those tests
# skip here; its GPU tests run).
shopt -s nullglob
TESTS=(tests/engine/test_gpu_engine.py tests/engine/test_batched*.py
  tests/engine/test_aggregate.py tests/engine/test_scatter.py tests/codecs/test_cseg_batch.py
  tests/codecs/test_gzip_frame.py tests/formats/precomputed/test_precomputed_sharding.py
  tests/formats/zarr3/test_zarr3.py tests/formats/zarr3/test_zarr3_chunks.py
  tests/sources/test_sources.py
  tests/e2e/test_pipeline_safety.py tests/lifecycle/test_lifecycle.py
  tests/e2e/test_lost_workers.py tests/verification/test_verify_trust.py
  tests/viewing/test_serve_and_demo.py tests/e2e/test_pyramids.py
  tests/e2e/test_output_regression.py tests/package)
shopt -u nullglob

# Three steps, most telling first, each bounded (a device lease is short): the tests that need
# the GPU, the benchmark, then the rest of the list (on 8 cores where pytest-xdist is there).
# GPU_TESTS_TIMEOUT, BENCH_TIMEOUT and TESTS_TIMEOUT (seconds) bound them; TESTS_TIMEOUT=0
# leaves the rest out.
summary() {  # "N passed, ..." of a junit file
  "$PY" - "$1" <<'EOF' 2>/dev/null || echo "no $(basename "$1")"
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else list(root)
n = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
print(f"{n['tests'] - n['failures'] - n['errors'] - n['skipped']} passed, {n['failures']} failed, "
      f"{n['errors']} errors, {n['skipped']} skipped")
EOF
}
run_pytest() {  # NAME TIMEOUT PYTEST-ARGS...: NAME.xml and NAME.log; the log's end, then a summary
  local name=$1 limit=$2 rc
  shift 2
  set +e
  timeout --kill-after 10 "$limit" "$PY" -m pytest -p no:cacheprovider -ra --tb=short \
    -o timeout=300 --junitxml "$OUTDIR/$name.xml" "$@" >"$OUTDIR/$name.log" 2>&1
  rc=$?
  set -e
  tail -n 60 "$OUTDIR/$name.log"
  local stopped=""
  ((rc == 124)) && stopped=", stopped at $limit s"
  echo "$(summary "$OUTDIR/$name.xml") (pytest exit $rc$stopped; $name.log, $name.xml)"
  return $rc
}
gpu_tests="not run: the install failed" tests="not run: the install failed"
gpu_rc=1 tests_rc=1
((${TESTS_TIMEOUT:-1800} > 0)) || { tests="left out (TESTS_TIMEOUT=0)"; tests_rc=0; }
if ((install_ok)); then
  gpu_tests=$(run_pytest tests-gpu "${GPU_TESTS_TIMEOUT:-900}" -m gpu "${TESTS[@]}") && gpu_rc=0
  echo "$gpu_tests"
  gpu_tests=$(tail -n 1 <<<"$gpu_tests")
fi

bench="not run: the install failed"
if ((install_ok)) && [[ -f benchmarks/bench_gpu.py ]]; then
  set +e
  timeout --kill-after 10 "${BENCH_TIMEOUT:-1800}" \
    "$PY" benchmarks/bench_gpu.py --xp cupy --out "$OUTDIR" "$@" 2>&1 | tee "$OUTDIR/bench.log"
  bench_rc=${PIPESTATUS[0]}
  set -e
  bench="$( ((bench_rc)) && echo "FAILED, exit $bench_rc" || echo ok) (bench.log)"
elif ((install_ok)); then
  bench="not run: there is no benchmarks/bench_gpu.py"
  echo "note: $bench" | tee "$OUTDIR/bench.log"
fi

if ((install_ok)) && ((${TESTS_TIMEOUT:-1800} > 0)); then  # 0: leave them out
  parallel=()
  "$PY" -c 'import xdist' 2>/dev/null && parallel=(-n 8)
  tests=$(run_pytest tests "${TESTS_TIMEOUT:-1800}" "${parallel[@]}" -m "not gpu" "${TESTS[@]}") \
    && tests_rc=0
  echo "$tests"
  tests=$(tail -n 1 <<<"$tests")
fi

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
echo "== shardwright GPU verification on $(hostname) (${gpu:-no GPU seen}), $EXTRA"
echo "install: $( ((install_ok)) && echo ok || echo FAILED) (install.log)"
echo "GPU tests: $gpu_tests"
echo "other tests: $tests"
echo "benchmark: $bench"
echo "results in $OUTDIR: $(cd "$OUTDIR" && echo *)"
((install_ok)) && ((gpu_rc == 0)) && ((tests_rc == 0))

#!/usr/bin/env bash
# The prepared device check of the DSpark draft-sampler harness (docs/gpu.md).
#
# usage: scripts/gpu_check.sh [--allow-cpu] OUTDIR
#
# On a bare GPU machine with no network and this repository's files only, runs
#   env      versions (python, torch, CUDA, triton, numpy, tabulate, pytest, hypothesis), GPU
#   pytest   every test marked gpu (python -m pytest -m gpu tests/), junit XML
#   graphs   python -m harness graphs --device cuda: the standard matrix captured in CUDA
#            graphs, every replay checked, noise redrawn, no host sync in __call__
#   figures  python -m harness gpu-figures --device cuda: CUDA-event legacy/fixed ratios,
#            the step kernel's bandwidth against the device's peak
# and writes into OUTDIR: log.txt (everything printed), results.json (the stage table and
# a summary of each stage), env.json, junit-gpu.xml, graphs/ and figures/ (each stage's
# report as JSON, Markdown and text). Every stage runs under `timeout` within a total
# budget of 400 s (GPU_CHECK_BUDGET_S), so the whole stays under 8 minutes.
#
# Installs nothing and needs no network. Assumes these are installed for the python it
# runs ($PYTHON, default python3): torch (2.11 with CUDA 13 on the target H200 machine),
# triton (3.6), numpy, tabulate (the report's tables), pytest, hypothesis, pytest-benchmark.
#
# Exit status: 0 when every stage passed; 1 when a stage failed or ran out of time
# (results.json and log.txt are written all the same); 2 on bad usage, or when torch
# finds no CUDA device. --allow-cpu runs the stages without one (the GPU stages then
# skip or refuse): that is how CI checks this script on a CPU.
set -euo pipefail

usage() {
    echo "usage: $0 [--allow-cpu] OUTDIR"
}

allow_cpu=0
out=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help)
            usage
            echo "Runs the GPU tests, the CUDA-graph checks and the GPU figures; writes"
            echo "OUTDIR/results.json and OUTDIR/log.txt. See docs/gpu.md."
            exit 0
            ;;
        --allow-cpu)
            allow_cpu=1
            shift
            ;;
        -*)
            usage >&2
            echo "error: unknown option $1" >&2
            exit 2
            ;;
        *)
            if [[ -n "$out" ]]; then
                usage >&2
                echo "error: one OUTDIR only" >&2
                exit 2
            fi
            out="$1"
            shift
            ;;
    esac
done
if [[ -z "$out" ]]; then
    usage >&2
    exit 2
fi

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
log="$out/log.txt"
stages="$out/stages.tsv"
: >"$log"
: >"$stages"
PYTHON="${PYTHON:-python3}"
budget_s="${GPU_CHECK_BUDGET_S:-400}"
tests="${GPU_CHECK_TESTS:-tests/}"
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONHASHSEED=0 PYTHONUNBUFFERED=1
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"
cd "$repo"
failed=0

say() {
    printf '%s\n' "$*" | tee -a "$log"
}

# run_stage NAME LIMIT_S COMMAND...: run under timeout, tee to the log, record the outcome.
run_stage() {
    local name="$1" limit="$2"
    shift 2
    local left=$((budget_s - SECONDS))
    ((limit > left)) && limit=$left
    if ((limit < 5)); then
        say "== $name: skipped, the ${budget_s}s budget is spent"
        printf '%s\t%s\t%s\t%s\n' "$name" skipped -1 0 >>"$stages"
        failed=1
        return 0
    fi
    local shown="$*"
    say "== $name (limit ${limit}s): ${shown%%$'\n'*}"
    local started=$SECONDS rc status
    set +e
    timeout --kill-after=5 "$limit" "$@" 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    set -e
    if ((rc == 124 || rc == 137)); then
        status=timed_out
    elif ((rc != 0)); then
        status=failed
    else
        status=passed
    fi
    [[ $status == passed ]] || failed=1
    say "== $name: $status (exit $rc, $((SECONDS - started))s)"
    printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$rc" "$((SECONDS - started))" >>"$stages"
}

ENV_PY='
import json, platform, sys
info = {"python": platform.python_version(), "cuda_available": False}
try:
    import torch
    info.update(torch=torch.__version__, cuda=torch.version.cuda,
                cuda_available=torch.cuda.is_available())
    if info["cuda_available"]:
        props = torch.cuda.get_device_properties(0)
        info.update(device=torch.cuda.get_device_name(0), device_count=torch.cuda.device_count(),
                    capability=list(torch.cuda.get_device_capability(0)),
                    memory_bytes=props.total_memory)
except Exception as error:
    info["torch_error"] = repr(error)
for name in ("triton", "numpy", "tabulate", "pytest", "hypothesis", "pytest_benchmark"):
    try:
        info[name] = __import__(name).__version__
    except Exception as error:
        info[name] = None
        info[name + "_error"] = repr(error)
with open(sys.argv[1], "w") as handle:
    json.dump(info, handle, indent=2)
print(json.dumps(info, indent=2))
sys.exit(0 if "torch" in info and info["triton"] else 1)
'

SUMMARY_PY='
import json, pathlib, sys
import xml.etree.ElementTree as ElementTree
out, allow_cpu = pathlib.Path(sys.argv[1]), sys.argv[2] == "1"
def load(name):
    try:
        return json.loads((out / name).read_text())
    except (OSError, ValueError):
        return None
stages = []
for line in (out / "stages.tsv").read_text().splitlines():
    name, status, code, seconds = line.split("\t")
    stages.append({"name": name, "status": status, "exit": int(code), "seconds": int(seconds)})
env = load("env.json") or {}
pytest = None
try:
    root = ElementTree.parse(out / "junit-gpu.xml").getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    pytest = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    pytest["passed"] = pytest["tests"] - pytest["failures"] - pytest["errors"] - pytest["skipped"]
except (OSError, ElementTree.ParseError, AttributeError):
    pass
def report(name):
    data = load(name)
    if data is None:
        return None
    sections = [{"title": s["title"], "ok": s["ok"], "verdict": s["verdict"]}
                for s in data.get("sections", [])]
    return {"ok": data.get("ok"), "file": str(out / name), "sections": sections,
            "timing": data.get("timing")}
figures = load("figures/gpu-figures.json")
cuda = bool(env.get("cuda_available"))
results = {
    "schema": "dspark-harness/gpu-check",
    "schema_version": 1,
    "ok": cuda and bool(stages) and all(s["status"] == "passed" for s in stages),
    "cuda_available": cuda,
    "allow_cpu": allow_cpu,
    "reason": None if cuda else "torch finds no CUDA device",
    "stages": stages,
    "environment": env,
    "pytest": pytest,
    "graphs": report("graphs/graphs.json"),
    "figures": report("figures/gpu-figures.json"),
    "figures_data": [s.get("data") for s in figures.get("sections", [])] if figures else None,
}
path = out / "results.json"
path.write_text(json.dumps(results, indent=2) + "\n")
print("results:", path, "ok:", results["ok"])
'

write_results() {
    if ! timeout 30 "$PYTHON" -c "$SUMMARY_PY" "$out" "$allow_cpu" 2>&1 | tee -a "$log"; then
        say "the summary failed; writing a minimal results.json"
        printf '{"schema": "dspark-harness/gpu-check", "schema_version": 1, "ok": false, "reason": "summary failed; see log.txt"}\n' >"$out/results.json"
    fi
}

say "gpu_check: $(date -u +%Y-%m-%dT%H:%M:%SZ) repo=$repo out=$out python=$PYTHON budget=${budget_s}s"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi 2>&1 | tee -a "$log" || true
fi
run_stage env 20 "$PYTHON" -c "$ENV_PY" "$out/env.json"
cuda=$("$PYTHON" -c 'import json, sys; print(int(json.load(open(sys.argv[1]))["cuda_available"]))' "$out/env.json" 2>/dev/null || echo 0)
if [[ $cuda != 1 && $allow_cpu != 1 ]]; then
    say "error: torch finds no CUDA device; nothing to check here (--allow-cpu runs the stages anyway)"
    write_results
    exit 2
fi

# shellcheck disable=SC2086
run_stage pytest 180 "$PYTHON" -m pytest -p no:cacheprovider -m gpu -q -rs \
    --junitxml="$out/junit-gpu.xml" $tests # split on purpose: one or more test paths
run_stage graphs 110 "$PYTHON" -m harness graphs --device cuda --out-dir "$out/graphs"
run_stage figures 90 "$PYTHON" -m harness gpu-figures --device cuda --out-dir "$out/figures"

write_results
say "gpu_check: $([[ $failed == 0 ]] && echo PASS || echo FAIL) after ${SECONDS}s"
exit $((failed == 0 ? 0 : 1))

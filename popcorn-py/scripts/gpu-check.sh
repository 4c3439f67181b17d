#!/usr/bin/env bash
# The Python package's tests on a machine with a GPU: installs the wheel built here
# (popcorn-py/dist/, carried along; no network and no Rust needed there) into the machine's
# python3, which must hold numpy, scikit-learn, scipy and pytest, and runs the pytest suite with
# POPCORN_REQUIRE_GPU=1, so that a GPU test fails instead of skipping when no GPU is usable.
#
#   bash popcorn-py/scripts/gpu-check.sh [WHEEL_DIR]     # from the repository root
#
# WHEEL_DIR defaults to popcorn-py/dist (`maturin build --release -m popcorn-py/Cargo.toml
# --out popcorn-py/dist` makes it). The log goes to $OUT/pytest-gpu.log (or, without $OUT, to
# popcorn-py/gpu-check.log); the exit status is pytest's.
set -uo pipefail
cd "$(dirname "$0")/../.."
wheels="${1:-popcorn-py/dist}"
log="${OUT:+$OUT/pytest-gpu.log}"
log="${log:-popcorn-py/gpu-check.log}"
python="${PYTHON:-python3}"

{
    echo "# $(date -u +%FT%TZ) $(uname -n)"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
    "$python" --version
    ls -l "$wheels"
} >"$log" 2>&1

# Into the interpreter's own environment (numpy and scikit-learn are there already); where
# that is not writable, into a folder of its own on PYTHONPATH.
if ! "$python" -m pip install --no-index --find-links "$wheels" --upgrade popcorn >>"$log" 2>&1; then
    site="$(mktemp -d)"
    "$python" -m pip install --no-index --find-links "$wheels" --no-deps --target "$site" popcorn >>"$log" 2>&1 || {
        echo "gpu-check: the wheel in $wheels could not be installed; see $log" >&2
        exit 1
    }
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
"$python" -c "import popcorn, pprint; pprint.pprint(popcorn.device_info())" >>"$log" 2>&1

POPCORN_REQUIRE_GPU=1 PYTHONUNBUFFERED=1 "$python" -m pytest -v -rs -p no:cacheprovider popcorn-py/tests 2>&1 | tee -a "$log"
status=${PIPESTATUS[0]}
echo "gpu-check: pytest exited with $status; log in $log"
exit "$status"

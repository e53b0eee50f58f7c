#!/usr/bin/env bash
# Builds tessera-gpu-check from native/ with CMake alone (no Node.js, no network) and runs it.
#
#   native/gpu-check/run.sh [OUT_DIR] [tessera-gpu-check arguments...]
#
# OUT_DIR (default native/build-gpu-check/out) receives report.txt, report.json and build.log; the report is also
# printed. The exit status is the check's: 0 all passed, 1 a check failed; 3 when the build failed (its log's tail is
# printed). Environment:
#   TESSERA_GPU_CHECK_CUDA=OFF     compile the CPU part only (default ON: the CUDA part whenever nvcc is found)
#   TESSERA_GPU_CHECK_BUILD=DIR    build directory (default native/build-gpu-check; reused, so reruns are incremental)
#   TESSERA_BUILD_JOBS=N           parallel compile jobs (default: every core)
#   CMAKE_CUDA_ARCHITECTURES=...   e.g. 90 to compile for Hopper only (default 80;90, as tessera_cuda.node)
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
native="$(dirname "$here")"
out="${1:-$native/build-gpu-check/out}"
[ $# -gt 0 ] && shift
build="${TESSERA_GPU_CHECK_BUILD:-$native/build-gpu-check}"
jobs="${TESSERA_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
cuda="${TESSERA_GPU_CHECK_CUDA:-ON}"
mkdir -p "$out" "$build"
log="$out/build.log"

args=(-S "$native" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTESSERA_GPU_CHECK_ONLY=ON "-DTESSERA_GPU_CHECK_CUDA=$cuda")
if [ -n "${CMAKE_CUDA_ARCHITECTURES:-}" ]; then args+=("-DCMAKE_CUDA_ARCHITECTURES=$CMAKE_CUDA_ARCHITECTURES"); fi
# Ninja when there is one and the build directory is new (a directory keeps the generator it was made with).
if [ ! -f "$build/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then args+=(-G Ninja); fi

start=$(date +%s)
echo "[gpu-check] building tessera-gpu-check in $build (TESSERA_GPU_CHECK_CUDA=$cuda, $jobs jobs); log: $log"
if ! { cmake "${args[@]}" && cmake --build "$build" --parallel "$jobs"; } >"$log" 2>&1; then
  echo "[gpu-check] BUILD FAILED; the end of $log:"
  tail -n 60 "$log"
  exit 3
fi
grep -h "tessera: building" "$log" | sed 's/^-- /[gpu-check] /'
echo "[gpu-check] built in $(( $(date +%s) - start )) s"

"$build/tessera-gpu-check" --report "$out/report.txt" --json "$out/report.json" "$@"

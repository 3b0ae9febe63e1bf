#!/usr/bin/env bash
# Builds the libFuzzer targets (the `fuzz` preset) and runs each for a while.
#   tests/fuzz/run.sh [seconds per target] [target...]
# A target that finds a crash, a sanitizer report or a broken promise of its
# own stops with the input saved under build/fuzz/artifacts/<target>/, and
# this script fails. The corpus each run grows is kept in
# build/fuzz/corpus/<target>/ and starts from the seeds make_seeds.py writes
# and the inputs that once failed (tests/fuzz/regressions/<target>/).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(region_open_fuzzer lease_socket_fuzzer telemetry_store_fuzzer daemon_rpc_fuzzer trace_format_fuzzer profile_summary_fuzzer)

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)"

# Inputs longer than a few requests are where the bugs are: no slow growth
# of the length limit, and a cap that fits each target's unit of work.
declare -A max_len=(
  [region_open_fuzzer]=1024 [lease_socket_fuzzer]=2048
  [telemetry_store_fuzzer]=16384 [daemon_rpc_fuzzer]=2048 [trace_format_fuzzer]=4096 [profile_summary_fuzzer]=4096
)
python3 tests/fuzz/make_seeds.py build/fuzz/seeds
status=0
for t in "${targets[@]}"; do
  corpus=build/fuzz/corpus/$t
  artifacts=build/fuzz/artifacts/$t
  mkdir -p "$corpus" "$artifacts"
  # Inputs that once failed (tests/fuzz/regressions/): run first, every time.
  regressions=
  [ -d "tests/fuzz/regressions/$t" ] && regressions="tests/fuzz/regressions/$t"
  echo "fuzz: $t for ${seconds}s"
  if ! "build/fuzz/tests/fuzz/$t" -max_total_time="$seconds" -len_control=0 -max_len="${max_len[$t]:-4096}" \
      -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$artifacts/" \
      "$corpus" "build/fuzz/seeds/$t" $regressions >"build/fuzz/$t.log" 2>&1; then
    echo "fuzz: $t FAILED; its report:"
    grep -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)|NEW_FUNC' "build/fuzz/$t.log" | tail -60
    ls "$artifacts"
    status=1
  else
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb)' "build/fuzz/$t.log" | tr '\n' ' '
    echo
  fi
done
exit $status

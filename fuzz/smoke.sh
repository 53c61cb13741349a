#!/usr/bin/env bash
# Builds every fuzz target and runs each for N seconds (default 20, first argument).
# Exits non-zero if a target fails to build, crashes, hangs or runs out of memory; the
# input that did it is left under fuzz/artifacts/<target>/.
set -euo pipefail

secs="${1:-20}"
cd "$(dirname "$0")"

if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "smoke.sh: cargo-fuzz is missing (cargo install cargo-fuzz --locked)" >&2
    exit 2
fi
# cargo-fuzz needs nightly flags; a stable toolchain accepts them with this.
export RUSTC_BOOTSTRAP="${RUSTC_BOOTSTRAP:-1}"

cargo fuzz build
for target in $(cargo fuzz list); do
    extra=()
    # Long enough to reach MAX_COMMAND_LINE (8192) and the TooLong path.
    [ "$target" = command_parse ] && extra+=(-max_len=9000)
    # FTS3's field names and values, so that bodies get past the JSON into the checks.
    [ "$target" = submit_parse ] && extra+=(-dict=submit_parse.dict)
    echo "smoke.sh: $target for ${secs}s"
    cargo fuzz run "$target" -- -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 ${extra[@]+"${extra[@]}"}
done
echo "smoke.sh: all targets ran ${secs}s without a crash"

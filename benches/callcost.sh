#!/usr/bin/env bash
# callcost.sh - what the C ABI adds to an MPI call, in instructions: the same benchmark as
# the Rust API (mpr-bench) and as C through libmpr (osu_mini built with mprcc), rank 0 run
# under valgrind's callgrind, the machine's noise left out (compare.sh measures time).
#
# usage: benches/callcost.sh [WHAT[:SIZE]...]
#   WHAT: any benchmark compare.sh takes; SIZE: bytes (default 8)
#   (default: latency:8 allreduce:4 bcast:8 allgather:8 alltoall:8 put_latency:8 get_latency:8)
#
# For each, both programs run `-np 2 ... WHAT --min SIZE --max SIZE --warmup 0` twice, with
# --iters N1 and N2; (instructions of rank 0 at N2 - at N1) / (N2 - N1) is the cost of one
# iteration: the call, and what both programs wrap it in (the timer, the loop, a barrier
# for the collectives). Printed: that cost for mpr and for mprc, their difference, and the
# C entry points' own instructions per iteration (the PMPI_ functions, their inlined code
# included, what they call not). A rank that waits for the other polls, and the polls are
# counted: the difference moves by a few tens between runs. The programs are those
# compare.sh runs: build them first (cargo build --release; compare.sh builds osu_mini).
#
# Environment: N1=2000 N2=4000 (iterations), KEEP= (a directory to keep callgrind's files in).
set -euo pipefail
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TARGET=${CARGO_TARGET_DIR:-$(dirname "$HERE")/target}/release
MPRC=$HERE/c/build/osu_mini.mprc
N1=${N1:-2000}
N2=${N2:-4000}
command -v valgrind >/dev/null || { echo "callcost.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
for f in "$TARGET/mprun" "$TARGET/mpr-bench" "$MPRC"; do
    [[ -x $f ]] || { echo "callcost.sh: $f is missing (cargo build --release; benches/compare.sh builds osu_mini)" >&2; exit 1; }
done
OUT=${KEEP:-$(mktemp -d)}
mkdir -p "$OUT"
[[ -n ${KEEP:-} ]] || trap 'rm -rf "$OUT"' EXIT

# Instructions of rank 0 (its total, from callgrind's file).
total() { sed -n 's/^totals: *//p' "$1"; }

# Runs PROGRAM WHAT SIZE ITERS with rank 0 under callgrind into FILE.
measure() {
    local file=$1 prog=$2 what=$3 size=$4 iters=$5
    "$TARGET/mprun" -np 2 sh -c 'if [ "$MPR_RANK" = 0 ]; then exec valgrind -q --tool=callgrind --callgrind-out-file="$0" "$@"; else exec "$@"; fi' \
        "$file" "$prog" "$what" --min "$size" --max "$size" --warmup 0 --iters "$iters" >/dev/null </dev/null
}

# The PMPI_ functions' own instructions per iteration, "name cost ...".
entries() {
    python3 - "$1" "$2" "$3" <<'PY'
import re, subprocess, sys
def own(path):
    out = subprocess.run(["callgrind_annotate", "--auto=no", "--inclusive=no", "--threshold=100", path],
                         capture_output=True, text=True).stdout
    d = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s.*?(PMPI_\w+)", line)
        if m:
            d[m.group(2)] = d.get(m.group(2), 0) + int(m.group(1).replace(",", ""))
    return d
a, b, n = own(sys.argv[1]), own(sys.argv[2]), float(sys.argv[3])
print(" ".join(f"{k} {(b.get(k, 0) - a.get(k, 0)) / n:.0f}" for k in sorted(b) if (b.get(k, 0) - a.get(k, 0)) / n >= 1))
PY
}

LIST=("$@")
[[ ${#LIST[@]} -gt 0 ]] || LIST=(latency:8 allreduce:4 bcast:8 allgather:8 alltoall:8 put_latency:8 get_latency:8)
printf '%-12s %6s %10s %10s %8s  %s\n' what size mpr mprc mprc-mpr "C entry points (own instructions per iteration)"
for item in "${LIST[@]}"; do
    what=${item%%:*}
    size=8
    [[ $item == *:* ]] && size=${item#*:}
    declare -A per=()
    for impl in mpr mprc; do
        prog=$TARGET/mpr-bench
        [[ $impl == mprc ]] && prog=$MPRC
        for n in "$N1" "$N2"; do
            measure "$OUT/$impl.$what.$size.$n.out" "$prog" "$what" "$size" "$n"
        done
        a=$(total "$OUT/$impl.$what.$size.$N1.out")
        b=$(total "$OUT/$impl.$what.$size.$N2.out")
        per[$impl]=$(((b - a) / (N2 - N1)))
    done
    printf '%-12s %6s %10s %10s %8s  %s\n' "$what" "$size" "${per[mpr]}" "${per[mprc]}" "$((per[mprc] - per[mpr]))" \
        "$(entries "$OUT/mprc.$what.$size.$N1.out" "$OUT/mprc.$what.$size.$N2.out" $((N2 - N1)))"
    unset per
done
echo "-> instructions per iteration of rank 0 (the call and its loop); mprc-mpr: what the C ABI adds"

#!/usr/bin/env bash
# hpl.sh - mpr-hpl against the reference HPL, with the same N, NB, P and Q, one after the
# other in one run.
#
# usage: benches/hpl.sh                      (CONFIGS="N NB P Q; ..." to choose)
#
# The reference is the HPL inside Debian's `hpcc` (HPC Challenge 1.5: HPL 2.x, Open MPI,
# BLAS through libblas.so.3; install libopenblas0-serial so that that is OpenBLAS, one
# thread). hpcc also runs its other benchmarks after HPL; only its HPL figure is read
# (`HPL_Tflops` in hpccoutf.txt). Its HPL runs with HPL's usual tuning: PFACT right,
# NBMIN 4, NDIV 2, RFACT Crout, BCAST 1rM, DEPTH 1, SWAP mix (64). mpr-hpl runs its own
# defaults (recursive right-looking panel, NBMIN 16, NDIV 2, BCAST 1rM, DEPTH 1).
# mpr-hpl runs twice per round: with its default pure-Rust kernels, and built with the
# `openblas` feature (the same OpenBLAS as the reference; needs libopenblas-serial-dev,
# skipped without it), which separates the algorithm from the kernels.
# Each configuration runs REPEATS times per side, alternating; medians are printed with
# the ratios to the reference.
#
# Environment: CONFIGS="10000 256 1 1; 10000 256 1 2", REPEATS=3, MPR_BUILD=1.
set -euo pipefail
SELF=$(realpath "$0")
cd "$(dirname "$SELF")/.."
ROOT=$PWD
CONFIGS=${CONFIGS:-"10000 256 1 1; 10000 256 1 2"}
REPEATS=${REPEATS:-3}
log() { echo "$@" >&2; }

command -v hpcc >/dev/null || { log "hpl.sh: hpcc not found (apt-get install hpcc libopenblas0-serial)"; exit 1; }
if [[ ${MPR_BUILD:-1} != 0 ]]; then
    log "hpl.sh: cargo build --release (mprun, mpr-hpl)"
    cargo build --release -q -p mpr-launcher -p mpr-hpl >&2
fi
DIR=$(mktemp -d /tmp/mpr-hpl-bench.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
# The OpenBLAS build, copied aside (the default build is what target/release holds after).
BLAS_BIN=
if [[ -e /usr/lib/x86_64-linux-gnu/libopenblas.so || -e /usr/lib/aarch64-linux-gnu/libopenblas.so ]]; then
    log "hpl.sh: cargo build --release -p mpr-hpl --features openblas"
    cargo build --release -q -p mpr-hpl --features openblas >&2
    cp target/release/mpr-hpl "$DIR/mpr-hpl-openblas" && BLAS_BIN="$DIR/mpr-hpl-openblas"
    cargo build --release -q -p mpr-hpl >&2
else
    log "hpl.sh: no libopenblas.so (apt-get install libopenblas-serial-dev): the OpenBLAS column is skipped"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1

reference() { # N NB P Q -> Gflops
    local n=$1 nb=$2 p=$3 q=$4 d="$DIR/ref"
    rm -rf "$d" && mkdir -p "$d"
    cat >"$d/hpccinf.txt" <<EOF
HPLinpack benchmark input file
Innovative Computing Laboratory, University of Tennessee
HPL.out      output file name (if any)
8            device out (6=stdout,7=stderr,file)
1            # of problems sizes (N)
$n           Ns
1            # of NBs
$nb          NBs
0            PMAP process mapping (0=Row-,1=Column-major)
1            # of process grids (P x Q)
$p           Ps
$q           Qs
16.0         threshold
1            # of panel fact
2            PFACTs (0=left, 1=Crout, 2=Right)
1            # of recursive stopping criterium
4            NBMINs (>= 1)
1            # of panels in recursion
2            NDIVs
1            # of recursive panel fact.
1            RFACTs (0=left, 1=Crout, 2=Right)
1            # of broadcast
1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)
1            # of lookahead depth
1            DEPTHs (>=0)
2            SWAP (0=bin-exch,1=long,2=mix)
64           swapping threshold
0            L1 in (0=transposed,1=no-transposed) form
0            U  in (0=transposed,1=no-transposed) form
1            Equilibration (0=no,1=yes)
8            memory alignment in double (> 0)
##### This line (no. 32) is ignored (it serves as a separator). ######
0                      		Number of additional problem sizes for PTRANS
1200 10000 30000        	values of N
0                       	number of additional blocking sizes for PTRANS
40 9 8 13 13 20 16 32 64       	values of NB
EOF
    (cd "$d" && timeout 3600 mpirun.openmpi --oversubscribe --bind-to core -np $((p * q)) hpcc >/dev/null 2>&1) || true
    awk -F= '/^HPL_Tflops=/ { printf "%.2f\n", $2 * 1000 }' "$d/hpccoutf.txt" 2>/dev/null
}

mine() { # BINARY N NB P Q -> Gflops
    local bin=$1 n=$2 nb=$3 p=$4 q=$5
    "$ROOT/target/release/mprun" -np $((p * q)) "$bin" -n "$n" --nb "$nb" -p "$p" -q "$q" 2>/dev/null |
        awk '/^W[RC][0-9]/ { printf "%.2f\n", $7 }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "n/a" }'; }

printf "%-20s %10s %12s %10s %8s %10s\n" "N NB P Q" "mpr Gflops" "mpr+OpenBLAS" "ref Gflops" "mpr/ref" "+BLAS/ref"
IFS=';' read -ra LIST <<<"$CONFIGS"
for cfg in "${LIST[@]}"; do
    read -r n nb p q <<<"$cfg"
    : >"$DIR/mine" && : >"$DIR/blas" && : >"$DIR/ref.txt"
    for ((r = 0; r < REPEATS; r++)); do
        log "hpl.sh: N=$n NB=$nb ${p}x$q, round $((r + 1)) of $REPEATS"
        mine "$ROOT/target/release/mpr-hpl" "$n" "$nb" "$p" "$q" >>"$DIR/mine"
        [[ -n $BLAS_BIN ]] && mine "$BLAS_BIN" "$n" "$nb" "$p" "$q" >>"$DIR/blas"
        reference "$n" "$nb" "$p" "$q" >>"$DIR/ref.txt"
    done
    a=$(median <"$DIR/mine")
    o=$(median <"$DIR/blas")
    b=$(median <"$DIR/ref.txt")
    printf "%-20s %10s %12s %10s %8s %10s\n" "$n $nb $p $q" "$a" "$o" "$b" "$(ratio "$a" "$b")" "$(ratio "$o" "$b")"
    log "hpl.sh: mpr runs: $(tr '\n' ' ' <"$DIR/mine"); mpr+OpenBLAS runs: $(tr '\n' ' ' <"$DIR/blas"); reference runs: $(tr '\n' ' ' <"$DIR/ref.txt")"
done

#!/usr/bin/env bash
# compare.sh - run mpr's micro-benchmarks side by side with MPICH and Open MPI.
#
# usage: benches/compare.sh [WHAT...]
#   WHAT: latency bw bibw mbw_mr allreduce bcast allgather alltoall barrier startup
#         put_latency get_latency acc_latency fop_latency cas_latency put_bw get_bw
#         (default: latency bw startup)
#
# For each WHAT it runs, REPEATS times and interleaved (the order rotating every repeat),
#   mpr:     target/release/mprun -np NP target/release/mpr-bench WHAT
#   mprc:    target/release/mprun -np NP benches/c/build/osu_mini.mprc WHAT
#            (the same C program as MPICH's and Open MPI's, built with mprcc against mpr's
#            C ABI: mpr/mprc is the cost of the C layer over the Rust API)
#   MPICH:   mpiexec.mpich -n NP benches/c/build/osu_mini.mpich WHAT
#   Open MPI mpirun.openmpi --allow-run-as-root --oversubscribe -np NP benches/c/build/osu_mini.openmpi WHAT
# takes the median per size and implementation, and prints one table
#   size  mpr  mpich  openmpi  mpr/mpich  mpr/openmpi  wins/mpich  wins/openmpi
# (wins/X: in how many repeats mpr was at least as fast as X, comparing the runs of one
# round, which ran back to back: on a machine whose speed drifts, a surer sign than the
# ratio of medians when the two are close. A trailing `+` or `-` marks a count that a
# two-sided sign test finds unlikely to be chance, p < 0.05: mpr faster or slower; no
# mark is a tie within the noise. Below each table, the sizes marked `-` are listed.)
# `startup` times `-np NP /bin/true` under each launcher (median of STARTUP_RUNS, ms).
# An implementation that is missing or whose runs all fail shows `n/a`.
#
# Environment:
#   NP=2             ranks for every implementation
#   TRANSPORT=tcp    all three over TCP on loopback (see launcher() below)
#   REPEATS=7        runs per benchmark and implementation (median is reported; the sign
#                    test needs 6 or more to mark anything)
#   STARTUP_RUNS=20  runs per launcher for `startup`
#   TIMEOUT=300      seconds before one run is killed (counts as failed)
#   BENCH_ARGS=      extra arguments for every benchmark run (all three implementations),
#                    e.g. "--max 65536" or "--iters 100"; osu_mini and mpr-bench both take
#                    --min B, --max B, --iters N, --warmup N, --window N, --offset B
#                    (buffers B bytes past a page boundary; 16 is where malloc puts large
#                    blocks), and run the same
#                    iteration schedule (OSU's style: fewer iterations for larger sizes);
#                    the one-sided tests also --win allocate|create|dynamic and
#                    --sync flush|lock|fence|pscw (default: allocate, flush)
#   MPR_BUILD=1      0 skips `cargo build --release` of mprun and mpr-bench
#   RAW_DIR=         keep raw outputs in this directory (default: temporary, deleted)
#
# Running as root: Open MPI refuses without OMPI_ALLOW_RUN_AS_ROOT=1 and
# OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (or --allow-run-as-root), both set below.
# MPICH (ch4:ucx, Hydra) needs nothing. Open MPI needs --oversubscribe when
# NP > cores. MPICH busy-polls without ever yielding, so with NP > cores its
# collectives take milliseconds per call (scheduler time slices); use BENCH_ARGS
# to cut iterations or raise TIMEOUT in that case.
set -euo pipefail
export LC_ALL=C

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
SRC=$HERE/c/osu_mini.c
BUILD=$HERE/c/build
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}/release

NP=${NP:-2}
REPEATS=${REPEATS:-7}
STARTUP_RUNS=${STARTUP_RUNS:-20}
TIMEOUT=${TIMEOUT:-300}
MPR_BUILD=${MPR_BUILD:-1}
read -r -a EXTRA <<<"${BENCH_ARGS:-}"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

IMPLS=(mpr mprc mpich openmpi)
KNOWN="latency bw bibw mbw_mr allreduce bcast allgather alltoall barrier startup \
put_latency get_latency acc_latency fop_latency cas_latency put_bw get_bw"

log() { printf '%s\n' "$*" >&2; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; }

WHATS=("$@")
[[ ${#WHATS[@]} -gt 0 ]] || WHATS=(latency bw startup)
for w in "${WHATS[@]}"; do
    case $w in
        -h | --help) usage; exit 0 ;;
    esac
    case " $KNOWN " in
        *" $w "*) ;;
        *) log "compare.sh: unknown benchmark '$w'"; usage; exit 2 ;;
    esac
done
for v in NP REPEATS STARTUP_RUNS TIMEOUT; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { log "compare.sh: $v must be a positive integer"; exit 2; }
done

if [[ -n ${RAW_DIR:-} ]]; then
    RAW=$RAW_DIR
    mkdir -p "$RAW"
else
    RAW=$(mktemp -d "${TMPDIR:-/tmp}/mpr-compare.XXXXXX")
    trap 'rm -rf "$RAW"' EXIT
fi

# ---------------------------------------------------------------- build
declare -A OK=([mpr]=0 [mprc]=0 [mpich]=0 [openmpi]=0)

mkdir -p "$BUILD"
for impl in mpich openmpi; do
    cc=mpicc.$impl
    if ! command -v "$cc" >/dev/null; then
        log "compare.sh: $cc not found; $impl column will be n/a"
    elif "$cc" -O2 -Wall -o "$BUILD/osu_mini.$impl" "$SRC"; then
        OK[$impl]=1
    else
        log "compare.sh: building osu_mini with $cc failed; $impl column will be n/a"
    fi
done
command -v mpiexec.mpich >/dev/null || OK[mpich]=0
command -v mpirun.openmpi >/dev/null || OK[openmpi]=0

if [[ $MPR_BUILD != 0 ]]; then
    log "compare.sh: cargo build --release (mprun, mpr-bench, mprcc, libmpr)"
    (cd "$ROOT" && cargo build --release --bin mprun --bin mpr-bench --bin mprcc && cargo build --release -p mpr-c) ||
        log "compare.sh: cargo build failed; using whatever is in $TARGET"
fi
[[ -x $TARGET/mprun ]] && OK[mpr]=1 || log "compare.sh: no $TARGET/mprun; mpr column will be n/a"
if [[ ${OK[mpr]} == 1 && -x $TARGET/mprcc ]] && "$TARGET/mprcc" -O2 -Wall -o "$BUILD/osu_mini.mprc" "$SRC"; then
    OK[mprc]=1
else
    log "compare.sh: building osu_mini with mprcc failed; mprc column will be n/a"
fi

# ---------------------------------------------------------------- running
# launcher IMPL: prints nothing, sets LAUNCH to the launcher prefix for IMPL.
# TRANSPORT=tcp makes all three use TCP between ranks of this host (loopback):
#   mpr: MPR_TRANSPORTS=tcp; MPICH (ch4:ucx): MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self
#   UCX_NET_DEVICES=lo; Open MPI: --mca pml ob1 --mca btl tcp,self --mca osc pt2pt (its
#   osc/sm would put one-sided operations through shared memory whatever the btl).
launcher() {
    if [[ ${TRANSPORT:-} == tcp ]]; then
        case $1 in
            mpr | mprc) LAUNCH=(env MPR_TRANSPORTS=tcp "$TARGET/mprun" -np "$NP") ;;
            mpich) LAUNCH=(env MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self UCX_NET_DEVICES=lo mpiexec.mpich -n "$NP") ;;
            openmpi) LAUNCH=(mpirun.openmpi --allow-run-as-root --oversubscribe --mca pml ob1 --mca btl tcp,self --mca osc pt2pt -np "$NP") ;;
        esac
        return
    fi
    case $1 in
        mpr | mprc) LAUNCH=("$TARGET/mprun" -np "$NP") ;;
        mpich) LAUNCH=(mpiexec.mpich -n "$NP") ;;
        openmpi) LAUNCH=(mpirun.openmpi --allow-run-as-root --oversubscribe -np "$NP") ;;
    esac
}

program() {
    case $1 in
        mpr) PROG=("$TARGET/mpr-bench") ;;
        *) PROG=("$BUILD/osu_mini.$1") ;;
    esac
}

# run IMPL OUTFILE CMD...: run bounded; stdout goes to OUTFILE on success, to
# OUTFILE.part on failure (rows printed before a crash or timeout are still used,
# and the table says how many runs were partial).
run() {
    local impl=$1 out=$2
    shift 2
    if timeout -k 10 "$TIMEOUT" "$@" >"$out.tmp" 2>"$out.err" </dev/null; then
        mv "$out.tmp" "$out"
        return 0
    else
        local rc=$?
        local why="exit $rc"
        [[ $rc == 124 || $rc == 137 ]] && why="timed out after ${TIMEOUT}s"
        log "compare.sh: $impl failed ($why): $*"
        sed -n '1,5s/^/    /p' "$out.err" >&2
        mv "$out.tmp" "$out.part"
        return 1
    fi
}

# The implementations in the order run `rep` takes them: rotated by one every repeat, so
# none always runs first or right after another one (on a noisy machine a position in the
# round can carry a bias of its own).
rotated() {
    local rep=$1 n=${#IMPLS[@]} i
    for ((i = 0; i < n; i++)); do printf '%s\n' "${IMPLS[$(((rep - 1 + i) % n))]}"; done
}

run_bench() {
    local what=$1 rep impl
    rm -f "$RAW/$what".*
    for ((rep = 1; rep <= REPEATS; rep++)); do
        for impl in $(rotated "$rep"); do
            [[ ${OK[$impl]} == 1 ]] || continue
            launcher "$impl"
            program "$impl"
            if [[ ! -x ${PROG[0]} ]]; then
                ((rep > 1)) || log "compare.sh: no ${PROG[0]}; $impl column will be n/a"
                continue
            fi
            log "compare.sh: $what: run $rep/$REPEATS: $impl"
            run "$impl" "$RAW/$what.$impl.$rep.out" \
                "${LAUNCH[@]}" "${PROG[@]}" "$what" "${EXTRA[@]}" || true
        done
    done
}

now_us() { local t=$EPOCHREALTIME; echo "${t/./}"; }

run_startup() {
    local i impl t0 t1
    rm -f "$RAW"/startup.*
    log "compare.sh: startup: $STARTUP_RUNS runs of -np $NP /bin/true per launcher"
    for ((i = 1; i <= STARTUP_RUNS; i++)); do
        for impl in "${IMPLS[@]}"; do
            # (mprc starts as mpr does: the same launcher.)
            [[ ${OK[$impl]} == 1 && $impl != mprc ]] || continue
            launcher "$impl"
            t0=$(now_us)
            if timeout -k 10 "$TIMEOUT" "${LAUNCH[@]}" /bin/true >/dev/null 2>"$RAW/startup.err" </dev/null; then
                t1=$(now_us)
                printf '%d %d.%03d\n' "$NP" $(((t1 - t0) / 1000)) $(((t1 - t0) % 1000)) \
                    >"$RAW/startup.$impl.$i.out"
            else
                log "compare.sh: $impl startup run $i failed (exit $?)"
            fi
        done
    done
}

# ---------------------------------------------------------------- report
report() { # WHAT RUNS
    python3 - "$RAW" "$1" "$2" "$NP" "${IMPLS[@]}" <<'PY'
import glob, math, os, statistics, sys

raw, what, runs, np, impls = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
META = {
    "latency":   ("one-way latency", "us", False),
    "bw":        ("bandwidth, window 64", "MB/s", True),
    "bibw":      ("bidirectional bandwidth, window 64 each way", "MB/s", True),
    "mbw_mr":    ("NP/2 pairs at once, window 64 (MB/s; messages/s in the same ratio)", "MB/s", True),
    "allreduce": ("MPI_Allreduce avg latency (float sum)", "us", False),
    "bcast":     ("MPI_Bcast avg latency", "us", False),
    "allgather": ("MPI_Allgather avg latency", "us", False),
    "alltoall":  ("MPI_Alltoall avg latency", "us", False),
    "barrier":   ("MPI_Barrier avg latency", "us", False),
    "startup":   ("launch of /bin/true, wall time", "ms", False),
    "put_latency": ("MPI_Put latency, rank 0 on rank 1's window", "us", False),
    "get_latency": ("MPI_Get latency, rank 0 on rank 1's window", "us", False),
    "acc_latency": ("MPI_Accumulate latency (int sum)", "us", False),
    "fop_latency": ("MPI_Fetch_and_op latency (int64 sum)", "us", False),
    "cas_latency": ("MPI_Compare_and_swap latency (int64)", "us", False),
    "put_bw":      ("MPI_Put bandwidth, window 64", "MB/s", True),
    "get_bw":      ("MPI_Get bandwidth, window 64", "MB/s", True),
}
title, unit, higher = META[what]

def parse(path):
    rows = {}
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            # SIZE VALUE (mbw_mr adds messages/s, in the same ratio between implementations)
            if len(parts) not in (2, 3):
                continue
            try:
                rows[int(parts[0])] = float(parts[1])
            except ValueError:
                continue
    return rows

med, nok, rounds = {}, {}, {}
for impl in impls:
    full = [(p, parse(p)) for p in glob.glob(os.path.join(raw, f"{what}.{impl}.*.out"))]
    part = [(p, parse(p)) for p in glob.glob(os.path.join(raw, f"{what}.{impl}.*.out.part"))]
    full, part = [x for x in full if x[1]], [x for x in part if x[1]]
    nok[impl] = f"{len(full)}/{runs}" + (f" (+{len(part)} partial)" if part else "")
    samples = {}
    for path, r in full + part:
        # the repeat number: WHAT.IMPL.REP.out[.part]
        rounds.setdefault(impl, {})[os.path.basename(path).split(".")[2]] = r
        for size, v in r.items():
            samples.setdefault(size, []).append(v)
    med[impl] = {s: statistics.median(v) for s, v in samples.items()}

sizes = sorted(set().union(*(m.keys() for m in med.values())))
label = "np" if what == "startup" else "size"
print(f"== {what}: {title} ({unit}), median of {runs} runs, NP={np}")
print("   runs ok: " + ", ".join(f"{i} {nok[i]}" for i in impls))
others = [i for i in impls if i != "mpr"]
hdr = f"{label:<10}" + "".join(f"{i:>13}" for i in impls) + "".join(f"{'mpr/' + o:>13}" for o in others)
if what != "startup":
    hdr += "".join(f"{'wins/' + o:>13}" for o in others)
print(hdr)

def fmt(v):
    # Latencies of a few tens of nanoseconds need the third decimal.
    return "n/a" if v is None else f"{v:.3f}" if unit == "us" else f"{v:.2f}"

def sign_p(good, n):
    # Two-sided sign test: the chance of a split at least this uneven if each round were a
    # coin toss.
    tail = sum(math.comb(n, k) for k in range(min(good, n - good) + 1)) / 2**n
    return min(1.0, 2 * tail)

def wins(o, s):
    # Rounds in which mpr did at least as well as `o`, of the rounds both ran this size:
    # the three run back to back in a round, so this holds up against a machine whose
    # speed drifts between rounds better than the medians do. Returns (text, mark).
    both = [(r[s], rounds[o][k][s]) for k, r in rounds.get("mpr", {}).items()
            if s in r and k in rounds.get(o, {}) and s in rounds[o][k]]
    if not both:
        return "n/a", ""
    good = sum(1 for m, v in both if (m >= v if higher else m <= v))
    mark = ""
    if sign_p(good, len(both)) < 0.05:
        mark = "+" if 2 * good > len(both) else "-"
    return f"{good}/{len(both)}{mark:<1}", mark

slower = {o: [] for o in others}
# mprc is the same runtime through the C ABI: where mpr wins by the sign test, the C layer
# costs something measurable.
c_layer = []
compared = {o: False for o in others}
for s in sizes:
    vals = [med[i].get(s) for i in impls]
    m = med.get("mpr", {}).get(s)
    ratios = []
    for o in others:
        ov = med[o].get(s)
        ratios.append(None if m is None or ov is None or ov == 0 else m / ov)
    line = f"{s:<10}" + "".join(f"{fmt(v):>13}" for v in vals) + "".join(f"{fmt(r):>13}" for r in ratios)
    if what != "startup":
        for o in others:
            text, mark = wins(o, s)
            line += f"{text:>13}"
            compared[o] |= text != "n/a"
            if mark == "-":
                slower[o].append(str(s))
            if mark == "+" and o == "mprc":
                c_layer.append(str(s))
    print(line)
if not sizes:
    print("(no results)")
if higher:
    print(f"-> higher {unit} is better: mpr/X > 1 means mpr is faster than X")
else:
    print(f"-> lower {unit} is better: mpr/X < 1 means mpr is faster than X")
if what != "startup":
    print("   wins/X: rounds in which mpr was at least as fast as X (same round, back to back);")
    print("   +/-: mpr faster/slower by a two-sided sign test, p < 0.05; no mark: a tie")
    for o in others:
        verdict = (", ".join(slower[o]) or "none") if compared[o] else "n/a (no rounds to compare)"
        print(f"   sizes where mpr is slower than {o}: {verdict}")
    if compared.get("mprc"):
        print(f"   sizes where the C ABI (mprc) is slower than the Rust API (mpr): {', '.join(c_layer) or 'none'}")
    if runs < 6:
        print(f"   (with {runs} rounds no split reaches p < 0.05: set REPEATS=6 or more for a verdict)")
print()
PY
}

ncpu=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
if ((NP > ncpu)); then
    log "compare.sh: NP=$NP > $ncpu cores: oversubscribed; busy-polling runtimes (MPICH) will be very slow"
fi

for what in "${WHATS[@]}"; do
    if [[ $what == startup ]]; then
        run_startup
        report startup "$STARTUP_RUNS"
    else
        run_bench "$what"
        report "$what" "$REPEATS"
    fi
done

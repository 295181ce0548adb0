#!/usr/bin/env bash
# slurm.sh - start-up time of a trivial job under Slurm, mpr against MPICH and Open MPI.
#
# usage: benches/slurm.sh            (as root, with slurm-wlm, munge, mpich, openmpi-bin)
#
# Brings up a one-machine Slurm cluster of its own (munged, slurmctld, one slurmd node `n1`
# with 4 CPUs; config, state and logs in a temporary directory; ports chosen free), makes
# one allocation of NP tasks with salloc, and inside it times, RUNS times each with the
# order rotating every round, the launch of a program that does init, one barrier and
# finalize (benches/src/bin/init-finalize.rs, benches/c/init_finalize.c):
#   mpr    srun --mpi=pmi2      srun --mpi=pmi2 -n NP init-finalize
#   mpr    srun --mpi=pmix      srun --mpi=pmix -n NP init-finalize
#   mpr    mprun (srun)         mprun -np NP init-finalize (the allocation's node, its proxy
#                               started with srun)
#   mpr    mprun (local)        mprun -np NP -H localhost init-finalize (no srun)
#   MPICH  srun --mpi=pmi2      srun --mpi=pmi2 -n NP init_finalize.mpich
#   MPICH  mpiexec (srun)       mpiexec.mpich -n NP init_finalize.mpich (hydra's proxy by srun)
#   OMPI   srun --mpi=pmix      srun --mpi=pmix -n NP init_finalize.openmpi
# and prints the median wall time of each and its ratio to MPICH under srun --mpi=pmi2.
# The cluster is stopped and its directory removed on exit, also on failure.
#
# Environment: NP=2, RUNS=20, MPR_BUILD=1 (0 skips the cargo build).
set -euo pipefail
SELF=$(realpath "$0")
cd "$(dirname "$SELF")/.."
ROOT=$PWD
NP=${NP:-2}
RUNS=${RUNS:-20}
log() { echo "$@" >&2; }

if [[ ${1:-} == __inside ]]; then
    # Inside the allocation: the timing loop. $2: the output file.
    out=$2
    names=("mpr srun --mpi=pmi2" "mpr srun --mpi=pmix" "mpr mprun (srun)" "mpr mprun (local)"
        "MPICH srun --mpi=pmi2" "MPICH mpiexec (srun)" "OMPI srun --mpi=pmix")
    launch() {
        case $1 in
        0) timeout 60 srun --mpi=pmi2 -n "$NP" "$BIN/init-finalize" ;;
        1) timeout 60 srun --mpi=pmix -n "$NP" "$BIN/init-finalize" ;;
        2) timeout 60 "$BIN/mprun" -np "$NP" "$BIN/init-finalize" ;;
        3) timeout 60 "$BIN/mprun" -np "$NP" -H localhost "$BIN/init-finalize" ;;
        4) timeout 60 srun --mpi=pmi2 -n "$NP" "$BUILD/init_finalize.mpich" ;;
        5) timeout 60 mpiexec.mpich -n "$NP" "$BUILD/init_finalize.mpich" ;;
        6) timeout 60 srun --mpi=pmix -n "$NP" "$BUILD/init_finalize.openmpi" ;;
        esac
    }
    n=${#names[@]}
    for ((r = 0; r < RUNS; r++)); do
        for ((k = 0; k < n; k++)); do
            i=$(((k + r) % n))
            t0=$(date +%s%N)
            if launch "$i" >/dev/null 2>"$out.err" </dev/null; then
                echo "$i $((($(date +%s%N) - t0) / 1000))" >>"$out"
            else
                log "slurm.sh: ${names[$i]} failed: $(head -c 300 "$out.err")"
            fi
        done
    done
    for ((i = 0; i < n; i++)); do echo "name $i ${names[$i]}" >>"$out"; done
    exit 0
fi

for tool in munged slurmctld slurmd srun salloc mpicc.mpich mpicc.openmpi mpiexec.mpich; do
    command -v "$tool" >/dev/null || {
        log "slurm.sh: $tool not found (apt-get install slurmctld slurmd slurm-client munge libmpich-dev libopenmpi-dev)"
        exit 1
    }
done
if [[ ${MPR_BUILD:-1} != 0 ]]; then
    log "slurm.sh: cargo build --release (mprun, init-finalize)"
    cargo build --release -q -p mpr-launcher -p mpr-bench >&2
fi
export BIN=$ROOT/target/release
DIR=$(mktemp -d /tmp/mpr-slurm-bench.XXXXXX)
export BUILD=$DIR/build

stop() {
    SLURM_CONF=$DIR/slurm.conf scancel --quiet --user="$(id -un)" 2>/dev/null || true
    for f in slurmd-n1.pid slurmctld.pid munge/pid; do
        [[ -f $DIR/$f ]] && kill "$(cat "$DIR/$f")" 2>/dev/null || true
    done
    sleep 1
    rm -rf "$DIR"
}
trap stop EXIT
mkdir -p "$BUILD" "$DIR/munge" "$DIR/state" "$DIR/spool/n1" "$DIR/log"
mpicc.mpich -O2 -o "$BUILD/init_finalize.mpich" benches/c/init_finalize.c
mpicc.openmpi -O2 -o "$BUILD/init_finalize.openmpi" benches/c/init_finalize.c

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
head -c 1024 /dev/urandom >"$DIR/munge/key"
chmod 400 "$DIR/munge/key"
chmod 700 "$DIR/munge"
host=$(hostname -s)
cat >"$DIR/slurm.conf" <<EOF
ClusterName=mprbench
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/sock
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$(free_port) CPUs=4 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$DIR/slurm.conf
munged --force --socket="$DIR/munge/sock" --key-file="$DIR/munge/key" --pid-file="$DIR/munge/pid" \
    --log-file="$DIR/munge/log" --seed-file="$DIR/munge/seed"
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF" -N n1
for ((i = 0; i < 300; i++)); do
    [[ $(sinfo -h -N -o %T 2>/dev/null) == idle ]] && break
    sleep 0.2
done
[[ $(sinfo -h -N -o %T) == idle ]] || { log "slurm.sh: the cluster did not come up"; tail "$DIR"/log/*; exit 1; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NP RUNS
log "slurm.sh: $RUNS rounds of 7 launches of -n $NP init/barrier/finalize, in one allocation"
salloc -Q -N 1 -n "$NP" bash "$SELF" __inside "$DIR/times"

python3 - "$DIR/times" <<'EOF'
import statistics, sys
times, names = {}, {}
for line in open(sys.argv[1]):
    w = line.split()
    if w[0] == "name":
        names[int(w[1])] = " ".join(w[2:])
    else:
        times.setdefault(int(w[0]), []).append(int(w[1]) / 1000)
med = {i: statistics.median(t) for i, t in times.items()}
ref = med.get(4)
print(f"{'launcher':26} {'runs':>4} {'median ms':>10} {'vs MPICH srun --mpi=pmi2':>26}")
for i in sorted(names):
    if i in med:
        ratio = f"{med[i] / ref:.2f}" if ref else "n/a"
        print(f"{names[i]:26} {len(times[i]):>4} {med[i]:>10.1f} {ratio:>26}")
    else:
        print(f"{names[i]:26} {0:>4} {'n/a':>10} {'n/a':>26}")
EOF

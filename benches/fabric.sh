#!/usr/bin/env bash
# mpr over fabrics of cables built from network namespaces, with the software RDMA provider
# (one soft device per cable interface, MPR_SOFT_IFACES): the ratios, not the absolute
# figures, are the point (the soft provider is UDP on loopback-speed veths, on these cores).
#   1. two hosts joined by one cable and by two: `mpr-bench latency` at 8 B and `bw` at
#      4 MiB (the 2-cable run stripes large messages over both);
#   2. the same two hosts with 4 ranks each: `mpr-bench mbw_mr` at 4 MiB (four pairs across
#      the hosts at once; each device's 10 queue pairs are the host's, so on one cable 6 of
#      the 16 pairs take TCP, on two cables all fit);
#   3. four hosts as a full mesh (6 cables) and as a ring (4 cables, the diagonals over
#      TCP): `mpr-bench allreduce` at 8 B and 1 MiB.
# Needs root and iproute2. Creates namespaces, a bridge (the IP network every host also has)
# and veth "cables" with unique names on 10.215.0.0/16, and removes them on exit.
#
#   REPEATS=3 benches/fabric.sh            (medians of REPEATS runs)
#   BIN=DIR benches/fabric.sh               (mprun and mpr-bench from DIR, e.g. another build)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${BIN:-$ROOT/target/release}
REPEATS=${REPEATS:-3}
id=$$
br=mprf$id
ns=(); addr=()
cleanup() {
    for n in "${ns[@]}"; do ip netns del "$n" 2>/dev/null || true; done
    ip link del "$br" 2>/dev/null || true
    rm -f "${exec_script:-}"
}
trap cleanup EXIT
ip link add "$br" type bridge
ip addr add 10.215.0.1/24 dev "$br"
ip link set "$br" up
for i in 0 1 2 3; do
    ns+=("mprfab$id-$i"); addr+=("10.215.0.$((11 + i))")
    ip netns add "${ns[$i]}"
    ip link add "f$id$i" type veth peer name eth0 netns "${ns[$i]}"
    ip link set "f$id$i" master "$br" up
    ip -n "${ns[$i]}" addr add "${addr[$i]}/24" dev eth0
    ip -n "${ns[$i]}" link set eth0 up
    ip -n "${ns[$i]}" link set lo up
done
ncable=0
# cable A B NAME_AT_A NAME_AT_B: a veth pair on its own /30 between hosts A and B.
cable() {
    local a=$1 b=$2 na=$3 nb=$4 k=$((ncable++))
    ip link add "$na" netns "${ns[$a]}" type veth peer name "$nb" netns "${ns[$b]}"
    ip -n "${ns[$a]}" addr add "10.215.1.$((4 * k + 1))/30" dev "$na"
    ip -n "${ns[$b]}" addr add "10.215.1.$((4 * k + 2))/30" dev "$nb"
    ip -n "${ns[$a]}" link set "$na" up
    ip -n "${ns[$b]}" link set "$nb" up
}
# Two cables between hosts 0 and 1; the ring 0-1-2-3-0 (tb*), the diagonals (dg*).
cable 0 1 tb1 tb0
cable 0 1 xb1 xb0
cable 1 2 tb2 tb1
cable 2 3 tb3 tb2
cable 3 0 tb0 tb3
cable 0 2 dg2 dg0
cable 1 3 dg3 dg1
sleep 1
exec_script=$(mktemp)
{
    echo '#!/bin/sh'
    echo 'host=$1; shift'
    echo 'case $host in'
    for i in 0 1 2 3; do echo "  ${addr[$i]}) exec ip netns exec ${ns[$i]} \"\$@\" ;;"; done
    echo 'esac'
    echo 'echo "unknown host $host" >&2; exit 1'
} >"$exec_script"
chmod +x "$exec_script"

median() { sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
# run HOSTS IFACES ARGS...: the median over REPEATS of the one figure mpr-bench prints.
run() {
    local hosts=$1 ifaces=$2; shift 2
    for _ in $(seq "$REPEATS"); do
        MPR_VERBS_PROVIDER=soft MPR_SOFT_IFACES=$ifaces "$T/mprun" --control-addr 10.215.0.1 \
            --launcher-exec "$exec_script" -H "$hosts" "$T/mpr-bench" "$@" | grep -v '^#' | awk '{print $2}'
    done | median
}
two="${addr[0]}:1,${addr[1]}:1"
four="${addr[0]}:1,${addr[1]}:1,${addr[2]}:1,${addr[3]}:1"
one_lat=$(run "$two" "tb0,tb1" latency --min 8 --max 8)
one_bw=$(run "$two" "tb0,tb1" bw --min 4194304 --max 4194304)
two_bw=$(run "$two" "tb0,tb1,xb0,xb1" bw --min 4194304 --max 4194304)
echo "== two hosts, 1 rank each (median of $REPEATS)"
printf '%-26s %12s\n' "latency 8 B, 1 cable (us)" "$one_lat"
printf '%-26s %12s\n%-26s %12s\n%-26s %12.2f\n' "bw 4 MiB, 1 cable (MB/s)" "$one_bw" "bw 4 MiB, 2 cables (MB/s)" \
    "$two_bw" "2/1" "$(echo "$two_bw $one_bw" | awk '{print $1 / $2}')"
eight="${addr[0]}:4,${addr[1]}:4"
one_mr=$(run "$eight" "tb0,tb1" mbw_mr --min 4194304 --max 4194304)
two_mr=$(run "$eight" "tb0,tb1,xb0,xb1" mbw_mr --min 4194304 --max 4194304)
echo "== two hosts, 4 ranks each, mbw_mr at 4 MiB, 4 pairs (MB/s, median of $REPEATS)"
printf '%-12s %12s\n%-12s %12s\n' "1 cable" "$one_mr" "2 cables" "$two_mr"
echo "== four hosts, allreduce (us, median of $REPEATS)"
printf '%-10s %12s %12s %12s\n' size mesh ring ring/mesh
for size in 8 1048576; do
    mesh=$(run "$four" "tb*,dg*" allreduce --min "$size" --max "$size")
    ring=$(run "$four" "tb*" allreduce --min "$size" --max "$size")
    printf '%-10s %12s %12s %12.2f\n' "$size" "$mesh" "$ring" "$(echo "$ring $mesh" | awk '{print $1 / $2}')"
done

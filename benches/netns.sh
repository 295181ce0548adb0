#!/usr/bin/env bash
# mpr over TCP between two network-namespace hosts, against the raw TCP floor between the
# same two namespaces (tcp-floor). Needs root and iproute2. Creates a bridge and two
# namespaces with unique names on 10.213.250.0/24 and removes them on exit.
#
#   benches/netns.sh [latency|bw]...     (default: latency bw)
#   REPEATS=3 benches/netns.sh latency
#   BENCH_ARGS="--max 8 --iters 200" benches/netns.sh latency   (passed to both benchmarks)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=$ROOT/target/release
REPEATS=${REPEATS:-3}
read -r -a BENCH_ARGS <<<"${BENCH_ARGS:-}"
WHATS=("$@")
[[ ${#WHATS[@]} -eq 0 ]] && WHATS=(latency bw)
id=$$
br=mprb$id
ns=(mprbench$id-a mprbench$id-b)
addr=(10.213.250.11 10.213.250.12)
cleanup() {
    for n in "${ns[@]}"; do ip netns del "$n" 2>/dev/null || true; done
    ip link del "$br" 2>/dev/null || true
}
trap cleanup EXIT
ip link add "$br" type bridge
ip addr add 10.213.250.1/24 dev "$br"
ip link set "$br" up
for i in 0 1; do
    ip netns add "${ns[$i]}"
    ip link add "v$id$i" type veth peer name eth0 netns "${ns[$i]}"
    ip link set "v$id$i" master "$br" up
    ip -n "${ns[$i]}" addr add "${addr[$i]}/24" dev eth0
    ip -n "${ns[$i]}" link set eth0 up
    ip -n "${ns[$i]}" link set lo up
done
exec_script=$(mktemp)
cat >"$exec_script" <<SCRIPT
#!/bin/sh
host=\$1; shift
case \$host in
  ${addr[0]}) exec ip netns exec ${ns[0]} "\$@" ;;
  ${addr[1]}) exec ip netns exec ${ns[1]} "\$@" ;;
esac
echo "unknown host \$host" >&2; exit 1
SCRIPT
chmod +x "$exec_script"
trap 'cleanup; rm -f "$exec_script"' EXIT

median() { sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

for what in "${WHATS[@]}"; do
    tmp=$(mktemp -d)
    for r in $(seq "$REPEATS"); do
        "$T/mprun" --control-addr 10.213.250.1 --launcher-exec "$exec_script" -H "${addr[0]}:1,${addr[1]}:1" \
            "$T/mpr-bench" "$what" "${BENCH_ARGS[@]}" | grep -v '^#' >"$tmp/mpr.$r"
        ip netns exec "${ns[0]}" env TCP_FLOOR_EXEC="ip netns exec ${ns[1]}" \
            "$T/tcp-floor" "$what" --bind "${addr[0]}" "${BENCH_ARGS[@]}" | grep -v '^#' >"$tmp/raw.$r"
    done
    unit="us"; [[ $what == bw ]] && unit="MB/s"
    echo "== $what between two namespaces over veth ($unit, median of $REPEATS)"
    printf '%-10s %12s %12s %10s\n' size mpr raw mpr/raw
    for size in $(awk '{print $1}' "$tmp/raw.1"); do
        m=$(cat "$tmp"/mpr.* | awk -v s="$size" '$1==s {print $2}' | median)
        w=$(cat "$tmp"/raw.* | awk -v s="$size" '$1==s {print $2}' | median)
        printf '%-10s %12s %12s %10.2f\n' "$size" "$m" "$w" "$(echo "$m $w" | awk '{print ($2>0)?$1/$2:0}')"
    done
    rm -rf "$tmp"
done

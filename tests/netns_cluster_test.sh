#!/usr/bin/env bash
# Smoke test of the network-namespace cluster (tools/netns_cluster.sh, tools/netns_rsh.sh): two
# hosts on a shaped link (5 ms each way, 1 % loss each way, 100 Mbit/s) answer ping within
# tolerance, and Open MPI's mpirun, started on host 1, runs one rank on each host that reports its
# host's name and sums over both with MPI_Allreduce. Exit 77 (skipped, with the reason) where
# namespaces cannot be made (no root, no veth, ...). Always removes the cluster.
#
#   bash tests/netns_cluster_test.sh [MPIEXEC]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cluster=$root/tools/netns_cluster.sh
mpirun=${1:-$(command -v mpirun || echo mpirun)}
prefix=vitkt  # not the default prefix, so that a developer's own cluster is left alone
shaping=(--delay 5 --loss 1 --rate 100)

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

status=0
reason=$("$cluster" check "${shaping[@]}" --prefix "$prefix") || status=$?
((status == 77)) && skip "$reason"
((status == 0)) || fail "netns_cluster.sh check: $reason"
for tool in "$mpirun" mpicc ping; do
  command -v "$tool" >/dev/null || skip "$tool is missing (tools/setup.sh installs it)"
done

work=$(mktemp -d)
trap '"$cluster" down --prefix "$prefix" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
hostfile=$("$cluster" up 2 "${shaping[@]}" --prefix "$prefix" --dir "$work")
[[ $(cat "$hostfile") == "${prefix}1 slots=1"$'\n'"${prefix}2 slots=1" ]] ||
  fail "hostfile $hostfile: $(cat "$hostfile")"

# ---- the link: 500 pings from host 1 to host 2. -U: the time between the program's own send
# and receive (without netem the kernel stamps a reply before it is held).
out=$(ip netns exec "${prefix}1" ping -U -q -n -c 500 -i 0.005 -W 2 192.0.2.12 || true)
loss=$(sed -n 's/.* \([0-9.]*\)% packet loss.*/\1/p' <<<"$out")
read -r rtt_min rtt_avg < <(sed -n 's|^rtt min/avg/max/mdev = \([0-9.]*\)/\([0-9.]*\)/.*|\1 \2|p' <<<"$out")
echo "ping: rtt min ${rtt_min:-?} avg ${rtt_avg:-?} ms, loss ${loss:-?}%"
[[ -n $loss && -n $rtt_avg ]] || fail "no ping statistics: $out"
# 5 ms each way: never under 10 ms; the upper bound only catches a packet held far too long
# (a busy machine adds its own waits).
awk -v m="$rtt_min" -v a="$rtt_avg" 'BEGIN { exit !(m >= 10 && a < 100) }' ||
  fail "round trip ${rtt_min}/${rtt_avg} ms (min/avg), expected at least 10 and well under 100"
# 1 % each way: about 2 % of round trips (10 of 500); 0 or over 6 % is not chance.
awk -v l="$loss" 'BEGIN { exit !(l > 0 && l <= 6) }' || fail "loss $loss%, expected about 2%"

# ---- MPI across the two hosts, mpirun on host 1 (as a user on node 1 would start it)
cat >"$work/allreduce.c" <<'EOF'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, len;
  char name[MPI_MAX_PROCESSOR_NAME];
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Get_processor_name(name, &len);
  double x = rank + 1, sum = 0;
  MPI_Allreduce(&x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  printf("rank %d on %s: sum %g\n", rank, name, sum);
  MPI_Finalize();
  return 0;
}
EOF
mpicc -O2 "$work/allreduce.c" -o "$work/allreduce"
# btl tcp,self: no shared memory between hosts; both TCP layers on the cluster's network only.
cd "$work"
out=$(timeout 120 "$cluster" exec "${prefix}1" "$mpirun" --allow-run-as-root \
  --hostfile "$hostfile" -np 2 --mca plm_rsh_agent "$root/tools/netns_rsh.sh" \
  --mca btl tcp,self --mca btl_tcp_if_include 192.0.2.0/24 --mca oob_tcp_if_include 192.0.2.0/24 \
  "$work/allreduce" 2>&1) || fail "mpirun: $out"
echo "$out"
grep -qx "rank 0 on ${prefix}1: sum 3" <<<"$out" || fail "rank 0 did not report from ${prefix}1"
grep -qx "rank 1 on ${prefix}2: sum 3" <<<"$out" || fail "rank 1 did not report from ${prefix}2"
cd /

# ---- down leaves nothing behind
"$cluster" down --prefix "$prefix"
[[ -z $(ip netns list | grep -E "^${prefix}[0-9]+( |$)" || true) ]] || fail "namespaces left: $(ip netns list)"
[[ -z $(ip -o link show | grep -E ": ${prefix}(br|[0-9]+p)[:@]" || true) ]] || fail "links left"
echo "PASS"

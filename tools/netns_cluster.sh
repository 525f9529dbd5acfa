#!/usr/bin/env bash
# "Hosts" for multi-host tests on one machine: Linux network namespaces joined by a bridge, each
# with its own address in 192.0.2.0/24 (RFC 5737, never routed off the machine), and optionally a
# shaped link (delay, rate, loss). Open MPI starts ranks in them through tools/netns_rsh.sh. Root.
#
#   netns_cluster.sh up N [--delay MS] [--rate MBIT] [--loss PCT] [--mtu BYTES] [--prefix P] [--dir DIR]
#       hosts P1..PN (P: vitkh) at 192.0.2.(10+i); prints the hostfile DIR/P.hosts
#   netns_cluster.sh down [--prefix P]       kill every process of the hosts, remove all of it
#   netns_cluster.sh link NAME down|up       unplug / plug back one host's cable
#   netns_cluster.sh pids NAME               the pids running in one host
#   netns_cluster.sh exec NAME COMMAND...    run COMMAND in a host, with its host name (mpirun)
#   netns_cluster.sh check [shaping options] exit 0 if `up` can work here, else the reason and 77
#
# --delay MS, --loss PCT and --rate MBIT shape each host's link in both directions: every packet a
# host receives has waited MS ms (RTT 2*MS between two hosts; measure it with `ping -U`, as
# without netem the kernel stamps a packet before the wait) and is lost with probability
# PCT/100 (a ping round trip about 2*PCT); each direction carries at most MBIT Mbit/s. netem does
# delay and loss where the kernel has it; otherwise nft drops at random for --loss and
# tools/netns_delay.c (compiled into DIR at `up`) holds packets from an NFQUEUE for --delay.
#
# mpirun runs in host 1, as a user would start it on node 1: the root namespace gets no address
# on the bridge (some machines' own network is 192.0.2.0/24). Host names need no /etc/hosts:
#   netns_cluster.sh exec vitkh1 mpirun --allow-run-as-root --hostfile HOSTFILE -np 2 \
#     --mca plm_rsh_agent "$PWD/tools/netns_rsh.sh" --mca btl tcp,self \
#     --mca btl_tcp_if_include 192.0.2.0/24 --mca oob_tcp_if_include 192.0.2.0/24 PROGRAM
# mpirun notices a host whose link is down only when its TCP keepalive gives up: after about
# 8 minutes by default, about 16 s with --mca oob_tcp_keepalive_time 10
# --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3.
set -euo pipefail

usage() { sed -n '2,28s/^# \{0,1\}//p' "$0"; }
die() { echo "netns_cluster.sh: error: $*" >&2; exit 1; }
skip() { echo "netns_cluster.sh: cannot run here: $*"; exit 77; }
note() { echo "netns_cluster.sh: $*" >&2; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
state_root=/run/vitk-netns  # per prefix: which hosts exist (netns_rsh.sh reads it), helper pid

prefix=vitkh delay=0 rate=0 loss=0 mtu=1500 dir=""

# Options after the subcommand's positional arguments; sets the globals above.
parse_options() {
  while (($#)); do
    case "$1" in
      --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
      --delay) delay=${2:?--delay needs milliseconds}; shift 2 ;;
      --rate) rate=${2:?--rate needs Mbit/s}; shift 2 ;;
      --loss) loss=${2:?--loss needs a percentage}; shift 2 ;;
      --mtu) mtu=${2:?--mtu needs bytes}; shift 2 ;;
      --dir) dir=${2:?--dir needs a directory}; shift 2 ;;
      *) echo "netns_cluster.sh: error: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
  done
  # Ends in a letter, so that host names (PREFIX1) and ports (PREFIX1p) fit 15 bytes and are unambiguous.
  [[ $prefix =~ ^[a-z]([a-z0-9]{0,9}[a-z])?$ ]] ||
    die "--prefix: 1 to 11 lower-case letters and digits, a letter first and last"
  for v in "$delay" "$rate" "$loss"; do
    [[ $v =~ ^[0-9]+([.][0-9]+)?$ ]] || die "not a number: '$v'"
  done
  [[ $mtu =~ ^[0-9]+$ ]] && ((mtu >= 1280 && mtu <= 65535)) || die "--mtu: 1280 to 65535"
}

positive() { awk -v x="$1" 'BEGIN { exit !(x > 0) }'; }
ns_path() { echo "/run/netns/$1"; }
# Our host names: PREFIX followed by a number.
hosts_of() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${1}[0-9]+$" || true; }

# ---- check

# Whether namespaces, veths, a bridge and the requested shaping can be made here; prints the
# reason for the first thing that cannot.
probe() {
  ((EUID == 0)) || { echo "needs root (network namespaces, veths, a bridge)"; return 1; }
  local t
  for t in ip awk unshare hostname; do
    command -v "$t" >/dev/null || { echo "$t is missing"; return 1; }
  done
  local ns="${prefix}chk$$" status=0
  ip netns add "$ns" 2>/dev/null || { echo "cannot create a network namespace (ip netns add)"; return 1; }
  probe_in "$ns" || status=1
  ip netns del "$ns" 2>/dev/null || true
  ip link del "${prefix}ck" 2>/dev/null || true
  ip link del "${prefix}cv" 2>/dev/null || true
  return "$status"
}

probe_in() {
  local ns=$1 reason
  ip link add "${prefix}ck" type bridge 2>/dev/null || { echo "cannot create a bridge"; return 1; }
  ip link add "${prefix}cv" type veth peer name eth0 netns "$ns" 2>/dev/null ||
    { echo "cannot create a veth pair"; return 1; }
  if positive "$rate"; then
    command -v tc >/dev/null || { echo "tc (iproute2) is missing, needed for --rate"; return 1; }
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate 10mbit burst 64k latency 50ms 2>/dev/null ||
      { echo "the kernel has no tbf qdisc, needed for --rate"; return 1; }
  fi
  if (positive "$delay" || positive "$loss") && ! has_netem "$ns"; then
    if positive "$loss"; then
      command -v nft >/dev/null || { echo "no netem, and nft (nftables) is missing for --loss"; return 1; }
      ip netns exec "$ns" nft -f - 2>/dev/null <<<"table inet t { chain i { type filter hook input priority 0; numgen random mod 10000 < 1 drop; }; }" ||
        { echo "no netem, and nftables here cannot drop at random (numgen) for --loss"; return 1; }
    fi
    if positive "$delay"; then
      reason=$(delay_tools_missing) && { echo "no netem, and for --delay $reason"; return 1; }
      add_queue_rule "$ns" eth0 2>/dev/null ||
        { echo "no netem, and no NFQUEUE (nft queue or iptables NFQUEUE) for --delay"; return 1; }
    fi
  fi
  return 0
}

has_netem() {
  ip netns exec "$1" tc qdisc add dev lo root netem delay 1ms 2>/dev/null || return 1
  ip netns exec "$1" tc qdisc del dev lo root 2>/dev/null || true
}

# What --delay without netem lacks (printed, status 0), or nothing (status 1).
delay_tools_missing() {
  command -v cc >/dev/null || { echo "cc is missing (build-essential)"; return 0; }
  [[ -f /usr/include/libnetfilter_queue/libnetfilter_queue.h ]] ||
    { echo "libnetfilter_queue is missing (libnetfilter-queue-dev)"; return 0; }
  command -v nft >/dev/null || command -v iptables >/dev/null ||
    { echo "nft or iptables is missing (nftables, iptables)"; return 0; }
  return 1
}

# Sends what namespace $1 receives on device $2 to NFQUEUE 0 (where netns_delay holds it). nft's
# queue expression first; kernels without it (CONFIG_NFT_QUEUE) still have iptables' NFQUEUE.
add_queue_rule() {
  if command -v nft >/dev/null && ip netns exec "$1" nft -f - 2>/dev/null <<EOF
table inet ${prefix}delay { chain in { type filter hook input priority 10; iifname "$2" queue num 0; }; }
EOF
  then return 0; fi
  command -v iptables >/dev/null && ip netns exec "$1" iptables -A INPUT -i "$2" -j NFQUEUE --queue-num 0
}

cmd_check() {
  parse_options "$@"
  local reason
  reason=$(probe) || skip "$reason"
  exit 0
}

# ---- up

cmd_up() {
  local n=${1:-}
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 200)) || die "up: the number of hosts, 1 to 200"
  shift
  parse_options "$@"
  local reason
  reason=$(probe) || die "$reason"
  local state="$state_root/$prefix"
  [[ -e $state || -n $(hosts_of "$prefix") ]] && die "hosts $prefix* exist already: run down --prefix $prefix first"
  mkdir -p "$state"
  if [[ -z $dir ]]; then
    dir=$(mktemp -d "/tmp/$prefix.XXXXXX")
    echo "$dir" >"$state/made_dir"  # down removes it
  fi
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  echo "$dir" >"$state/dir"
  # From here on, a failure leaves nothing behind.
  trap 'if (($? != 0)); then note "up failed; removing what it made"; cmd_down --prefix "$prefix"; fi' EXIT

  # The switch: a bridge in the root namespace with no address and no uplink, so nothing is
  # routed anywhere, and no spanning tree, so ports forward at once.
  local br="${prefix}br"
  ip link add "$br" type bridge stp_state 0 forward_delay 0
  sysctl -qw "net.ipv6.conf.$br.disable_ipv6=1"
  ip link set "$br" mtu "$mtu" up
  # Bridged frames pass the root namespace's FORWARD chain (br_netfilter); a DROP policy there,
  # as Docker sets, would cut the hosts off from each other. Let the bridge's own traffic through.
  if command -v iptables >/dev/null && iptables -S FORWARD >/dev/null 2>&1; then
    iptables -I FORWARD -i "$br" -o "$br" -m comment --comment "netns_cluster $prefix" -j ACCEPT
  fi

  local i ns port
  for ((i = 1; i <= n; i++)); do
    ns="$prefix$i" port="$prefix${i}p"
    ip netns add "$ns"
    echo "$ns" >>"$state/hosts"
    # The host's end is eth0 in its namespace; its peer (PREFIXip) is a bridge port.
    ip link add "$port" mtu "$mtu" type veth peer name eth0 mtu "$mtu" netns "$ns"
    sysctl -qw "net.ipv6.conf.$port.disable_ipv6=1"
    ip link set "$port" master "$br" up
    # IPv4 only: no router solicitations or duplicate address detection to wait for.
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "192.0.2.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
  done

  shape "$n" "$dir"

  local hostfile="$dir/$prefix.hosts"
  : >"$hostfile"
  for ((i = 1; i <= n; i++)); do echo "$prefix$i slots=1" >>"$hostfile"; done
  trap - EXIT
  echo "$hostfile"
}

# The rate: tbf on both ends of every veth. Delay and loss: on what a host receives, so that
# each direction of a path is shaped once and the sender's TCP (whose small-queue limit counts
# packets not yet sent) does not wait for them. netem on the switch's port where the kernel has
# it; otherwise nft drops and netns_delay holds packets in each host's input hook.
shape() {
  local n=$1 dir=$2 i ns port netem=0
  if positive "$delay" || positive "$loss"; then has_netem "${prefix}1" && netem=1; fi
  for ((i = 1; i <= n; i++)); do
    ns="$prefix$i" port="$prefix${i}p"
    local parent=(root)
    if positive "$rate"; then
      tbf "$ns" eth0
      tbf "" "$port"
      parent=(parent 1:1)  # netem under the port's tbf
    fi
    if ((netem)); then
      local args=()
      positive "$delay" && args+=(delay "${delay}ms")
      positive "$loss" && args+=(loss "${loss}%")
      tc qdisc add dev "$port" "${parent[@]}" handle 10: netem "${args[@]}" limit 100000
    elif positive "$loss"; then
      local per10k
      per10k=$(awk -v p="$loss" 'BEGIN { printf "%d", p * 100 + 0.5 }')
      ip netns exec "$ns" nft -f - <<EOF
table inet ${prefix}loss { chain in { type filter hook input priority -10; iifname "eth0" numgen random mod 10000 < $per10k drop; }; }
EOF
    fi
  done
  if ((netem)); then
    note "shaping with netem"
  elif positive "$delay"; then
    start_delay "$n" "$dir"
  fi
  return 0
}

# tbf on device $2 of namespace $1 ("": the root): a bucket that holds a few GSO packets or 4 ms
# at the rate, whichever is more, and a queue of at most 20 ms beyond it.
tbf() {
  local burst
  burst=$(awk -v r="$rate" -v m="$mtu" 'BEGIN { b = r * 1e6 / 8 * 0.004; if (b < 4 * 65536) b = 4 * 65536; if (b < 4 * m) b = 4 * m; printf "%d", b }')
  local run=()
  [[ -n $1 ]] && run=(ip netns exec "$1")
  "${run[@]}" tc qdisc add dev "$2" root handle 1: tbf rate "${rate}mbit" burst "$burst" latency 20ms
}

# Compiles netns_delay into DIR (unless it is there and newer than its source), starts it for
# every host, waits until it holds its queues, then sends the hosts' packets to it.
start_delay() {
  local n=$1 dir=$2 bin="$2/netns_delay" log="$2/$prefix.delay.log" state="$state_root/$prefix"
  if [[ ! -x $bin || $here/netns_delay.c -nt $bin ]]; then
    cc -O2 -Wall "$here/netns_delay.c" -lnetfilter_queue -o "$bin"
  fi
  local paths=() i
  for ((i = 1; i <= n; i++)); do paths+=("$(ns_path "$prefix$i")"); done
  # Its own session, and not on our stdout (a caller's $(...) would wait for it).
  setsid "$bin" --delay "$delay" --queue 0 "${paths[@]}" </dev/null >/dev/null 2>"$log" &
  echo $! >"$state/delay.pid"
  for ((i = 0; i < 100; i++)); do
    grep -q ready "$log" 2>/dev/null && break
    kill -0 "$(cat "$state/delay.pid")" 2>/dev/null || die "netns_delay failed: $(cat "$log")"
    sleep 0.05
  done
  grep -q ready "$log" || die "netns_delay did not start: $(cat "$log")"
  for ((i = 1; i <= n; i++)); do add_queue_rule "$prefix$i" eth0 || die "cannot queue packets for --delay"; done
  note "shaping without netem: --delay by netns_delay (NFQUEUE), --loss by nft numgen"
}

# ---- down

cmd_down() {
  parse_options "$@"
  local state="$state_root/$prefix" ns pid
  local hosts
  hosts=$(hosts_of "$prefix")
  # Power off: every process in a host, so that nothing keeps a namespace (or its veth) alive.
  for ns in $hosts; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  for ns in $hosts; do
    local tries=0
    while [[ -n $(ip netns pids "$ns" 2>/dev/null) ]] && ((tries++ < 50)); do sleep 0.1; done
  done
  # The delay helper, if this is still the process we started (pids are reused).
  if [[ -f $state/delay.pid ]]; then
    pid=$(cat "$state/delay.pid")
    if [[ $(cat "/proc/$pid/comm" 2>/dev/null) == netns_delay ]]; then
      kill -TERM "$pid" 2>/dev/null || true
      local tries=0
      while kill -0 "$pid" 2>/dev/null && ((tries++ < 20)); do sleep 0.1; done
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  # Deleting a namespace removes its veth pair, qdiscs and nft tables with it.
  for ns in $hosts; do ip netns del "$ns" 2>/dev/null || true; done
  local port
  for port in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep -E "^${prefix}[0-9]+p$" || true); do
    ip link del "$port" 2>/dev/null || true
  done
  ip link del "${prefix}br" 2>/dev/null || true
  if command -v iptables >/dev/null; then
    while iptables -D FORWARD -i "${prefix}br" -o "${prefix}br" -m comment \
      --comment "netns_cluster $prefix" -j ACCEPT 2>/dev/null; do :; done
  fi
  if [[ -f $state/dir ]]; then
    local d
    d=$(cat "$state/dir")
    rm -f "$d/$prefix.hosts" "$d/$prefix.delay.log" "$d/netns_delay"
    [[ -f $state/made_dir ]] && rm -rf "$(cat "$state/made_dir")"
  fi
  rm -rf "$state"
  rmdir "$state_root" 2>/dev/null || true
  return 0
}

# ---- link, pids

# The host named $1, which must be one of ours (a namespace with a port on a bridge).
our_host() {
  [[ $1 =~ ^[a-z][a-z0-9]*[0-9]$ ]] && ip netns list | awk '{print $1}' | grep -qx "$1" &&
    ip link show "${1}p" >/dev/null 2>&1 || die "'$1' is not a host of netns_cluster.sh"
}

cmd_link() {
  local name=${1:-} how=${2:-}
  [[ $how == up || $how == down ]] || die "link NAME down|up"
  our_host "$name"
  # The switch's end of the cable: the host sees its carrier go, the others see silence.
  ip link set "${name}p" "$how"
}

cmd_pids() {
  our_host "${1:-}"
  ip netns pids "$1"
}

# As netns_rsh.sh does for orted, but COMMAND's words stay words (no shell in between).
cmd_exec() {
  our_host "${1:-}"
  (($# >= 2)) || die "exec NAME COMMAND..."
  exec ip netns exec "$1" unshare --uts -- /bin/sh -c 'hostname "$1" && shift && exec "$@"' sh "$@"
}

case "${1:-}" in
  up) shift; cmd_up "$@" ;;
  down) shift; cmd_down "$@" ;;
  link) shift; cmd_link "$@" ;;
  pids) shift; cmd_pids "$@" ;;
  exec) shift; cmd_exec "$@" ;;
  check|--check) shift; cmd_check "$@" ;;
  -h|--help) usage ;;
  *) usage >&2; exit 2 ;;
esac

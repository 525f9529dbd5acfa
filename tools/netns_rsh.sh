#!/usr/bin/env bash
# Open MPI's remote shell for the hosts of tools/netns_cluster.sh: runs COMMAND in the network
# namespace HOST with HOST as its host name (so that MPI_Get_processor_name says HOST), as ssh
# would run it on a machine called HOST. Root.
#
#   mpirun --mca plm_rsh_agent /abs/path/tools/netns_rsh.sh --hostfile DIR/vitkh.hosts ...
#   netns_rsh.sh [ssh-style options] HOST COMMAND...
#
# Open MPI 4.1 calls it as `netns_rsh.sh HOST orted -mca ess "env" ...`: the words after HOST are
# joined with spaces and run by bash -c, as ssh does (they hold shell quoting). Options before HOST
# (ssh's -x, -l USER, ...) are ignored. HOST must be a host that netns_cluster.sh up made.
set -euo pipefail

die() { echo "netns_rsh.sh: error: $*" >&2; exit 255; }  # 255: ssh's own failure status

# ssh options Open MPI may add for an agent it takes for ssh or rsh; those with a value take two words.
while [[ ${1:-} == -* ]]; do
  case "$1" in
    -l|-p|-o|-i|-F) shift 2 ;;
    *) shift ;;
  esac
done
(($# >= 2)) || die "usage: netns_rsh.sh HOST COMMAND..."
host=$1
shift

# One of ours: netns_cluster.sh up lists its hosts in /run/vitk-netns/PREFIX/hosts.
if ! [[ $host =~ ^[a-z][a-z0-9]*$ ]] || ! grep -qsx "$host" /run/vitk-netns/*/hosts ||
  [[ ! -e /run/netns/$host ]]; then
  die "'$host' is not a host of tools/netns_cluster.sh (run netns_cluster.sh up, see ip netns list)"
fi

# Every step execs (bash, unlike dash, also execs the last command of a -c list), so that the
# command (orted) is the very process Open MPI started, watches and signals.
# unshare --uts: a host name of its own, which `hostname` sets only for this command.
# shellcheck disable=SC2016  # $1 and $* are the inner shell's
exec ip netns exec "$host" unshare --uts -- /bin/sh -c 'hostname "$1" && shift && exec /bin/bash -c "$*"' \
  sh "$host" "$@"

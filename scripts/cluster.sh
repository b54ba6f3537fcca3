#!/usr/bin/env bash
# A cluster on one machine: H emulated hosts of R slots each, for running Tessera across "hosts"
# under mpirun. Each host is a Linux network namespace (with a host name of its own) and two veth
# links to a switch (bridges in a namespace of its own), as a cluster node with a data network and
# a management network:
#   data        198.18.NET.(11+i), shaped in both directions with an htb class of RATE: MPI's
#               traffic between the hosts (btl tcp) and Tessera's heartbeats;
#   management  198.19.NET.(11+i), not shaped: the launcher's own traffic (Open MPI's daemons,
#               oob tcp), with TCP keepalive so a host that is gone is noticed in about 5 s
#               (and tcp_retries2 7 in every host: unacknowledged data is given up after ~51 s).
# Addresses come only from 198.18.0.0/15 (RFC 2544, benchmarking); NET from TESSERA_CLUSTER_NET
# (default 0). No traffic leaves the namespaces made here: mpirun runs inside host 0, the other
# hosts' daemons are started inside theirs by a small rsh agent (`ip netns exec`, no sshd), and
# Open MPI is told to use only these two networks. Ranks on one host use shared memory; waiting
# ranks yield the CPU (mpi_yield_when_idle: a host's ranks may outnumber its CPUs). Each host has
# CPUs of its own: this machine's CPUs split evenly over the hosts (taskset), unless there are
# fewer CPUs than hosts or `up ... --shared-cpus` (every host on all of them).
# What this does not emulate (docs/CLUSTER.md): latency (no netem in these kernels: the links
# are bandwidth-limited, not delayed) and separate caches and memory (all hosts share the LLC,
# the memory bus and the kernel that runs every link's TCP).
#
#   cluster.sh up H R [--link RATE] [--shared-cpus]
#                                     make H hosts of R slots (RATE as tc takes it: 1gbit, 50mbit;
#                                     default 1gbit), write the hostfile and mpirun flags
#   cluster.sh run [--np N] [MPIRUN_ARGS...] -- CMD [ARGS...]
#                                     mpirun CMD on the hosts (N default H x R, ranks filled
#                                     host by host: ranks 0..R-1 on host 0, ...)
#   cluster.sh mpirun MPIRUN_ARGS...  mpirun with the cluster's flags inside host 0, the arguments
#                                     as given (a launcher for tools that build their own mpirun
#                                     line: tessera-plan calibrate --cross_host_mpirun)
#   cluster.sh exec H -- CMD          run CMD inside host H's namespace
#   cluster.sh link RATE              reshape every link
#   cluster.sh cut H [down|slow|host|tcp]
#                                     cut host H's data link: its switch port down (default), or
#                                     shaped to 8 bit/s both ways; `host`: both of its links down
#                                     (the whole host gone from the network); `tcp`: only its TCP
#                                     shaped to 8 bit/s (a u32 filter), UDP unhurt: MPI's
#                                     connections stall while the host and its heartbeats live
#   cluster.sh kill H                 SIGKILL every process in host H (its ranks and daemon)
#   cluster.sh heal                   end every process left in the hosts, links up at their rate
#   cluster.sh stats                  bytes sent and received per host link
#   cluster.sh flags | hostfile       print the mpirun flags / the hostfile's path
#   cluster.sh down                   remove everything `up` made (also safe when nothing is up)
#
# `up` tears down what it made if it fails half-way (a trap); callers put `cluster.sh down` in
# their own EXIT trap. Needs root, `ip netns`, veth, bridge and tc htb: without them it says why
# and exits 77 (ctest's SKIP_RETURN_CODE for the tests that use it).
# Env: TESSERA_CLUSTER_PREFIX (namespace name prefix, default tsr), TESSERA_CLUSTER_NET (third
# address octet, 0-255, default 0), TESSERA_CLUSTER_STATE (state directory, default
# ${TMPDIR:-/tmp}/tessera-cluster-PREFIX). Two clusters at once need distinct PREFIX and NET.
set -euo pipefail

prefix=${TESSERA_CLUSTER_PREFIX:-tsr}
net=${TESSERA_CLUSTER_NET:-0}
state=${TESSERA_CLUSTER_STATE:-${TMPDIR:-/tmp}/tessera-cluster-$prefix}
sw="$prefix-sw"

die() { echo "cluster.sh: $*" >&2; exit 1; }
skip() { echo "cluster.sh: SKIP: $*" >&2; exit 77; }
usage() { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

host_ns() { echo "$prefix-h$1"; }
host_addr() { echo "198.18.$net.$((11 + $1))"; }
mgmt_addr() { echo "198.19.$net.$((11 + $1))"; }

# Root, the tools, and a namespace with a veth and an htb qdisc: else exit 77.
check_capable() {
  [ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
  command -v ip > /dev/null || skip "no 'ip' command (iproute2)"
  command -v tc > /dev/null || skip "no 'tc' command (iproute2)"
  command -v mpirun > /dev/null || skip "no mpirun"
  command -v unshare > /dev/null || skip "no 'unshare' command (util-linux)"
  local probe="$prefix-probe$$"
  ip netns add "$probe" 2> /dev/null || skip "cannot create a network namespace"
  local ok=1
  ip -n "$probe" link add pa type veth peer name pb 2> /dev/null || ok=0
  [ $ok -eq 1 ] && { ip -n "$probe" link add pbr type bridge 2> /dev/null || ok=0; }
  [ $ok -eq 1 ] && { tc -n "$probe" qdisc add dev pa root handle 1: htb default 1 2> /dev/null ||
                     ok=0; }
  ip netns del "$probe" 2> /dev/null || true
  [ $ok -eq 1 ] || skip "veth, bridge or tc htb not available in a namespace"
}

# This process's CPUs, one per line (its affinity: /proc/self/status Cpus_allowed_list, "0-3,8").
cpu_list() {
  local ranges r
  ranges=$(awk '/^Cpus_allowed_list:/ {print $2}' /proc/self/status)
  IFS=, read -ra ranges <<< "$ranges"
  for r in "${ranges[@]}"; do
    if [[ "$r" == *-* ]]; then seq "${r%-*}" "${r#*-}"; else echo "$r"; fi
  done
}

# host_pin H: "taskset -c LIST" for host H's own CPUs (nothing when the hosts share them).
host_pin() {
  local c
  c=$(sed -n "$(($1 + 1))p" "$state/cpus" 2> /dev/null || true)
  [ -n "$c" ] && echo "taskset -c $c"
  return 0
}

load_state() {
  [ -f "$state/env" ] || die "no cluster is up (no $state/env): run 'cluster.sh up H R' first"
  # shellcheck disable=SC1091
  . "$state/env"
}

# shape NS DEV RATE: one htb class of RATE on DEV's egress.
shape() {
  tc -n "$1" qdisc del dev "$2" root 2> /dev/null || true
  tc -n "$1" qdisc add dev "$2" root handle 1: htb default 1
  tc -n "$1" class add dev "$2" parent 1: classid 1:1 htb rate "$3" ceil "$3" quantum 60000
}

# shape_tcp NS DEV: DEV's TCP (IP protocol 6) into a class of 8 bit/s, the rest at its rate.
shape_tcp() {
  tc -n "$1" class add dev "$2" parent 1: classid 1:2 htb rate 8bit ceil 8bit quantum 1500 \
    2> /dev/null || tc -n "$1" class change dev "$2" parent 1: classid 1:2 htb rate 8bit ceil 8bit
  tc -n "$1" filter add dev "$2" parent 1: protocol ip prio 1 u32 match ip protocol 6 0xff \
    flowid 1:2 || die "cut tcp: tc cannot classify by IP protocol here (u32 filter)"
}

# Ends every process inside host namespaces (leftovers of a cut or killed run).
kill_host_procs() {
  local h pids
  for h in "$@"; do
    pids=$(ip netns pids "$(host_ns "$h")" 2> /dev/null || true)
    [ -n "$pids" ] && kill -9 $pids 2> /dev/null || true
  done
  return 0
}

cmd_down() {
  local ns
  for ns in $(ip netns list 2> /dev/null | awk '{print $1}'); do
    case "$ns" in
      "$prefix"-h[0-9]*|"$sw")
        local pids
        pids=$(ip netns pids "$ns" 2> /dev/null || true)
        [ -n "$pids" ] && kill -9 $pids 2> /dev/null || true
        ip netns del "$ns" 2> /dev/null || true ;;
    esac
  done
  rm -rf "$state"
}

cmd_up() {
  [ $# -ge 2 ] || usage
  local hosts=$1 slots=$2 rate=1gbit pin=1; shift 2
  while [ $# -gt 0 ]; do
    case "$1" in
      --link) rate=$2; shift 2 ;;
      --link=*) rate=${1#--link=}; shift ;;
      --shared-cpus) pin=0; shift ;;
      *) die "up: unknown argument '$1'" ;;
    esac
  done
  [[ "$hosts" =~ ^[0-9]+$ ]] && [ "$hosts" -ge 1 ] && [ "$hosts" -le 200 ] ||
    die "up: H must be 1..200, got '$hosts'"
  [[ "$slots" =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die "up: R must be >= 1, got '$slots'"
  [[ "$net" =~ ^[0-9]+$ ]] && [ "$net" -le 255 ] ||
    die "TESSERA_CLUSTER_NET must be 0..255, got '$net'"
  check_capable
  [ -f "$state/env" ] && die "a cluster is already up ($state/env); run 'cluster.sh down' first"
  ip netns list | awk '{print $1}' | grep -qx "$sw" &&
    die "namespace $sw exists already (another cluster with prefix '$prefix'?)"
  trap 'echo "cluster.sh: up failed; tearing down" >&2; cmd_down' ERR
  mkdir -p "$state"
  ip netns add "$sw"
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  ip -n "$sw" link add br1 type bridge
  ip -n "$sw" link set br1 up
  ip -n "$sw" link set lo up
  local i ns
  : > "$state/hostfile"
  # Each host's own CPUs: this machine's usable CPUs split evenly over the hosts (every host
  # at least one), as a cluster's nodes each have their own cores; with fewer CPUs than hosts,
  # --shared-cpus or no taskset, every host runs on all of them. One line per host (a taskset
  # CPU list; empty: not pinned).
  local cpus=() ncpu
  mapfile -t cpus < <(cpu_list)
  ncpu=${#cpus[@]}
  : > "$state/cpus"
  for ((i = 0; i < hosts; i++)); do
    if [ "$pin" = 1 ] && [ "$ncpu" -ge "$hosts" ] && command -v taskset > /dev/null; then
      local lo=$((i * ncpu / hosts)) hi=$(((i + 1) * ncpu / hosts)) list="" j
      for ((j = lo; j < hi; j++)); do list+="${list:+,}${cpus[$j]}"; done
      echo "$list" >> "$state/cpus"
    else
      echo "" >> "$state/cpus"
    fi
  done
  for ((i = 0; i < hosts; i++)); do
    ns=$(host_ns "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # The pair is made in the host and its far end moved to the switch as port h<i>.
    ip -n "$ns" link add eth0 type veth peer name "h$i"
    ip -n "$ns" link set "h$i" netns "$sw"
    ip -n "$ns" addr add "$(host_addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$sw" link set "h$i" master br0
    ip -n "$sw" link set "h$i" up
    ip -n "$ns" link add mgmt0 type veth peer name "m$i"
    ip -n "$ns" link set "m$i" netns "$sw"
    ip -n "$ns" addr add "$(mgmt_addr "$i")/24" dev mgmt0
    ip -n "$ns" link set mgmt0 up
    ip -n "$sw" link set "m$i" master br1
    ip -n "$sw" link set "m$i" up
    # TCP gives up on unacknowledged data after about 51 s instead of ~15 min (tcp_retries2 7:
    # 0.2 s doubling, 255 x 0.2 s): mpirun with a message in flight to a lost host's daemon
    # (keepalive probes only idle connections) then notices the loss within a minute.
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2=7
    shape "$ns" eth0 "$rate"       # host -> switch
    shape "$sw" "h$i" "$rate"      # switch -> host
    echo "$(host_addr "$i") slots=$slots" >> "$state/hostfile"
  done
  # The rsh agent Open MPI's launcher uses for the other hosts: `agent HOST CMD...` runs the
  # daemon's command line in HOST's namespace.
  cat > "$state/rsh" <<EOF
#!/usr/bin/env bash
# Open MPI's plm_rsh_agent for the emulated hosts (written by cluster.sh): HOST CMD...
host=\$1; shift
while [ "\${host#-}" != "\$host" ]; do host=\$1; shift; done  # ssh-style options, if any
i=\$(( \${host##*.} - 11 ))
cpus=\$(sed -n "\$((i + 1))p" "$state/cpus")
pin=(); [ -n "\$cpus" ] && pin=(taskset -c "\$cpus")
exec ip netns exec "$prefix-h\$i" "\${pin[@]}" unshare --uts sh -c "hostname $prefix-h\$i && \$*"
EOF
  chmod +x "$state/rsh"
  cat > "$state/flags" <<EOF
--hostfile $state/hostfile
--mca plm_rsh_agent $state/rsh
--mca plm_rsh_no_tree_spawn 1
--mca btl tcp,vader,self
--bind-to none
--mca mpi_yield_when_idle 1
--mca btl_tcp_if_include 198.18.$net.0/24
--mca oob_tcp_if_include 198.19.$net.0/24
--mca oob_tcp_keepalive_time 2
--mca oob_tcp_keepalive_intvl 1
--mca oob_tcp_keepalive_probes 3
EOF
  [ "$(id -u)" -eq 0 ] && echo "--allow-run-as-root" >> "$state/flags"
  cat > "$state/env" <<EOF
HOSTS=$hosts
SLOTS=$slots
RATE=$rate
EOF
  trap - ERR
  echo "cluster.sh: $hosts host(s) x $slots slot(s), links $rate; hostfile $state/hostfile"
}

cmd_run() {
  load_state
  local np=$((HOSTS * SLOTS)) extra=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    case "$1" in
      --np) np=$2; shift 2 ;;
      *) extra+=("$1"); shift ;;
    esac
  done
  [ "${1:-}" = "--" ] || die "run: expected -- CMD"
  shift
  [ $# -ge 1 ] || die "run: no command after --"
  cmd_mpirun -np "$np" "${extra[@]}" "$@"
}

# mpirun ARGS... inside host 0 with the cluster's flags (what `run` does, the arguments as given).
cmd_mpirun() {
  load_state
  local flags
  mapfile -t flags < <(tr ' ' '\n' < "$state/flags" | sed '/^$/d')
  # The working directory and environment carry over (mpirun passes OMPI_* and -x variables).
  # Each host has a host name of its own (a UTS namespace): Open MPI names its shared-memory
  # segments and session directories after it, so two hosts must not share one.
  exec ip netns exec "$(host_ns 0)" $(host_pin 0) unshare --uts env OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 sh -c 'hostname "$0" && exec "$@"' "$(host_ns 0)" \
    mpirun "${flags[@]}" "$@"
}

cmd_exec() {
  load_state
  local h=$1; shift
  [ "${1:-}" = "--" ] && shift
  exec ip netns exec "$(host_ns "$h")" $(host_pin "$h") "$@"
}

cmd_link() {
  load_state
  local rate=$1 i
  for ((i = 0; i < HOSTS; i++)); do
    shape "$(host_ns "$i")" eth0 "$rate"
    shape "$sw" "h$i" "$rate"
  done
  sed -i "s/^RATE=.*/RATE=$rate/" "$state/env"
}

cmd_cut() {
  load_state
  local h=$1 how=${2:-down}
  [ "$h" -ge 0 ] && [ "$h" -lt "$HOSTS" ] || die "cut: no host $h (hosts 0..$((HOSTS - 1)))"
  case "$how" in
    down) ip -n "$sw" link set "h$h" down ;;
    slow) shape "$(host_ns "$h")" eth0 8bit; shape "$sw" "h$h" 8bit ;;
    host) ip -n "$sw" link set "h$h" down; ip -n "$sw" link set "m$h" down ;;
    tcp) shape_tcp "$(host_ns "$h")" eth0; shape_tcp "$sw" "h$h" ;;
    *) die "cut: 'down', 'slow', 'host' or 'tcp', got '$how'" ;;
  esac
}

cmd_heal() {
  load_state
  local i hs=()
  for ((i = 0; i < HOSTS; i++)); do hs+=("$i"); done
  kill_host_procs "${hs[@]}"
  for ((i = 0; i < HOSTS; i++)); do
    ip -n "$sw" link set "h$i" up
    ip -n "$sw" link set "m$i" up
    shape "$(host_ns "$i")" eth0 "$RATE"
    shape "$sw" "h$i" "$RATE"
  done
}

cmd_stats() {
  load_state
  local i
  for ((i = 0; i < HOSTS; i++)); do
    local rx tx
    rx=$(ip netns exec "$(host_ns "$i")" cat /sys/class/net/eth0/statistics/rx_bytes)
    tx=$(ip netns exec "$(host_ns "$i")" cat /sys/class/net/eth0/statistics/tx_bytes)
    echo "host $i $(host_addr "$i") tx_bytes $tx rx_bytes $rx"
  done
}

[ $# -ge 1 ] || usage
cmd=$1; shift
case "$cmd" in
  up) cmd_up "$@" ;;
  run) cmd_run "$@" ;;
  mpirun) cmd_mpirun "$@" ;;
  exec) [ $# -ge 2 ] || usage; cmd_exec "$@" ;;
  link) [ $# -eq 1 ] || usage; cmd_link "$1" ;;
  cut) [ $# -ge 1 ] || usage; cmd_cut "$@" ;;
  kill) [ $# -eq 1 ] || usage; load_state; kill_host_procs "$1" ;;
  heal) cmd_heal ;;
  stats) cmd_stats ;;
  flags) load_state; cat "$state/flags" ;;
  hostfile) load_state; echo "$state/hostfile" ;;
  down) [ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"; cmd_down ;;
  -h|--help|help) usage ;;
  *) die "unknown command '$cmd' (up, run, mpirun, exec, link, cut, kill, heal, stats, flags, hostfile, down)" ;;
esac

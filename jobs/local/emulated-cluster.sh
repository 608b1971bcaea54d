#!/usr/bin/env bash
# Several "nodes" on this machine: one network namespace per node, each with its own hostname and one
# link to a shared bridge, shaped to a bandwidth with tc. Real MPI runs across them with
# jobs/local/mpiexec-emulated. Needs root (ip netns, tc, /etc/hosts).
#   jobs/local/emulated-cluster.sh up --nodes N --rate R [--burst B]
#       N nodes (2-16) enode1..enodeN at 198.18.0.1..N/24, the bridge hpcb-br0 at 198.18.0.254;
#       R a tc rate (1gbit, 100mbit, 500kbit...) applied both ways on every link (tbf: the bridge-side
#       end shapes what enters a node, the node's eth0 what leaves it); B the tbf burst (default 256kb).
#       Says what it creates; run again with other settings it reshapes or rebuilds (idempotent).
#   jobs/local/emulated-cluster.sh status     the nodes, their addresses and link rates
#   jobs/local/emulated-cluster.sh down       removes exactly what `up` created: the namespaces, their
#       links, the bridge, /etc/netns/enodeK and the lines `up` added to /etc/hosts (marked
#       "hpcbench-emulated"); nothing else is touched.
# The kernel may lack netem: bandwidth can be shaped, extra latency cannot. Addresses come only from
# 198.18.0.0/15 (reserved for benchmarking); no traffic leaves the namespaces made here.
set -euo pipefail

STATE=/run/hpcbench-emulated/cluster
BRIDGE=hpcb-br0
BRIDGE_ADDR=198.18.0.254
MARK="# hpcbench-emulated"
PREFIX=enode

say() { echo "emulated-cluster.sh: $*"; }
die() { echo "emulated-cluster.sh: error: $*" >&2; exit 2; }

[ "$(id -u)" = 0 ] || die "needs root (ip netns, tc and /etc/hosts)"
for tool in ip tc; do command -v "$tool" >/dev/null || die "'$tool' not found (the iproute2 package)"; done

nodes_in_state() { [ -s "$STATE" ] && awk -F= '$1 == "nodes" {print $2}' "$STATE" || echo 0; }

down() {
    local n
    n=$(nodes_in_state)
    for k in $(seq 1 "$n"); do
        if ip netns list | grep -qw "$PREFIX$k"; then
            ip netns delete "$PREFIX$k"  # takes its end of the veth, and so the pair, with it
            say "removed node $PREFIX$k"
        fi
        ip link delete "v-$PREFIX$k" 2>/dev/null || true
        rm -rf "/etc/netns/$PREFIX$k"
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link delete "$BRIDGE"
        say "removed bridge $BRIDGE"
    fi
    if grep -q "$MARK" /etc/hosts; then
        # Rewritten in place (not replaced): /etc/hosts may be a bind mount.
        grep -v "$MARK" /etc/hosts > /etc/hosts.hpcbench-tmp || true
        cat /etc/hosts.hpcbench-tmp > /etc/hosts
        rm -f /etc/hosts.hpcbench-tmp
        say "removed the emulated nodes' lines from /etc/hosts"
    fi
    rm -f "$STATE"
    rmdir /etc/netns 2>/dev/null || true
}

shape() {  # shape DEV [NETNS]: a token bucket at $RATE on DEV's egress
    local dev=$1 ns=${2:-}
    local run=()
    [ -n "$ns" ] && run=(ip netns exec "$ns")
    "${run[@]}" tc qdisc replace dev "$dev" root tbf rate "$RATE" burst "$BURST" latency 200ms
}

status() {
    if [ ! -s "$STATE" ]; then
        echo "no emulated cluster (jobs/local/emulated-cluster.sh up --nodes N --rate R)"
        return 0
    fi
    local n rate
    n=$(nodes_in_state)
    rate=$(awk -F= '$1 == "rate" {print $2}' "$STATE")
    burst=$(awk -F= '$1 == "burst" {print $2}' "$STATE")
    echo "emulated cluster: $n nodes, links $rate each way (burst $burst), bridge $BRIDGE $BRIDGE_ADDR"
    for k in $(seq 1 "$n"); do
        local up="missing"
        ip netns list | grep -qw "$PREFIX$k" && up="up"
        qdisc=$(ip netns exec "$PREFIX$k" tc qdisc show dev eth0 2>/dev/null | awk '/tbf/ {print $8}' || true)
        echo "  $PREFIX$k  198.18.0.$k  $up  eth0 rate ${qdisc:-?}"
    done
}

up() {
    local n=""
    RATE="" BURST=256kb
    while [ $# -gt 0 ]; do
        case "$1" in
            --nodes) n=${2:-}; shift 2 ;;
            --rate) RATE=${2:-}; shift 2 ;;
            --burst) BURST=${2:-}; shift 2 ;;
            *) die "unknown option '$1'; valid: --nodes N --rate R [--burst B]" ;;
        esac
    done
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 16 ] || die "--nodes must be 2..16, got '$n'"
    [[ "$RATE" =~ ^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$ ]] \
        || die "--rate must be a tc rate such as 1gbit or 100mbit, got '$RATE'"
    [[ "$BURST" =~ ^[0-9]+(b|kb|mb|k|m)?$ ]] || die "--burst must be a size such as 256kb, got '$BURST'"
    if [ "$(nodes_in_state)" != 0 ] && [ "$(nodes_in_state)" != "$n" ]; then
        say "rebuilding: $(nodes_in_state) nodes up, $n asked for"
        down
    fi
    mkdir -p "$(dirname "$STATE")"
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
        ip addr add "$BRIDGE_ADDR/24" dev "$BRIDGE"
        ip link set "$BRIDGE" up
        say "created bridge $BRIDGE ($BRIDGE_ADDR/24)"
    fi
    local here
    here=$(hostname)
    for k in $(seq 1 "$n"); do
        local node=$PREFIX$k
        if ! ip netns list | grep -qw "$node"; then
            ip netns add "$node"
            ip link add "v-$node" type veth peer name eth0 netns "$node"
            ip link set "v-$node" master "$BRIDGE" up
            ip netns exec "$node" ip addr add "198.18.0.$k/24" dev eth0
            ip netns exec "$node" ip link set eth0 up
            ip netns exec "$node" ip link set lo up
            say "created node $node (198.18.0.$k), linked to $BRIDGE"
        fi
        mkdir -p "/etc/netns/$node"
        {
            echo "127.0.0.1 localhost"
            echo "$BRIDGE_ADDR $here"
            for j in $(seq 1 "$n"); do echo "198.18.0.$j $PREFIX$j"; done
        } > "/etc/netns/$node/hosts"
        shape "v-$node"
        shape eth0 "$node"
    done
    if ! grep -q "$MARK" /etc/hosts; then
        for j in $(seq 1 "$n"); do echo "198.18.0.$j $PREFIX$j $MARK"; done >> /etc/hosts
        say "added $n lines to /etc/hosts (marked '$MARK')"
    fi
    printf 'nodes=%s\nrate=%s\nburst=%s\n' "$n" "$RATE" "$BURST" > "$STATE"
    say "links shaped to $RATE each way (burst $BURST); run across the nodes with jobs/local/mpiexec-emulated"
}

case "${1:-}" in
    up) shift; up "$@" ;;
    down) down ;;
    status) status ;;
    *) die "unknown command '${1:-}'; valid: up --nodes N --rate R [--burst B], status, down" ;;
esac

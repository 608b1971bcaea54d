#!/usr/bin/env bash
# Several "nodes" on this machine: one network namespace per node, each with its own hostname and one
# link to a shared bridge, shaped to a bandwidth with tc. Real MPI runs across them with
# jobs/local/mpiexec-emulated. Needs root (ip netns, tc, /etc/hosts).
#   jobs/local/emulated-cluster.sh up --nodes N --rate R [--burst B] [--owner NAME]
#       N nodes (2-16) enode1..enodeN at 198.18.0.1..N/24, the bridge hpcb-br0 at 198.18.0.254;
#       R a tc rate (1gbit, 100mbit, 500kbit...) applied both ways on every link (tbf: the bridge-side
#       end shapes what enters a node, the node's eth0 what leaves it); B the tbf burst (default 256kb).
#       Says what it creates; run again with other settings it reshapes or rebuilds (idempotent).
#       Transactional: its state is written before anything is made ("building"), and a failure on the
#       way (a tool refusing, Ctrl-C, SIGTERM) removes everything it made; after a SIGKILL the state
#       still says "building", and status and the next up or down find what was left.
#       NAME (default "user") marks who brought the cluster up: up and down refuse a cluster another
#       owner brought up, so a tool never reshapes or removes the cluster someone else is using.
#   jobs/local/emulated-cluster.sh status     the nodes, their addresses, link rates and owner; a half-built
#       cluster, or leftovers with no state, are named with what to do
#   jobs/local/emulated-cluster.sh down [--owner NAME]   removes what the state or the naming scheme says
#       is ours: every enodeK namespace, v-enodeK link, /etc/netns/enodeK, the bridge, and the lines `up`
#       added to /etc/hosts (marked "hpcbench-emulated"); nothing else is touched.
# The kernel may lack netem: bandwidth can be shaped, extra latency cannot. Addresses come only from
# 198.18.0.0/15 (reserved for benchmarking); no traffic leaves the namespaces made here.
set -Eeuo pipefail  # -E: the ERR trap that rolls a failed up back fires inside functions too

STATE=/run/hpcbench-emulated/cluster
BRIDGE=hpcb-br0
BRIDGE_ADDR=198.18.0.254
MARK="# hpcbench-emulated"
PREFIX=enode

say() { echo "emulated-cluster.sh: $*"; }
die() { echo "emulated-cluster.sh: error: $*" >&2; exit 2; }

[ "$(id -u)" = 0 ] || die "needs root (ip netns, tc and /etc/hosts)"
for tool in ip tc; do command -v "$tool" >/dev/null || die "'$tool' not found (the iproute2 package)"; done

field() { [ -s "$STATE" ] && awk -F= -v k="$1" '$1 == k {print $2}' "$STATE" || true; }
nodes_in_state() { local n; n=$(field nodes); echo "${n:-0}"; }
owner_in_state() { local o; o=$(field owner); echo "${o:-user}"; }

# What the naming scheme says is ours, whatever the state says (a SIGKILLed up leaves no complete state).
our_namespaces() { ip netns list | awk '{print $1}' | grep -E "^$PREFIX[0-9]+\$" || true; }
our_links() { ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^(v-$PREFIX[0-9]+|$BRIDGE)\$" || true; }
leftovers() {
    our_namespaces; our_links
    ls -d /etc/netns/"$PREFIX"[0-9]* 2>/dev/null || true
    grep -c "$MARK" /etc/hosts >/dev/null 2>&1 && echo "/etc/hosts lines" || true
}

refuse_other_owner() {  # refuse_other_owner NAME: a cluster brought up by someone else is left as it is
    if [ -s "$STATE" ] && [ "$(owner_in_state)" != "$1" ]; then
        die "the emulated cluster up now was brought up by '$(owner_in_state)', not '$1': it is left as it is \
($(nodes_in_state) nodes, $(field rate)); take it down with: jobs/local/emulated-cluster.sh down --owner $(owner_in_state)"
    fi
}

down() {
    local ns link
    for ns in $(our_namespaces); do
        ip netns delete "$ns"  # takes its end of the veth, and so the pair, with it
        say "removed node $ns"
    done
    for link in $(our_links); do
        [ "$link" = "$BRIDGE" ] && continue
        ip link delete "$link" 2>/dev/null || true
    done
    rm -rf /etc/netns/"$PREFIX"[0-9]*
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
    local left
    left=$(leftovers | tr '\n' ' ')
    if [ ! -s "$STATE" ]; then
        if [ -n "$left" ]; then
            echo "no emulated cluster, but leftovers of one with no state: ${left% }; remove them with: jobs/local/emulated-cluster.sh down"
            return 1
        fi
        echo "no emulated cluster (jobs/local/emulated-cluster.sh up --nodes N --rate R)"
        return 0
    fi
    if [ "$(field state)" != up ]; then
        echo "a half-built emulated cluster: up was stopped before it finished (owner '$(owner_in_state)'); what it made: ${left% }; remove it with: jobs/local/emulated-cluster.sh down"
        return 1
    fi
    local n rate
    n=$(nodes_in_state)
    rate=$(field rate)
    burst=$(field burst)
    echo "emulated cluster: $n nodes, links $rate each way (burst $burst), bridge $BRIDGE $BRIDGE_ADDR, owner '$(owner_in_state)'"
    for k in $(seq 1 "$n"); do
        local up="missing"
        ip netns list | grep -qw "$PREFIX$k" && up="up"
        qdisc=$(ip netns exec "$PREFIX$k" tc qdisc show dev eth0 2>/dev/null | awk '/tbf/ {print $8}' || true)
        echo "  $PREFIX$k  198.18.0.$k  $up  eth0 rate ${qdisc:-?}"
    done
}

up() {
    local n="" owner=user
    RATE="" BURST=256kb
    while [ $# -gt 0 ]; do
        case "$1" in
            --nodes) n=${2:-}; shift 2 ;;
            --rate) RATE=${2:-}; shift 2 ;;
            --burst) BURST=${2:-}; shift 2 ;;
            --owner) owner=${2:-}; shift 2 ;;
            *) die "unknown option '$1'; valid: --nodes N --rate R [--burst B] [--owner NAME]" ;;
        esac
    done
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 16 ] || die "--nodes must be 2..16, got '$n'"
    [[ "$RATE" =~ ^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit|bps|kbps|mbps|gbps)$ ]] \
        || die "--rate must be a tc rate such as 1gbit or 100mbit, got '$RATE'"
    [[ "$BURST" =~ ^[0-9]+(b|kb|mb|k|m)?$ ]] || die "--burst must be a size such as 256kb, got '$BURST'"
    [[ "$owner" =~ ^[A-Za-z0-9_.-]+$ ]] || die "--owner must be a plain name, got '$owner'"
    refuse_other_owner "$owner"
    if [ -s "$STATE" ] && [ "$(field state)" != up ]; then
        say "a half-built cluster was left (up did not finish): removing it first"
        down
    elif [ "$(nodes_in_state)" != 0 ] && [ "$(nodes_in_state)" != "$n" ]; then
        say "rebuilding: $(nodes_in_state) nodes up, $n asked for"
        down
    elif [ ! -s "$STATE" ] && [ -n "$(leftovers)" ]; then
        say "leftovers of an earlier cluster with no state: removing them first"
        down
    fi
    mkdir -p "$(dirname "$STATE")"
    # The state first: whatever happens next, status and down know a cluster was being built, and by whom.
    save_state() { printf 'state=%s\nnodes=%s\nrate=%s\nburst=%s\nowner=%s\n' "$1" "$n" "$RATE" "$BURST" "$owner" > "$STATE"; }
    save_state building
    trap 'rollback "$BASH_COMMAND"' ERR
    trap 'rollback "stopped by a signal"' INT TERM HUP
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
    save_state up
    trap - ERR INT TERM HUP
    say "links shaped to $RATE each way (burst $BURST); run across the nodes with jobs/local/mpiexec-emulated"
}

rollback() {  # rollback WHAT: up failed at WHAT; remove everything it made, then fail in one line
    trap - ERR INT TERM HUP
    down >/dev/null 2>&1 || true
    die "up failed at: $1; everything it made was removed (nothing is left half-built)"
}

down_as() {  # down [--owner NAME]
    local owner=user
    if [ "${1:-}" = --owner ]; then owner=${2:-}; fi
    refuse_other_owner "$owner"
    down
}

case "${1:-}" in
    up) shift; up "$@" ;;
    down) shift; down_as "$@" ;;
    status) status ;;
    *) die "unknown command '${1:-}'; valid: up --nodes N --rate R [--burst B], status, down" ;;
esac

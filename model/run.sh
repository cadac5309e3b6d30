#!/bin/sh
# Runs every SPIN model of model/ (issue 33) and checks each variant's expected outcome:
# "pass" variants must finish with no error, "fail" variants must produce a counterexample
# (a known-bad variant that passes fails this script). Usage: sh model/run.sh [builddir]
# Bounds and state counts: docs/models.md.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-build/model}
mkdir -p "$out"
out=$(cd "$out" && pwd)
status=0

# run NAME MODEL EXPECT(pass|fail) KIND(safety|live) SPIN-DEFINES...
run() {
    name=$1 model=$2 expect=$3 kind=$4
    shift 4
    d="$out/$name"
    rm -rf "$d" && mkdir -p "$d" && cp "$here/$model" "$d/" && cd "$d" || exit 1
    if [ "$kind" = safety ]; then
        cc="-DSAFETY -DCOLLAPSE -DNFAIR=8"
        pan="-m200000"
        grep -q "^ltl" "$model" && pan="$pan -noclaim"
    else
        cc="-DCOLLAPSE -DNFAIR=8"
        pan="-m200000 -a -f"
    fi
    start=$(date +%s)
    if ! spin "$@" -a "$model" >spin.log 2>&1 || ! gcc -w -O2 $cc -o pan pan.c >gcc.log 2>&1; then
        echo "model: $name: spin or gcc failed (see $d)"
        status=1
        cd - >/dev/null
        return
    fi
    ./pan $pan >pan.log 2>&1
    errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' pan.log | head -1)
    states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' pan.log | head -1)
    secs=$(($(date +%s) - start))
    got=pass
    [ "${errors:-1}" != 0 ] && got=fail
    if [ "$got" = "$expect" ]; then
        verdict=ok
    else
        verdict=UNEXPECTED
        status=1
    fi
    echo "model: $name ($kind, $*): $got as expected=$expect: $verdict; $states states, ${secs}s"
    if [ "$got" = fail ]; then
        spin "$@" -t "$model" >trail.txt 2>&1
        echo "  counterexample: $d/trail.txt"
    fi
    cd - >/dev/null
}

# model 2: one owner per shard (ticks: heartbeat 1, pause 1, stable-after 4, fence-after 3)
run owner_fence shard_owner.pml pass safety -DAP=1 -DSA=4 -DFM=1 -DMAXCUTS=1
run owner_no_margin shard_owner.pml fail safety -DAP=1 -DSA=4 -DFM=0 -DFA=5 -DDRM=0 -DMAXCUTS=1
# model 1: quorum intersection across restarts (2 writes; FAULTS = crash/restart/cut/heal/remove/join
# events). RULE=4 the age rule of the code now (repl_catch_up_done), RULE=1 the rule of 672634c,
# 2 no catching up (docs/models.md). -DA2: the fault budget keeps A2 (at most one member of a
# write's counted set stops counting). LIVE=2: the oldest majority up and connected.
run quorum3_age_safety quorum_restart.pml pass safety -DN=3 -DRULE=4 -DA2 -DFAULTS=3
# 5 members: -DFORMED (the founders caught up before anything; 3 members check the formation)
run quorum5_age_safety quorum_restart.pml pass safety -DN=5 -DRULE=4 -DA2 -DFORMED -DFAULTS=2
run quorum3_age_live_oldest quorum_restart.pml pass live -DN=3 -DRULE=4 -DA2 -DFAULTS=3 -DLIVE=2
run quorum5_age_live_oldest quorum_restart.pml pass live -DN=5 -DRULE=4 -DA2 -DFORMED -DFAULTS=2 -DLIVE=2
# expected to fail: the age rule is NOT live for "any majority up, no empty restart": a restart
# with its store is a new incarnation, the youngest, which waits for every older member it needs
# (docs/models.md); it holds once the oldest majority is up (above) or the resolver removes the
# crashed one
run quorum3_age_live_any quorum_restart.pml fail live -DN=3 -DRULE=4 -DA2 -DFAULTS=3 -DLIVE=1
run quorum3_672634c_safety quorum_restart.pml pass safety -DN=3 -DRULE=1 -DFAULTS=4
run quorum3_672634c_live_oldest quorum_restart.pml fail live -DN=3 -DRULE=1 -DA2 -DFAULTS=3 -DLIVE=2
run quorum3_672634c_live quorum_restart.pml fail live -DN=3 -DRULE=1 -DFAULTS=3
run quorum5_672634c_live quorum_restart.pml fail live -DN=5 -DRULE=1 -DFAULTS=2
run quorum3_no_catch_up quorum_restart.pml fail safety -DN=3 -DRULE=2 -DFAULTS=3
run quorum5_no_catch_up quorum_restart.pml fail safety -DN=5 -DRULE=2 -DFAULTS=3
# model 3: the protocol switch (3 nodes of max 1 or 2, EVENTS joins and crashes)
run protocol_safety protocol_switch.pml pass safety -DEVENTS=6
run protocol_live protocol_switch.pml pass live -DEVENTS=6
run protocol_no_handshake protocol_switch.pml fail safety -DEVENTS=4 -DNOHS
run protocol_no_rewrite protocol_switch.pml fail live -DEVENTS=4 -DNOREWRITE
exit $status

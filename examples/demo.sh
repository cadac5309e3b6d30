#!/bin/sh
# The README's main job: Shoal's demos. Argument: the folder of the release binaries.
set -eu
bin=${1:-build/bin}

echo "== crdt-tour: three replicas, concurrent changes, deltas exchanged as bytes =="
"$bin/crdt-tour"

echo
echo "== replicated-map: three node processes share a map; one is killed with SIGKILL =="
base=$(( 20000 + $$ % 12000 ))  # below the kernel's ephemeral ports (32768-)
p1=$base; p2=$((base + 1)); p3=$((base + 2))
dir=$(mktemp -d)
cleanup() { kill -9 $pids 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
pids=""
for p in $p1 $p2 $p3; do
    others=""
    for q in $p1 $p2 $p3; do [ "$q" = "$p" ] || others="$others $q"; done
    # shellcheck disable=SC2086
    "$bin/replicated-map" node "$p" $others >"$dir/$p.log" 2>&1 &
    pids="$pids $!"
done
map="$bin/replicated-map"
# a majority counts the peers a node knows: wait until every node knows the other two
for p in $p1 $p2 $p3; do
    i=0
    until "$map" wait "$p" 2 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt 10 ] || { echo "FAIL: the nodes did not find each other"; cat "$dir"/*.log; exit 1; }
        sleep 0.5
    done
done
"$map" put $p1 greeting hello majority
echo "\$ replicated-map put $p1 greeting hello majority   -> ok"
"$map" put $p2 lang C majority && echo "\$ replicated-map put $p2 lang C majority   -> ok"
echo "\$ replicated-map get $p3 '' majority   (read through the third node)"
first=$("$map" get $p3 "" majority)
echo "$first" | sed 's/^/    /'
for want in "greeting = hello" "lang = C"; do
    echo "$first" | grep -qx "$want" || { echo "FAIL: majority read missed '$want'"; exit 1; }
done
victim=$(echo $pids | cut -d' ' -f3)
kill -9 "$victim"
echo "node on port $p3 killed with SIGKILL"
"$map" put $p1 after-kill still-works majority && echo "\$ replicated-map put $p1 after-kill still-works majority   -> ok (2 of 3 is a majority)"
out=$("$map" get $p2 "" majority)
echo "\$ replicated-map get $p2 '' majority"
echo "$out" | sed 's/^/    /'
for want in "greeting = hello" "lang = C" "after-kill = still-works"; do
    echo "$out" | grep -qx "$want" || { echo "FAIL: missing '$want'"; exit 1; }
done
if "$map" put $p1 needs-all x all 2>/dev/null; then
    echo "FAIL: WriteAll succeeded with a node dead"; exit 1
fi
echo "\$ replicated-map put $p1 needs-all x all   -> timed out, as it must with a node dead"
echo "OK: every acknowledged write is readable from the survivors"

echo
echo "== cluster membership: members join through a seed; one is killed, one leaves =="
kill -9 $pids 2>/dev/null || true
pids=""
c1=$((base + 10)); c2=$((base + 11)); c3=$((base + 12)); c4=$((base + 13))
seed="tcp://127.0.0.1:$c1"
for p in $c1 $c2 $c3 $c4; do
    "$bin/shoal-member" --bind "tcp://127.0.0.1:$p" --seed "$seed" --fast >"$dir/m$p.log" 2>&1 &
    pids="$pids $!"
done
tool="$bin/shoal-cluster"
# waits until the node on port $1 lists exactly $2 members, all Up and converged
wait_members() {
    i=0
    while :; do
        json=$("$tool" --node "tcp://127.0.0.1:$1" --json members 2>/dev/null || true)
        n=$(echo "$json" | grep -o '"status":"Up"' | wc -l)
        total=$(echo "$json" | grep -o '"status":' | wc -l)
        if [ "$n" -eq "$2" ] && [ "$total" -eq "$2" ] && echo "$json" | grep -q '"converged":true'; then
            return 0
        fi
        i=$((i + 1))
        [ $i -lt 60 ] || { echo "FAIL: expected $2 members Up at port $1"; echo "$json"; cat "$dir"/m*.log | tail -40; exit 1; }
        sleep 0.5
    done
}
wait_members $c2 4
echo "\$ shoal-cluster --node tcp://127.0.0.1:$c2 members"
"$tool" --node "tcp://127.0.0.1:$c2" members | sed 's/^/    /'
victim=$(echo $pids | cut -d' ' -f4)
kill -9 "$victim"
echo "member on port $c4 killed with SIGKILL: unreachable, downed by the split-brain resolver (keep-majority), removed"
wait_members $c2 3
"$tool" --node "tcp://127.0.0.1:$c2" members | sed 's/^/    /'
echo "\$ shoal-cluster --node tcp://127.0.0.1:$c1 leave 127.0.0.1:$c3"
"$tool" --node "tcp://127.0.0.1:$c1" leave "127.0.0.1:$c3" | sed 's/^/    /'
wait_members $c1 2
"$tool" --node "tcp://127.0.0.1:$c1" members | sed 's/^/    /'
leaver=$(echo $pids | cut -d' ' -f3)
i=0
while kill -0 "$leaver" 2>/dev/null; do
    i=$((i + 1))
    [ $i -lt 40 ] || { echo "FAIL: the member that left did not exit"; exit 1; }
    sleep 0.25
done
echo "the member that left shut down by itself"
if "$tool" --node "tcp://127.0.0.1:$c1" down 127.0.0.1:1 >/dev/null 2>&1; then
    echo "FAIL: downing an unknown member succeeded"; exit 1
fi
echo "OK: members joined, a killed member was removed, a leaving member exited, the rest stayed Up"

#!/bin/sh
# The README's main job: Shoal's demos. Argument: the folder of the release binaries.
set -eu
bin=${1:-build/bin}

# every program the demos run, checked before the first one starts
for prog in crdt-tour replicated-map payments kvstore counter-service shoal-member shoal-cluster shoal-keygen ddata-dump; do
    [ -x "$bin/$prog" ] || { echo "FAIL: $bin/$prog is missing (scons demo builds it; run it from the checkout)"; exit 1; }
done

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
echo "== payments: payment flows as sharded entities with stored state; a node is killed mid-run =="
kill -9 $pids 2>/dev/null || true
pids=""
"$bin/payments" --payments 1000 2>"$dir/payments.log" || { echo "FAIL: payments"; tail -n 30 "$dir/payments.log"; exit 1; }

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

echo
echo "== kvstore: a durable replicated map (LMDB) on three members over CURVE; one is killed and restarted =="
kill -9 $pids 2>/dev/null || true
pids=""
kb=$((base + 20)); [ $((kb + 2)) -lt 32000 ] || kb=$((base - 30))  # stay below 32000
k1=$kb; k2=$((kb + 1)); k3=$((kb + 2))
kv="$bin/kvstore"
# every member gets the same seed list: the first seed forms the cluster as soon as the others
# answer that they are in no cluster, and any of them restarted joins the others' cluster
kseeds="--seed tcp://127.0.0.1:$k1 --seed tcp://127.0.0.1:$k2 --seed tcp://127.0.0.1:$k3"
# CURVE: a key pair per member and one for the commands (the "ops" key); the allow-list holds
# their public certificates, each member's with the endpoint where it listens
mkdir -p "$dir/allow"
for p in $k1 $k2 $k3; do
    "$bin/shoal-keygen" "$dir/keys$p" --endpoint "tcp://127.0.0.1:$p" >/dev/null
    cp "$dir/keys$p/node.cert" "$dir/allow/kv$p.cert"
done
"$bin/shoal-keygen" "$dir/ops" --name ops >/dev/null && cp "$dir/ops/ops.cert" "$dir/allow/"
"$bin/shoal-keygen" "$dir/stranger" >/dev/null
export SHOAL_CURVE_ALLOW="$dir/allow" SHOAL_CURVE_CERT="$dir/ops/ops.cert"
# starts the kvstore node on port $1 (its LMDB store in $dir/kv$1), appending to its log
start_kv() {
    SHOAL_CURVE_CERT="$dir/keys$1/node.cert" \
    # shellcheck disable=SC2086
    "$kv" node --bind "tcp://127.0.0.1:$1" $kseeds --data "$dir/kv$1" --fast >>"$dir/kv$1.log" 2>&1 &
    pids="$pids $!"
    kpid=$!
}
kfail() { echo "FAIL: $*"; tail -n 15 "$dir"/kv*.log; exit 1; }
# retries "$@" (a kvstore command) until its output contains the line $want, for $tries x 0.25 s
until_line() {
    want=$1; tries=$2; shift 2
    i=0
    until "$@" 2>/dev/null | grep -qxF "$want"; do
        i=$((i + 1))
        [ $i -lt "$tries" ] || return 1
        sleep 0.25
    done
}
start_kv $k1; kp1=$kpid; start_kv $k2; kp2=$kpid; start_kv $k3
kvictim=$kpid
wait_members $k1 3; wait_members $k2 3; wait_members $k3 3
echo "three kvstore members Up (ports $k1 $k2 $k3; data in LMDB under $dir/kv<port>), over CURVE:"
echo "    keys made by shoal-keygen; the allow-list $dir/allow holds the members' and the ops key"
# a key that is not on the list is refused at once, and the node logs and counts it
if SHOAL_CURVE_CERT="$dir/stranger/node.cert" "$kv" get $k1 color local >"$dir/stranger.txt" 2>&1; then
    kfail "a client with a key not on the allow-list was answered"
fi
grep -q "is not on the allow-list" "$dir/kv$k1.log" || kfail "the refused key was not logged"
echo "\$ SHOAL_CURVE_CERT=stranger.cert kvstore get $k1 color   -> $(tail -n 1 "$dir/stranger.txt")"
echo "    node log: $(grep -m1 "is not on the allow-list" "$dir/kv$k1.log" | sed 's/^.*: refused/refused/')"
"$kv" put $k1 color blue local || kfail "local write"
echo "\$ kvstore put $k1 color blue local   -> ok (this replica now, the others by gossip)"
"$kv" put $k2 shape circle majority || kfail "majority write"
echo "\$ kvstore put $k2 shape circle majority   -> ok"
"$kv" put $k3 size large all || kfail "write to all"
echo "\$ kvstore put $k3 size large all   -> ok (all three replicas have it)"
"$kv" put $k1 tmp x majority && "$kv" del $k2 tmp majority || kfail "delete"
echo "\$ kvstore put $k1 tmp x majority; kvstore del $k2 tmp majority   -> ok"
out=$("$kv" get $k3 "" all) || kfail "read from all"
echo "\$ kvstore get $k3 '' all"
echo "$out" | sed 's/^/    /'
for want in "color = blue" "shape = circle" "size = large"; do
    echo "$out" | grep -qxF "$want" || kfail "read from all missed '$want'"
done
echo "$out" | grep -q '^tmp = ' && kfail "the deleted key is still there"
"$kv" get $k2 color majority | grep -qxF "color = blue" || kfail "majority read of color"
echo "\$ kvstore get $k2 color majority   -> color = blue"
# the victim must hold everything in its own store before it dies
until_line "color = blue" 20 "$kv" get $k3 color local || kfail "the local write did not reach $k3"
until_line "shape = circle" 20 "$kv" get $k3 shape local || kfail "the majority write did not reach $k3"
kill -9 "$kvictim"
echo "member on port $k3 killed with SIGKILL"
"$kv" put $k1 while-down yes majority || kfail "majority write with a member dead"
echo "\$ kvstore put $k1 while-down yes majority   -> ok (2 of 3 is a majority)"
out=$("$kv" get $k2 "" majority) || kfail "majority read with a member dead"
echo "\$ kvstore get $k2 '' majority"
echo "$out" | sed 's/^/    /'
for want in "color = blue" "shape = circle" "size = large" "while-down = yes"; do
    echo "$out" | grep -qxF "$want" || kfail "majority read missed '$want'"
done
"$bin/ddata-dump" "$dir/kv$k3" >"$dir/stored.txt" 2>&1 || { cat "$dir/stored.txt"; kfail "cannot read the LMDB store of $k3"; }
echo "\$ ddata-dump $dir/kv$k3   (the dead member's LMDB store, read offline)"
sed 's/^/    /' "$dir/stored.txt"
for want in '"color" -> "blue"' '"shape" -> "circle"' '"size" -> "large"'; do
    grep -qF "$want" "$dir/stored.txt" || kfail "the store of $k3 lacks $want"
done
start_kv $k3
kp3=$kpid
echo "member on port $k3 restarted with the same data directory (a new incarnation)"
wait_members $k3 3
out=$("$kv" get $k3 "" local) || kfail "local read on the restarted member"
echo "\$ kvstore get $k3 '' local   (right after it is Up: its LMDB store, plus what gossip brought)"
echo "$out" | sed 's/^/    /'
for want in "color = blue" "shape = circle" "size = large"; do
    echo "$out" | grep -qxF "$want" || kfail "the restarted member lost '$want'"
done
until_line "while-down = yes" 40 "$kv" get $k3 while-down local ||
    kfail "the write made while $k3 was down did not arrive by gossip"
echo "\$ kvstore get $k3 while-down local   -> while-down = yes (arrived by gossip)"
echo "\$ ddata-dump --compare (the three replicas)"
i=0
until "$bin/ddata-dump" --compare "tcp://127.0.0.1:$k1" "tcp://127.0.0.1:$k2" "tcp://127.0.0.1:$k3" >"$dir/compare.txt" 2>&1; do
    i=$((i + 1))
    [ $i -lt 40 ] || { cat "$dir/compare.txt"; kfail "the replicas did not converge"; }
    sleep 0.25
done
sed 's/^/    /' "$dir/compare.txt"
kill -TERM $kp1 $kp2 $kp3
i=0
while kill -0 $kp1 2>/dev/null || kill -0 $kp2 2>/dev/null || kill -0 $kp3 2>/dev/null; do
    i=$((i + 1))
    [ $i -lt 60 ] || kfail "the members did not stop within 15 s of SIGTERM"
    sleep 0.25
done
for kp in $kp1 $kp2 $kp3; do
    wait "$kp" || kfail "a member exited with status $? after SIGTERM"
done
echo "SIGTERM: the three members left the cluster and exited 0"
unset SHOAL_CURVE_ALLOW SHOAL_CURVE_CERT
echo "OK: over CURVE, a stranger's key was refused; writes at local, majority and all were read back; with a member killed, majority reads and writes went on; restarted, it recovered its keys from LMDB and caught up by gossip; the replicas are equal"

echo
echo "== counter-service: a sharded service driven from the shell; its shard moved with shoal-cluster =="
kill -9 $pids 2>/dev/null || true
pids=""
cs="$bin/counter-service"
cb=$((base + 30)); [ $((cb + 2)) -lt 32000 ] || cb=$((base - 40))  # stay below 32000
s1=$cb; s2=$((cb + 1)); s3=$((cb + 2))
cfail() { echo "FAIL: counter-service: $1"; tail -n 20 "$dir"/cs*.log; exit 1; }
cpids=""
for p in $s1 $s2 $s3; do
    "$cs" node --bind "tcp://127.0.0.1:$p" --seed "tcp://127.0.0.1:$s1" --data-dir "$dir/cs$p" \
        --fast >"$dir/cs$p.out" 2>"$dir/cs$p.log" &
    cpids="$cpids $!"
done
pids="$cpids"
i=0
until "$tool" --node "tcp://127.0.0.1:$s1" check 2>/dev/null | grep -q '3 members Up'; do
    i=$((i + 1))
    [ $i -lt 60 ] || cfail "the three members did not come Up"
    sleep 0.5
done
"$cs" --node "tcp://127.0.0.1:$s2" tell account alice add 100 >/dev/null || cfail "tell"
echo "\$ counter-service --node tcp://127.0.0.1:$s2 tell account alice add 100   -> told"
out=$("$cs" --node "tcp://127.0.0.1:$s3" ask account alice add 25) || cfail "ask add 25"
echo "\$ counter-service --node tcp://127.0.0.1:$s3 ask account alice add 25"
echo "    $out"
# alice's home, from the reply; the move goes to another member, so the shard is handed off
home=$(echo "$out" | sed 's/.* on \(.*\))$/\1/')
to="127.0.0.1:$s1"; [ "$home" != "$to" ] || to="127.0.0.1:$s2"
out=$("$tool" --node "tcp://127.0.0.1:$s2" move account 80 "$to") || cfail "move: $out"
echo "\$ shoal-cluster --node tcp://127.0.0.1:$s2 move account 80 $to"
echo "$out" | sed 's/^/    /'
out=$("$cs" --node "tcp://127.0.0.1:$s3" ask account alice get) || cfail "ask get after the move"
echo "\$ counter-service --node tcp://127.0.0.1:$s3 ask account alice get"
echo "    $out"
[ "$out" = "125 (account alice, shard 80, on $to)" ] || cfail "after the move: '$out'"
if "$tool" --node "tcp://127.0.0.1:$s2" move account 999 "$to" >"$dir/move999.txt" 2>&1; then
    cfail "a move of shard 999 of 100 was accepted"
fi
echo "\$ shoal-cluster --node tcp://127.0.0.1:$s2 move account 999 $to   -> refused:"
sed 's/^/    /' "$dir/move999.txt"
for p in $cpids; do # one at a time: each hands its shards to the others and leaves
    kill -TERM "$p"
    i=0
    while kill -0 "$p" 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt 120 ] || cfail "a member did not stop within 30 s of SIGTERM"
        sleep 0.25
    done
done
pids=""
echo "OK: tell and ask through any member reached the entity; moved to another member with shoal-cluster, it kept its value (125); a move of a shard the type does not have was refused"

#!/usr/bin/env bash
# deb-test.sh [DEB_DIR] — tries the Debian packages that `scons deb` built (DEB_DIR, default
# build/deb) the way a user of a bare Debian 12 would (docs/deployment.md, "Debian packages"):
#
#   1. lintian on the three packages: no error (the warnings that stay: debian/README.source);
#   2. in a bare Debian 12 chroot (debootstrap minbase): apt-get install ./*.deb, then build
#      examples/tour-map.c with `pkg-config --cflags --libs shoal` and run it;
#   3. start shoal-member with the ExecStart line of the installed shoal-member.service (as
#      nobody, in a network namespace of its own so that its ports meet no other test's), see it
#      Up (shoal-cluster members) and ready (/health/ready 200), stop it with SIGTERM: exit 0;
#   4. apt-get purge the packages: nothing of what `dpkg -L` listed is left (files, and the
#      directories of Shoal's own: /etc/shoal, /usr/include/shoal, the doc directories);
#   5. the Containerfile's steps in the same chroot (no container runtime here): its COPY and
#      RUN lines, then its ENTRYPOINT and CMD as its USER, until its HEALTHCHECK passes.
#
# Needs root (debootstrap, chroot, mounts). Stands alone (CI's clone has nothing beside it). The
# base system and the downloaded .debs are cached in $SHOAL_DEB_CACHE (default
# /tmp/shoal-deb-cache): the first run downloads Debian (a minute or two more).
set -euo pipefail
cd "$(dirname "$0")/.."
debs=$(cd "${1:-build/deb}" && pwd)
cache=${SHOAL_DEB_CACHE:-/tmp/shoal-deb-cache}
t0=$(date +%s)
say() { echo "deb-test: $* ($(($(date +%s) - t0)) s)"; }
die() { echo "deb-test: FAILED: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot)"
for t in debootstrap lintian unshare python3; do
    command -v "$t" >/dev/null || die "$t is missing: sh tools/install-deps.sh installs it"
done
pkgs="libshoal1 libshoal-dev shoal-tools"
for p in $pkgs; do
    ls "$debs"/"${p}"_*.deb >/dev/null 2>&1 || die "$debs/${p}_*.deb is missing: run scons deb"
done

# --- 1. lintian ------------------------------------------------------------------------------
# the .changes when there is one (lintian then checks the packages as a set, and the .buildinfo)
if ls "$debs"/shoal_*.changes >/dev/null 2>&1; then
    lint_on=$(ls "$debs"/shoal_*.changes | tail -n 1)
else
    lint_on="$(ls "$debs"/libshoal1_*.deb "$debs"/libshoal-dev_*.deb "$debs"/shoal-tools_*.deb)"
fi
# shellcheck disable=SC2086
lint=$(lintian --display-info --pedantic $lint_on 2>&1 | grep -v 'running with root privileges' || true)
echo "$lint" | sed "/^$/d; s/^/deb-test: lintian: /"
echo "$lint" | grep -q '^E: ' && die "lintian reports errors"
say "lintian: $(echo "$lint" | grep -c '^E: ' || true) errors, $(echo "$lint" | grep -c '^W: ' || true) warnings, $(echo "$lint" | grep -c '^[IP]: ' || true) infos/pedantic"

# --- the chroot ------------------------------------------------------------------------------
mkdir -p "$cache/apt-archives/partial"
root=$(mktemp -d /tmp/shoal-deb-root.XXXXXX)
cleanup() {
    for m in var/cache/apt/archives dev/pts dev proc; do umount -l "$root/$m" 2>/dev/null || true; done
    rm -rf --one-file-system "$root"
}
trap cleanup EXIT
if [ ! -f "$cache/bookworm-minbase.tar" ]; then
    say "debootstrap (first run: cached afterwards in $cache)"
    debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian \
        >"$cache/debootstrap.log" 2>&1 || die "debootstrap failed: $cache/debootstrap.log"
    tar -C "$root" -cf "$cache/bookworm-minbase.tar.tmp" . && mv "$cache/bookworm-minbase.tar.tmp" "$cache/bookworm-minbase.tar"
else
    tar -C "$root" -xf "$cache/bookworm-minbase.tar"
fi
chmod 755 "$root" # mktemp's 0700 (also the tarball's ./) would keep nobody out of the system
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mount --bind /dev/pts "$root/dev/pts" 2>/dev/null || true
mkdir -p "$root/var/cache/apt/archives"
mount --bind "$cache/apt-archives" "$root/var/cache/apt/archives"
echo 'Binary::apt::APT::Keep-Downloaded-Packages "true"; APT::Sandbox::User "root";' \
    >"$root/etc/apt/apt.conf.d/90deb-test"
# no fsync for every unpacked file: the chroot is thrown away (halves the install time here)
echo force-unsafe-io >"$root/etc/dpkg/dpkg.cfg.d/90deb-test"
mkdir -p "$root/src/debs" "$root/src/ctx"
cp "$debs"/libshoal1_*.deb "$debs"/libshoal-dev_*.deb "$debs"/shoal-tools_*.deb "$root/src/debs/"
cp examples/tour-map.c "$root/src/"
# in the chroot; in_root_net runs it in a network namespace of its own (loopback only)
in_root() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
                DEBIAN_FRONTEND=noninteractive bash -euo pipefail -c "$1"; }
# (and a PID namespace: whatever it started dies with it, even when a step fails)
in_root_net() { unshare --net --pid --fork --kill-child bash -c 'ip link set lo up && exec "$@"' _ chroot "$root" \
                    /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
                    bash -euo pipefail -c "$1"; }
say "bare Debian 12 ready in $root"

# --- 2. install, build an example against the package, run it --------------------------------
in_root "apt-get update -q >/dev/null && cd /src/debs && apt-get install -y -q ./*.deb gcc libc6-dev pkg-config >/src/install.log" \
    || { tail -30 "$root/src/install.log"; die "apt-get install ./*.deb failed"; }
say "installed: $(in_root "dpkg-query -W -f='\${Package} \${Version}, ' $pkgs")"
in_root "cd /src && dpkg -L $pkgs | sort -u >/src/listed && test -f /usr/include/shoal/ddata.h \
         && cc -o /src/tour-map tour-map.c \$(pkg-config --cflags --libs shoal) && ldd /src/tour-map | grep 'libshoal.so.1 => /' \
         && /src/tour-map" || die "examples/tour-map.c against the installed libshoal-dev"
say "tour-map built with pkg-config --cflags --libs shoal and run: exit 0"

# --- 3. the service's command line ------------------------------------------------------------
# wait_up: shoal-cluster sees the member of the unit (127.0.0.1:2552, /etc/shoal/shoal.cfg) Up,
# and /health/ready on 8558 (the unit's --http) answers 200 (bash's /dev/tcp: no HTTP client here)
wait_up='wait_up() {
    end=$((SECONDS + 30))
    while [ $SECONDS -lt $end ]; do
        if shoal-cluster --node tcp://127.0.0.1:2552 --timeout 1000 members >/tmp/members 2>&1 \
           && grep -q "127.0.0.1:2552 .* Up " /tmp/members \
           && exec 3<>/dev/tcp/127.0.0.1/8558 \
           && printf "GET /health/ready HTTP/1.0\r\nHost: localhost\r\n\r\n" >&3 \
           && head -n 1 <&3 | grep -q " 200 "; then
            exec 3>&-; cat /tmp/members; return 0
        fi
        exec 3>&- 2>/dev/null || true
        sleep 0.2
    done
    cat /tmp/members; return 1
}'
in_root_net "$wait_up
    unit=/lib/systemd/system/shoal-member.service
    grep -q '^Type=notify' \$unit
    cmd=\$(sed -n 's/^ExecStart=//p' \$unit)
    echo \"deb-test: ExecStart: \$cmd\"
    # DynamicUser=yes: an unprivileged user of its own; nobody here
    setpriv --reuid=nobody --regid=nogroup --clear-groups -- \$cmd >/src/member.log 2>&1 &
    pid=\$!
    wait_up || { cat /src/member.log; exit 1; }
    kill -TERM \$pid
    rc=0; wait \$pid || rc=\$?
    [ \$rc = 0 ] || { cat /src/member.log; echo \"exit \$rc after SIGTERM\"; exit 1; }" \
    || die "shoal-member from the unit's ExecStart"
say "shoal-member from shoal-member.service's ExecStart: Up, /health/ready 200, SIGTERM exit 0"

# --- 4. purge: nothing left behind ------------------------------------------------------------
in_root "apt-get purge -y -q $pkgs >/src/purge.log
    if dpkg -l $pkgs 2>/dev/null | grep -E '^(ii|rc)'; then echo 'still known to dpkg'; exit 1; fi
    left=0
    while read -r f; do
        case \$f in /.) continue ;; esac
        # every file, and the directories of Shoal's own (shared ones like /usr/bin stay)
        if [ -e \"\$f\" ] && { [ ! -d \"\$f\" ] || echo \"\$f\" | grep -q shoal; }; then
            echo \"left behind: \$f\"; left=1
        fi
    done </src/listed
    [ \$left = 0 ]
    test ! -e /etc/shoal" || die "apt-get purge left files behind"
say "purged: none of the $(wc -l <"$root/src/listed") paths dpkg -L listed is left"

# --- 5. the Containerfile's steps --------------------------------------------------------------
# COPY, RUN, USER, ENTRYPOINT, CMD and HEALTHCHECK as a container engine reads them (the JSON
# forms of ENTRYPOINT, CMD and HEALTHCHECK CMD; RUN's shell form)
python3 - Containerfile "$root/src/container.sh" <<'EOF'
import json, re, shlex, sys
text = open(sys.argv[1]).read().replace('\\\n', ' ')
steps, user, entry, cmd, health = [], 'root', [], [], None
for line in text.splitlines():
    line = line.strip()
    if not line or line.startswith('#'):
        continue
    word, _, rest = line.partition(' ')
    if word == 'FROM':
        assert rest.startswith('debian:bookworm'), 'deb-test runs Debian 12: ' + rest
    elif word == 'COPY':
        *srcs, dest = rest.split()
        steps.append('mkdir -p %s && (cd /src/debs && cp %s %s)' % (dest, ' '.join(srcs), dest))
    elif word == 'RUN':
        steps.append('sh -c %s' % shlex.quote(rest))
    elif word == 'USER':
        user = rest.strip()
    elif word == 'ENTRYPOINT':
        entry = json.loads(rest)
    elif word == 'CMD':
        cmd = json.loads(rest)
    elif word == 'HEALTHCHECK':
        health = json.loads(rest[rest.index('CMD') + 3:])
    elif word != 'EXPOSE':
        sys.exit('deb-test: Containerfile: %s is not understood here' % word)
assert entry and health, 'Containerfile: ENTRYPOINT and HEALTHCHECK CMD expected'
with open(sys.argv[2], 'w') as f:
    f.write('cd /\n' + '\n'.join(steps) + '\n')
    f.write('run_as() { setpriv --reuid=%s --regid=$(id -g %s) --clear-groups -- "$@"; }\n'
            % (user, user))
    # not through run_as: $! must be the member itself, which SIGTERM must reach
    f.write('setpriv --reuid=%s --regid=$(id -g %s) --clear-groups -- %s >/src/container.log 2>&1 &\n'
            'pid=$!\n' % (user, user, ' '.join(map(shlex.quote, entry + cmd))))
    f.write('end=$((SECONDS + 30)); while [ $SECONDS -lt $end ]; do run_as %s && break; sleep 0.2; done\n'
            % ' '.join(map(shlex.quote, health)))
    f.write('run_as %s || { cat /src/container.log; echo "HEALTHCHECK failed"; exit 1; }\n'
            % ' '.join(map(shlex.quote, health)))
    f.write('kill -TERM $pid; rc=0; wait $pid || rc=$?; [ $rc = 0 ] || { cat /src/container.log; exit 1; }\n')
EOF
in_root "# the image's RUN: the slim image has no Shoal installed; the chroot has none since the purge
    bash -euo pipefail -c \"\$(sed '/^run_as() /,\$d' /src/container.sh)\"" \
    || die "the Containerfile's COPY and RUN steps"
in_root_net "bash -euo pipefail -c \"\$(sed -n '/^run_as() /,\$p' /src/container.sh)\"" \
    || die "the Containerfile's ENTRYPOINT/CMD as its USER, until its HEALTHCHECK passes"
say "Containerfile: COPY and RUN steps, then ENTRYPOINT+CMD as its USER: HEALTHCHECK passes, SIGTERM exit 0"
say "all passed"

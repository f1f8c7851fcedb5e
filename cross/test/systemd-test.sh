#!/bin/sh
# systemd-test.sh: reads cross/systemd/tinyhub.service and the systemd example of README.md
# together, and checks that, under the unit's sandbox, every path the example's
# TINYHUB_ARGS (and the unit's own header examples) hand the hub is usable: the cache
# (--disk-cache-path), the root dir (--root-dir) and the directory of a --bootstrap-file
# (the hub rewrites it) writable and present before the hub starts; the kubeconfig and
# kubelet's files readable. Flags left out take their defaults from README.md's flag
# table. The sandbox model: ProtectSystem=strict leaves only ReadWritePaths and the
# State/Cache/Logs/RuntimeDirectory directories writable; ProtectHome hides /home, /root
# and /run/user; PrivateTmp gives the hub a /tmp and /var/tmp of its own; InaccessiblePaths
# hides, ReadOnlyPaths forbids writes. And that the unit does not restart the hub on the
# statuses that mean a retry cannot help (2, 78). `systemd-analyze verify` runs too when
# installed (under CI=true it must be).
# Exits non-zero when any check fails.
set -u

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$here/lib.sh"
unit=$here/../systemd/tinyhub.service
readme=$here/../../README.md

echo "systemd-test: $unit with README.md"

# setting <Key>: the values of a [Service] setting, one per line, in order.
setting() {
	awk -v key="$1" '/^\[/ { s = ($0 == "[Service]") }
		s && index($0, key "=") == 1 { print substr($0, length(key) + 2) }' "$unit"
}

# The directories systemd makes at each start and keeps writable (State/Cache/Logs/
# RuntimeDirectory); with those an ExecStartPre=+ (run outside the sandbox) makes with
# mkdir, the directories present when the hub starts.
own_dirs=$(
	for d in $(setting StateDirectory); do echo "/var/lib/$d"; done
	for d in $(setting CacheDirectory); do echo "/var/cache/$d"; done
	for d in $(setting LogsDirectory); do echo "/var/log/$d"; done
	for d in $(setting RuntimeDirectory); do echo "/run/$d"; done
)
made_dirs=$(
	printf '%s\n' "$own_dirs"
	setting ExecStartPre | sed -n 's|^+[^ ]*mkdir \(.*\)|\1|p' | tr ' ' '\n' | grep '^/'
)
# Where the sandbox lets the hub write.
writable_dirs=$(
	for p in $(setting ReadWritePaths); do echo "${p#-}"; done
	printf '%s\n' "$own_dirs"
)
hidden_dirs=$(
	for p in $(setting InaccessiblePaths); do echo "${p#-}"; done
	case $(setting ProtectHome) in yes|read-only|tmpfs) printf '%s\n' /home /root /run/user ;; esac
	[ "$(setting PrivateTmp)" = yes ] && printf '%s\n' /tmp /var/tmp
)
readonly_dirs=$(for p in $(setting ReadOnlyPaths); do echo "${p#-}"; done)

# under <path> <dirs>: the path is one of the dirs or below one.
under() {
	for d in $2; do
		case $1/ in "${d%/}"/*) return 0 ;; esac
	done
	return 1
}

# problem_write <dir>: why the hub could not write in <dir>, or nothing.
problem_write() {
	if under "$1" "$hidden_dirs"; then
		echo "$1 is hidden from the hub (ProtectHome, PrivateTmp or InaccessiblePaths)"
	elif under "$1" "$readonly_dirs"; then
		echo "$1 is in ReadOnlyPaths"
	elif [ "$(setting ProtectSystem)" = strict ] && ! under "$1" "$writable_dirs"; then
		echo "$1 is read-only under ProtectSystem=strict (not in ReadWritePaths or a StateDirectory)"
	elif ! printf '%s\n' "$made_dirs" | grep -qxF "$1" && ! under "$1" "$made_dirs"; then
		echo "$1 may not exist when the hub starts (no StateDirectory or ExecStartPre=+mkdir makes it)"
	fi
}

# problem_read <file>: why the hub could not read <file>, or nothing.
problem_read() {
	if under "$1" "$hidden_dirs"; then
		echo "$1 is hidden from the hub (ProtectHome, PrivateTmp or InaccessiblePaths)"
	fi
}

# flag <args> <flag>: the value of --flag=value in a TINYHUB_ARGS string.
flag() {
	for a in $1; do
		case $a in "$2"=*) echo "${a#*=}" ;; esac
	done | tail -1
}

# default_of <flag>: its default in README.md's flag table.
default_of() {
	sed -n "s/^| \`$1\` | \\(\\/[^ |]*\\) |.*/\\1/p" "$readme" | head -1
}

# problems <args>: every path problem of one TINYHUB_ARGS value, one a line.
problems() {
	for f in --disk-cache-path --root-dir; do
		p=$(flag "$1" $f)
		[ -n "$p" ] || p=$(default_of $f)
		[ -n "$p" ] || { echo "no $f given and no default for it in README.md"; continue; }
		problem_write "$p"
	done
	p=$(flag "$1" --bootstrap-file)
	[ -z "$p" ] || problem_write "${p%/*}"
	for f in --kubeconfig --kubelet-kubeconfig --kubelet-ca-file --kubelet-client-certificate \
		--multiplexer-client-ca-file; do
		p=$(flag "$1" $f)
		[ -z "$p" ] || problem_read "$p"
	done
}

# check_args <where> <args>
check_args() {
	found=$(problems "$2")
	if [ -z "$found" ]; then
		ok "$1: every path usable under the sandbox ($2)"
	else
		bad "$1 ($2):"
		printf '%s\n' "$found" | sed 's/^/        /'
	fi
}

# The README's example: the TINYHUB_ARGS of the sh block in its systemd section.
section=$(awk '/^## / { s = /systemd/ } s' "$readme")
readme_args=$(printf '%s\n' "$section" | awk '/^```sh/ { c = 1; next } /^```/ { c = 0 } c' |
	sed -n 's/^TINYHUB_ARGS=//p')
if [ -n "$readme_args" ]; then
	ok "README.md has a systemd section with TINYHUB_ARGS"
	check "README's example passes --disk-cache-path, --root-dir and --kubeconfig" \
		sh -c 'case $1 in *--disk-cache-path=*--root-dir=*|*--root-dir=*--disk-cache-path=*) ;; *) exit 1 ;; esac
			case $1 in *--kubeconfig=*) ;; *) exit 1 ;; esac' - "$readme_args"
	# Not a pipe: its loop would run in a subshell and lose the counts.
	while IFS= read -r args; do check_args "README.md" "$args"; done <<EOF
$readme_args
EOF
else
	bad "README.md: no sh block with a TINYHUB_ARGS= line in a section about systemd"
fi

# The unit's own default and its header examples.
while IFS= read -r args; do check_args "tinyhub.service" "$args"; done <<EOF
$(setting Environment | sed -n 's/^TINYHUB_ARGS=//p'
	sed -n 's/^#.*TINYHUB_ARGS=\([^'"'"'\\]*\).*/\1/p' "$unit")
EOF

check "the root dir is a StateDirectory (created 0700 at each start)" \
	sh -c '[ "$1" = yurthub ] && [ "$2" = 0700 ]' - "$(setting StateDirectory)" "$(setting StateDirectoryMode)"
check "ExecStart passes \$TINYHUB_ARGS from EnvironmentFile" \
	sh -c '[ -n "$1" ] && case $2 in *"\$TINYHUB_ARGS"*) ;; *) exit 1 ;; esac' - "$(setting EnvironmentFile)" "$(setting ExecStart)"

# The model must catch what the unit would break: a cache it cannot write, a cache nothing
# makes, a kubeconfig it cannot see.
for case in "--disk-cache-path=/var/cache/tinyhub|read-only" "--disk-cache-path=/tmp/tinyhub-cache|hidden" \
	"--kubeconfig=/root/.kube/config|hidden" "--disk-cache-path=/var/lib/yurthub/cache|" \
	"--bootstrap-file=/etc/kubernetes/bootstrap-hub.conf|read-only"; do
	args=${case%|*} want=${case#*|}
	got=$(problems "$args")
	if [ -n "$want" ]; then
		check "the model refuses $args ($got)" sh -c 'printf "%s" "$1" | grep -q "$2"' - "$got" "$want"
	else
		check "the model accepts $args (below the StateDirectory)" [ -z "$got" ]
	fi
done

# A flag or config error (2) and a cache the hub cannot use (78) stop the unit for good, and
# the README's systemd section says which statuses those are.
prevent=$(setting RestartPreventExitStatus | tr ' ' '\n')
# The section as one line: a sentence may wrap.
prose=$(printf '%s\n' "$section" | tr '\n' ' ')
for status in 2 78; do
	check "RestartPreventExitStatus lists $status: the unit stays failed instead of restarting" \
		sh -c 'printf "%s\n" "$1" | grep -qx "$2"' - "$prevent" "$status"
	check "README.md's systemd section names exit status $status" \
		sh -c 'printf "%s\n" "$1" | grep -q "exit status[^.]*[^0-9.]$2[^0-9]"' - "$prose" "$status"
done

# An absent binary (the one ExecStart names) is the only complaint allowed: this is not
# the gateway. Every other line of systemd-analyze's is a defect of the unit.
bin=$(setting ExecStart | sed 's/ .*//')
if command -v systemd-analyze > /dev/null 2>&1; then
	out=$(systemd-analyze verify "$unit" 2>&1 |
		grep -vF ": Command $bin is not executable: No such file or directory")
	if [ -z "$out" ]; then ok "systemd-analyze verify (but for the absent $bin)"; else bad "systemd-analyze verify: $out"; fi
elif [ "${CI:-}" = true ]; then
	bad "systemd-analyze not installed (CI=true; cross.mk's cross-test-tools installs systemd)"
else
	skip "systemd-analyze verify (systemd not installed; make cross-test-tools installs it)"
fi

finish systemd-test

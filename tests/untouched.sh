#!/bin/sh
# untouched.sh '<command>': runs the test suites (`make test` passes its cargo commands) so that
# a test that touches the machine outside its own temp dir, or leaves anything behind, fails
# the run, naming what it touched:
#
# - TMPDIR is a fresh directory, and must be empty again at the end: a temp dir a test did
#   not remove, or one a hub still wrote into after its test removed it, is a failure, and
#   so is a process still running on a temp dir (a hub a test never stopped).
# - The directories a hub uses by default (its flags: --root-dir /var/lib/yurthub,
#   --disk-cache-path /etc/kubernetes/cache) must be as they were: their listing with types,
#   modes, sizes and mtimes (or their absence), taken before and after, must be the same.
# - Run as root where `unshare` works (CI), the command runs in a mount namespace of its own
#   where both are empty directories of this run, and a stand-in hub holds them locked as a
#   running hub does (src/dir_lock.rs: an exclusive flock on the directory, a note in
#   .tinyhub.lock): the suites meet what they meet on a node where YurtHub or tinyhub runs,
#   and the machine's own are never touched. Elsewhere the machine's own are listed.
#   TINYHUB_REQUIRE_NAMESPACES=1 (CI) makes a namespace that cannot be made a failure, so a
#   green run means the locked run happened.
#
# The exit status is the command's, else 1 when something was touched or left.
set -eu

defaults="/var/lib/yurthub /etc/kubernetes"

# Whether this user may write at `path`, or where it would be made (its nearest existing
# parent).
writable() {
	at=$1
	while [ ! -e "$at" ] && [ "$at" != / ]; do at=$(dirname "$at"); done
	[ -w "$at" ]
}

# Each default path's tree, one line an entry, or `<path> absent`. Only where this user may
# write: a user's tests cannot change root's directories, and a hub running on them (a node's
# own) would change them under the check.
listing() {
	for path in $defaults; do
		if ! writable "$path"; then
			echo "$path not writable by this user: not listed"
		elif [ -e "$path" ] || [ -L "$path" ]; then
			find "$path" -printf '%p %y %m %s %T@\n' 2>&1 | sort
		else
			echo "$path absent"
		fi
	done
}

# Runs the command with TMPDIR at $scratch/tmp, then checks what it left there and in the
# default paths. `where` says which default paths were checked.
run_checked() {
	cmd=$1 scratch=$2 where=$3
	# As /tmp is: tests run hubs as another user too (setpriv --reuid=65534).
	chmod 755 "$scratch"
	mkdir -m 1777 "$scratch/tmp"
	listing > "$scratch/before"
	ran=0
	TMPDIR=$scratch/tmp sh -c "$cmd" || ran=$?
	listing > "$scratch/after"
	touched=0
	# A process still running on a test's temp dir (a hub a test never stopped): said, and
	# ended, by its pid.
	# The path matched as a plain string (pgrep -f would read it as a pattern).
	left=$(
		for cmdline in /proc/[0-9]*/cmdline; do
			tr '\0' ' ' < "$cmdline" 2> /dev/null | grep -qF -- "$scratch/tmp/" || continue
			pid=${cmdline#/proc/}
			echo "${pid%/cmdline}"
		done
	)
	if [ -n "$left" ]; then
		echo "untouched: FAIL: processes the tests started still run:"
		for pid in $left; do
			echo "  $(ps -o args= -p "$pid" | cut -c1-200)"
			kill -9 "$pid" 2> /dev/null || true
		done
		touched=1
	fi
	if [ -n "$(ls -A "$scratch/tmp")" ]; then
		echo "untouched: FAIL: the tests left these in their TMPDIR (each test removes its own temp dir):"
		find "$scratch/tmp" -mindepth 1 -maxdepth 2 | sed "s|^$scratch/tmp/|  |" | sort | head -50
		touched=1
	fi
	if ! cmp -s "$scratch/before" "$scratch/after"; then
		echo "untouched: FAIL: the tests changed $where (before/after, a hub's default paths):"
		diff "$scratch/before" "$scratch/after" | sed 's/^/  /' | head -50
		touched=1
	fi
	if [ "$touched" = 0 ]; then
		echo "untouched: nothing left in TMPDIR; $where unchanged"
	fi
	if [ "$ran" != 0 ]; then
		return "$ran"
	fi
	return "$touched"
}

# The mounts below `dir` (not `dir` itself) whose own parents are not below it too, one a line:
# bound with --rbind, each brings those below it.
submounts() {
	findmnt -rn -o TARGET | awk -v d="$1/" 'index($0, d) == 1' | sort |
		awk 'top == "" || index($0, top "/") != 1 { print; top = $0 }'
}

# In the new mount namespace: the default paths become directories of this run, held by a
# stand-in hub, then the command runs checked.
inside() {
	cmd=$1 scratch=$2
	for path in $defaults; do
		private=$scratch/private$path
		mkdir -p "$private"
		if [ ! -d "$path" ]; then
			# Made in an overlay of its parent whose changes live in a tmpfs of this run (an
			# overlay's upper directory may not be on an overlay, as /tmp in a container is),
			# as tests/support/namespace.rs's bind_over does: the machine's /etc stays as it is.
			parent=$(dirname "$path")
			layer=$scratch/layer$parent
			mkdir -p "$layer"
			mount -t tmpfs tinyhub-test "$layer"
			mkdir "$layer/upper" "$layer/work" "$layer/kept"
			# The mounts inside the parent (a container's /etc/hosts, /etc/resolv.conf) would
			# show the overlay's lower files: kept aside here, bound back over it below.
			subs=$(submounts "$parent")
			n=0
			for sub in $subs; do
				n=$((n + 1))
				if [ -d "$sub" ]; then mkdir "$layer/kept/$n"; else : > "$layer/kept/$n"; fi
				mount --rbind "$sub" "$layer/kept/$n"
			done
			mount -t overlay overlay \
				-o "lowerdir=$parent,upperdir=$layer/upper,workdir=$layer/work" "$parent"
			n=0
			for sub in $subs; do
				n=$((n + 1))
				if [ -d "$layer/kept/$n" ]; then mkdir -p "$sub"; elif [ ! -e "$sub" ]; then
					mkdir -p "$(dirname "$sub")" && : > "$sub"
				fi
				mount --rbind "$layer/kept/$n" "$sub"
			done
			mkdir "$path"
		fi
		mount --bind "$private" "$path"
	done
	mkdir /etc/kubernetes/cache
	chmod 700 /var/lib/yurthub /etc/kubernetes/cache
	note="pid $$ on $(uname -n): make test's stand-in hub (tests/untouched.sh)"
	for held in /var/lib/yurthub /etc/kubernetes/cache; do
		(umask 077 && echo "$note" > "$held/.tinyhub.lock")
	done
	# One process holding both locks (its open directories), ended by the trap below.
	(
		exec 8< /var/lib/yurthub 9< /etc/kubernetes/cache
		flock -x 8
		flock -x 9
		exec sleep 86400
	) &
	holder=$!
	# A background job of a script ignores Ctrl-C: ended here however the run ends.
	trap 'kill "$holder" 2> /dev/null || true' EXIT
	trap 'exit 130' INT TERM
	while flock -n /etc/kubernetes/cache true; do
		kill -0 "$holder" 2> /dev/null || {
			echo "untouched: FAIL: the stand-in hub ended before it held the locks"
			return 1
		}
		sleep 0.1
	done
	# tests/integration/host_untouched.rs: the default directories are this run's, held.
	export TINYHUB_TEST_DEFAULTS_HELD=1
	status=0
	run_checked "$cmd" "$scratch" \
		"the private /var/lib/yurthub and /etc/kubernetes (locked by a stand-in hub)" || status=$?
	return "$status"
}

if [ "${1-}" = --inside ]; then
	shift
	inside "$@"
	exit
fi
[ $# = 1 ] || {
	echo "usage: $0 '<command>'" >&2
	exit 2
}
scratch=$(mktemp -d "${TMPDIR:-/tmp}/tinyhub-test-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
trap 'exit 130' INT TERM
status=0
# The check makes a mount too: a machine may allow the namespace and refuse mounts in it.
if [ "$(id -u)" = 0 ] && why=$(unshare -m --propagation private \
	sh -c 'd=$(mktemp -d) && mount -t tmpfs tinyhub-test "$d" && umount "$d"; s=$?; rmdir "$d"; exit $s' 2>&1); then
	echo "untouched: the tests run with TMPDIR=$scratch/tmp, in a mount namespace where /var/lib/yurthub and /etc/kubernetes/cache are private and held by a stand-in hub"
	unshare -m --propagation private sh "$0" --inside "$1" "$scratch" || status=$?
else
	[ "$(id -u)" = 0 ] || why="not root"
	if [ "${TINYHUB_REQUIRE_NAMESPACES-}" = 1 ]; then
		echo "untouched: FAIL: cannot make a mount namespace ($why); TINYHUB_REQUIRE_NAMESPACES=1 requires one"
		exit 1
	fi
	echo "untouched: the tests run with TMPDIR=$scratch/tmp; no private mount namespace ($why): the machine's $defaults are checked unchanged where this user may write"
	run_checked "$1" "$scratch" "the machine's $defaults" || status=$?
fi
exit "$status"

#!/bin/sh
# install-missing.sh command:package...: installs, with apt-get, the package of each command
# that is missing, and nothing else. A package already installed is never asked for: apt-get
# install of an installed package upgrades it, and a test run must not upgrade the machine
# (once, a missing busybox had the host's systemd upgraded with it). A command missing while
# its package is installed (a package that no longer ships it) is said and left to the test
# that needs it. `command:pkg1|pkg2`: the first of them the machine's sources have. Installing
# a missing package may ask for newer versions of packages already installed (its
# dependencies): apt-get's plan is read first, and such an install is refused, naming them,
# unless TINYHUB_INSTALL_UPGRADES=1 (.ci/run: a fresh machine made for the run).
# /usr/sbin and /sbin count as on PATH (nginx, ip). Used by `make tools`, `make bench-tools`
# and cross/cross.mk's cross-test-tools.
set -eu

PATH=$PATH:/usr/sbin:/sbin
installed() { dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2> /dev/null | grep -q '^ii'; }

# Each missing command's choices, one line each, none already installed.
wanted=
for pair in "$@"; do
	tool=${pair%%:*} choices=${pair#*:}
	command -v "$tool" > /dev/null 2>&1 && continue
	present=
	for package in $(echo "$choices" | tr '|' ' '); do
		installed "$package" && present=$package
	done
	if [ -n "$present" ]; then
		echo "$tool is missing but $present is installed: not installing it again"
		continue
	fi
	wanted="$wanted $choices"
done
[ -n "$wanted" ] || exit 0

sudo=
[ "$(id -u)" = 0 ] || sudo=sudo
echo "installing what is missing:$wanted"
$sudo apt-get update -qq
for choices in $wanted; do
	done_=
	# Two commands of one package (util-linux's unshare and setpriv): asked for once.
	for package in $(echo "$choices" | tr '|' ' '); do
		installed "$package" && done_=yes
	done
	[ -z "$done_" ] || continue
	for package in $(echo "$choices" | tr '|' ' '); do
		# The plan (-s: nothing done). `Inst name [installed-version] (new ...)`: an upgrade.
		plan=$(apt-get install -s --no-upgrade "$package" 2> /dev/null) || continue
		upgrades=$(echo "$plan" | awk '/^Inst [^ ]+ \[/ { print $2 " " $3 }' | tr -d '[]')
		if [ -n "$upgrades" ] && [ "${TINYHUB_INSTALL_UPGRADES:-}" = 1 ]; then
			echo "install-missing: installing $package upgrades (TINYHUB_INSTALL_UPGRADES=1, a machine made for the run):"
			echo "$upgrades" | sed 's/^/  /'
		elif [ -n "$upgrades" ]; then
			echo "install-missing: installing $package would upgrade what is installed; nothing installed:"
			echo "$upgrades" | sed 's/^/  /'
			echo "install $package yourself (apt-get install $package) if those upgrades are wanted"
			exit 1
		fi
		# --no-upgrade: never upgrade it should it be installed after all.
		if DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-upgrade "$package"; then
			done_=yes
			break
		fi
	done
	[ -n "$done_" ] || {
		echo "install-missing: cannot install $choices"
		exit 1
	}
done

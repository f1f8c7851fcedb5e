# Stand-in for the UCI part of OpenWrt's /lib/functions.sh, for cross/test/init-test.sh.
# config_load sources $STUB_UCI_DIR/<package>: a UCI file is valid shell once `config`,
# `option` and `list` are functions, which is how OpenWrt loads it too. Values live in
# variables CONFIG_<section>_<option>; a list also keeps _ITEM<n> and _LENGTH, and its plain
# value is the items joined by spaces, as in OpenWrt. `logger` is recorded, not sent.

# Appends one call, its arguments shell-quoted, to $STUB_LOG.
stub_record() {
	local _line="$1" _arg
	shift
	for _arg in "$@"; do
		_line="$_line $(stub_quote "$_arg")"
	done
	printf '%s\n' "$_line" >> "$STUB_LOG"
}

# Prints $1 single-quoted for sh.
stub_quote() {
	printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"
}

stub_set() {
	eval "CONFIG_$1_$2=\$3"
}

config() {
	CONFIG_SECTION=$2
	stub_set "$CONFIG_SECTION" TYPE "$1"
}

option() {
	local _name="$1"
	shift
	stub_set "$CONFIG_SECTION" "$_name" "$*"
}

list() {
	local _name="$1" _len _prev
	shift
	config_get _len "$CONFIG_SECTION" "${_name}_LENGTH" 0
	_len=$((_len + 1))
	stub_set "$CONFIG_SECTION" "${_name}_ITEM$_len" "$*"
	stub_set "$CONFIG_SECTION" "${_name}_LENGTH" "$_len"
	config_get _prev "$CONFIG_SECTION" "$_name"
	stub_set "$CONFIG_SECTION" "$_name" "${_prev:+$_prev }$*"
}

config_load() {
	stub_record config_load "$@"
	[ -f "$STUB_UCI_DIR/$1" ] || return 1
	. "$STUB_UCI_DIR/$1"
}

# config_get <var> <section> <option> [default]
config_get() {
	eval "$1=\${CONFIG_$2_$3:-\$4}"
}

# config_get_bool <var> <section> <option> [default]
config_get_bool() {
	local _v
	config_get _v "$2" "$3"
	case "$_v" in
		1|on|true|yes|enabled) _v=1 ;;
		0|off|false|no|disabled) _v=0 ;;
		*) _v=$4 ;;
	esac
	eval "$1=\$_v"
}

# config_list_foreach <section> <option> <function> [args...]: <function> <item> [args...]
config_list_foreach() {
	local _section="$1" _option="$2" _function="$3" _len _i=1 _item
	shift 3
	config_get _len "$_section" "${_option}_LENGTH" 0
	while [ "$_i" -le "$_len" ]; do
		config_get _item "$_section" "${_option}_ITEM$_i"
		"$_function" "$_item" "$@"
		_i=$((_i + 1))
	done
}

logger() {
	stub_record logger "$@"
}

# Stand-in for df -k: a filesystem of $STUB_DF_KIB KiB (30000 unless set), with its name on a
# line of its own as busybox prints a long one; with -P (-Pk), one line each as POSIX has
# it, mounted on a path with a space in it; the path is recorded.
df() {
	stub_record df "$@"
	case $1 in
	-P*)
		printf 'Filesystem           1024-blocks    Used Available Capacity Mounted on\n'
		printf '%s %s %s %s %s%% %s\n' /dev/mtdblock-with-a-long-name "${STUB_DF_KIB:-30000}" 1000 20000 5 '/mnt/usb stick'
		return
		;;
	esac
	printf 'Filesystem           1K-blocks      Used Available Use%% Mounted on\n'
	printf '/dev/mtdblock-with-a-long-name\n'
	printf '%20s %9s %9s %9s %3s%% %s\n' "${STUB_DF_KIB:-30000}" 1000 20000 5 /overlay
}

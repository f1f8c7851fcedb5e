# Stand-in for OpenWrt's /lib/functions/procd.sh, for cross/test/init-test.sh. Every call is
# appended to $STUB_LOG; procd_close_instance also writes the instance's whole command line
# as one `command ...` line (arguments quoted), which is what the tests compare.

procd_open_service() { stub_record procd_open_service "$@"; }

procd_close_service() {
	service_triggers
	stub_record procd_close_service "$@"
}

procd_open_instance() {
	stub_record procd_open_instance "$@"
	STUB_CMD=
}

procd_set_param() {
	stub_record procd_set_param "$@"
	[ "$1" = command ] || return 0
	shift
	STUB_CMD=
	stub_add_cmd "$@"
}

procd_append_param() {
	stub_record procd_append_param "$@"
	[ "$1" = command ] || return 0
	shift
	stub_add_cmd "$@"
}

stub_add_cmd() {
	local _arg
	for _arg in "$@"; do
		STUB_CMD="${STUB_CMD:+$STUB_CMD }$(stub_quote "$_arg")"
	done
}

procd_close_instance() {
	stub_record procd_close_instance "$@"
	printf 'command %s\n' "$STUB_CMD" >> "$STUB_LOG"
}

procd_add_reload_trigger() { stub_record procd_add_reload_trigger "$@"; }
procd_add_interface_trigger() { stub_record procd_add_interface_trigger "$@"; }
procd_add_reload_interface_trigger() { stub_record procd_add_reload_interface_trigger "$@"; }
procd_add_config_trigger() { stub_record procd_add_config_trigger "$@"; }

#!/bin/sh
# init-test.sh: runs cross/openwrt/tinyhub.init against stand-ins of OpenWrt's rc.common and
# its procd/UCI shell functions (cross/test/openwrt-stub/), once per shell found among
# dash, bash and busybox ash (OpenWrt's own shell), and checks what a router would do:
# UCI options become exactly the expected tinyhub command line, absent options take their
# defaults, lists join with commas or repeat a flag, each way to join (kubeconfig, token
# with a bootstrap file or a join token and pins, kubeletcertificate) passes its flags (a
# join token in a 0600 file under root_dir, never on the command line), and
# a config that cannot work (no credentials, a join token without a pin, `enabled 0`) stops
# with a clear message and no procd instance; the open-file limit follows
# --max-requests-in-flight (with `-` or `_`), and the files the hub reads its identity from
# at start (a kubeconfig's certificate files too) are reload triggers, and those it follows
# by itself are not; the cache bound defaults to a third of the cache's filesystem (a
# stand-in df), at least 4 MiB, and '0' or a size passes as given. Under CI=true a missing busybox is a failure. Exits non-zero when any
# check fails.
set -u

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
init=$here/../openwrt/tinyhub.init
stub=$here/openwrt-stub
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT INT TERM
# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$here/lib.sh"

# Files in the working directory so that an unguarded glob of `*` would expand.
mkdir -p "$work/cwd" "$work/uci"
touch "$work/cwd/glob-bait-a" "$work/cwd/glob-bait-b"
kc=$work/hub.kubeconfig
echo "apiVersion: v1" > "$kc"
# A kubeconfig that names its certificate files, in a directory with a space in its name:
# relative paths are the kubeconfig directory's, as kubectl reads them.
mkdir -p "$work/kube dir"
kcf="$work/kube dir/hub.kubeconfig"
cat > "$kcf" <<EOF
apiVersion: v1
clusters:
- name: c
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority: ../pki/ca.crt   # the cluster CA
- name: other
  cluster:
    certificate-authority-data: Q0E=
users:
- name: hub
  user:
    client-certificate: pki/hub.crt
    client-key: "/etc/kubernetes/pki/hub key.pem"
- name: sa
  user:
    tokenFile: /var/run/secrets/token
contexts:
- name: x
  context: {cluster: c, user: hub}
current-context: x
EOF
bf=$work/bootstrap-hub.conf
echo "apiVersion: v1" > "$bf"
tok=abcdef.0123456789abcdef
pin1=sha256:$(printf '%064d' 1)
pin2=sha256:$(printf '%064d' 2)
host=$(tr 'A-Z' 'a-z' < /proc/sys/kernel/hostname)

# run <uci file content> [action]: runs the init script; leaves its stdout, stderr and the
# stand-ins' record in $work/out, $work/err, $work/log.
run() {
	printf '%s\n' "$1" > "$work/uci/tinyhub"
	: > "$work/log"
	(cd "$work/cwd" && STUB_UCI_DIR=$work/uci STUB_LOG=$work/log STUB_DF_KIB=${df_kib:-} \
		$sh "$stub/rc.common" "$init" "${2:-start}" > "$work/out" 2> "$work/err")
}

# expect_cmd <case> <expected quoted argv>: exactly one instance, with that command line.
expect_cmd() {
	got=$(sed -n 's/^command //p' "$work/log")
	n=$(grep -c '^procd_open_instance' "$work/log")
	if [ "$n" = 1 ] && [ "$got" = "$2" ]; then
		ok "$1"
	else
		bad "$1: $n instance(s)"
		echo "        expected: $2"
		echo "        got:      $got"
	fi
}

# expect_line <case> <exact line of the record>
expect_line() {
	if grep -qxF -- "$2" "$work/log"; then ok "$1"; else bad "$1: no line [$2] in:"; sed 's/^/        /' "$work/log"; fi
}

# expect_refusal <case> <text>: no instance; <text> on stderr and in a logger -t tinyhub call.
expect_refusal() {
	if grep -q '^procd_open_instance' "$work/log"; then
		bad "$1: an instance was opened"
	elif ! grep -qF -- "$2" "$work/err"; then
		bad "$1: stderr lacks [$2]: $(cat "$work/err")"
	elif ! grep -q "^logger '-t' 'tinyhub' .*$2" "$work/log"; then
		bad "$1: no logger -t tinyhub call with [$2]"
	else
		ok "$1"
	fi
}

# expect_secret_kept <case>: the join token's secret is in no message and no logger call.
expect_secret_kept() {
	if grep -qF "${tok#*.}" "$work/err" "$work/out" || grep '^logger' "$work/log" | grep -qF "${tok#*.}"; then
		bad "$1: the token's secret was printed or logged"
	else
		ok "$1"
	fi
}

# expect_token_file <case>: $R/join-token holds the token, one line, mode 0600.
expect_token_file() {
	if [ "$(cat "$R/join-token" 2>/dev/null)" != "$tok" ]; then
		bad "$1: $R/join-token does not hold the token"
	elif [ "$(stat -c %a "$R/join-token")" != 600 ]; then
		bad "$1: $R/join-token is mode $(stat -c %a "$R/join-token"), not 600"
	elif [ "$(stat -c %a "$R")" != 700 ]; then
		# The hub makes its root dir 0700 but leaves one that exists: made here first, it
		# must be made as the hub would.
		bad "$1: $R is mode $(stat -c %a "$R"), not 700"
	else
		ok "$1"
	fi
}

P="'/usr/bin/tinyhub' '--kubeconfig=$kc'"
# The root dir of the join token cases: the init script writes the token there.
R=$work/root-dir
DR="'--node-name=$host' '--disk-cache-path=/etc/kubernetes/cache' '--root-dir=$R' '--cache-max-bytes=10000Ki'"
# The defaults that follow the identity and server flags.
D="'--node-name=$host' '--disk-cache-path=/etc/kubernetes/cache' '--root-dir=/etc/kubernetes/yurthub' '--cache-max-bytes=10000Ki'"

check_shell() {
	echo "init-test: tinyhub.init under $sh"

	run "config tinyhub 'main'
	option enabled '1'
	option kubeconfig '$kc'
	list server_addr 'https://10.0.0.1:6443'
	list server_addr 'https://10.0.0.2:6443'
	option node_name 'gw-01'
	option disk_cache_path '/tmp/tinyhub-cache'
	option root_dir '/mnt/data/yurthub'
	option cache_max_bytes '16Mi'
	list cache_agents 'edge-agent'
	list cache_agents 'my-operator'
	option bind_address '127.0.0.2'
	option proxy_port '10361'
	option proxy_secure_port '10368'
	option serve_port '10367'
	option node_ip '192.0.2.50'
	option working_mode 'cloud'
	option lb_mode 'priority'
	option enable_dummy_if '1'
	option dummy_if_ip '169.254.9.9'
	option dummy_if_name 'pods0'
	option v '4'
	option extra_args '--nodepool-name=pool-a  --heartbeat-interval-seconds=5'
	list interface 'wan'
	list interface 'wwan'"
	expect_cmd "every option maps to its flag, in order" \
		"$P '--server-addr=https://10.0.0.1:6443,https://10.0.0.2:6443' '--node-name=gw-01' '--disk-cache-path=/tmp/tinyhub-cache' '--root-dir=/mnt/data/yurthub' '--cache-max-bytes=16Mi' '--cache-agents=edge-agent,my-operator' '--bind-address=127.0.0.2' '--proxy-port=10361' '--proxy-secure-port=10368' '--serve-port=10367' '--node-ip=192.0.2.50' '--working-mode=cloud' '--lb-mode=priority' '--enable-dummy-if=true' '--dummy-if-ip=169.254.9.9' '--dummy-if-name=pods0' '--v=4' '--nodepool-name=pool-a' '--heartbeat-interval-seconds=5'"
	expect_line "respawn with procd's defaults" "procd_set_param 'respawn'"
	expect_line "stdout to syslog" "procd_set_param 'stdout' '1'"
	expect_line "stderr to syslog" "procd_set_param 'stderr' '1'"
	expect_line "restart on reload only when the config changed" "procd_set_param 'file' '/etc/config/tinyhub'"
	expect_line "a reload restarts the hub when its kubeconfig changed" "procd_append_param 'file' '$kc'"
	expect_line "nofile raised for 2 x 250 connections, their upstreams, the multiplexer and the rest" \
		"procd_set_param 'limits' 'nofile=1512 1512'"
	expect_line "reload on uci commit tinyhub" "procd_add_reload_trigger 'tinyhub'"
	expect_line "reload when wan comes up" "procd_add_reload_interface_trigger 'wan'"
	expect_line "reload when wwan comes up" "procd_add_reload_interface_trigger 'wwan'"

	run "config tinyhub 'main'
	option enabled '1'
	option kubeconfig '$kc'"
	expect_cmd "defaults: hostname, /etc/kubernetes/cache, root dir on flash, the rest left to the hub" \
		"$P '--node-name=$host' '--disk-cache-path=/etc/kubernetes/cache' '--root-dir=/etc/kubernetes/yurthub' '--cache-max-bytes=10000Ki'"
	if grep -q 'interface_trigger' "$work/log"; then bad "no interface trigger unless listed"; else ok "no interface trigger unless listed"; fi
	# The cache may not be made yet: df sizes the nearest directory that exists.
	near=/etc/kubernetes/cache
	while [ ! -d "$near" ]; do near=$(dirname -- "$near"); done
	expect_line "the cache bound's default sizes the cache's filesystem" "df '-Pk' '--' '$near'"

	run "config tinyhub 'main'
	option enabled '1'
	option kubeconfig '$kc'
	option cache_max_bytes '0'"
	expect_cmd "cache_max_bytes 0 turns the bound off" "$P $(printf '%s' "$D" | sed "s/10000Ki/0/")"

	df_kib=6000
	run "config tinyhub 'main'
	option enabled '1'
	option kubeconfig '$kc'"
	expect_cmd "the automatic bound is at least 4 MiB" "$P $(printf '%s' "$D" | sed "s/10000Ki/4096Ki/")"

	df_kib=unknown
	run "config tinyhub 'main'
	option enabled '1'
	option kubeconfig '$kc'"
	df_kib=""
	expect_cmd "no bound when df says nothing usable" "$P $(printf '%s' "$D" | sed "s/ '--cache-max-bytes=10000Ki'//")"
	if grep -qF "the cache is not bounded" "$work/err"; then ok "which is said"; else bad "which is said: $(cat "$work/err")"; fi

	run "config tinyhub 'main'
	option enabled 'yes'
	option kubeconfig '$kc'
	option server_addr 'https://a.example:6443, https://b.example:6443,'
	option cache_agents '*'"
	expect_cmd "comma strings join, '*' is not globbed, 'yes' enables" \
		"$P '--server-addr=https://a.example:6443,https://b.example:6443' $D '--cache-agents=*'"

	run "config tinyhub 'main'
	option enabled '1'
	option kubeconfig '$kc'
	option enable_dummy_if 'off'"
	expect_cmd "enable_dummy_if 'off' turns the dummy interface off" \
		"$P $D '--enable-dummy-if=false'"

	run "config tinyhub 'main'
	option enabled 'on'
	option kubeconfig '$kc'
	list cache_agents 'a,b'
	list cache_agents 'c'
	list server_addr 'https://only:6443'"
	expect_cmd "list items that hold commas, and a one-item list" \
		"$P '--server-addr=https://only:6443' $D '--cache-agents=a,b,c'"

	run "config tinyhub 'main'
	option enabled '1'
	option server_addr 'https://10.0.0.1:6443'"
	expect_refusal "no kubeconfig, no bootstrap: refused" "no credentials for the cloud"
	expect_line "no credentials: triggers still registered" "procd_add_reload_trigger 'tinyhub'"

	run "config tinyhub 'main'
	option enabled '1'
	option kubeconfig '$work/absent.kubeconfig'
	option bootstrap_file '$bf'"
	expect_refusal "kubeconfig file absent: refused, no fallback to bootstrap" "kubeconfig $work/absent.kubeconfig"

	run "config tinyhub 'main'
	option enabled '1'
	option kubeconfig '$kc'
	option bootstrap_mode 'kubeletcertificate'
	option bootstrap_file '$bf'
	option join_token '$tok'
	list ca_cert_hash '$pin1'
	option unsafe_skip_ca_verification '1'
	list hub_cert_organizations 'openyurt:tenant:edge'
	option hub_cert_signer 'kube-apiserver-client-kubelet'
	option kubelet_client_certificate '$work/kubelet.pem'"
	expect_cmd "a kubeconfig wins: no bootstrap flags, so no token on the command line" "$P $D"
	expect_line "a kubeconfig wins: the config and the kubeconfig are watched" "procd_set_param 'file' '/etc/config/tinyhub'"
	if [ "$(grep "^procd_append_param 'file'" "$work/log")" = "procd_append_param 'file' '$kc'" ]; then
		ok "a kubeconfig wins: the kubeconfig is watched, the bootstrap file and kubelet's files are not"
	else
		bad "a kubeconfig wins: watched files: $(grep "'file'" "$work/log")"
	fi

	run "config tinyhub 'main'
	option enabled '1'
	option bootstrap_file '$bf'"
	expect_cmd "token mode, the default, with a bootstrap file" \
		"'/usr/bin/tinyhub' '--bootstrap-mode=token' '--bootstrap-file=$bf' $D"
	if grep -q "^procd_append_param 'file'" "$work/log"; then
		bad "bootstrap file: not a reload trigger (the hub reads it afresh and rewrites it): $(grep "'file'" "$work/log")"
	else
		ok "bootstrap file: not a reload trigger (the hub reads it afresh and rewrites it)"
	fi
	if [ -s "$work/err" ]; then bad "bootstrap file present: no warning: $(cat "$work/err")"; else ok "bootstrap file present: no warning"; fi

	run "config tinyhub 'main'
	option enabled '1'
	option bootstrap_mode 'token'
	option bootstrap_file '$work/absent.conf'
	list hub_cert_organizations 'openyurt:tenant:edge'
	list hub_cert_organizations 'extra-a,extra-b'
	option hub_cert_signer 'kube-apiserver-client-kubelet'"
	expect_cmd "organizations repeat the flag per item; the signer passes" \
		"'/usr/bin/tinyhub' '--bootstrap-mode=token' '--bootstrap-file=$work/absent.conf' '--hub-cert-organizations=openyurt:tenant:edge' '--hub-cert-organizations=extra-a' '--hub-cert-organizations=extra-b' '--hub-cert-signer=kube-apiserver-client-kubelet' $D"
	if grep -qF "bootstrap file $work/absent.conf" "$work/err" &&
		grep -q "^logger '-t' 'tinyhub' '-p' 'daemon.warn' 'bootstrap file $work/absent.conf" "$work/log"; then
		ok "bootstrap file absent: started, with a warning in syslog"
	else
		bad "bootstrap file absent: no warning on stderr and in syslog: $(cat "$work/err")"
	fi

	# A join token goes to the hub in a 0600 file under root_dir, never on its command line.
	rm -rf "$R"
	run "config tinyhub 'main'
	option enabled '1'
	option join_token '$tok'
	list ca_cert_hash '$pin1'
	list ca_cert_hash '$pin2'
	list server_addr 'https://10.0.0.1:6443'
	option root_dir '$R'"
	expect_cmd "join token with two pins: one flag per pin, the token in a file" \
		"'/usr/bin/tinyhub' '--bootstrap-mode=token' '--join-token-file=$R/join-token' '--discovery-token-ca-cert-hash=$pin1' '--discovery-token-ca-cert-hash=$pin2' '--server-addr=https://10.0.0.1:6443' $DR"
	expect_token_file "join token: written to root_dir/join-token"
	if grep -q "^procd_append_param 'file'" "$work/log"; then bad "join token: no file to watch but the config"; else ok "join token: no file to watch but the config"; fi
	expect_secret_kept "join token: the token is in no message"
	mkdir -p "$R"
	echo "stale" > "$R/join-token"
	chmod 0644 "$R/join-token"
	run "config tinyhub 'main'
	option enabled '1'
	option join_token '$tok'
	option ca_cert_hash '$pin1, $pin2'
	option server_addr 'https://10.0.0.1:6443'
	option root_dir '$R'"
	expect_cmd "pins as one comma string: still one flag each" \
		"'/usr/bin/tinyhub' '--bootstrap-mode=token' '--join-token-file=$R/join-token' '--discovery-token-ca-cert-hash=$pin1' '--discovery-token-ca-cert-hash=$pin2' '--server-addr=https://10.0.0.1:6443' $DR"
	expect_token_file "join token: a file holding something else is replaced, 0600"

	run "config tinyhub 'main'
	option enabled '1'
	option join_token '$tok'
	option unsafe_skip_ca_verification '0'
	list server_addr 'https://10.0.0.1:6443'
	option root_dir '$R'"
	expect_refusal "join token without a pin: refused" "option join_token needs list ca_cert_hash"
	expect_secret_kept "join token without a pin: the token is not in the message"

	run "config tinyhub 'main'
	option enabled '1'
	option join_token '$tok'
	list ca_cert_hash '$pin1'
	option root_dir '$R'"
	expect_refusal "join token without server_addr: refused" "option join_token needs server_addr"
	expect_secret_kept "join token without server_addr: the token is not in the message"

	run "config tinyhub 'main'
	option enabled '1'
	option join_token '$tok'
	option unsafe_skip_ca_verification 'yes'
	list server_addr 'https://10.0.0.1:6443'
	option root_dir '$R'"
	expect_cmd "join token with unsafe_skip_ca_verification and no pin" \
		"'/usr/bin/tinyhub' '--bootstrap-mode=token' '--join-token-file=$R/join-token' '--discovery-token-unsafe-skip-ca-verification' '--server-addr=https://10.0.0.1:6443' $DR"

	run "config tinyhub 'main'
	option enabled '1'
	option bootstrap_file '$bf'
	option join_token '$tok'
	option root_dir '$R'"
	expect_cmd "join token beside a bootstrap file: no pin, no server_addr needed (no discovery)" \
		"'/usr/bin/tinyhub' '--bootstrap-mode=token' '--bootstrap-file=$bf' '--join-token-file=$R/join-token' $DR"

	printf '%s\n' "$tok" > "$R/join-token"
	run "config tinyhub 'main'
	option enabled '1'
	option bootstrap_file '$bf'
	option root_dir '$R'"
	expect_cmd "join token no longer configured: its file is no longer passed" \
		"'/usr/bin/tinyhub' '--bootstrap-mode=token' '--bootstrap-file=$bf' $DR"

	# A token file of the owner's passes as it is, and is a reload trigger.
	printf '%s\n' "$tok" > "$work/own-token"
	run "config tinyhub 'main'
	option enabled '1'
	option join_token_file '$work/own-token'
	list ca_cert_hash '$pin1'
	list server_addr 'https://10.0.0.1:6443'
	option root_dir '$R'"
	expect_cmd "join_token_file: passed as it is" \
		"'/usr/bin/tinyhub' '--bootstrap-mode=token' '--join-token-file=$work/own-token' '--discovery-token-ca-cert-hash=$pin1' '--server-addr=https://10.0.0.1:6443' $DR"
	expect_line "join_token_file: a reload trigger (the hub reads it at start)" \
		"procd_append_param 'file' '$work/own-token'"
	run "config tinyhub 'main'
	option enabled '1'
	option join_token_file '$work/own-token'
	list server_addr 'https://10.0.0.1:6443'
	option root_dir '$R'"
	expect_refusal "join_token_file without a pin: refused" "option join_token_file needs list ca_cert_hash"
	run "config tinyhub 'main'
	option enabled '1'
	option join_token_file '$work/absent-token'
	list ca_cert_hash '$pin1'
	list server_addr 'https://10.0.0.1:6443'
	option root_dir '$R'"
	expect_refusal "join_token_file absent: refused" "join token file $work/absent-token (option join_token_file"
	run "config tinyhub 'main'
	option enabled '1'
	option join_token '$tok'
	option join_token_file '$work/own-token'
	list ca_cert_hash '$pin1'
	list server_addr 'https://10.0.0.1:6443'
	option root_dir '$R'"
	expect_refusal "join_token and join_token_file: refused" "options join_token and join_token_file"
	expect_secret_kept "join_token and join_token_file: the token is not in the message"

	run "config tinyhub 'main'
	option enabled '1'
	option bootstrap_mode 'kubeletcertificate'"
	expect_cmd "kubeletcertificate: kubelet's paths left to the hub" \
		"'/usr/bin/tinyhub' '--bootstrap-mode=kubeletcertificate' $D"
	expect_line "kubeletcertificate: a reload restarts the hub when kubelet's kubeconfig or CA (kubeadm's paths) changed, not its rotating certificate" \
		"procd_append_param 'file' '/etc/kubernetes/kubelet.conf' '/etc/kubernetes/pki/ca.crt'"
	if grep -q "kubelet-client-current.pem" "$work/log"; then bad "kubeletcertificate: kubelet's client certificate is a reload trigger"; else ok "kubeletcertificate: kubelet's client certificate (the hub follows it) is no reload trigger"; fi

	run "config tinyhub 'main'
	option enabled '1'
	option bootstrap_mode 'kubeletcertificate'
	option bootstrap_file '$bf'
	option join_token '$tok'
	list hub_cert_organizations 'openyurt:tenant:edge'
	option kubelet_kubeconfig '$work/kubelet.conf'
	option kubelet_ca_file '$work/ca.crt'
	option kubelet_client_certificate '$work/absent-kubelet-client-current.pem'
	option root_dir '/overlay/yurthub'"
	expect_cmd "kubeletcertificate: its paths pass, an absent certificate is no refusal, token options unused" \
		"'/usr/bin/tinyhub' '--bootstrap-mode=kubeletcertificate' '--kubelet-kubeconfig=$work/kubelet.conf' '--kubelet-ca-file=$work/ca.crt' '--kubelet-client-certificate=$work/absent-kubelet-client-current.pem' '--node-name=$host' '--disk-cache-path=/etc/kubernetes/cache' '--root-dir=/overlay/yurthub' '--cache-max-bytes=10000Ki'"
	expect_line "kubeletcertificate: the configured kubelet kubeconfig and CA are the reload triggers" \
		"procd_append_param 'file' '$work/kubelet.conf' '$work/ca.crt'"
	if grep -q "^procd_append_param 'file' '$bf'" "$work/log"; then bad "kubeletcertificate: the bootstrap file is watched"; else ok "kubeletcertificate: the bootstrap file is not watched"; fi

	run "config tinyhub 'main'
	option enabled '1'
	option kubeconfig '$kc'
	option extra_args '--max-requests-in-flight=1000 --multiplexer-client-ca-file $work/pool-ca.crt'"
	expect_line "--max-requests-in-flight=1000 in extra_args: nofile follows (4 x 1000 + 512)" \
		"procd_set_param 'limits' 'nofile=4512 4512'"
	expect_line "a multiplexer client CA in extra_args (--flag value) is a reload trigger" \
		"procd_append_param 'file' '$work/pool-ca.crt'"

	run "config tinyhub 'main'
	option enabled '1'
	option kubeconfig '$kc'
	option extra_args '--max-requests-in-flight 40 --multiplexer-client-ca-file=$work/pool-ca.crt --max-requests-in-flight=60'"
	expect_line "--max-requests-in-flight given twice: the last one counts, as in the hub" \
		"procd_set_param 'limits' 'nofile=752 752'"
	expect_line "a multiplexer client CA in extra_args (--flag=value) is a reload trigger" \
		"procd_append_param 'file' '$work/pool-ca.crt'"

	run "config tinyhub 'main'
	option enabled '1'
	option kubeconfig '$kc'
	option extra_args '--max_requests_in_flight=2000 --multiplexer_client_ca_file $work/pool_ca.crt'"
	expect_line "--max_requests_in_flight=2000 (underscores, as the hub accepts): nofile follows (4 x 2000 + 512)" \
		"procd_set_param 'limits' 'nofile=8512 8512'"
	expect_line "--multiplexer_client_ca_file (underscores) is a reload trigger, its value kept as written" \
		"procd_append_param 'file' '$work/pool_ca.crt'"

	run "config tinyhub 'main'
	option enabled '1'
	option kubeconfig '$kcf'"
	expect_cmd "a kubeconfig in a directory with a space" "'/usr/bin/tinyhub' '--kubeconfig=$kcf' $D"
	got=$(sed -n "s/^procd_append_param 'file' //p" "$work/log")
	want="'$kcf'
'$work/kube dir/../pki/ca.crt'
'$work/kube dir/pki/hub.crt'
'/etc/kubernetes/pki/hub key.pem'"
	if [ "$got" = "$want" ]; then
		ok "the files a kubeconfig names are reload triggers, relative ones under its directory; not the *-data forms nor a tokenFile"
	else
		bad "kubeconfig's files as reload triggers:"
		echo "        expected: $want"
		echo "        got:      $got"
	fi

	run "config tinyhub 'main'
	option enabled '1'
	option bootstrap_mode 'kubelet'
	option bootstrap_file '$bf'"
	expect_refusal "unknown bootstrap_mode: refused" "option bootstrap_mode in /etc/config/tinyhub is kubelet, not token or kubeletcertificate"

	run "config tinyhub 'main'
	option enabled '0'
	option kubeconfig '$kc'"
	expect_refusal "enabled 0: refused" "disabled in /etc/config/tinyhub"
	expect_line "enabled 0: reload trigger kept, so enabling + uci commit starts it" "procd_add_reload_trigger 'tinyhub'"

	run "config tinyhub 'main'
	option kubeconfig '$kc'"
	expect_refusal "enabled absent: off by default" "disabled in /etc/config/tinyhub"

	run "config tinyhub 'other'
	option enabled '1'
	option kubeconfig '$kc'"
	expect_refusal "no 'main' section: off" "disabled in /etc/config/tinyhub"

	shipped=$(cat "$here/../openwrt/tinyhub.config")
	run "$shipped"
	expect_refusal "the shipped config loads, and is off until configured" "disabled in /etc/config/tinyhub"
	run "$(printf '%s\n' "$shipped" | sed -e "s/enabled '0'/enabled '1'/")"
	expect_refusal "the shipped config, enabled as it is: no credentials" "no credentials for the cloud"
	run "$(printf '%s\n' "$shipped" | sed -e "s/enabled '0'/enabled '1'/" \
		-e "s#^	\#option kubeconfig '/etc/kubernetes/tinyhub.kubeconfig'#	option kubeconfig '$kc'#")"
	expect_cmd "the shipped config, enabled, with a kubeconfig" "$P $D"
	run "$(printf '%s\n' "$shipped" | sed -e "s/enabled '0'/enabled '1'/" \
		-e "s#^	\#option bootstrap_file '/etc/kubernetes/yurthub/bootstrap-hub.conf'#	option bootstrap_file '$bf'#")"
	expect_cmd "the shipped config, enabled, with its bootstrap_file line" \
		"'/usr/bin/tinyhub' '--bootstrap-mode=token' '--bootstrap-file=$bf' $D"

	# Kubernetes' default node name is the lower-cased hostname: give this run its own one.
	if unshare -u true 2>/dev/null; then
		printf '%s\n' "config tinyhub 'main'
	option enabled '1'
	option kubeconfig '$kc'" > "$work/uci/tinyhub"
		: > "$work/log"
		(cd "$work/cwd" && STUB_UCI_DIR=$work/uci STUB_LOG=$work/log \
			unshare -u $sh -c 'hostname GW-Test-01 && exec '"$sh"' "$0" "$@"' \
			"$stub/rc.common" "$init" start > "$work/out" 2> "$work/err")
		expect_cmd "an upper-case hostname becomes a lower-case node name" \
			"$P '--node-name=gw-test-01' '--disk-cache-path=/etc/kubernetes/cache' '--root-dir=/etc/kubernetes/yurthub' '--cache-max-bytes=10000Ki'"
	else
		skip "upper-case hostname (unshare -u not permitted here)"
	fi

	# `service tinyhub cache …`: the tool with the config's paths and node name, its own
	# arguments first, and no procd instance.
	printf '#!/bin/sh\nfor a in "$@"; do printf "%%s|" "$a"; done > "$STUB_ARGS"\n' > "$work/prog"
	chmod +x "$work/prog"
	printf '%s\n' "config tinyhub 'main'
	option node_name 'gw-01'
	option disk_cache_path '/data/cache'" > "$work/uci/tinyhub"
	: > "$work/log"
	(cd "$work/cwd" && STUB_UCI_DIR=$work/uci STUB_LOG=$work/log STUB_PROG=$work/prog \
		STUB_ARGS=$work/args $sh "$stub/rc.common" "$init" cache get kubelet pods -n 'kube system' web > "$work/out" 2> "$work/err")
	want="cache|get|kubelet|pods|-n|kube system|web|--disk-cache-path=/data/cache|--root-dir=/etc/kubernetes/yurthub|--node-name=gw-01|"
	if [ "$(cat "$work/args" 2>/dev/null)" = "$want" ] && ! grep -q '^procd_open_instance' "$work/log"; then
		ok "cache passes its arguments and the config's paths to tinyhub cache"
	else
		bad "cache: got [$(cat "$work/args" 2>/dev/null)] $(cat "$work/err"), want [$want]"
	fi

	rm -rf "$work/root"
	mkdir -p "$work/root/etc/init.d"
	(cd "$work/cwd" && IPKG_INSTROOT=$work/root STUB_UCI_DIR=$work/uci STUB_LOG=$work/log \
		$sh "$stub/rc.common" "$init" enable)
	if [ "$(readlink "$work/root/etc/rc.d/S99tinyhub.init")" = ../init.d/tinyhub.init ]; then
		ok "enable links rc.d/S99 (START=99, after the network's S20)"
	else
		bad "enable: no rc.d/S99 link: $(ls -l "$work/root/etc/rc.d" 2>&1)"
	fi
}

found=0
for sh in dash bash "busybox sh"; do
	command -v "${sh%% *}" > /dev/null 2>&1 || continue
	[ "$sh" = "busybox sh" ] && ! busybox sh -c true 2>/dev/null && continue
	found=1
	check_shell
done
if [ "$found" = 0 ]; then
	sh=sh
	check_shell
fi
# CI installs busybox (cross.mk: cross-test-tools), so there its absence is a failure.
if ! busybox sh -c true > /dev/null 2>&1; then
	if [ "${CI:-}" = true ]; then
		bad "busybox not installed (CI=true): OpenWrt's own shell (ash) was not tried"
	else
		echo "init-test: note: busybox not installed, so OpenWrt's own shell (ash) was not tried"
	fi
fi

finish init-test

//! Issue 17 item 1: YurtHub's own command lines start tinyhub, word for word: the static pod
//! of YurtHub's Helm chart and the one `yurtadm join` writes, in edge and cloud mode, and
//! the systemd unit yurtadm writes where yurthub runs on the host. They
//! use YurtHub's fixed ports (10261, 10267, 10268), its default paths (`/var/lib/yurthub`,
//! `/etc/kubernetes/cache`) and the dummy interface, so the test runs in new mount and
//! network namespaces (this binary re-run under `unshare -m -n`, `-r` too when not root),
//! with private directories mounted over those paths and the stand-in cloud inside: the
//! machine's ports, interfaces and files are never touched.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::support::Cloud;
use crate::support::hub::*;
use crate::support::namespace::{bind_over, enter_child, ip, is_root, run_test_in_namespaces};

/// Set in the child process that runs inside the namespaces.
const NS_CHILD: &str = "TINYHUB_YURTHUB_COMMAND_LINE_NS_CHILD";
/// What `yurtadm join` writes and both command lines name.
const BOOTSTRAP_FILE: &str = "/var/lib/yurthub/bootstrap-hub.conf";
/// The node, as kubelet substitutes `$(NODE_NAME)` from `spec.nodeName`.
const NODE: &str = "edge-1";
/// YurtHub's default dummy interface address.
const DUMMY_IP: &str = "169.254.2.1";

#[test]
fn yurthubs_helm_chart_and_yurtadm_command_lines_run_a_hub() {
    let namespaces: &[&str] = if is_root() {
        &["-m", "-n"]
    } else {
        &["-r", "-m", "-n"]
    };
    run_test_in_namespaces(
        namespaces,
        "yurthub_command_line::namespace_child",
        NS_CHILD,
    );
}

/// The `command:` of openyurt's `charts/yurthub/templates/yurthub-yurtstaticset.yaml` with
/// `values.yaml`'s defaults (`yurthubBindingAddr` 127.0.0.1, `bootstrapFile`
/// /var/lib/yurthub/bootstrap-hub.conf, `nodePoolName` and `organizations` empty), the
/// release namespace kube-system, and the stand-in cloud for `kubernetesServerAddr`.
fn helm_chart_command(server: &str) -> Vec<String> {
    [
        "--v=2",
        "--bind-address=127.0.0.1",
        &format!("--server-addr={server}"),
        &format!("--node-name={NODE}"),
        "--nodepool-name=",
        &format!("--bootstrap-file={BOOTSTRAP_FILE}"),
        "--working-mode=edge",
        "--namespace=kube-system",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The `command:` of openyurt's `pkg/yurtadm/constants/constants.go` `YurthubTemplate` with
/// what `yurtadm join` fills in: its default binding address, the cloud, the working mode,
/// the namespace, and the optional lines all present (`enableDummyIf` and `enableNodePool`
/// as older releases of yurtadm set them, an organization yurt-manager approves, a pool).
fn yurtadm_join_command(server: &str, working_mode: &str) -> Vec<String> {
    [
        "--v=2",
        "--bind-address=127.0.0.1",
        &format!("--server-addr={server}"),
        &format!("--node-name={NODE}"),
        &format!("--bootstrap-file={BOOTSTRAP_FILE}"),
        &format!("--working-mode={working_mode}"),
        "--namespace=kube-system",
        "--enable-dummy-if=true",
        "--enable-node-pool=true",
        "--hub-cert-organizations=openyurt:tenant:acme",
        "--nodepool-name=hangzhou",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The `ExecStart` of openyurt's `pkg/yurtadm/constants/constants.go` `YurtHubUnitConfig`
/// with its `Environment` lines expanded, filled in as
/// `pkg/yurtadm/util/yurthub/host_config.go` fills it from `yurtadm join`'s data
/// (`NewYurthubHostConfigFromJoinData`: the bootstrap file, no bootstrap mode; a pool) by
/// `bootstrapArgs()` and `normalizedServerAddr()`, which puts `https://` before each of the
/// join's `host:port` servers. The cloud is listed with a second apiserver that is down, as a node may be
/// joined while one of two apiservers is.
fn yurtadm_systemd_command(server: &str) -> Vec<String> {
    let cloud = server.strip_prefix("https://").unwrap_or(server);
    // A port nothing listens on: this network namespace is the test's own.
    let down = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let server_addr = [cloud.to_owned(), down.to_string()]
        .map(|addr| format!("https://{addr}"))
        .join(",");
    [
        &format!("--node-name={NODE}"),
        "--nodepool-name=hangzhou",
        &format!("--server-addr={server_addr}"),
        &format!("--bootstrap-file={BOOTSTRAP_FILE}"),
        "--bind-address=127.0.0.1",
        "--working-mode=edge",
        "--namespace=kube-system",
        "--v=2",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// A command line for a cloud server's URL.
type CommandLine = fn(&str) -> Vec<String>;

#[test]
#[ignore = "run by yurthubs_helm_chart_and_yurtadm_command_lines_run_a_hub in namespaces"]
fn namespace_child() {
    enter_child(NS_CHILD);
    let dir = TempDir::new("yurthub-command-line");
    let (hub_dir, kubernetes_dir) = (dir.path().join("yurthub"), dir.path().join("kubernetes"));
    for private in [&hub_dir, &kubernetes_dir] {
        std::fs::create_dir(private).unwrap();
    }
    // Dropped before `dir`: the directories are removed once nothing is mounted on them.
    let _mounts = [
        bind_over(
            &hub_dir,
            Path::new("/var/lib/yurthub"),
            &dir.path().join("var-lib"),
        ),
        bind_over(
            &kubernetes_dir,
            Path::new("/etc/kubernetes"),
            &dir.path().join("etc"),
        ),
    ];

    let cases: [(&str, CommandLine); 4] = [
        ("helm chart", helm_chart_command),
        ("yurtadm join, edge", |s| yurtadm_join_command(s, "edge")),
        ("yurtadm join, cloud", |s| yurtadm_join_command(s, "cloud")),
        ("yurtadm's systemd unit", yurtadm_systemd_command),
    ];
    for (name, command) in cases {
        // Each node joins afresh, as a new node would (the directories stay: they are
        // what is mounted).
        for private in [&hub_dir, &kubernetes_dir] {
            for entry in std::fs::read_dir(private).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    std::fs::remove_dir_all(&path).unwrap();
                } else {
                    std::fs::remove_file(&path).unwrap();
                }
            }
        }
        let cloud = Cloud::start();
        runs_a_hub(name, &cloud, &command(&cloud.url()), &kubernetes_dir);
    }
}

/// `args` start a hub that joins `cloud` by the bootstrap file, becomes ready, forwards a
/// read as the node, serves on YurtHub's ports (and its dummy interface where the kernel
/// has the `dummy` link kind), and stops cleanly on SIGTERM.
fn runs_a_hub(name: &str, cloud: &Cloud, args: &[String], kubernetes_dir: &Path) {
    let edge = args.iter().any(|a| a == "--working-mode=edge");
    cloud.add_bootstrap_token("abcdef", "0123456789abcdef");
    cloud.write_bootstrap_kubeconfig(Path::new(BOOTSTRAP_FILE), "abcdef.0123456789abcdef");
    cloud.create(
        "configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "default"}, "data": {"k": "v"}}),
    );
    let mut hub = Hub::start_exact(args, &[]);
    assert_eq!(hub.proxy, "127.0.0.1:10261".parse().unwrap(), "{name}");
    assert_eq!(hub.serve, "127.0.0.1:10267".parse().unwrap(), "{name}");
    // Ready once the hub holds its client certificate from the bootstrap token (and, in edge
    // mode, the cache is loaded). Generous: an emulated hub makes its keys slowly.
    let ready = eventually(Duration::from_secs(180), || {
        get("http://127.0.0.1:10267/v1/readyz", "curl/8").status == 200
    });
    assert!(ready, "{name}: never ready:\n{}", hub.logs());
    assert_eq!(
        hub.wait_https(Duration::from_secs(120)),
        Some("127.0.0.1:10268".parse().unwrap()),
        "{name}: {}",
        hub.logs()
    );

    reads_as_the_node(cloud, &hub, "settings");
    // The hub's own files went where YurtHub keeps them: in the private directories here.
    assert!(
        Path::new("/var/lib/yurthub/yurthub.conf").exists(),
        "{name}"
    );
    if edge {
        let cached = kubernetes_dir.join("cache/kubelet/configmaps.v1.core/default/settings");
        assert!(
            eventually(Duration::from_secs(60), || cached.exists()),
            "{name}: {} was not cached",
            cached.display()
        );
    }
    // Every flag of both command lines is implemented or honoured as given: no warning.
    assert_eq!(
        hub.log_lines(|l| l.contains("not implemented by tinyhub")),
        0,
        "{name}: {}",
        hub.logs()
    );
    dummy_interface_serves(name, &hub);

    signal(hub.pid(), "TERM");
    assert!(hub.wait_exit().success(), "{name}: {}", hub.logs());
}

/// Where the kernel can make the dummy interface (not every test kernel has the `dummy`
/// link kind, and a hub without it says so and runs on, as tests/integration/dummy_if.rs
/// checks), the proxy answers on its address with the same port.
fn dummy_interface_serves(name: &str, hub: &Hub) {
    let links = ip(&["-o", "link", "show"]);
    if !links.contains("hub-dummy0") {
        assert!(
            hub.logs().contains("pointed at --bind-proxy-address"),
            "{name}: no interface and no word why: {}",
            hub.logs()
        );
        eprintln!("{name}: no dummy interface in this kernel; its address was not tried");
        return;
    }
    let on_dummy: SocketAddr = format!("{DUMMY_IP}:10261").parse().unwrap();
    let got = get(
        &format!("http://{on_dummy}/api/v1/namespaces/default/configmaps/settings"),
        KUBELET,
    );
    assert_eq!(got.status, 200, "{name}: {}", got.text());
}

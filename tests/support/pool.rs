//! A pool of hubs on one machine (issue 16): N hubs of nodes `edge-1..N` in pool `pool-a`,
//! each with its own client certificate (`system:node:edge-N`, O `system:nodes`), node IP
//! `127.0.0.<N+1>` and the same multiplexer port, and the pool's `leader-hub-pool-a`
//! ConfigMap in the stand-in cloud. Shared by the integration tests and the benchmarks.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::Auth;
use super::cloud::{Cloud, RecordedRequest};
use super::hub::{Hub, HubSpec, TempDir, emulated, eventually, get};

/// The pool's name.
pub const POOL: &str = "pool-a";
/// The pool's ConfigMap (in `kube-system`).
pub const CONFIG_NAME: &str = "leader-hub-pool-a";
/// The pool-scope resources the ConfigMap names (YurtHub's defaults).
pub const POOL_SCOPED: &str = "/v1/services,discovery.k8s.io/v1/endpointslices";

/// `secs` seconds, three times that for an emulated binary: the pool tests' waits.
pub fn patience(secs: u64) -> Duration {
    Duration::from_secs(if emulated() { secs * 3 } else { secs })
}

/// Node `n`'s name (`edge-<n>`, from 1).
pub fn node_name(n: usize) -> String {
    format!("edge-{n}")
}

/// Node `n`'s IP, `127.0.0.<n+1>`: one loopback address per hub.
pub fn node_ip(n: usize) -> Ipv4Addr {
    let last = u8::try_from(n + 1).expect("a small pool");
    Ipv4Addr::new(127, 0, 0, last)
}

/// A TCP port free on the IPs of nodes 1..=n (every hub serves its multiplexer on the same
/// port, on its own IP).
pub fn free_port(n: usize) -> u16 {
    for _ in 0..100 {
        let first = TcpListener::bind((node_ip(1), 0)).expect("bind a node IP");
        let port = first.local_addr().expect("its address").port();
        let others: Vec<_> = (2..=n)
            .map(|i| TcpListener::bind((node_ip(i), port)))
            .collect();
        if others.iter().all(Result::is_ok) {
            return port;
        }
    }
    panic!("no port free on {n} node IPs");
}

/// The `leaders` value naming nodes `leaders` (`edge-1/127.0.0.2,...`).
pub fn leaders_value(leaders: &[usize]) -> String {
    leaders
        .iter()
        .map(|&n| format!("{}/{}", node_name(n), node_ip(n)))
        .collect::<Vec<_>>()
        .join(",")
}

/// The pool's ConfigMap as yurt-manager writes it, naming `leaders` with election `election`
/// and the default pool-scope resources.
pub fn leader_config(leaders: &[usize], election: bool) -> Value {
    leader_config_scoped(leaders, election, POOL_SCOPED)
}

/// The pool's ConfigMap with `scoped` as its `pool-scoped-metadata`.
pub fn leader_config_scoped(leaders: &[usize], election: bool, scoped: &str) -> Value {
    json!({
        "metadata": {
            "name": CONFIG_NAME,
            "namespace": "kube-system",
            "labels": {"openyurt.io/configmap-name": CONFIG_NAME},
        },
        "data": {
            "leaders": leaders_value(leaders),
            "pool-scoped-metadata": scoped,
            "interconnectivity": "true",
            "enable-leader-election": if election { "true" } else { "false" },
        },
    })
}

/// Creates or replaces the pool's ConfigMap.
pub fn set_leader_config(cloud: &Cloud, leaders: &[usize], election: bool) {
    set_leader_config_scoped(cloud, leaders, election, POOL_SCOPED);
}

/// Creates or replaces the pool's ConfigMap, with `scoped` as its `pool-scoped-metadata`.
pub fn set_leader_config_scoped(cloud: &Cloud, leaders: &[usize], election: bool, scoped: &str) {
    let config = leader_config_scoped(leaders, election, scoped);
    if cloud
        .get("configmaps", "kube-system", CONFIG_NAME)
        .is_some()
    {
        cloud.update("configmaps", config);
    } else {
        cloud.create("configmaps", config);
    }
}

/// The spec of node `n`'s hub in the pool, caching under `dir`, serving its multiplexer
/// (when it leads) on `port`; response filters off, so that what components get through
/// the hub is what the cloud has.
pub fn node_spec(cloud: &Cloud, dir: &Path, n: usize, port: u16) -> HubSpec {
    let name = node_name(n);
    let cert = cloud.issue_client(&format!("system:node:{name}"), &["system:nodes"]);
    HubSpec::with_auth(cloud, dir, Auth::CertInline(cert)).with(&[
        &format!("--node-name={name}"),
        &format!("--node-ip={}", node_ip(n)),
        &format!("--multiplexer-port={port}"),
        &format!("--nodepool-name={POOL}"),
        "--bind-proxy-address=127.0.0.1",
        "--enable-resource-filter=false",
    ])
}

/// A pool of hubs: node `i+1` is `hubs[i]`.
pub struct Pool {
    /// The hubs, `edge-1` first; None while stopped.
    pub hubs: Vec<Option<Hub>>,
    /// The multiplexer port they share.
    pub port: u16,
    /// Flags every hub gets after [`node_spec`]'s (later flags win).
    extra: Vec<String>,
    dirs: Vec<TempDir>,
}

impl Pool {
    /// Starts `n` hubs; the ConfigMap must exist already (see [`set_leader_config`]). The
    /// hubs named in `leaders` start first, and the others once each leader serves warm
    /// caches, so that no follower starts by reading from the cloud.
    pub fn start(cloud: &Cloud, tag: &str, n: usize, leaders: &[usize]) -> Pool {
        Pool::start_with(cloud, tag, n, leaders, &[])
    }

    /// [`Pool::start`] with `extra` flags for every hub (e.g. `--enable-resource-filter=true`).
    pub fn start_with(
        cloud: &Cloud,
        tag: &str,
        n: usize,
        leaders: &[usize],
        extra: &[&str],
    ) -> Pool {
        let mut pool = Pool::stopped(tag, n, extra);
        for &l in leaders {
            pool.start_node(cloud, l);
            let hub = pool.hub(l);
            assert!(
                hub.wait_log("role=multiplexer addr=", patience(20)),
                "{} does not serve the multiplexer port",
                node_name(l)
            );
            for path in [
                "/api/v1/services",
                "/apis/discovery.k8s.io/v1/endpointslices",
            ] {
                let url = format!("{}{path}", hub.url());
                assert!(
                    eventually(patience(20), || get(&url, "warm-up").status == 200),
                    "{}'s cache of {path} is not warm",
                    node_name(l)
                );
            }
        }
        for i in (1..=n).filter(|i| !leaders.contains(i)) {
            pool.start_node(cloud, i);
        }
        pool
    }

    /// Starts all `n` hubs at once, as after a power cut: followers may find their leader
    /// still warming.
    pub fn start_together(cloud: &Cloud, tag: &str, n: usize, extra: &[&str]) -> Pool {
        let mut pool = Pool::stopped(tag, n, extra);
        for i in 1..=n {
            pool.start_node(cloud, i);
        }
        pool
    }

    /// Starts every hub but those in `late` at once, and those `delay` later, as after a
    /// power cut where the leaders boot last: followers dial a leader that does not listen.
    pub fn start_late(
        cloud: &Cloud,
        tag: &str,
        n: usize,
        late: &[usize],
        delay: Duration,
        extra: &[&str],
    ) -> Pool {
        let mut pool = Pool::stopped(tag, n, extra);
        for i in (1..=n).filter(|i| !late.contains(i)) {
            pool.start_node(cloud, i);
        }
        std::thread::sleep(delay);
        for &i in late {
            pool.start_node(cloud, i);
        }
        pool
    }

    /// A pool of `n` hubs none of which runs yet.
    fn stopped(tag: &str, n: usize, extra: &[&str]) -> Pool {
        Pool {
            hubs: (0..n).map(|_| None).collect(),
            port: free_port(n),
            extra: extra.iter().map(|s| (*s).to_owned()).collect(),
            dirs: (1..=n)
                .map(|i| TempDir::new(&format!("{tag}-{i}")))
                .collect(),
        }
    }

    /// Starts node `n`'s hub (again, with its cache).
    pub fn start_node(&mut self, cloud: &Cloud, n: usize) {
        let extra: Vec<&str> = self.extra.iter().map(String::as_str).collect();
        let spec = node_spec(cloud, self.dirs[n - 1].path(), n, self.port).with(&extra);
        self.hubs[n - 1] = Some(Hub::start(&spec));
    }

    /// Kills node `n`'s hub.
    pub fn stop_node(&mut self, n: usize) {
        if let Some(mut hub) = self.hubs[n - 1].take() {
            hub.kill9();
        }
    }

    /// Node `n`'s hub (running).
    pub fn hub(&self, n: usize) -> &Hub {
        self.hubs[n - 1].as_ref().expect("the hub runs")
    }

    /// The multiplexer address of node `n`.
    pub fn multiplexer(&self, n: usize) -> SocketAddr {
        SocketAddr::new(node_ip(n).into(), self.port)
    }
}

/// A ClusterIP Service `ns/name` at `ip` (port 80 to 8080), labelled `app=<name>`.
pub fn service_in(ns: &str, name: &str, ip: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {"clusterIP": ip, "clusterIPs": [ip], "type": "ClusterIP",
                 "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]},
    })
}

/// [`service_in`] namespace `shop`.
pub fn service(name: &str, ip: &str) -> Value {
    service_in("shop", name, ip)
}

/// An EndpointSlice `shop/name` of Service `service`, one ready endpoint at `ip`.
pub fn slice(name: &str, service: &str, ip: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "shop",
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    })
}

/// A request of the pool-scope collection `resource` (`services` or `endpointslices`;
/// lists and watches of it, in any namespace).
pub fn of(r: &RecordedRequest, resource: &str) -> bool {
    r.path.ends_with(resource)
        && r.path.contains(if resource == "services" {
            "/api/v1"
        } else {
            "discovery.k8s.io"
        })
}

/// A list through `hub` as `ua`, waiting up to `wait` out a warming cache's 429s.
pub fn list_when_warm_within(hub: &Hub, path: &str, ua: &str, wait: Duration) -> Value {
    let url = format!("{}{path}", hub.url());
    let mut last = None;
    let warm = eventually(wait, || {
        let reply = get(&url, ua);
        let ok = reply.status == 200;
        last = Some(reply);
        ok
    });
    let reply = last.expect("one reply");
    assert!(warm, "{path} as {ua}: {} {}", reply.status, reply.text());
    reply.json()
}

/// A list through `hub` as `ua`, waiting out a warming cache's 429s (`patience(20)`).
pub fn list_when_warm(hub: &Hub, path: &str, ua: &str) -> Value {
    list_when_warm_within(hub, path, ua, patience(20))
}

/// (namespace/name, resourceVersion) of each item, in order.
pub fn keys_in_order(items: &[Value]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|o| {
            (
                format!(
                    "{}/{}",
                    o["metadata"]["namespace"].as_str().unwrap_or(""),
                    o["metadata"]["name"].as_str().unwrap_or("")
                ),
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
            )
        })
        .collect()
}

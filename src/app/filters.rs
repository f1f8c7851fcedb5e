//! The response filters from the flags: their switches, what they know of this hub, the live
//! configuration the `yurt-hub-cfg` watch reloads, and servicetopology's Services watch.

use std::sync::Arc;
use std::time::Duration;

use crate::clients::services_watch;
use crate::config::Config;
use crate::error::StartupError;
use crate::filters::Filters;
use crate::filters::lookups::CloudLookups;
use crate::filters::topology_index::TopologyIndex;
use crate::filters::{FilterConfig, FilterContext, FilterName, FilterReload, Switches};
use crate::mode::WorkingMode;
use crate::spawn;
use crate::upstream::Upstream;
use crate::watchcache::PoolCaches;

/// How long after start servicetopology may wait for the first list of Services to end before
/// it looks Services up one by one: a big list over a slow link takes a while, and a kube-proxy
/// list filtered by one round trip per Service would take far longer. A failed list ends the
/// wait at once.
const FIRST_SERVICES_LIST_PATIENCE: Duration = Duration::from_secs(60);

/// The response filters of the flags (None when `--enable-resource-filter=false`), and their
/// live configuration for the `yurt-hub-cfg` watch; with servicetopology on, the thread that
/// watches Services for it.
pub(super) fn response_filters(
    config: &Config,
    upstream: &Arc<Upstream>,
    host: std::net::IpAddr,
    pool: Option<&Arc<PoolCaches>>,
    stop: &crossbeam_channel::Receiver<()>,
) -> Result<(Option<Filters>, Option<FilterReload>), StartupError> {
    if !config.enable_resource_filter {
        return Ok((None, None));
    }
    let switches = filter_switches(config);
    for name in &switches.unknown {
        log::warn!("--disabled-resource-filters names no filter: {name}");
    }
    // A filter the switches turn off stays off: yurt-hub-cfg only adds components.
    let services = if switches.is_enabled(FilterName::ServiceTopology) {
        let index = Arc::new(TopologyIndex::new(FIRST_SERVICES_LIST_PATIENCE));
        let (upstream, watched, stop) = (Arc::clone(upstream), Arc::clone(&index), stop.clone());
        let retry = config.heartbeat.interval;
        // One list and watch of Services per node: the pool cache's when it has Services
        // (its own while that cache serves none).
        let cached = pool.filter(|p| p.services().is_some()).cloned();
        spawn("services-watch", move || match cached {
            Some(pool) => services_watch::run_from_cache(pool, upstream, watched, retry, stop),
            None => services_watch::run(upstream, watched, retry, stop),
        })?;
        Some(index)
    } else {
        None
    };
    let lookups = CloudLookups::new(
        Arc::clone(upstream) as Arc<dyn crate::filters::lookups::FetchObject>,
        config.node_name.clone(),
        services,
    );
    let live = Arc::new(std::sync::RwLock::new(Arc::new(FilterConfig::new(
        switches,
    ))));
    let filters = Filters {
        config: Arc::clone(&live),
        ctx: filter_context(config, host),
        lookups: Arc::new(lookups),
        memos: Default::default(),
    };
    // (A dummy interface that could not be made has said so in its own line.)
    if config.dummy_if.is_none() && filters.ctx.host.is_loopback() {
        log::warn!(
            "the response filters point in-cluster clients at {}, which pods cannot reach: \
             enable the dummy interface or set --bind-proxy-address to an address pods reach",
            filters.ctx.host
        );
    }
    Ok((Some(filters), Some(FilterReload { config: live })))
}

/// The response filters' switches from the flags: `--enable-resource-filter`,
/// `--disabled-resource-filters`, `--working-mode=cloud` (edge-only filters off).
fn filter_switches(config: &Config) -> Switches {
    Switches::new(
        config.enable_resource_filter,
        &config.disabled_resource_filters,
        config.working_mode == WorkingMode::Cloud,
    )
}

/// What the response filters know of this hub, from the flags: `--node-ip`, the port of
/// `--proxy-secure-port`, the node and `--nodepool-name`; `host` as [`FilterContext::new`] takes it.
fn filter_context(config: &Config, host: std::net::IpAddr) -> FilterContext {
    FilterContext::new(
        host,
        config.node_ip,
        config.proxy_secure_addr.port(),
        config.node_name.clone(),
        config.nodepool_name.clone(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filters::{FilterName, SecurePort};
    use std::net::IpAddr;

    fn config(args: &[&str]) -> crate::config::Config {
        match crate::config::from_args(args.iter().copied()) {
            Ok(crate::config::Command::Run(c)) => *c,
            Ok(other) => panic!("not a run: {other:?}"),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn switches_and_context_from_the_flags() {
        let base = [
            "--node-name=edge-1",
            "--server-addr=https://10.0.0.1:6443",
            "--join-token=abcdef.0123456789abcdef",
            "--discovery-token-unsafe-skip-ca-verification",
        ];
        let c = config(&base);
        assert_eq!(filter_switches(&c), Switches::new(true, &[], false));
        let host: IpAddr = "169.254.2.1".parse().expect("literal IP");
        let context = filter_context(&c, host);
        assert_eq!(
            context,
            FilterContext {
                host,
                secure_port: SecurePort::new(10268),
                node_name: "edge-1".into(),
                pool_name: None
            }
        );

        let mut args = base.to_vec();
        args.extend([
            "--working-mode=cloud",
            "--disabled-resource-filters=masterservice,bogus",
            "--proxy-secure-port=10443",
            "--nodepool-name=hangzhou",
        ]);
        let c = config(&args);
        let s = filter_switches(&c);
        assert!(!s.is_enabled(FilterName::MasterService));
        assert!(!s.is_enabled(FilterName::ServiceEnvUpdater), "cloud mode");
        assert!(s.is_enabled(FilterName::ServiceTopology));
        assert_eq!(s.unknown, ["bogus"]);
        let context = filter_context(&c, host);
        assert_eq!(context.secure_port.get(), 10443);
        // A clone shares the port the HTTPS listener publishes.
        let copy = context.clone();
        context.secure_port.set(40001);
        assert_eq!(copy.secure_port.get(), 40001);
        assert_eq!(context.pool_name.as_deref(), Some("hangzhou"));

        // Bound to every address, the hub tells pods the node's.
        let mut args = base.to_vec();
        args.push("--node-ip=10.1.2.3");
        let any: IpAddr = "0.0.0.0".parse().expect("literal IP");
        let context = filter_context(&config(&args), any);
        assert_eq!(
            context.host,
            "10.1.2.3".parse::<IpAddr>().expect("literal IP")
        );

        let mut args = base.to_vec();
        args.push("--enable-resource-filter=false");
        assert_eq!(
            filter_switches(&config(&args)),
            Switches::new(false, &[], false)
        );
    }
}

//! The hub's local address at run time: the dummy interface made at start (or a warning and
//! the fallback host), re-checked every [`RECHECK_PERIOD`] on its own thread, removed at exit.

use std::net::IpAddr;
use std::time::Duration;

use super::{DummyInterface, NetifError, RECHECK_PERIOD};
/// The hub's local address at run time: the interface when it is up, and the host the
/// response filters inject into what pods read (YurtHub's `pkg/yurthub/filter/manager/manager.go`).
#[derive(Debug)]
pub(crate) struct LocalAddress {
    /// The interface, when it was made (or found in place) at start; None when disabled, in
    /// cloud mode, or when it could not be made.
    pub(crate) interface: Option<DummyInterface>,
    /// The dummy IP when the interface is up, else `--bind-proxy-address`: where in-cluster
    /// clients are pointed (with `--proxy-secure-port`).
    pub(crate) filter_host: IpAddr,
}

impl LocalAddress {
    /// Makes the configured interface. A failure is one log line and the hub runs on with
    /// `bind_proxy` as the filters' host, as YurtHub does without CAP_NET_ADMIN; a missing
    /// permission or kernel module is a warning, anything else an error (the hub still serves
    /// the node on its other addresses).
    pub(crate) fn start(wanted: Option<&DummyInterface>, bind_proxy: IpAddr) -> LocalAddress {
        let fallback = LocalAddress {
            interface: None,
            filter_host: bind_proxy,
        };
        let Some(wanted) = wanted else {
            return fallback;
        };
        match wanted.ensure() {
            Ok(done) => {
                log::info!(
                    "dummy interface {} carries {}{}",
                    wanted.name,
                    wanted.ip,
                    if done.created { " (created)" } else { "" }
                );
                LocalAddress {
                    interface: Some(wanted.clone()),
                    filter_host: wanted.ip,
                }
            }
            Err(e) => {
                let line = format!(
                    "{e}; the hub runs without its local address {}: in-cluster clients are \
                     pointed at --bind-proxy-address {bind_proxy}",
                    wanted.ip
                );
                match e {
                    NetifError::NoPermission { .. } | NetifError::KindMissing { .. } => {
                        log::warn!("{line}")
                    }
                    _ => log::error!("{line}"),
                }
                fallback
            }
        }
    }

    /// The address the proxy ports also listen on: the dummy IP when the interface is up,
    /// unless `bind_proxy` already covers it (the same address, or an unspecified one that
    /// takes it, which a second bind of the port would collide with).
    pub(crate) fn extra_listen_ip(&self, bind_proxy: IpAddr) -> Option<IpAddr> {
        let ip = self.interface.as_ref()?.ip;
        // `::` takes IPv4 too: std leaves IPV6_V6ONLY at Linux's default (off).
        let covered = bind_proxy == ip
            || (bind_proxy.is_unspecified() && (bind_proxy.is_ipv6() || ip.is_ipv4()));
        (!covered).then_some(ip)
    }

    /// Re-checks the interface every [`RECHECK_PERIOD`] until `stop` is disconnected; a repair
    /// is one info line, a failure one warning until it changes or ends.
    pub(crate) fn spawn_recheck(
        &self,
        stop: crossbeam_channel::Receiver<()>,
    ) -> Result<Option<std::thread::JoinHandle<()>>, crate::error::StartupError> {
        let Some(interface) = self.interface.clone() else {
            return Ok(None);
        };
        crate::spawn("dummy-if-check", move || {
            recheck_loop(&interface, &stop, RECHECK_PERIOD)
        })
        .map(Some)
    }

    /// Deletes the interface at exit; a failure is logged (the next start re-uses it).
    pub(crate) fn remove(&self) {
        let Some(interface) = &self.interface else {
            return;
        };
        match interface.remove() {
            Ok(()) => log::info!("dummy interface {} removed", interface.name),
            Err(e) => log::warn!("{e}; the dummy interface stays until the next start re-uses it"),
        }
    }
}

/// The re-check thread's body: one [`DummyInterface::recheck`] per `period` until `stop` is
/// disconnected (a message on it also ends the loop).
pub(super) fn recheck_loop(
    interface: &DummyInterface,
    stop: &crossbeam_channel::Receiver<()>,
    period: Duration,
) {
    let mut failing: Option<String> = None;
    while let Err(crossbeam_channel::RecvTimeoutError::Timeout) = stop.recv_timeout(period) {
        match interface.ensure() {
            Ok(done) => {
                if done.changed() {
                    log::info!(
                        "dummy interface {} repaired:{}{}{}",
                        interface.name,
                        if done.created { " created" } else { "" },
                        if done.brought_up { " brought up" } else { "" },
                        if done.address_added {
                            " address re-added"
                        } else {
                            ""
                        },
                    );
                } else if failing.is_some() {
                    log::info!("dummy interface {} is in place again", interface.name);
                }
                failing = None;
            }
            Err(e) => {
                let text = e.to_string();
                if failing.as_deref() != Some(text.as_str()) {
                    log::warn!("re-checking the dummy interface: {text}");
                }
                failing = Some(text);
            }
        }
    }
}

//! Each connection the agents make, as the hub keeps it: its socket's shutdown handle noted on
//! the calling thread (a stream's cancel handle, a pooled connection's for its generation), its
//! count as an open connection to its server, and a hook with a say in whether it may be used
//! (again).
use std::cell::RefCell;
use std::fmt;
use std::sync::{Arc, Weak};

use ureq::http;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, NextTimeout, ShutdownHandle, Transport,
};

use super::socket::{Socket, TcpConnector};
use crate::metrics::{METRICS, OpenConn};

thread_local! {
    /// The shutdown handle of the last connection this thread opened (see [`Recording`]).
    pub(super) static LAST_CONNECTION: RefCell<Option<Weak<dyn ShutdownHandle>>> = const { RefCell::new(None) };
}

/// ureq's TCP connector, noting on the calling thread the shutdown handle of each new
/// connection. Streams use an agent that never reuses connections, so the handle noted
/// during a stream's request is its connection's. Each connection counts as open to its
/// server ([`Metrics::open_conn`]) until ureq drops it: pooled, streaming, to a cloud server
/// or a leader hub alike.
#[derive(Debug, Default)]
pub(super) struct Recording(TcpConnector);

impl Connector<()> for Recording {
    type Out = Hooked<Socket, OpenConn>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<()>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let register = Arc::clone(&details.register_shutdown);
        let noting = Arc::new(move |handle: Weak<dyn ShutdownHandle>| {
            LAST_CONNECTION.with(|last| *last.borrow_mut() = Some(handle.clone()));
            register(handle)
        });
        let details = ConnectionDetails {
            uri: details.uri,
            addrs: details.addrs.clone(),
            config: details.config,
            request_level: details.request_level,
            resolver: details.resolver,
            now: details.now,
            timeout: details.timeout,
            current_time: Arc::clone(&details.current_time),
            run_connector: Arc::clone(&details.run_connector),
            register_shutdown: noting,
        };
        let server = conn_server(details.uri);
        Ok(self.0.connect(&details, chained)?.map(|inner| Hooked {
            inner,
            hook: METRICS.open_conn(&server, details.needs_tls()),
        }))
    }
}

/// The server of a connection as YurtHub labels its connections: `host:port`.
pub(super) fn conn_server(uri: &http::Uri) -> String {
    let host = uri.host().unwrap_or_default();
    let port = uri.port_u16().unwrap_or(default_port(uri));
    format!("{host}:{port}")
}

/// The host a server URL names, an IPv6 literal without its brackets, and its port (the
/// scheme's when it names none): what the hub connects to.
pub(super) fn host_and_port(uri: &http::Uri) -> Option<(&str, u16)> {
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    Some((host, uri.port_u16().unwrap_or(default_port(uri))))
}

/// 80 for `http`, else 443.
fn default_port(uri: &http::Uri) -> u16 {
    match uri.scheme_str() {
        Some("http") => 80,
        _ => 443,
    }
}

/// What the hub keeps with one of its connections, for as long as the connection lives,
/// and its say in whether the connection may be used (again).
pub(super) trait ConnHook: Send + Sync + 'static {
    /// Whether the connection is open to use; `inner_open` asks the transport below.
    fn is_open(&mut self, inner_open: &mut dyn FnMut() -> bool) -> bool;
}

/// An open connection counted to its server: open as the transport says.
impl ConnHook for OpenConn {
    fn is_open(&mut self, inner_open: &mut dyn FnMut() -> bool) -> bool {
        inner_open()
    }
}

/// A transport passed through, with `hook` beside it.
pub(super) struct Hooked<T, H> {
    pub(super) inner: T,
    pub(super) hook: H,
}

impl<T: fmt::Debug, H> fmt::Debug for Hooked<T, H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl<T: Transport, H: ConnHook> Transport for Hooked<T, H> {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.inner.transmit_output(amount, timeout)
    }

    fn maybe_await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.inner.maybe_await_input(timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.inner.await_input(timeout)
    }

    fn is_open(&mut self) -> bool {
        let inner = &mut self.inner;
        self.hook.is_open(&mut || inner.is_open())
    }

    fn is_tls(&self) -> bool {
        self.inner.is_tls()
    }
}

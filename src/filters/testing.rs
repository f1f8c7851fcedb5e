//! Test helpers shared by the filter tests: a context, canned lookups, and a runner that
//! checks the input was not modified.

use std::cell::Cell;
use std::collections::HashMap;
use std::net::IpAddr;

use serde_json::Value;

use super::{FilterContext, Lookups, Outcome};

/// A context for node `node-a` with host 169.254.2.1 and port 10268.
pub(crate) fn ctx() -> FilterContext {
    FilterContext {
        host: "169.254.2.1".parse().expect("literal IP"),
        secure_port: super::SecurePort::new(10268),
        node_name: "node-a".into(),
        pool_name: None,
    }
}

/// [`ctx`] with another host.
pub(crate) fn ctx_with_host(host: &str) -> FilterContext {
    FilterContext {
        host: host.parse::<IpAddr>().expect("test IP"),
        ..ctx()
    }
}

/// Canned answers; counts the calls so a test can see a lookup was not needed.
#[derive(Default)]
pub(crate) struct FakeLookups {
    /// `namespace/name` → annotation (absent key: Service not found).
    pub services: HashMap<String, Option<String>>,
    /// The node's pool label.
    pub node_pool: Option<String>,
    /// Pool → members.
    pub pools: HashMap<String, Vec<String>>,
    /// Calls made.
    pub calls: Cell<u32>,
    /// The update triggers reported, in order.
    pub triggers: std::cell::RefCell<Vec<String>>,
}

impl Lookups for FakeLookups {
    fn service_topology(&self, namespace: &str, service: &str) -> Option<Option<String>> {
        self.calls.set(self.calls.get() + 1);
        self.services
            .get(&format!("{namespace}/{service}"))
            .cloned()
    }

    fn node_pool(&self) -> Option<String> {
        self.calls.set(self.calls.get() + 1);
        self.node_pool.clone()
    }

    fn pool_members(&self, pool: &str) -> Option<Vec<String>> {
        self.calls.set(self.calls.get() + 1);
        self.pools.get(pool).cloned()
    }

    fn saw_update_trigger(&self, namespace: &str, service: &str, trigger: &str) {
        self.triggers
            .borrow_mut()
            .push(format!("{namespace}/{service}@{trigger}"));
    }
}

/// Runs `f` on `obj` and asserts `obj` is as it was.
pub(crate) fn run_pure(obj: &Value, f: impl FnOnce(&Value) -> Outcome) -> Outcome {
    let before = obj.clone();
    let outcome = f(obj);
    assert_eq!(*obj, before, "a filter modified its input");
    outcome
}

/// The changed object, or a panic naming what came instead.
pub(crate) fn changed(outcome: Outcome) -> Value {
    match outcome {
        Outcome::Changed(v) => v,
        other => panic!("expected a changed object, got {other:?}"),
    }
}

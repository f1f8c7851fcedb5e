//! Offline answers to a client with its own credential (issue 28): only what the same
//! credential read from the cloud while it was reachable (`cache/grants.rs`) — a get when
//! it got that object or listed a scope holding it, a list or watch when it listed the
//! same scope or one covering it. Everything else is a 403 `Forbidden`: client-go treats it
//! as a refusal to log and retry (an informer backs off and lists again, and gets the
//! cloud's answer once it is back), where a 404 or an empty list would tell it that objects
//! are gone. The node's requests (`Requester::is_node`) are answered as before, unasked.
//!
//! [`scope_of`] is also what the proxy records when the cloud answers 200 (`proxy/grant.rs`).

use super::Offline;
use crate::cache::grants::{ObjectCover, Reach, Scope};
use crate::request::{ApiRequest, Verb};
use crate::requester::Credential;
use crate::selector::Selectors;
use crate::status::Status;
use crate::unix_now;

/// The scope a get, list or watch reads (a subresource reads its object: `status` is the
/// only one answered offline); `None` for anything else.
pub(crate) fn scope_of(req: &ApiRequest) -> Option<Scope> {
    if !matches!(req.verb, Verb::Get | Verb::List | Verb::Watch) {
        return None;
    }
    let path = req.resource()?;
    let namespace = path.namespace.as_deref();
    Some(match &path.name {
        Some(name) => Scope::object(&path.gvr.group, &path.gvr.resource, namespace, name),
        None => Scope::list(
            &path.gvr.group,
            &path.gvr.resource,
            namespace,
            req.query.label_selector.as_deref(),
            req.query.field_selector.as_deref(),
        ),
    })
}

/// What the cache may answer one request.
#[derive(Debug)]
pub(super) enum Allowed {
    /// All it asks: the node, or a credential that read this scope.
    All,
    /// A get of an object the credential listed only with selectors: the object if it
    /// matches one of these.
    IfMatches(Vec<Selectors>),
    /// Nothing: answer this.
    Refused(Status),
}

impl Offline {
    /// What the cache may answer `req` (a get, list or watch).
    pub(super) fn allowed(&self, req: &ApiRequest) -> Allowed {
        let Credential::Authorization { digest } = &req.requester.credential else {
            // The node, or a request route already closed the cache to.
            return Allowed::All;
        };
        let Some(scope) = scope_of(req) else {
            return Allowed::All;
        };
        let now = unix_now();
        let refused = || Allowed::Refused(forbidden(&scope));
        match &scope.reach {
            Reach::List { .. } if self.grants.allows_list(digest, &scope, now) => Allowed::All,
            Reach::List { .. } => refused(),
            Reach::Object(_) => match self.grants.object_cover(digest, &scope, now) {
                ObjectCover::Whole => Allowed::All,
                // A held watch of one object sends nothing; it is not worth reading it.
                ObjectCover::Selected(_) if req.verb != Verb::Get => refused(),
                ObjectCover::Selected(texts) => {
                    let selectors: Vec<Selectors> = texts
                        .iter()
                        .filter_map(|(l, f)| Selectors::parse(Some(l), Some(f)).ok())
                        .collect();
                    if selectors.is_empty() {
                        refused()
                    } else {
                        Allowed::IfMatches(selectors)
                    }
                }
                ObjectCover::Nothing => refused(),
            },
        }
    }
}

/// The refusal of `scope`.
pub(super) fn forbidden(scope: &Scope) -> Status {
    let resource = crate::status::qualified(&scope.group, &scope.resource);
    let what = match (&scope.reach, &scope.namespace) {
        (Reach::Object(name), Some(ns)) => format!("{resource} \"{name}\" in namespace \"{ns}\""),
        (Reach::Object(name), None) => format!("{resource} \"{name}\""),
        (Reach::List { .. }, Some(ns)) => format!("this list of {resource} in namespace \"{ns}\""),
        (Reach::List { .. }, None) => format!("this list of {resource}"),
    };
    Status::forbidden(format!(
        "the cloud apiserver is unreachable and this credential has not read {what} from it; \
         the cache answers a credential only what it read online"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::classify;

    fn scope(method: &str, url: &str) -> Option<Scope> {
        let req = classify(
            method,
            url,
            &[("User-Agent".to_owned(), "kube-proxy".to_owned())],
        )
        .unwrap();
        scope_of(&req)
    }

    #[test]
    fn a_request_reads_an_object_or_a_list_scope_as_sent() {
        assert_eq!(
            scope("GET", "/api/v1/namespaces/a/secrets/s"),
            Some(Scope::object("", "secrets", Some("a"), "s"))
        );
        // A subresource reads its object.
        assert_eq!(
            scope("GET", "/api/v1/namespaces/a/pods/p/status"),
            Some(Scope::object("", "pods", Some("a"), "p"))
        );
        assert_eq!(
            scope(
                "GET",
                "/apis/discovery.k8s.io/v1/endpointslices?labelSelector=%21service.kubernetes.io%2Fheadless&limit=500"
            ),
            Some(Scope::list(
                "discovery.k8s.io",
                "endpointslices",
                None,
                Some("!service.kubernetes.io/headless"),
                None
            ))
        );
        assert_eq!(
            scope(
                "GET",
                "/api/v1/namespaces/a/services?watch=true&resourceVersion=5"
            ),
            Some(Scope::list("", "services", Some("a"), None, None))
        );
        // Writes and non-resources read nothing.
        assert_eq!(scope("POST", "/api/v1/namespaces/a/configmaps"), None);
        assert_eq!(scope("DELETE", "/api/v1/namespaces/a/configmaps/c"), None);
        assert_eq!(scope("GET", "/version"), None);
    }

    #[test]
    fn a_refusal_is_a_forbidden_status_naming_what_was_not_read() {
        let status = forbidden(&Scope::object("apps", "deployments", Some("a"), "d"));
        assert_eq!((status.code, status.reason), (403, "Forbidden"));
        assert!(
            status
                .message
                .contains(r#"deployments.apps "d" in namespace "a""#),
            "{}",
            status.message
        );
        let status = forbidden(&Scope::list("", "services", None, Some("x=y"), None));
        assert!(status.message.contains("this list of services"));
    }
}

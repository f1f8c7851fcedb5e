//! What the cache keeps of one answer: the cache's own vocabulary, which routing decides
//! (`route.rs`) and the writer carries out (`writer/`).

use crate::cache::key::CollectionKey;
use crate::selector::Selectors;

/// What to persist from the answer.
#[derive(Debug, Clone)]
pub(crate) enum CacheTarget {
    /// A get, create, update or patch answer: one object of the collection. The request's
    /// namespace and name identify what a 404 removes; the stored key comes from the object.
    Object {
        /// Collection on disk.
        collection: CollectionKey,
        /// Namespace of the request.
        namespace: Option<String>,
        /// Name of the request (none for a create).
        name: Option<String>,
    },
    /// A list answer: replaces what the component cached within this scope.
    List {
        /// Collection on disk.
        collection: CollectionKey,
        /// Namespace scope (None: all namespaces).
        namespace: Option<String>,
        /// Selector scope.
        selectors: Selectors,
        /// Upsert only, delete nothing: the request continues a paged list, or its query is
        /// one the cloud may read differently from the hub (`Query::ambiguous` in request.rs).
        /// (A first page is recognised by the `continue` in its answer, which the writer
        /// checks.)
        paged: bool,
    },
    /// A watch stream: each event upserts or deletes one object.
    Watch {
        /// Collection on disk.
        collection: CollectionKey,
    },
    /// `/version` or a discovery document.
    NonResource {
        /// File name under the cache root (of the legacy form: see `route::target_for_answer`).
        file: String,
    },
    /// A TokenRequest answer, kept for offline TokenRequests (`tokens.rs`).
    Token(TokenTarget),
}

/// Where a TokenRequest answer is kept. The digest of what was asked comes from the request
/// body, which only the forwarding reads: until then it is `None`, and an answer without one
/// is not kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenTarget {
    /// The component that asked.
    pub component: crate::names::Component,
    /// The service account's namespace.
    pub namespace: String,
    /// The service account.
    pub name: String,
    /// [`TokenSpec::digest`](crate::tokens::TokenSpec::digest) of the request.
    pub digest: Option<String>,
}

impl CacheTarget {
    /// The collection on disk, for resource targets.
    pub(crate) fn collection(&self) -> Option<&CollectionKey> {
        match self {
            CacheTarget::Object { collection, .. }
            | CacheTarget::List { collection, .. }
            | CacheTarget::Watch { collection } => Some(collection),
            CacheTarget::NonResource { .. } | CacheTarget::Token(_) => None,
        }
    }
}

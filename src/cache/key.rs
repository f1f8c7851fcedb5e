//! Cache keys: which file an object or a non-resource document lives in.
//!
//! Pure values and string checks, no I/O. A key names a path under the cache root in
//! YurtHub's layout, `<component>/<resource>.<version>.<group>/[<namespace>/]<name>` (a
//! metadata-only client's view one level down, under
//! `<component>/partialobjectmetadatas.v1.meta.k8s.io/`: see [`View`]), and
//! [`is_safe_segment`] is the rule every piece of such a path must pass before the store
//! touches the disk. The request parser applies it to names and Kubernetes' stricter rules to
//! namespaces, groups and versions; here it is the store's own last line of defence.

use crate::names::{Component, Gvr, is_safe_segment};

/// Which form of a kind's objects a collection holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum View {
    /// The objects whole, as a plain JSON read returns them.
    Full,
    /// Only their metadata, as `PartialObjectMetadata` (what client-go's metadata client and
    /// its informers read): kept apart from the full objects, in YurtHub's layout.
    Metadata,
}

impl View {
    /// The directory between a component's and the kind's: none for full objects,
    /// `partialobjectmetadatas.v1.meta.k8s.io` for metadata (YurtHub's
    /// `pkg/yurthub/util/util.go`, where the `v1` is the meta.k8s.io version asked for).
    pub(crate) fn dir(self) -> Option<&'static str> {
        match self {
            View::Full => None,
            View::Metadata => Some(METADATA_DIR),
        }
    }
}

/// The directory of every metadata view of a component ([`View::Metadata`]). It has the form
/// of a kind directory (`<resource>.<version>.<group>`), but no apiserver serves that
/// resource: a full-view key of it is refused ([`CollectionKey::unsafe_field`]).
pub(crate) const METADATA_DIR: &str = "partialobjectmetadatas.v1.meta.k8s.io";

/// The kind of each object the metadata view holds (`meta.k8s.io/v1`).
pub(crate) const METADATA_KIND: &str = "PartialObjectMetadata";

/// One component's cache of one kind: the directory `<component>/<resource>.<version>.<group>`
/// (the metadata view's `<component>/partialobjectmetadatas.v1.meta.k8s.io/<resource>.<version>.<group>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct CollectionKey {
    /// The caching component (User-Agent before the first `/`, lower-cased), e.g. `kubelet`:
    /// checked when it was made, so always a safe segment.
    pub component: Component,
    /// The kind: group (empty for the core group), version, plural resource name.
    pub gvr: Gvr,
    /// Whole objects or only their metadata.
    pub view: View,
}

impl CollectionKey {
    /// Builds a key from borrowed parts; `component` must be a valid one.
    #[cfg(test)]
    pub(crate) fn new(
        component: &str,
        resource: &str,
        version: &str,
        group: &str,
    ) -> CollectionKey {
        CollectionKey {
            component: Component::new(component)
                .unwrap_or_else(|| panic!("{component:?} is not a component")),
            gvr: Gvr::new(group, version, resource),
            view: View::Full,
        }
    }

    /// The same collection's metadata view.
    #[cfg(test)]
    pub(crate) fn metadata(mut self) -> CollectionKey {
        self.view = View::Metadata;
        self
    }

    /// The kind directory's path below the component's: `pods.v1.core`,
    /// `deployments.v1.apps`; for the metadata view
    /// `partialobjectmetadatas.v1.meta.k8s.io/pods.v1.core`.
    pub(crate) fn dir_name(&self) -> String {
        match self.view.dir() {
            None => self.gvr.dir_name(),
            Some(view) => format!("{view}/{}", self.gvr.dir_name()),
        }
    }

    /// The first field that is not a safe path segment, as (field, value).
    ///
    /// The group may be empty (the core group); everything else must be a safe segment. A
    /// full-view key whose directory would be the metadata views' ([`METADATA_DIR`]) is
    /// refused as its resource: its answers (a 404 prunes a collection) must never reach them.
    pub(crate) fn unsafe_field(&self) -> Option<(&'static str, &str)> {
        if self.view == View::Full && self.gvr.is("meta.k8s.io", "v1", "partialobjectmetadatas") {
            return Some(("resource", self.gvr.resource.as_str()));
        }
        [
            ("component", self.component.as_str()),
            ("resource", self.gvr.resource.as_str()),
            ("version", self.gvr.version.as_str()),
        ]
        .into_iter()
        .find(|(_, value)| !is_safe_segment(value))
        .or_else(|| {
            let group = self.gvr.group.as_str();
            (!group.is_empty() && !is_safe_segment(group)).then_some(("group", group))
        })
    }
}

/// One cached object: a file in a collection's directory, or in a namespace directory below it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ObjectKey {
    /// The collection the object belongs to.
    pub collection: CollectionKey,
    /// The namespace; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
}

impl ObjectKey {
    /// The first field that is not a safe path segment, as (field, value).
    pub(crate) fn unsafe_field(&self) -> Option<(&'static str, &str)> {
        self.collection.unsafe_field().or_else(|| {
            match self.namespace.as_deref() {
                Some(ns) if !is_safe_segment(ns) => Some(("namespace", ns)),
                _ => None,
            }
            .or_else(|| (!is_safe_segment(&self.name)).then_some(("name", self.name.as_str())))
        })
    }
}

/// The file name a non-resource document is cached under, directly in the cache root.
///
/// `/version` is `version` (as YurtHub names it); any other path is its segments joined
/// with `_` behind a leading `_`: `/api` → `_api`, `/apis/discovery.k8s.io/v1` →
/// `_apis_discovery.k8s.io_v1`. `path` is the URL path without a query. `None` when the
/// path is not absolute or a segment is unsafe (empty segments included, so `//` and a
/// trailing `/` are refused).
pub(crate) fn non_resource_file_name(path: &str) -> Option<String> {
    let rest = path.strip_prefix('/')?;
    if !rest.split('/').all(is_safe_segment) {
        return None;
    }
    let name = if rest == "version" {
        rest.to_owned()
    } else {
        format!("_{}", rest.replace('/', "_"))
    };
    is_safe_segment(&name).then_some(name)
}

/// Whether resourceVersion `candidate` is newer than `than`.
///
/// Kubernetes calls resourceVersions opaque, but every apiserver in use hands out
/// integers. Both must parse as `u64` to be compared; anything else is "not newer", so
/// an unreadable version never blocks an update.
pub(crate) fn rv_newer(candidate: &str, than: &str) -> bool {
    match (candidate.parse::<u64>(), than.parse::<u64>()) {
        (Ok(candidate), Ok(than)) => candidate > than,
        _ => false,
    }
}

/// One cached TokenRequest answer: the file
/// `<component>/tokens/<namespace>/<service account>/<digest>`. `tokens` has no dot, so it can
/// never be a collection's directory (`<resource>.<version>.<group>` always has two), and
/// nothing that reads collections ever looks inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenKey {
    /// The component that asked, e.g. `kubelet` (checked when it was made).
    pub component: Component,
    /// The service account's namespace.
    pub namespace: String,
    /// The service account's name.
    pub name: String,
    /// Hex digest of what the token was asked for (audiences, bound object): see
    /// `tokens::TokenSpec::digest`.
    pub digest: String,
}

impl TokenKey {
    /// The directory under a component's that holds every token answer.
    pub(crate) const DIR: &'static str = "tokens";

    /// The first field that is not a safe path segment, as (field, value).
    pub(crate) fn unsafe_field(&self) -> Option<(&'static str, &str)> {
        [
            ("component", self.component.as_str()),
            ("namespace", self.namespace.as_str()),
            ("name", self.name.as_str()),
            ("digest", self.digest.as_str()),
        ]
        .into_iter()
        .find(|(_, value)| !is_safe_segment(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_names() {
        let check = |group: &str, expected: &str| {
            assert_eq!(
                CollectionKey::new("kubelet", "pods", "v1", group).dir_name(),
                expected
            );
        };
        check("", "pods.v1.core");
        check("apps", "pods.v1.apps");
        check("discovery.k8s.io", "pods.v1.discovery.k8s.io");
        // The metadata view, in YurtHub's layout.
        assert_eq!(
            CollectionKey::new("kubelet", "deployments", "v1", "apps")
                .metadata()
                .dir_name(),
            "partialobjectmetadatas.v1.meta.k8s.io/deployments.v1.apps"
        );
    }

    #[test]
    fn the_metadata_views_directory_is_no_full_collection() {
        let lookalike =
            CollectionKey::new("kubelet", "partialobjectmetadatas", "v1", "meta.k8s.io");
        assert_eq!(lookalike.dir_name(), METADATA_DIR);
        assert_eq!(lookalike.unsafe_field().map(|(f, _)| f), Some("resource"));
        // Another version or group is only a kind whose name looks alike.
        let other = CollectionKey::new(
            "kubelet",
            "partialobjectmetadatas",
            "v1beta1",
            "meta.k8s.io",
        );
        assert_eq!(other.unsafe_field(), None);
        assert_eq!(lookalike.metadata().unsafe_field(), None);
    }

    #[test]
    fn unsafe_fields_are_named() {
        let good = ObjectKey {
            collection: CollectionKey::new("kubelet", "pods", "v1", ""),
            namespace: Some("default".into()),
            name: "web".into(),
        };
        assert_eq!(good.unsafe_field(), None);
        let check = |edit: &dyn Fn(&mut ObjectKey), field: &str| {
            let mut key = good.clone();
            edit(&mut key);
            assert_eq!(key.unsafe_field().map(|(f, _)| f), Some(field));
        };
        // (A component is checked when it is made: `..` is none.)
        assert_eq!(Component::new(".."), None);
        check(&|k| k.collection.gvr.resource = "a/b".into(), "resource");
        check(&|k| k.collection.gvr.version = String::new(), "version");
        check(&|k| k.collection.gvr.group = ".apps".into(), "group");
        check(&|k| k.namespace = Some("a\0".into()), "namespace");
        check(&|k| k.namespace = Some(String::new()), "namespace");
        check(&|k| k.name = "../../etc/passwd".into(), "name");
        let mut cluster = good.clone();
        cluster.namespace = None;
        assert_eq!(cluster.unsafe_field(), None);
    }

    #[test]
    fn non_resource_names() {
        let check = |path: &str, expected: Option<&str>| {
            assert_eq!(
                non_resource_file_name(path).as_deref(),
                expected,
                "{path:?}"
            );
        };
        check("/version", Some("version"));
        check("/api", Some("_api"));
        check("/apis", Some("_apis"));
        check("/api/v1", Some("_api_v1"));
        check(
            "/apis/discovery.k8s.io/v1",
            Some("_apis_discovery.k8s.io_v1"),
        );
        check("version", None);
        check("/", None);
        check("", None);
        check("/api/", None);
        check("//version", None);
        check("/apis/../version", None);
        check("/apis/./v1", None);
        check("/apis/%2e%2e", None);
        check("/api\0", None);
        check(&format!("/{}", "a".repeat(253)), None);
    }

    #[test]
    fn resource_versions() {
        let check = |candidate: &str, than: &str, expected: bool| {
            assert_eq!(
                rv_newer(candidate, than),
                expected,
                "{candidate:?} > {than:?}"
            );
        };
        check("10", "9", true);
        check("9", "10", false);
        check("10", "10", false);
        check("18446744073709551615", "1", true);
        check("", "1", false);
        check("1", "", false);
        check("abc", "1", false);
        check("2", "abc", false);
        check("-1", "0", false);
    }
}

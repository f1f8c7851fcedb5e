//! [`Gvr`], one group/version/resource: the value the request path, the cache keys, the
//! watch caches and the pool-scope set all name a resource by, with the texts made of it
//! written once (the cache's kind directory, `apiVersion`, the URL path of the group
//! version, the flag format). Pure, and it names nothing outside `names`.

use std::fmt;

use super::{is_dns_subdomain, is_resource_name, is_version};

/// One group/version/resource; the core group is "".
///
/// Made checked by [`Gvr::parse`] (the flag and ConfigMap format) or by the request parser,
/// which checks each part by the same rules; [`Gvr::new`] takes parts already checked, or
/// constants. Ordered by group, then version, then resource.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Gvr {
    /// API group, "" for core.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Resource (plural), e.g. `pods`.
    pub resource: String,
}

/// Why an entry is not `group/version/resource`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GvrError {
    /// Not exactly two `/`.
    NotThreeParts(String),
    /// One part is not valid.
    Part {
        /// The whole entry.
        entry: String,
        /// Which part.
        part: GvrPart,
        /// The part as given (trimmed).
        value: String,
    },
}

/// A part of a `group/version/resource` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GvrPart {
    /// The API group.
    Group,
    /// The API version.
    Version,
    /// The resource (plural).
    Resource,
}

impl fmt::Display for GvrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GvrError::NotThreeParts(entry) => write!(
                f,
                "{entry:?} is not group/version/resource (the core group is empty: /v1/services)"
            ),
            GvrError::Part { entry, part, value } => {
                let what = match part {
                    GvrPart::Group => "an API group",
                    GvrPart::Version => "an API version",
                    GvrPart::Resource => "a resource name",
                };
                write!(f, "{entry:?}: {value:?} is not {what}")
            }
        }
    }
}

impl std::error::Error for GvrError {}

impl Gvr {
    /// The group/version/resource of parts already checked (or constants): no check here.
    pub(crate) fn new(group: &str, version: &str, resource: &str) -> Gvr {
        Gvr {
            group: group.to_owned(),
            version: version.to_owned(),
            resource: resource.to_owned(),
        }
    }

    /// Reads one entry in YurtHub's format `group/version/resource` (exactly two `/`; the
    /// core group empty, as in `/v1/services`). Blanks around each part are trimmed, as
    /// YurtHub trims them; each part must then be a valid group, version and resource.
    pub(crate) fn parse(entry: &str) -> Result<Gvr, GvrError> {
        let parts: Vec<&str> = entry.split('/').map(str::trim).collect();
        let [group, version, resource] = parts[..] else {
            return Err(GvrError::NotThreeParts(entry.into()));
        };
        let bad = |part: GvrPart, value: &str| GvrError::Part {
            entry: entry.into(),
            part,
            value: value.into(),
        };
        if !group.is_empty() && !is_dns_subdomain(group) {
            return Err(bad(GvrPart::Group, group));
        }
        if !is_version(version) {
            return Err(bad(GvrPart::Version, version));
        }
        // A resource names one path segment: no '.' to begin with, no '/'.
        if !is_resource_name(resource) {
            return Err(bad(GvrPart::Resource, resource));
        }
        Ok(Gvr::new(group, version, resource))
    }

    /// Whether this is (`group`, `version`, `resource`), without making a `Gvr` of them.
    pub(crate) fn is(&self, group: &str, version: &str, resource: &str) -> bool {
        self.group == group && self.version == version && self.resource == resource
    }

    /// The group as the cache's kind directory names it: `core` for the core group.
    fn group_or_core(&self) -> &str {
        if self.group.is_empty() {
            "core"
        } else {
            &self.group
        }
    }

    /// The cache's kind directory, YurtHub's `<resource>.<version>.<group>` with `core` for
    /// the core group: `pods.v1.core`, `deployments.v1.apps`.
    pub(crate) fn dir_name(&self) -> String {
        format!(
            "{}.{}.{}",
            self.resource,
            self.version,
            self.group_or_core()
        )
    }

    /// The kind directory's three parts, in order, for a hash that must see the same bytes
    /// as [`Gvr::dir_name`] without building it: resource, version, group or `core`.
    pub(crate) fn dir_name_parts(&self) -> [&str; 3] {
        [&self.resource, &self.version, self.group_or_core()]
    }

    /// `apiVersion` of the objects and lists: `v1`, `discovery.k8s.io/v1`.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The URL path of the group version, below which its resources are: `/api/v1` for the
    /// core group, `/apis/<group>/<version>` for any other.
    pub(crate) fn api_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    /// The cluster-wide collection's URL path: `/api/v1/services`,
    /// `/apis/discovery.k8s.io/v1/endpointslices`.
    pub(crate) fn collection_path(&self) -> String {
        format!("{}/{}", self.api_path(), self.resource)
    }

    /// Go's `GroupVersionResource.String()`: `/v1, Resource=services`,
    /// `discovery.k8s.io/v1, Resource=endpointslices`.
    pub(crate) fn go_string(&self) -> String {
        format!(
            "{}/{}, Resource={}",
            self.group, self.version, self.resource
        )
    }
}

impl fmt::Display for Gvr {
    /// The flag and ConfigMap format, `group/version/resource`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.group, self.version, self.resource)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_texts_of_a_core_and_a_named_group() {
        let core = Gvr::new("", "v1", "pods");
        let apps = Gvr::new("discovery.k8s.io", "v1", "endpointslices");
        assert_eq!(core.dir_name(), "pods.v1.core");
        assert_eq!(apps.dir_name(), "endpointslices.v1.discovery.k8s.io");
        assert_eq!(core.dir_name_parts().concat(), "podsv1core");
        assert_eq!(core.api_version(), "v1");
        assert_eq!(apps.api_version(), "discovery.k8s.io/v1");
        assert_eq!(core.api_path(), "/api/v1");
        assert_eq!(apps.api_path(), "/apis/discovery.k8s.io/v1");
        assert_eq!(core.collection_path(), "/api/v1/pods");
        assert_eq!(
            apps.collection_path(),
            "/apis/discovery.k8s.io/v1/endpointslices"
        );
        assert_eq!(core.go_string(), "/v1, Resource=pods");
        assert_eq!(core.to_string(), "/v1/pods");
        assert!(core.is("", "v1", "pods") && !core.is("", "v1", "services"));
        assert_eq!(Gvr::parse("/v1/pods"), Ok(core));
    }
}

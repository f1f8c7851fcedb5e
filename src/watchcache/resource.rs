//! The resource one watch cache holds: its group/version/resource, kind, scope, and the field
//! labels the apiserver lets a `fieldSelector` name for it.

use crate::selector::Selectors;
use crate::status::Status;

/// Field labels of core/v1 Services beyond `metadata.name` and `metadata.namespace`
/// (`pkg/apis/core/v1/conversion.go`; YurtHub's `multiplexer/atters.go` serves the same).
const SERVICE_FIELDS: &[&str] = &["spec.clusterIP", "spec.type"];

/// One resource served from a watch cache. Costs a few hundred bytes once per cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Resource {
    /// API group, "" for core.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Plural resource name, e.g. `endpointslices`.
    pub resource: String,
    /// Kind of one object, e.g. `EndpointSlice`; the list's kind is this plus `List`.
    pub kind: String,
    /// Whether objects live in namespaces (their key is `namespace/name`, else `name`).
    pub namespaced: bool,
    /// Field labels beyond the metadata ones, in the order objects keep them.
    fields: &'static [&'static str],
}

/// Which field of an object a field label reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FieldRef {
    /// `metadata.name`.
    Name,
    /// `metadata.namespace`.
    Namespace,
    /// The resource's own field label, by its index in [`Resource::extra_fields`].
    Extra(usize),
}

impl Resource {
    /// A resource; its field labels come from the apiserver's table for the known ones, and
    /// are the metadata ones only for any other (the apiserver's default conversion).
    pub(crate) fn new(
        group: &str,
        version: &str,
        resource: &str,
        kind: &str,
        namespaced: bool,
    ) -> Resource {
        let fields = match (group, resource) {
            ("", "services") => SERVICE_FIELDS,
            _ => &[],
        };
        Resource {
            group: group.to_owned(),
            version: version.to_owned(),
            resource: resource.to_owned(),
            kind: kind.to_owned(),
            namespaced,
            fields,
        }
    }

    /// core/v1 Services, a default pool-scope resource.
    pub(crate) fn services() -> Resource {
        Resource::new("", "v1", "services", "Service", true)
    }

    /// discovery.k8s.io/v1 EndpointSlices, a default pool-scope resource.
    pub(crate) fn endpointslices() -> Resource {
        Resource::new(
            "discovery.k8s.io",
            "v1",
            "endpointslices",
            "EndpointSlice",
            true,
        )
    }

    /// `apiVersion` of the objects and lists: `v1`, `discovery.k8s.io/v1`.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The list's kind, e.g. `ServiceList`.
    pub(crate) fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// Go's `GroupVersionResource.String()`: `/v1, Resource=services`,
    /// `discovery.k8s.io/v1, Resource=endpointslices`.
    pub(crate) fn gvr_string(&self) -> String {
        format!(
            "{}/{}, Resource={}",
            self.group, self.version, self.resource
        )
    }

    /// The field labels beyond `metadata.name` and `metadata.namespace`.
    pub(crate) fn extra_fields(&self) -> &'static [&'static str] {
        self.fields
    }

    /// Which field a field label reads; `None` when the apiserver refuses the label.
    pub(crate) fn field(&self, path: &str) -> Option<FieldRef> {
        match path {
            "metadata.name" => Some(FieldRef::Name),
            "metadata.namespace" => Some(FieldRef::Namespace),
            _ => self
                .fields
                .iter()
                .position(|f| *f == path)
                .map(FieldRef::Extra),
        }
    }

    /// Refuses a field selector naming a label the apiserver does not support for this
    /// resource, with the apiserver's 400 text.
    pub(crate) fn check_selectors(&self, selectors: &Selectors) -> Result<(), Status> {
        match selectors.field.paths().find(|p| self.field(p).is_none()) {
            None => Ok(()),
            Some(path) => Err(Status::bad_request(self.unknown_field_message(path))),
        }
    }

    /// The apiserver's error for an unsupported field label: Services have their own
    /// conversion function, every other resource the default one of apimachinery.
    fn unknown_field_message(&self, path: &str) -> String {
        if self.fields.is_empty() {
            format!(
                "{path:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
            )
        } else {
            format!("field label not supported: {path}")
        }
    }
}

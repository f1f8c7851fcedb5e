//! The resource one watch cache holds: its group/version/resource (a [`Gvr`], whose texts
//! are `apiVersion` and Go's `GroupVersionResource.String()`), kind, scope, and the field
//! labels the apiserver lets a `fieldSelector` name for it.

use crate::names::Gvr;
use crate::selector::Selectors;
use crate::status::Status;

/// Field labels of core/v1 Services beyond `metadata.name` and `metadata.namespace`
/// (`pkg/apis/core/v1/conversion.go`; YurtHub's `multiplexer/atters.go` serves the same).
const SERVICE_FIELDS: &[&str] = &["spec.clusterIP", "spec.type"];

/// One resource served from a watch cache. Costs a few hundred bytes once per cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Resource {
    /// API group ("" for core), version and plural resource name, e.g.
    /// `discovery.k8s.io/v1/endpointslices`.
    pub gvr: Gvr,
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
            gvr: Gvr::new(group, version, resource),
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

    /// The list's kind, e.g. `ServiceList`.
    pub(crate) fn list_kind(&self) -> String {
        format!("{}List", self.kind)
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

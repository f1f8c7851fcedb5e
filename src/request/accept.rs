//! What a client will take as a response body, read from its `Accept` header as the
//! apiserver's content negotiation reads it: JSON, protobuf, a transformed answer (`as=`),
//! and the forms of the discovery documents.

/// What the client will take as a response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Accept {
    /// JSON (or anything: no header, `*/*`).
    Json,
    /// JSON or protobuf; the hub may ask the cloud for JSON.
    JsonOrProtobuf,
    /// Only protobuf: passes through uncached.
    ProtobufOnly,
    /// Only the objects' metadata, `meta.k8s.io/v1` `PartialObjectMetadata` (a get or watch)
    /// or `PartialObjectMetadataList` (a list): what client-go's metadata client asks for,
    /// protobuf first, then that form in JSON, then plain JSON. Cached and answered offline
    /// in the metadata view when the JSON form is listed (`json`); without it (protobuf
    /// only) it passes through uncached, as a transformed answer does. A protobuf metadata
    /// form listed with plain JSON but not the JSON metadata form is [`Accept::Transformed`].
    Metadata {
        /// `as=PartialObjectMetadataList` (else `as=PartialObjectMetadata`).
        list: bool,
        /// The JSON metadata form is listed.
        json: bool,
    },
    /// A transformed answer (`as=Table`, `as=PartialObjectMetadata;v=v1beta1`...);
    /// `plain_json_too` when plain JSON is also listed as acceptable (kubectl lists it last).
    Transformed {
        /// Plain JSON is acceptable as a fallback.
        plain_json_too: bool,
    },
    /// Aggregated discovery (`as=APIGroupDiscoveryList`, what kubectl ≥ 1.26 and client-go
    /// ask `/api` and `/apis` for), with the forms the client takes, best first.
    Discovery(DiscoveryAccept),
    /// Something else (YAML, CBOR...).
    Other,
}

impl Accept {
    /// The forms of a discovery document this client takes, best first: the legacy (plain
    /// JSON) form alone unless it asks for aggregated discovery.
    pub(crate) fn discovery(self) -> DiscoveryAccept {
        match self {
            Accept::Discovery(forms) => forms,
            Accept::Json | Accept::JsonOrProtobuf => DiscoveryAccept::LEGACY,
            Accept::Transformed {
                plain_json_too: true,
            } => DiscoveryAccept::LEGACY,
            Accept::Transformed { .. }
            | Accept::Metadata { .. }
            | Accept::ProtobufOnly
            | Accept::Other => DiscoveryAccept::NONE,
        }
    }
}

/// A form of the discovery documents `/api` and `/apis`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DiscoveryForm {
    /// `APIVersions` or `APIGroupList` as plain JSON (every other document has only this form).
    Legacy,
    /// Aggregated: an `apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`.
    V2,
    /// Aggregated, `apidiscovery.k8s.io/v2beta1` (apiservers 1.26 to 1.32 also serve it).
    V2Beta1,
}

impl DiscoveryForm {
    /// Every form.
    pub(crate) const ALL: [DiscoveryForm; 3] = [
        DiscoveryForm::Legacy,
        DiscoveryForm::V2,
        DiscoveryForm::V2Beta1,
    ];

    /// The `Content-Type` of a document in this form, as the apiserver writes it.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            DiscoveryForm::Legacy => "application/json",
            DiscoveryForm::V2 => {
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
            }
            DiscoveryForm::V2Beta1 => {
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
            }
        }
    }

    /// The form of an answer with this `Content-Type` (its parameters in any order, unknown
    /// ones ignored); None when it is none of them (not JSON, a Table...).
    pub(crate) fn of_content_type(content_type: &str) -> Option<DiscoveryForm> {
        MediaRange::parse(content_type)
            .filter(|m| {
                m.ty.eq_ignore_ascii_case("application") && m.sub.eq_ignore_ascii_case("json")
            })
            .and_then(|m| m.discovery_form())
    }
}

/// The discovery forms a client takes, in the order the apiserver picks from its `Accept`:
/// by `q`, specific types before wildcards, then as listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DiscoveryAccept {
    forms: [Option<DiscoveryForm>; 3],
}

impl DiscoveryAccept {
    /// Only the legacy form.
    pub(crate) const LEGACY: DiscoveryAccept = DiscoveryAccept {
        forms: [Some(DiscoveryForm::Legacy), None, None],
    };
    /// No form at all.
    pub(crate) const NONE: DiscoveryAccept = DiscoveryAccept { forms: [None; 3] };

    /// The forms taken, best first.
    pub(crate) fn forms(self) -> impl Iterator<Item = DiscoveryForm> {
        self.forms.into_iter().flatten()
    }

    /// Whether `form` is taken.
    pub(crate) fn takes(self, form: DiscoveryForm) -> bool {
        self.forms.contains(&Some(form))
    }

    /// From an `Accept` header, as the apiserver's negotiation reads it (goautoneg: a `q` that
    /// does not parse is 0; ranges sorted by Go's insertion sort with its order).
    fn parse(header: &str) -> DiscoveryAccept {
        let mut ranges: Vec<MediaRange<'_>> =
            header.split(',').filter_map(MediaRange::parse).collect();
        let before = |a: &MediaRange<'_>, b: &MediaRange<'_>| {
            a.q > b.q || (a.ty != "*" && b.ty == "*") || (a.sub != "*" && b.sub == "*")
        };
        for i in 1..ranges.len() {
            let mut j = i;
            while j > 0 && before(&ranges[j], &ranges[j - 1]) {
                ranges.swap(j, j - 1);
                j -= 1;
            }
        }
        let mut accept = DiscoveryAccept::NONE;
        let mut n = 0;
        for form in ranges.iter().filter_map(MediaRange::discovery_form) {
            if !accept.takes(form) && n < accept.forms.len() {
                accept.forms[n] = Some(form);
                n += 1;
            }
        }
        accept
    }
}

/// One range of an `Accept` header, or a `Content-Type`.
struct MediaRange<'a> {
    ty: &'a str,
    sub: &'a str,
    q: f32,
    /// The `as`, `g` and `v` parameters: a transformed answer when `as` is given.
    as_: Option<&'a str>,
    g: Option<&'a str>,
    v: Option<&'a str>,
}

impl<'a> MediaRange<'a> {
    fn parse(range: &'a str) -> Option<MediaRange<'a>> {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("");
        let (ty, sub) = match media.split_once('/') {
            Some((ty, sub)) => (ty.trim(), sub.trim()),
            None if media == "*" => ("*", "*"),
            None => return None,
        };
        let mut m = MediaRange {
            ty,
            sub,
            q: 1.0,
            as_: None,
            g: None,
            v: None,
        };
        for (key, value) in parts.filter_map(|p| p.split_once('=')) {
            let (key, value) = (key.trim(), value.trim());
            if key.eq_ignore_ascii_case("q") {
                m.q = value.parse().unwrap_or(0.0);
            } else if key.eq_ignore_ascii_case("as") {
                m.as_ = Some(value);
            } else if key.eq_ignore_ascii_case("g") {
                m.g = Some(value);
            } else if key.eq_ignore_ascii_case("v") {
                m.v = Some(value);
            }
        }
        Some(m)
    }

    /// `application/json` or a wildcard that covers it.
    fn json_like(&self) -> bool {
        (self.ty == "*" && self.sub == "*")
            || (self.ty.eq_ignore_ascii_case("application")
                && (self.sub == "*" || self.sub.eq_ignore_ascii_case("json")))
    }

    fn protobuf(&self) -> bool {
        self.ty.eq_ignore_ascii_case("application")
            && self.sub.eq_ignore_ascii_case("vnd.kubernetes.protobuf")
    }

    /// `Some(list)` for `as=PartialObjectMetadata` (false) or `as=PartialObjectMetadataList`
    /// (true) in `meta.k8s.io/v1`; None for anything else (v1beta1 too).
    fn metadata(&self) -> Option<bool> {
        if self.g != Some("meta.k8s.io") || self.v != Some("v1") {
            return None;
        }
        match self.as_ {
            Some("PartialObjectMetadata") => Some(false),
            Some("PartialObjectMetadataList") => Some(true),
            _ => None,
        }
    }

    /// The discovery form this range takes (a conversion the apiserver does not know takes
    /// none).
    fn discovery_form(&self) -> Option<DiscoveryForm> {
        if !self.json_like() {
            return None;
        }
        match (self.as_, self.g, self.v) {
            (None, None, None) => Some(DiscoveryForm::Legacy),
            (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some("v2")) => {
                Some(DiscoveryForm::V2)
            }
            (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some("v2beta1")) => {
                Some(DiscoveryForm::V2Beta1)
            }
            _ => None,
        }
    }
}

/// The [`Accept`] of a request's `Accept` header (none: JSON).
pub(super) fn classify_accept(header: Option<&str>) -> Accept {
    let Some(header) = header.filter(|h| !h.trim().is_empty()) else {
        return Accept::Json;
    };
    // The forms most clients send, known without parsing ranges.
    if crate::ascii::eq_ignore_ascii_case(header, "application/json") {
        return Accept::Json;
    }
    if crate::ascii::eq_ignore_ascii_case(
        header,
        "application/vnd.kubernetes.protobuf,application/json",
    ) {
        return Accept::JsonOrProtobuf;
    }
    let mut plain_json = false;
    let mut protobuf = false;
    let mut discovery = false;
    // Each metadata range's form (`list`) and whether it is JSON; any other transformed
    // range makes the header a transformed one, and so does a metadata form after a plain
    // one: the apiserver (and YurtHub, which reads the first range) answers the first form
    // it serves, whole objects then.
    let mut metadata: Option<bool> = None;
    let mut metadata_json = false;
    let mut other_transformed = false;
    for range in header.split(',').filter_map(MediaRange::parse) {
        match range.as_ {
            Some("APIGroupDiscoveryList") => discovery = true,
            Some(_) if range.json_like() || range.protobuf() => {
                let first = metadata.is_none();
                match range.metadata() {
                    Some(list)
                        if metadata.is_none_or(|m| m == list)
                            && !(first && (plain_json || protobuf)) =>
                    {
                        metadata = Some(list);
                        metadata_json |= range.json_like();
                    }
                    _ => other_transformed = true,
                }
            }
            None if range.json_like() => plain_json = true,
            None if range.protobuf() => protobuf = true,
            _ => {}
        }
    }
    let transformed = metadata.is_some() || other_transformed;
    match (discovery, transformed, plain_json, protobuf) {
        // The order of the forms matters only here: parsed again, rarely.
        (true, ..) => Accept::Discovery(DiscoveryAccept::parse(header)),
        (false, true, plain, _) => match metadata.filter(|_| !other_transformed) {
            Some(list) if metadata_json || !plain => Accept::Metadata {
                list,
                json: metadata_json,
            },
            _ => Accept::Transformed {
                plain_json_too: plain,
            },
        },
        (false, false, true, true) => Accept::JsonOrProtobuf,
        (false, false, true, false) => Accept::Json,
        (false, false, false, true) => Accept::ProtobufOnly,
        (false, false, false, false) => Accept::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_forms_read_as_their_ranges_do() {
        // Known without parsing; a space in front takes the general reading.
        for (header, want) in [
            ("application/json", Accept::Json),
            ("APPLICATION/JSON", Accept::Json),
            (
                "application/vnd.kubernetes.protobuf,application/json",
                Accept::JsonOrProtobuf,
            ),
        ] {
            assert_eq!(classify_accept(Some(header)), want, "{header:?}");
            assert_eq!(
                classify_accept(Some(&format!(" {header}"))),
                want,
                "{header:?}"
            );
        }
    }

    #[test]
    fn metadata_only_clients_are_told_apart() {
        let check = |header: &str, want: Accept| {
            assert_eq!(classify_accept(Some(header)), want, "{header:?}");
        };
        let meta = |list, json| Accept::Metadata { list, json };
        // client-go's metadata client: protobuf, the JSON form, plain JSON.
        check(
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,\
             application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
            meta(true, true),
        );
        check(
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,\
             application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
            meta(false, true),
        );
        check(
            "application/json;v=v1;g=meta.k8s.io;as=PartialObjectMetadata",
            meta(false, true),
        );
        // Protobuf only: no form the hub reads.
        check(
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            meta(true, false),
        );
        // Protobuf metadata or plain JSON: the apiserver answers protobuf metadata.
        check(
            "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,\
             application/json",
            Accept::Transformed {
                plain_json_too: true,
            },
        );
        // v1beta1, both forms at once, or a Table beside it: transformed, as before.
        for header in [
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1beta1",
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,\
             application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
            "application/json;as=Table;g=meta.k8s.io;v=v1,\
             application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            "application/json;as=PartialObjectMetadataList;g=apps;v=v1",
        ] {
            check(
                header,
                Accept::Transformed {
                    plain_json_too: false,
                },
            );
        }
        // A plain form first is what the apiserver answers: whole objects.
        check(
            "application/json,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1",
            Accept::Transformed {
                plain_json_too: true,
            },
        );
        check(
            "application/vnd.kubernetes.protobuf,\
             application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
            Accept::Transformed {
                plain_json_too: false,
            },
        );
        // A metadata client takes no discovery document.
        assert_eq!(meta(true, true).discovery(), DiscoveryAccept::NONE);
    }
}

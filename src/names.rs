//! Kubernetes' name rules, and the cache's rule for one path segment: pure string checks, no
//! imports. The one place each rule is written; the request parser, the configuration, the
//! cache keys, the selector parser and the offline event's name check all use these; and the
//! types made by such checks: [`Component`], and [`Gvr`] (`names/gvr.rs`), one
//! group/version/resource.

use std::borrow::Cow;

mod gvr;

pub(crate) use gvr::{Gvr, GvrError};

/// Longest object name: a DNS-1123 subdomain, the longest Kubernetes object name.
const MAX_SEGMENT_BYTES: usize = 253;

/// A DNS-1123 label (namespaces): lower-case alphanumerics and '-', at most 63.
pub(crate) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain: API groups, and what Kubernetes accepts as a node name.
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// An API version such as `v1` or `v1beta2`.
pub(crate) fn is_version(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// A resource or subresource name: lower-case alphanumerics, '-' and '.'.
pub(crate) fn is_resource_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !s.starts_with('.')
}

/// Whether `s` can be used as one path segment below the cache root; also the rule for an
/// object name in a request path (the apiserver refuses `.`, `..`, `/` and `%` there).
///
/// Non-empty, at most 253 bytes, not `.` or `..`, no leading `.` (the store's own
/// temporary and journal names start with one), and no `/`, `\`, `%`, NUL or other
/// control character. Anything passing this names an entry directly inside its parent
/// directory, so a key made of such segments cannot reach outside the root.
pub(crate) fn is_safe_segment(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_SEGMENT_BYTES
        && !s.starts_with('.')
        && !has_unsafe_byte(s.as_bytes())
}

/// Whether UTF-8 `bytes` hold `/`, `\`, `%` or a control character (`char::is_control`:
/// U+0000–U+001F, U+007F, and U+0080–U+009F, which UTF-8 writes as `C2 80`–`C2 9F`). Read
/// by bytes rather than decoded chars: every cached answer's key is checked (issue 34), and
/// every request's object name: one plain loop, cheaper than an iterator chain in the
/// size-optimized release build.
fn has_unsafe_byte(bytes: &[u8]) -> bool {
    // Whether the byte before was C2, which starts a C1 control with 80–9F.
    let mut after_c2 = false;
    for &b in bytes {
        if b < 0x20
            || matches!(b, b'/' | b'\\' | b'%' | 0x7f)
            || (after_c2 && matches!(b, 0x80..=0x9f))
        {
            return true;
        }
        after_c2 = b == 0xc2;
    }
    false
}

/// An object name as the apiserver accepts it in a path, and safe as a file name: the
/// store's own segment rule ([`is_safe_segment`]).
pub(crate) fn is_object_name(s: &str) -> bool {
    is_safe_segment(s)
}

/// A component name usable as a cache directory: the one rule of [`Component::new`].
fn is_component_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && !s.starts_with(['.', '_', '-'])
        && s != "version"
        && s.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
        })
}

/// A component's name, valid as its cache directory (lower-case alphanumerics, `-`, `_` and
/// `.`, not starting with a punctuation mark, at most 63 bytes, not `version`, which names
/// the cached `/version` beside the components): it can be made only by [`Component::new`],
/// which checks it, so a cache key or route holding one never holds an unchecked name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Component(Cow<'static, str>);

impl Component {
    /// kubelet, whose lease and pods the hub reads from its cache itself.
    pub(crate) const KUBELET: Component = Component(Cow::Borrowed("kubelet"));
    /// The hub, which caches what it reads for itself (`yurt-hub-cfg`) under its own name.
    pub(crate) const TINYHUB: Component = Component(Cow::Borrowed("tinyhub"));

    /// `name` as a component, when it is a valid one.
    pub(crate) fn new(name: &str) -> Option<Component> {
        // The node's own agents, asking on every request, cost no copy of their name.
        for known in [Component::KUBELET, Component::TINYHUB] {
            if known.as_str() == name {
                return Some(known);
            }
        }
        is_component_name(name).then(|| Component(Cow::Owned(name.to_owned())))
    }

    /// The name.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }
}

impl PartialEq<&str> for Component {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// A component names one directory, directly below the cache root.
impl AsRef<std::path::Path> for Component {
    fn as_ref(&self) -> &std::path::Path {
        self.as_str().as_ref()
    }
}

impl std::fmt::Display for Component {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A label key's name part or a non-empty label value: alphanumerics, '-', '_' or '.',
/// starting and ending alphanumeric (the length limit is the caller's).
pub(crate) fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests;

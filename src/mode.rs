//! The hub's working mode, a value the configuration reads and the request path, the filters
//! and the background clients decide by. A leaf: it names no other module.

/// `--working-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WorkingMode {
    /// Cache what components read and answer from the cache when the cloud is gone.
    Edge,
    /// Forward only.
    Cloud,
}

//! How an object is read: the options, and the depth limit with the stack grown under it.

use crate::Error;

/// How [`from_slice`](crate::from_slice) and [`Envelope::decode`](crate::Envelope::decode)
/// read an object.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecodeOptions {
    /// The deepest nesting of objects and arrays to read, counted as in the object's JSON
    /// (the top object is 1), embedded JSON included. 512 by default (ctrlkit's informers'
    /// `DEFAULT_MAX_DEPTH`).
    pub max_depth: usize,
    /// Skip `metadata.managedFields` on the wire, as a client that drops them from its cache
    /// would cut them from JSON text. Off by default.
    pub skip_managed_fields: bool,
    /// Fail with [`Error::UnknownField`] on a field the vendored messages lack (a server newer
    /// than the vendored protos sends it; JSON would keep it) rather than skip it. Every
    /// message the type reads is checked, at any depth (lists' items, watch events' objects,
    /// inline and special messages); a value the type itself skips (serde's `IgnoredAny`,
    /// which JSON also drops) is not read, so not checked. Fields Kubernetes removed that
    /// older servers still write (v1.20's `ObjectMeta.clusterName`, empty on every object)
    /// are skipped even so: k8s-openapi's types lack them too. Off by default: unknown
    /// fields are skipped, as protobuf readers skip them.
    pub deny_unknown_fields: bool,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        DecodeOptions { max_depth: 512, skip_managed_fields: false, deny_unknown_fields: false }
    }
}

impl DecodeOptions {
    /// The defaults: a depth of 512, managed fields kept, unknown fields skipped.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`max_depth`](Self::max_depth).
    #[must_use]
    pub fn max_depth(mut self, max_depth: usize) -> Self {
        self.max_depth = max_depth;
        self
    }

    /// Sets [`skip_managed_fields`](Self::skip_managed_fields).
    #[must_use]
    pub fn skip_managed_fields(mut self, skip: bool) -> Self {
        self.skip_managed_fields = skip;
        self
    }

    /// Sets [`deny_unknown_fields`](Self::deny_unknown_fields).
    #[must_use]
    pub fn deny_unknown_fields(mut self, deny: bool) -> Self {
        self.deny_unknown_fields = deny;
        self
    }
}

/// [`Error::TooDeep`] when `depth` is past the limit.
pub(crate) fn check_depth(depth: usize, options: &DecodeOptions) -> Result<(), Error> {
    if depth > options.max_depth {
        return Err(Error::TooDeep { max_depth: options.max_depth });
    }
    Ok(())
}

/// Runs `f` with room on the stack for one more level, growing it when little is left.
#[inline]
pub(crate) fn grow<R>(f: impl FnOnce() -> R) -> R {
    // Room for a level of a debug build's deserializers, and a new segment of 1 MiB.
    stacker::maybe_grow(128 * 1024, 1024 * 1024, f)
}

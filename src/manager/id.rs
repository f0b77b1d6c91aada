//! [`RunnableId`]: how a runnable added through a [`ManagerHandle`](super::ManagerHandle) is
//! named for its removal.

/// A runnable's id in its manager, returned by [`ManagerHandle::add`](super::ManagerHandle::add) and taken by
/// [`ManagerHandle::remove`](super::ManagerHandle::remove). Ids are never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunnableId(pub(super) u64);

impl std::fmt::Display for RunnableId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

//! The strategy of the kinds whose one rule of their own is that a delete answers with the
//! object, not with a `Status`, as the real server answers for them: core/v1
//! PersistentVolumes, PersistentVolumeClaims, ResourceQuotas and PodTemplates, and
//! `storage.k8s.io`'s StorageClasses, CSIDrivers, CSINodes and VolumeAttachments. None is
//! served by default; a user may register them (`ApiServerBuilder::resource`).

use crate::registry::Strategy;

/// A delete answers with the object; every other hook is the generic one.
pub(crate) struct ReturnsObject;

impl Strategy for ReturnsObject {
    fn returns_deleted_object(&self) -> bool {
        true
    }
}

//! The strategy of `SubjectAccessReview` (kube's
//! `pkg/registry/authorization/subjectaccessreview`): a create is answered with RBAC's
//! decision over the stored roles and bindings (see `auth`), and nothing is stored.

use serde_json::Value;

use crate::auth;
use crate::model::resources::ResourceType;
use crate::model::status::ApiResult;
use crate::registry::Strategy;
use crate::storage::store::Store;

/// The rules of SubjectAccessReviews.
pub(crate) struct SubjectAccessReviewStrategy;

impl Strategy for SubjectAccessReviewStrategy {
    fn answer_create(
        &self,
        store: &Store,
        rt: &ResourceType,
        body: &[u8],
    ) -> Option<ApiResult<Value>> {
        Some(auth::review(rt, body, |spec| auth::access_review(store, spec)))
    }
}

//! The strategy of `TokenReview` (kube's `pkg/registry/authentication/tokenreview`): a create
//! is answered with the review's status, the user the token authenticates as (see `auth`),
//! and nothing is stored.

use serde_json::Value;

use crate::auth::{self, Users};
use crate::model::resources::ResourceType;
use crate::model::status::ApiResult;
use crate::registry::Strategy;
use crate::storage::store::Store;

/// The rules of TokenReviews: the users the server authenticates, by token.
pub(crate) struct TokenReviewStrategy {
    pub(crate) users: Users,
}

impl Strategy for TokenReviewStrategy {
    fn answer_create(&self, _: &Store, rt: &ResourceType, body: &[u8]) -> Option<ApiResult<Value>> {
        Some(auth::review(rt, body, |spec| auth::token_review(&self.users, spec)))
    }
}

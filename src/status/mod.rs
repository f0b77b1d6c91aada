//! Writing an object's status the way controllers do, by server-side apply through the
//! `/status` subresource as the field manager that owns what it writes:
//! - [`apply_status`]: a status, its `apiVersion` and `kind` taken from the type;
//! - [`ConditionWriter`]: `status.conditions`, with apimachinery's rules
//!   ([`set_status_condition`]): `lastTransitionTime` kept while a condition's status holds,
//!   `observedGeneration` the generation the condition describes, and only the conditions the
//!   field manager owns in its apply, so that two writers (a controller and a policy agent)
//!   each own their own.

mod apply;
mod conditions;
mod writer;

pub use apply::apply_status;
pub use conditions::{
    ConditionFields, ConditionStatus, StatusCondition, find_status_condition,
    is_status_condition_true, remove_status_condition, set_status_condition,
};
pub use writer::ConditionWriter;

//! Which kinds have a strategy of their own, and which: the registration table the server
//! builds its registry with (kube-apiserver's `pkg/registry/<group>/rest/storage_<group>.go`,
//! which name each kind's storage). A kind not listed gets `GenericStrategy`; a kind a CRD
//! defines gets the custom resources' strategy.

use std::sync::Arc;

use crate::auth::Users;

use super::admissionregistration::policy::PolicyStrategy;
use super::admissionregistration::webhook_configuration::ConfigurationStrategy;
use super::apiextensions::crd::DefinitionStrategy;
use super::apiextensions::custom_resource::{CustomResourceStrategy, Schemas};
use super::apps::daemonset::DaemonSetStrategy;
use super::apps::deployment::DeploymentStrategy;
use super::apps::replicaset::ReplicaSetStrategy;
use super::apps::statefulset::StatefulSetStrategy;
use super::authentication::tokenreview::TokenReviewStrategy;
use super::authorization::subjectaccessreview::SubjectAccessReviewStrategy;
use super::batch::job::JobStrategy;
use super::coordination::lease::LeaseStrategy;
use super::core::configmap::ConfigMapStrategy;
use super::core::event::EventStrategy;
use super::core::namespace::NamespaceStrategy;
use super::core::pod::PodStrategy;
use super::core::returns_object::ReturnsObject;
use super::core::secret::SecretStrategy;
use super::core::service::ServiceStrategy;
use super::core::serviceaccount::ServiceAccountStrategy;
use super::generic::Registry;
use super::strategy::Strategy;

impl Registry {
    /// Gives every kind with rules of its own its strategy: the built-in kinds' (if only a
    /// Table printer), those a user may register (whose only rule is a delete's answer, or
    /// passing no webhook), and the CRDs' and their kinds'. `users` are the tokens a
    /// TokenReview authenticates.
    pub(crate) fn with_kind_strategies(self, users: Users) -> Self {
        let schemas = Arc::new(Schemas::default());
        let custom = CustomResourceStrategy { schemas: schemas.clone() };
        let kinds: Vec<(&str, &[&str], Arc<dyn Strategy>)> = vec![
            ("", &["pods"], Arc::new(PodStrategy)),
            ("", &["namespaces"], Arc::new(NamespaceStrategy)),
            ("", &["services"], Arc::new(ServiceStrategy)),
            ("", &["serviceaccounts"], Arc::new(ServiceAccountStrategy)),
            ("", &["secrets"], Arc::new(SecretStrategy)),
            ("", &["configmaps"], Arc::new(ConfigMapStrategy)),
            ("", &["events"], Arc::new(EventStrategy)),
            ("events.k8s.io", &["events"], Arc::new(EventStrategy)),
            ("apps", &["deployments"], Arc::new(DeploymentStrategy)),
            ("apps", &["replicasets"], Arc::new(ReplicaSetStrategy)),
            ("apps", &["statefulsets"], Arc::new(StatefulSetStrategy)),
            ("apps", &["daemonsets"], Arc::new(DaemonSetStrategy)),
            ("batch", &["jobs"], Arc::new(JobStrategy)),
            ("coordination.k8s.io", &["leases"], Arc::new(LeaseStrategy)),
            (
                "",
                &["persistentvolumes", "persistentvolumeclaims", "resourcequotas", "podtemplates"],
                Arc::new(ReturnsObject),
            ),
            (
                "storage.k8s.io",
                &["storageclasses", "csidrivers", "csinodes", "volumeattachments"],
                Arc::new(ReturnsObject),
            ),
            (
                "apiextensions.k8s.io",
                &["customresourcedefinitions"],
                Arc::new(DefinitionStrategy { schemas }),
            ),
            (
                "admissionregistration.k8s.io",
                &["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
                Arc::new(ConfigurationStrategy),
            ),
            ("authentication.k8s.io", &["tokenreviews"], Arc::new(TokenReviewStrategy { users })),
            (
                "authorization.k8s.io",
                &["subjectaccessreviews"],
                Arc::new(SubjectAccessReviewStrategy),
            ),
        ];
        // Every other kind of the group (the admission policies and their bindings, a kind a
        // user registers there) passes no webhook either, as before strategies.
        let mut registry = self
            .with_custom_resource_strategy(Arc::new(custom))
            .with_group_strategy("admissionregistration.k8s.io", Arc::new(PolicyStrategy));
        for (group, plurals, strategy) in kinds {
            for plural in plurals {
                registry = registry.with_strategy(group, plural, strategy.clone());
            }
        }
        registry
    }
}

//! The resource types the server serves: group, version, kind, plural, scope.

/// One kind of object the embedded API server stores and serves.
///
/// Objects are stored as JSON, so any kind works: register custom resources with
/// [`ApiServerBuilder::resource`](crate::ApiServerBuilder::resource).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core group (`/api/v1`).
    pub group: String,
    /// API version, such as `v1`.
    pub version: String,
    /// Kind, such as `Pod`.
    pub kind: String,
    /// Plural resource name used in paths, such as `pods`.
    pub plural: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Whether `/status` is a subresource: then the main endpoint ignores status changes and
    /// `/status` changes nothing but status.
    pub status_subresource: bool,
    /// Whether `/scale` is a subresource: an `autoscaling/v1` `Scale` over `spec.replicas`,
    /// `status.replicas` and `spec.selector`, as Deployments, ReplicaSets and StatefulSets have.
    pub scale_subresource: bool,
    /// Short names for kubectl, such as `po`.
    pub short_names: Vec<String>,
    /// The columns `kubectl get` shows beside the name (a CRD's `additionalPrinterColumns`);
    /// none: an `Age` column for a CRD's kind, `Created At` for another registered type.
    pub printer_columns: Vec<PrinterColumn>,
    /// Whether a CustomResourceDefinition defines the type (set by the server).
    pub from_definition: bool,
}

/// A column of `kubectl get`: a CRD's `additionalPrinterColumns` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrinterColumn {
    /// The header, such as `Size`.
    pub name: String,
    /// `string`, `integer`, `number`, `boolean` or `date`.
    pub kind: String,
    /// Where the value is: a simple JSONPath such as `.spec.size` or `.status.items[0].name`.
    pub json_path: String,
    /// 0: always shown; more: only with `-o wide`.
    pub priority: i32,
}

impl ResourceType {
    /// A resource type with no status subresource and no short names.
    pub fn new(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            plural: plural.to_owned(),
            namespaced,
            status_subresource: false,
            scale_subresource: false,
            short_names: Vec::new(),
            printer_columns: Vec::new(),
            from_definition: false,
        }
    }

    /// Gives the type a `/status` subresource.
    pub fn with_status(mut self) -> Self {
        self.status_subresource = true;
        self
    }

    /// Gives the type a `/scale` subresource.
    pub fn with_scale(mut self) -> Self {
        self.scale_subresource = true;
        self
    }

    /// Adds short names (for `kubectl get po`).
    pub fn with_short_names(mut self, names: &[&str]) -> Self {
        self.short_names = names.iter().map(|n| (*n).to_owned()).collect();
        self
    }

    /// `v1` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The `ApiResource` to reach this type as `DynamicObject`s through kube-client
    /// (`Api::namespaced_with` / `Api::all_with`).
    pub fn api_resource(&self) -> kube_client::api::ApiResource {
        kube_client::api::ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version: self.api_version(),
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }

    /// The kind's name in lower case, as discovery's `singularName`.
    pub(crate) fn singular(&self) -> String {
        self.kind.to_lowercase()
    }

    /// The resource as kubectl names it: its plural for the core group (`configmaps`),
    /// `plural.group` otherwise (`configmapsets.ctrlkit.example.com`).
    pub(crate) fn resource_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// Whether this is one of Kubernetes' own kinds rather than a custom resource: their
    /// `/status` takes metadata changes too, and they accept strategic merge patches.
    pub(crate) fn is_builtin(&self) -> bool {
        is_builtin_group(&self.group)
    }
}

/// The types every server has: core/v1 pods, namespaces, configmaps, secrets, services,
/// serviceaccounts, events; apps/v1 deployments, replicasets, statefulsets, daemonsets;
/// batch/v1 jobs; coordination.k8s.io/v1 leases; events.k8s.io/v1 events;
/// apiextensions.k8s.io/v1 customresourcedefinitions. With the `/status` and `/scale`
/// subresources the real server gives them, and no controllers behind them.
pub(crate) fn builtin() -> Vec<ResourceType> {
    let apps = |kind: &str, plural: &str, short: &str| {
        ResourceType::new("apps", "v1", kind, plural, true).with_status().with_short_names(&[short])
    };
    vec![
        ResourceType::new("", "v1", "Pod", "pods", true).with_status().with_short_names(&["po"]),
        ResourceType::new("", "v1", "Namespace", "namespaces", false)
            .with_status()
            .with_short_names(&["ns"]),
        ResourceType::new("", "v1", "ConfigMap", "configmaps", true).with_short_names(&["cm"]),
        ResourceType::new("", "v1", "Secret", "secrets", true),
        ResourceType::new("", "v1", "Service", "services", true)
            .with_status()
            .with_short_names(&["svc"]),
        ResourceType::new("", "v1", "Event", "events", true).with_short_names(&["ev"]),
        ResourceType::new("", "v1", "ServiceAccount", "serviceaccounts", true)
            .with_short_names(&["sa"]),
        apps("Deployment", "deployments", "deploy").with_scale(),
        apps("ReplicaSet", "replicasets", "rs").with_scale(),
        apps("StatefulSet", "statefulsets", "sts").with_scale(),
        apps("DaemonSet", "daemonsets", "ds"),
        ResourceType::new("batch", "v1", "Job", "jobs", true).with_status(),
        ResourceType::new("coordination.k8s.io", "v1", "Lease", "leases", true),
        ResourceType::new("events.k8s.io", "v1", "Event", "events", true).with_short_names(&["ev"]),
        definition_type(),
        ResourceType::new("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", false),
        ResourceType::new(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            false,
        ),
        ResourceType::new("rbac.authorization.k8s.io", "v1", "Role", "roles", true),
        ResourceType::new("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", true),
        ResourceType::new("authentication.k8s.io", "v1", "TokenReview", "tokenreviews", false),
        ResourceType::new(
            "authorization.k8s.io",
            "v1",
            "SubjectAccessReview",
            "subjectaccessreviews",
            false,
        ),
        ResourceType::new(
            "admissionregistration.k8s.io",
            "v1",
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
            false,
        ),
        ResourceType::new(
            "admissionregistration.k8s.io",
            "v1",
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
            false,
        ),
    ]
}

/// Whether `group` is one of Kubernetes' own API groups (the core group, `*.k8s.io`, `apps`,
/// `batch`, `policy`, `autoscaling`), whose kinds are Go structs in the real server.
pub(crate) fn is_builtin_group(group: &str) -> bool {
    group.is_empty()
        || group.ends_with(".k8s.io")
        || matches!(group, "apps" | "batch" | "policy" | "autoscaling")
}

/// The resource type of CRDs themselves.
fn definition_type() -> ResourceType {
    ResourceType::new(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
    )
    .with_status()
    .with_short_names(&["crd", "crds"])
}

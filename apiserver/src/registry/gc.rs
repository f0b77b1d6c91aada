//! The garbage collector, opt-in ([`ApiServerBuilder::garbage_collector`]): what
//! kube-controller-manager's garbage collector does with `ownerReferences`, so that cascades
//! can be tested without a cluster.
//!
//! [`ApiServerBuilder::garbage_collector`]: crate::ApiServerBuilder::garbage_collector
//!
//! After every write, one pass over the store, in one transaction:
//! - **Orphaning** (a delete with `propagationPolicy: Orphan`, which left the owner with the
//!   `orphan` finalizer): the owner is taken out of its dependents' `ownerReferences`, then the
//!   finalizer is removed, and the owner goes.
//! - **Foreground** (`propagationPolicy: Foreground`: the `foregroundDeletion` finalizer): the
//!   owner's dependents are deleted (in the foreground too, when they have dependents of their
//!   own); the finalizer is removed, and the owner goes, once no dependent that blocks it
//!   (`blockOwnerDeletion: true`) is left.
//! - **Background** (the default): a dependent none of whose owners exists any more is deleted.
//!   A dependent with an owner left keeps living; the references to the owners that are gone
//!   (or being deleted in the foreground) are removed from it.
//!
//! An owner exists when an object of the reference's group and kind, name and `uid` is stored
//! (in the dependent's namespace, unless the kind is cluster-scoped). A deleted dependent goes
//! as a DELETE would make it go: with its own finalizers it is marked and stays.
//!
//! Each pass reads every object that has `ownerReferences`, so a server holding many makes
//! each write cost more; the collector is off unless asked for.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

use serde_json::Value;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::task::JoinHandle;

use crate::model::resources::ResourceType;
use crate::registry::{
    FOREGROUND_FINALIZER, ORPHAN_FINALIZER, Propagation, Registry, has_finalizers,
};
use crate::storage::store::{ChangeReceiver, StoredObject, Txn, object_key};

/// Runs the collector until the server stops: a pass after each batch of writes.
pub(crate) fn spawn(registry: &Arc<Registry>) -> JoinHandle<()> {
    let changes = registry.store.subscribe();
    tokio::spawn(run(Arc::downgrade(registry), changes))
}

async fn run(registry: Weak<Registry>, mut changes: ChangeReceiver) {
    loop {
        match changes.recv().await {
            // A lagging receiver only means many writes: one pass sees them all.
            Ok(_) | Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
        loop {
            match changes.try_recv() {
                Ok(_) | Err(TryRecvError::Lagged(_)) => continue,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Closed) => return,
            }
        }
        let Some(registry) = registry.upgrade() else { return };
        collect(&registry);
    }
}

/// One object of the store, as the collector sees it.
struct Node {
    resource: usize,
    rt: Arc<ResourceType>,
    key: String,
    object: Arc<StoredObject>,
    value: Value,
}

impl Node {
    fn uid(&self) -> &str {
        self.value["metadata"]["uid"].as_str().unwrap_or_default()
    }

    fn owner_references(&self) -> &[Value] {
        self.value["metadata"]["ownerReferences"].as_array().map_or(&[], Vec::as_slice)
    }

    fn deleting(&self) -> bool {
        self.value["metadata"].get("deletionTimestamp").is_some()
    }

    fn held_by(&self, finalizer: &str) -> bool {
        held_by(&self.value, finalizer)
    }
}

/// Whether `object` is being deleted and held by `finalizer`.
fn held_by(object: &Value, finalizer: &str) -> bool {
    object["metadata"].get("deletionTimestamp").is_some()
        && object["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == finalizer))
}

/// One pass; see the module docs.
fn collect(registry: &Registry) {
    let types = registry.store.served_types();
    registry.store.write(|txn| {
        let nodes = read(txn, &types);
        let dependents: Vec<&Node> =
            nodes.iter().filter(|n| !n.owner_references().is_empty()).collect();
        let owners: Vec<&Node> = nodes
            .iter()
            .filter(|n| n.held_by(ORPHAN_FINALIZER) || n.held_by(FOREGROUND_FINALIZER))
            .collect();
        let mut written: HashSet<(usize, String)> = HashSet::new();

        for owner in owners.iter().filter(|o| o.held_by(ORPHAN_FINALIZER)) {
            let uid = owner.uid();
            for dependent in dependents.iter().filter(|d| refers_to(d, uid)) {
                let mut value = fresh(txn, dependent);
                retain_refs(&mut value, |r| r["uid"] != uid);
                txn.put(dependent.resource, &dependent.key, value);
                written.insert((dependent.resource, dependent.key.clone()));
            }
            finish(txn, owner, ORPHAN_FINALIZER);
            written.insert((owner.resource, owner.key.clone()));
        }

        for owner in owners.iter().filter(|o| o.held_by(FOREGROUND_FINALIZER)) {
            let uid = owner.uid();
            let blocked = dependents.iter().any(|d| {
                d.owner_references()
                    .iter()
                    .any(|r| r["uid"] == uid && r["blockOwnerDeletion"] == Value::Bool(true))
            });
            if !blocked && !written.contains(&(owner.resource, owner.key.clone())) {
                finish(txn, owner, FOREGROUND_FINALIZER);
                written.insert((owner.resource, owner.key.clone()));
            }
        }

        let has_dependents: HashSet<&str> = dependents
            .iter()
            .flat_map(|d| d.owner_references().iter().filter_map(|r| r["uid"].as_str()))
            .collect();
        let by_kind = kinds(&types);
        for dependent in &dependents {
            if dependent.deleting()
                || written.contains(&(dependent.resource, dependent.key.clone()))
            {
                continue;
            }
            let mut solid = 0;
            let mut gone: Vec<&str> = Vec::new();
            let mut waiting: Vec<&str> = Vec::new();
            for reference in dependent.owner_references() {
                let uid = reference["uid"].as_str().unwrap_or_default();
                match owner_of(txn, &by_kind, dependent, reference) {
                    None => gone.push(uid),
                    Some(owner) if held_by(&owner, FOREGROUND_FINALIZER) => waiting.push(uid),
                    Some(_) => solid += 1,
                }
            }
            if solid > 0 {
                if !gone.is_empty() || !waiting.is_empty() {
                    let mut value = dependent.value.clone();
                    retain_refs(&mut value, |r| {
                        let uid = r["uid"].as_str().unwrap_or_default();
                        !gone.contains(&uid) && !waiting.contains(&uid)
                    });
                    txn.put(dependent.resource, &dependent.key, value);
                }
                continue;
            }
            // No owner left, or only owners deleted in the foreground: the dependent goes, in
            // the foreground itself if it has dependents (so that the owner waits for them).
            let propagation = if !waiting.is_empty() && has_dependents.contains(dependent.uid()) {
                Propagation::Foreground
            } else {
                Propagation::Background
            };
            let current = dependent.object.clone();
            registry.delete_in(
                txn,
                &dependent.rt,
                dependent.resource,
                &dependent.key,
                current,
                Some(propagation),
            );
        }
    });
}

/// Every stored object that has owner references or is held by a collector's finalizer.
fn read(txn: &Txn<'_>, types: &[(usize, Arc<ResourceType>)]) -> Vec<Node> {
    let mut nodes = Vec::new();
    for (resource, rt) in types {
        for object in txn.list(*resource, None) {
            // Most objects are neither: skip them before parsing.
            let text = &object.json[..];
            let relevant = [&b"ownerReferences"[..], FOREGROUND_FINALIZER.as_bytes(), b"orphan"]
                .iter()
                .any(|needle| text.windows(needle.len()).any(|w| w == *needle));
            if !relevant {
                continue;
            }
            let namespace = rt.namespaced.then_some(object.fields.namespace.as_str());
            let key = object_key(namespace, &object.fields.name);
            let value = object.value();
            nodes.push(Node { resource: *resource, rt: rt.clone(), key, object, value });
        }
    }
    nodes
}

/// The served types by group and kind.
fn kinds(types: &[(usize, Arc<ResourceType>)]) -> HashMap<(String, String), (usize, bool)> {
    types
        .iter()
        .map(|(id, rt)| ((rt.group.clone(), rt.kind.clone()), (*id, rt.namespaced)))
        .collect()
}

/// The owner `reference` of `dependent` names, if it is stored (same uid).
fn owner_of(
    txn: &Txn<'_>,
    kinds: &HashMap<(String, String), (usize, bool)>,
    dependent: &Node,
    reference: &Value,
) -> Option<Value> {
    let api_version = reference["apiVersion"].as_str()?;
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    let kind = reference["kind"].as_str()?;
    let name = reference["name"].as_str()?;
    let (resource, namespaced) = *kinds.get(&(group.to_owned(), kind.to_owned()))?;
    let namespace = namespaced.then(|| dependent.value["metadata"]["namespace"].as_str()).flatten();
    let owner = txn.get(resource, &object_key(namespace, name))?.value();
    (owner["metadata"]["uid"] == reference["uid"]).then_some(owner)
}

fn refers_to(node: &Node, uid: &str) -> bool {
    node.owner_references().iter().any(|r| r["uid"] == uid)
}

/// The object as stored now (an earlier step of this pass may have written it).
fn fresh(txn: &Txn<'_>, node: &Node) -> Value {
    txn.get(node.resource, &node.key).map_or_else(|| node.value.clone(), |o| o.value())
}

/// Keeps the owner references `keep` accepts; drops the field when none is left.
fn retain_refs(value: &mut Value, keep: impl Fn(&Value) -> bool) {
    let metadata = &mut value["metadata"];
    if let Some(refs) = metadata["ownerReferences"].as_array_mut() {
        refs.retain(|r| keep(r));
        if refs.is_empty() {
            metadata.as_object_mut().map(|m| m.remove("ownerReferences"));
        }
    }
}

/// Removes `finalizer` from `owner`; the owner goes if no finalizer is left (one write, as an
/// update that removes a deleting object's last finalizer).
fn finish(txn: &mut Txn<'_>, owner: &Node, finalizer: &str) {
    let mut value = fresh(txn, owner);
    if let Some(finalizers) = value["metadata"]["finalizers"].as_array_mut() {
        finalizers.retain(|f| f != finalizer);
        if finalizers.is_empty() {
            value["metadata"].as_object_mut().map(|m| m.remove("finalizers"));
        }
    }
    match has_finalizers(&value) {
        true => txn.put(owner.resource, &owner.key, value),
        false => txn.remove(owner.resource, &owner.key, value),
    };
}

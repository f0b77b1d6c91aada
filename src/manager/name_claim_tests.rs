//! The table's controller names: held from the claim, before the controller is built, until
//! the entry's series are forgotten, however the entry leaves.

use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;

use super::*;

/// A runnable that returns as soon as it starts.
struct Returns;

#[async_trait]
impl Runnable for Returns {
    fn name(&self) -> String {
        "returns".to_owned()
    }
    async fn start(&self, _: Stop) -> Result<(), RunnableError> {
        Ok(())
    }
}

fn duplicate(result: Result<Option<NameClaim>, HandleError>) -> bool {
    matches!(result, Err(HandleError::DuplicateName { .. }))
}

#[test]
fn a_name_is_held_while_its_entrys_series_are_forgotten() {
    let table = Table::new(Telemetry::default());
    // What a claim of the name would get while the first's series are being forgotten.
    let during_forget = Arc::new(Mutex::new(None));
    let (seen, weak) = (during_forget.clone(), Arc::downgrade(&table));
    let forget: Forget = Box::new(move || {
        let table = weak.upgrade().expect("the table");
        *seen.lock() = Some(duplicate(table.claim(Some("stamp"))));
    });
    let claim = table.claim(Some("stamp")).unwrap();
    assert!(duplicate(table.claim(Some("stamp"))), "claimed: a second add is refused");
    let id = table.insert(Arc::new(Returns), Some(forget), None, claim).unwrap();
    assert!(duplicate(table.claim(Some("stamp"))), "the entry's");

    assert!(matches!(table.begin_removal(id), Ok(Removal::Gone)));
    assert_eq!(*during_forget.lock(), Some(true), "held until forgotten");
    assert!(table.claim(Some("stamp")).unwrap().is_some(), "free once removed");
}

#[test]
fn a_refused_or_abandoned_claim_frees_its_name() {
    let table = Table::new(Telemetry::default());
    let claim = table.claim(Some("stamp")).unwrap();
    drop(claim); // a build that panicked, say
    let claim = table.claim(Some("stamp")).unwrap();
    table.stop();
    let refused = table.insert(Arc::new(Returns), None, None, claim);
    assert!(matches!(refused, Err(HandleError::Stopped { .. })));
    assert!(table.claim(Some("stamp")).unwrap().is_some(), "freed with the refused add");
}

#[tokio::test]
async fn a_name_is_freed_when_its_runnable_returns_on_its_own() {
    let table = Table::new(Telemetry::default());
    let mut ended = table.run().expect("the first run");
    let claim = table.claim(Some("stamp")).unwrap();
    table.insert(Arc::new(Returns), None, None, claim).unwrap();
    table.reach(Reach::Synced { shard: None, leader: None });
    let end = ended.recv().await.expect("it returned");
    assert_eq!(end.name, "returns");
    assert!(table.claim(Some("stamp")).unwrap().is_some(), "free once it returned");
}

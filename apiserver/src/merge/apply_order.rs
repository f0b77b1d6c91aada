//! The order of a merged keyed list or set under server-side apply, as structured-merge-diff
//! orders it (read off v1.36.2): the live list (LHS) and the applied one (RHS) are walked
//! together; a live-only item is taken where it stands, an applied-only one likewise; where
//! both next items are in both lists, the same item is taken once, and a live one the applied
//! list puts later is left for the applied list to place. So the applied list's order wins
//! for the items both hold (`[x]` applied as `[y, x]` is `[y, x]`; `[a, b, d]` applied as
//! `[d, c, a]` is `[b, d, c, a]`).

use serde_json::Value;

use crate::merge::list_types::{ListType, Node};

/// Reorders the lists of `merged` that `applied` sets, from `live`'s order and `applied`'s,
/// at every depth (the items of keyed lists included).
pub(crate) fn order_lists(
    merged: &mut Value,
    live: Option<&Value>,
    applied: &Value,
    node: Node<'_>,
) {
    match (merged, applied) {
        (Value::Object(merged), Value::Object(applied)) => {
            for (key, applied) in applied {
                if let Some(merged) = merged.get_mut(key) {
                    let live = live.and_then(|l| l.get(key));
                    order_lists(merged, live, applied, node.child(key));
                }
            }
        }
        (Value::Array(merged), Value::Array(applied)) => {
            let key: Box<dyn Fn(&Value) -> Value> = match node.list_type() {
                ListType::Map(keys) => Box::new(move |item: &Value| {
                    Value::Array(
                        keys.iter().map(|k| item.get(*k).cloned().unwrap_or_default()).collect(),
                    )
                }),
                ListType::Set => Box::new(Value::clone),
                ListType::Atomic => return,
            };
            let lhs: Vec<Value> = match live {
                Some(Value::Array(live)) => live.iter().map(&key).collect(),
                _ => Vec::new(),
            };
            let rhs: Vec<Value> = applied.iter().map(&key).collect();
            let order = merge_order(&lhs, &rhs);
            let mut items: Vec<Option<Value>> =
                std::mem::take(merged).into_iter().map(Some).collect();
            let keys: Vec<Value> = items.iter().flatten().map(&key).collect();
            for k in order.iter().chain(&keys) {
                if let Some(i) = keys.iter().position(|have| have == k)
                    && let Some(item) = items[i].take()
                {
                    merged.push(item);
                }
            }
            // Nested lists of the items the apply sets.
            for applied in applied {
                let k = key(applied);
                let live_item = match live {
                    Some(Value::Array(live)) => live.iter().find(|l| key(l) == k),
                    _ => None,
                };
                if let Some(item) = merged.iter_mut().find(|m| key(m) == k) {
                    order_lists(item, live_item, applied, node.item());
                }
            }
        }
        _ => {}
    }
}

/// The merged order of the keys `lhs` (live) and `rhs` (applied).
fn merge_order(lhs: &[Value], rhs: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < lhs.len() && j < rhs.len() {
        if out.contains(&lhs[i]) {
            i += 1;
        } else if !rhs.contains(&lhs[i]) {
            out.push(lhs[i].clone());
            i += 1;
        } else if out.contains(&rhs[j]) {
            j += 1;
        } else if !lhs.contains(&rhs[j]) || lhs[i] == rhs[j] {
            out.push(rhs[j].clone());
            j += 1;
        } else {
            i += 1; // both shared, apart: the applied list places it
        }
    }
    for k in lhs[i..].iter().chain(&rhs[j..]) {
        if !out.contains(k) {
            out.push(k.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(lhs: &str, rhs: &str) -> String {
        let keys = |s: &str| s.chars().map(|c| Value::String(c.to_string())).collect::<Vec<_>>();
        let out = merge_order(&keys(lhs), &keys(rhs));
        out.iter().filter_map(Value::as_str).collect()
    }

    /// Each case as v1.36.2 merged it (a `map` list keyed by `type`, and a `set`).
    #[test]
    fn the_applied_order_wins_for_shared_items_as_on_kube_apiserver() {
        for (lhs, rhs, merged) in [
            ("x", "yx", "yx"),
            ("ab", "ca", "cab"),
            ("abd", "dca", "bdca"),
            ("apz", "qz", "apqz"),
            ("ab", "ba", "ba"),
            ("apbq", "bqa", "pbqa"),
            ("abc", "cxb", "acxb"),
            ("pa", "aq", "paq"),
        ] {
            assert_eq!(order(lhs, rhs), merged, "{lhs} applied as {rhs}");
        }
    }
}

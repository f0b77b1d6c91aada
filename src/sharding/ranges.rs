//! [`HashRanges`]: a set of ranges of the 64-bit hash space, as server-side shard selectors
//! (KEP-5866, Kubernetes 1.36 behind `ShardedListAndWatch`) select objects:
//! `shardRange(object.metadata.uid,'0x…','0x…')`, OR-ed with `||`, each `[start, end)` of the
//! FNV-1a 64 hash of the object's uid.
//!
//! The set is kept sorted, with touching ranges merged, so two sets that cover the same
//! hashes are equal and the selector written for them is the same text.

use std::fmt::Write;

/// The end of the hash space, 2^64: a range's end may be it (written `0x10000000000000000`).
pub const HASH_SPACE_END: u128 = 1 << 64;

/// A set of hash ranges; see the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct HashRanges {
    /// `[start, end)`, sorted, disjoint, none touching the next, none empty.
    ranges: Vec<(u128, u128)>,
}

impl HashRanges {
    /// No hash.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Every hash.
    pub fn all() -> Self {
        Self { ranges: vec![(0, HASH_SPACE_END)] }
    }

    /// The union of `ranges`, each `[start, end)` (ends past 2^64 are cut there; empty
    /// ranges are dropped).
    pub fn new(ranges: impl IntoIterator<Item = (u128, u128)>) -> Self {
        let mut ranges: Vec<(u128, u128)> = ranges
            .into_iter()
            .map(|(start, end)| (start, end.min(HASH_SPACE_END)))
            .filter(|(start, end)| start < end)
            .collect();
        ranges.sort_unstable();
        let mut merged: Vec<(u128, u128)> = Vec::with_capacity(ranges.len());
        for (start, end) in ranges {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        Self { ranges: merged }
    }

    /// The ranges, `[start, end)`, sorted.
    pub fn ranges(&self) -> &[(u128, u128)] {
        &self.ranges
    }

    /// Whether it holds no hash.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether `hash` is in one of the ranges.
    pub fn contains(&self, hash: u64) -> bool {
        let hash = u128::from(hash);
        let at = self.ranges.partition_point(|(start, _)| *start <= hash);
        at > 0 && hash < self.ranges[at - 1].1
    }

    /// The hashes in both.
    pub(crate) fn intersection(&self, other: &Self) -> Self {
        let (mut i, mut j, mut out) = (0, 0, Vec::new());
        while i < self.ranges.len() && j < other.ranges.len() {
            let (a, b) = (self.ranges[i], other.ranges[j]);
            let (start, end) = (a.0.max(b.0), a.1.min(b.1));
            if start < end {
                out.push((start, end));
            }
            if a.1 < b.1 { i += 1 } else { j += 1 }
        }
        Self::new(out)
    }

    /// The hashes in either.
    pub(crate) fn union(&self, other: &Self) -> Self {
        Self::new(self.ranges.iter().chain(&other.ranges).copied())
    }

    /// The hashes in `self` and not in `other`.
    pub(crate) fn difference(&self, other: &Self) -> Self {
        self.intersection(&other.complement())
    }

    /// Whether every hash of `self` is in `other`.
    pub(crate) fn is_subset(&self, other: &Self) -> bool {
        self.difference(other).is_empty()
    }

    /// The hashes not in it.
    pub(crate) fn complement(&self) -> Self {
        let mut out = Vec::with_capacity(self.ranges.len() + 1);
        let mut from = 0;
        for (start, end) in &self.ranges {
            out.push((from, *start));
            from = *end;
        }
        out.push((from, HASH_SPACE_END));
        Self::new(out)
    }

    /// The share of the hash space it covers, 0 to 1.
    pub(crate) fn fraction(&self) -> f64 {
        let covered: u128 = self.ranges.iter().map(|(start, end)| end - start).sum();
        covered as f64 / HASH_SPACE_END as f64
    }

    /// The shard selector of these ranges of `field` (`object.metadata.uid`, say):
    /// `shardRange(<field>,'0x…','0x…')||…`, bounds of 16 hex digits (an end of 2^64 as
    /// `0x10000000000000000`). `None` for the empty set, which no selector expresses.
    pub fn selector(&self, field: &str) -> Option<String> {
        let mut out = String::new();
        for (i, (start, end)) in self.ranges.iter().enumerate() {
            if i > 0 {
                out.push_str("||");
            }
            let _ = write!(out, "shardRange({field},'0x{start:016x}','0x{end:016x}')");
        }
        (!out.is_empty()).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn touching_ranges_merge_and_empty_ones_go() {
        let set = HashRanges::new([(10, 20), (0, 5), (5, 10), (30, 30), (25, 40)]);
        assert_eq!(set.ranges(), [(0, 20), (25, 40)]);
        assert!(set.contains(0) && set.contains(19) && !set.contains(20) && set.contains(39));
        assert!(!set.contains(40) && !set.contains(u64::MAX));
        assert!(HashRanges::all().contains(u64::MAX));
    }

    #[test]
    fn the_selector_is_the_servers_syntax() {
        let set =
            HashRanges::new([(0, 0x4000_0000_0000_0000), (0xc000_0000_0000_0000, HASH_SPACE_END)]);
        assert_eq!(
            set.selector("object.metadata.uid").unwrap(),
            "shardRange(object.metadata.uid,'0x0000000000000000','0x4000000000000000')||\
             shardRange(object.metadata.uid,'0xc000000000000000','0x10000000000000000')"
        );
        assert_eq!(HashRanges::empty().selector("object.metadata.uid"), None);
    }

    fn sets() -> impl Strategy<Value = HashRanges> {
        prop::collection::vec((any::<u64>(), 0u64..u64::MAX / 4), 0..8).prop_map(|v| {
            HashRanges::new(
                v.into_iter().map(|(s, len)| (u128::from(s), u128::from(s) + u128::from(len))),
            )
        })
    }

    proptest! {
        #[test]
        fn set_operations_agree_with_membership(a in sets(), b in sets(), probes in prop::collection::vec(any::<u64>(), 64)) {
            let ends = a.ranges().iter().chain(b.ranges()).flat_map(|(s, e)| [*s, *e, s + 1, e.saturating_sub(1)]);
            let probes: Vec<u64> = probes.into_iter().chain(ends.filter_map(|h| u64::try_from(h).ok())).collect();
            for h in probes {
                prop_assert_eq!(a.intersection(&b).contains(h), a.contains(h) && b.contains(h));
                prop_assert_eq!(a.union(&b).contains(h), a.contains(h) || b.contains(h));
                prop_assert_eq!(a.difference(&b).contains(h), a.contains(h) && !b.contains(h));
                prop_assert_eq!(a.complement().contains(h), !a.contains(h));
            }
            prop_assert_eq!(a.intersection(&b).is_empty(), a.difference(&b) == a);
            prop_assert!(a.intersection(&b).is_subset(&a));
            prop_assert_eq!(a.union(&a.complement()), HashRanges::all());
        }
    }
}

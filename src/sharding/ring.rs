//! [`HashRing`]: which shard of a ring an object belongs to, by consistent hashing over the
//! ring's ready shards.
//!
//! The hash is [`ring_hash`]: FNV-1a 64 ([`fnv1a64`], the hash Kubernetes' shard selectors
//! use) followed by MurmurHash3's 64-bit finalizer, which spreads FNV's poorly mixed high bits
//! (keys that differ in their last characters, as `set-1` and `set-2` do, otherwise land
//! close together). It is stable across versions and platforms, so that any tool can compute
//! an object's shard:
//! - each shard `s` places [`VIRTUAL_NODES`] tokens on the ring, token `i` at
//!   `ring_hash("<s>#<i>")` (`i` in decimal, from 0);
//! - an object's key is [`ring_key`]: `<group>/<kind>/<namespace>/<name>` (an empty group for
//!   the core, an empty namespace for a cluster-scoped object), hashed with `ring_hash`;
//! - the object belongs to the shard of the first token at or after its hash, wrapping
//!   around; equal tokens go to the shard whose id sorts first.
//!
//! When a shard joins, only the objects that fall on its new tokens move (to it); when one
//! leaves, only its own objects move. With 256 tokens a shard, each of `N` shards holds
//! `1/N` of the keys give or take a few percent.

use super::ranges::{HASH_SPACE_END, HashRanges};

/// Tokens each shard places on the ring.
pub const VIRTUAL_NODES: usize = 256;

/// FNV-1a, 64 bits: offset basis `0xcbf29ce484222325`, prime `0x100000001b3`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// An object's or a token's place on the ring: [`fnv1a64`], then MurmurHash3's `fmix64`
/// (`h ^= h >> 33; h *= 0xff51afd7ed558ccd; h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53;
/// h ^= h >> 33`, wrapping).
pub fn ring_hash(bytes: &[u8]) -> u64 {
    let mut h = fnv1a64(bytes);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The ring key of an object: `<group>/<kind>/<namespace>/<name>`.
pub fn ring_key(group: &str, kind: &str, namespace: Option<&str>, name: &str) -> String {
    format!("{group}/{kind}/{}/{name}", namespace.unwrap_or_default())
}

/// A consistent hash ring over a set of shard ids; see the module docs. Cheap to build for a
/// few dozen shards; lookups are a binary search.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HashRing {
    /// The shard ids, sorted, without duplicates.
    shards: Vec<String>,
    /// `(token, index into shards)`, sorted.
    tokens: Vec<(u64, usize)>,
}

impl HashRing {
    /// The ring of `shards` (duplicates count once; order does not matter).
    pub fn new<S: Into<String>>(shards: impl IntoIterator<Item = S>) -> Self {
        let mut shards: Vec<String> = shards.into_iter().map(Into::into).collect();
        shards.sort();
        shards.dedup();
        let mut tokens: Vec<(u64, usize)> = shards
            .iter()
            .enumerate()
            .flat_map(|(index, shard)| {
                (0..VIRTUAL_NODES)
                    .map(move |i| (ring_hash(format!("{shard}#{i}").as_bytes()), index))
            })
            .collect();
        tokens.sort_unstable();
        Self { shards, tokens }
    }

    /// The shard ids, sorted.
    pub fn shards(&self) -> &[String] {
        &self.shards
    }

    /// Whether the ring has no shard.
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    /// The shard the ring key `key` belongs to (`None` on an empty ring).
    pub fn shard_for(&self, key: &str) -> Option<&str> {
        self.shard_for_hash(ring_hash(key.as_bytes()))
    }

    /// The shard a place on the ring belongs to: the first token at or after `hash`,
    /// wrapping around (`None` on an empty ring). In a ring of
    /// [`Assignment::ShardSelectors`](super::Assignment::ShardSelectors) an object's place is
    /// [`fnv1a64`] of its uid, the hash the API server's shard selectors use.
    pub fn shard_for_hash(&self, hash: u64) -> Option<&str> {
        let at = self.tokens.partition_point(|(token, _)| *token < hash);
        let (_, index) = self.tokens.get(at).or_else(|| self.tokens.first())?;
        Some(&self.shards[*index])
    }

    /// The places on the ring that belong to `shard`, as [`shard_for_hash`](Self::shard_for_hash)
    /// assigns them: the hashes after each of its tokens' predecessors up to the token itself
    /// (empty for a shard not in the ring).
    pub fn hash_ranges(&self, shard: &str) -> HashRanges {
        let Ok(own) = self.shards.binary_search_by(|s| s.as_str().cmp(shard)) else {
            return HashRanges::empty();
        };
        let (Some(first), Some(last)) = (self.tokens.first(), self.tokens.last()) else {
            return HashRanges::empty();
        };
        let mut ranges = Vec::new();
        let mut previous: Option<u64> = None;
        for (token, index) in &self.tokens {
            if *index == own {
                let start = previous.map_or(0, |p| u128::from(p) + 1);
                ranges.push((start, u128::from(*token) + 1));
            }
            previous = Some(*token);
        }
        // The first token also takes the hashes after the last one, wrapping around.
        if first.1 == own {
            ranges.push((u128::from(last.0) + 1, HASH_SPACE_END));
        }
        HashRanges::new(ranges)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn hash_ranges_are_what_shard_for_hash_assigns(n in 1usize..5, probes in prop::collection::vec(any::<u64>(), 200)) {
            let ring = HashRing::new((0..n).map(|i| format!("replica-{i}")));
            let ranges: Vec<(String, HashRanges)> =
                ring.shards().iter().map(|s| (s.clone(), ring.hash_ranges(s))).collect();
            // The shards' ranges cover the space once.
            let total: f64 = ranges.iter().map(|(_, r)| r.fraction()).sum();
            prop_assert!((total - 1.0).abs() < 1e-9, "covered {total}");
            let tokens = ring.tokens.iter().flat_map(|(t, _)| [*t, t.wrapping_add(1), t.wrapping_sub(1)]);
            for hash in probes.into_iter().chain(tokens).chain([0, u64::MAX]) {
                let owner = ring.shard_for_hash(hash).unwrap();
                for (shard, r) in &ranges {
                    prop_assert_eq!(r.contains(hash), shard == owner, "hash {:#x}", hash);
                }
            }
        }
    }

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        // From the FNV reference (isthe.com/chongo/tech/comp/fnv).
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn keys_spread_evenly_over_the_shards() {
        for n in 1..=5 {
            let ring = HashRing::new((0..n).map(|i| format!("replica-{i}")));
            let mut counts = std::collections::HashMap::new();
            let total = 10_000;
            for i in 0..total {
                let key = ring_key(
                    "ctrlkit.example.com",
                    "ConfigMapSet",
                    Some("default"),
                    &format!("set-{i}"),
                );
                *counts.entry(ring.shard_for(&key).unwrap().to_owned()).or_insert(0) += 1;
            }
            let even = total as f64 / n as f64;
            for (shard, count) in counts {
                let off = (count as f64 - even).abs() / even;
                assert!(off < 0.15, "{n} shards: {shard} holds {count}, {:.0}% off", off * 100.0);
            }
        }
    }

    #[test]
    fn an_empty_ring_has_no_shard() {
        assert_eq!(HashRing::new(Vec::<String>::new()).shard_for("a/b/c/d"), None);
    }

    proptest! {
        /// A joining shard takes keys only for itself; a leaving one gives away only its own.
        #[test]
        fn membership_changes_move_only_the_keys_of_the_shard_that_changed(
            members in prop::collection::btree_set("[a-z]{1,8}", 1..6),
            joiner in "[a-z]{1,8}",
            keys in prop::collection::vec("[a-z0-9/]{1,20}", 1..200),
        ) {
            prop_assume!(!members.contains(&joiner));
            let before = HashRing::new(members.iter().cloned());
            let after = HashRing::new(members.iter().cloned().chain([joiner.clone()]));
            for key in &keys {
                let (was, is) = (before.shard_for(key).unwrap(), after.shard_for(key).unwrap());
                prop_assert!(was == is || is == joiner, "{key}: {was} -> {is}");
            }
            // The order members are given in does not matter.
            let reversed = HashRing::new(members.iter().rev().cloned());
            prop_assert_eq!(&before, &reversed);
        }
    }
}

//! The CA bundle of one webhook's `clientConfig`, as injection rewrites it: the served CAs
//! added, every other writer's CA kept, ctrlkit's own CAs bounded.
//!
//! Contract ([`merged`]):
//! - The served CAs (`ours`) are always in the result: appended when missing.
//! - A certificate ctrlkit did not make (any but a CA named "ctrlkit webhook CA" with a random
//!   unit, [`tls::made_here`]) is never removed, nor is any text that is not a certificate
//!   (other PEM blocks, comments): a CA dropped is cut out of the bundle, the rest kept as
//!   it was.
//! - ctrlkit's own CAs other than the served ones: an expired one goes at once; of the rest,
//!   the newest are kept, so that with the served ones at most `keep` of ctrlkit's CAs stay.
//!   Newest is the latest `notBefore`, ties broken by place in the bundle (injection appends,
//!   so later is newer). A replica's CA is made at its start (or when the CA is renewed), so
//!   the newest are those of the replicas started last: a live replica's CA goes only once
//!   `keep` of ctrlkit's CAs newer than it are in the bundle, which takes more CAs than live
//!   replicas hold (two each at most, during a CA's renewal) when `keep` is at least
//!   2 × (replicas + maxSurge) + 1 (a rollout's most live at once) and replicas restart one
//!   after another.
//! - Nothing to add and nothing to drop: no write (`None`), so writers settle.

use std::time::SystemTime;

use k8s_openapi::ByteString;

use crate::tls;

/// `current` with the served CAs of `ours` it lacks appended, ctrlkit's own expired CAs
/// dropped and its own others bounded to `keep` with the served ones (see the module docs);
/// `None` when nothing changes. A bundle that holds no certificate (empty, or garbage) is
/// replaced by `ours`.
pub(crate) fn merged(
    current: Option<&ByteString>,
    ours: &str,
    keep: usize,
    now: SystemTime,
) -> Option<ByteString> {
    let text = current.map(|b| String::from_utf8_lossy(&b.0).into_owned()).unwrap_or_default();
    let held: Vec<String> = tls::blocks(&text);
    let held_ders: Vec<Vec<u8>> = held.iter().flat_map(|block| ders(block)).collect();
    let served = ders(ours);
    let missing: Vec<String> = tls::blocks(ours)
        .into_iter()
        .filter(|block| !ders(block).iter().all(|d| held_ders.contains(d)))
        .collect();
    if held_ders.is_empty() {
        return Some(ByteString(ours.to_owned().into_bytes()));
    }
    let dropped = dropped(&held, &served, ours, keep, now);
    if missing.is_empty() && dropped.is_empty() {
        return None;
    }
    let mut bundle = match dropped.is_empty() {
        // Nothing taken out: the bundle as it was, every byte kept.
        true if text.ends_with('\n') => text,
        true => text + "\n",
        false => cut(&text, &held, &dropped),
    };
    bundle.extend(missing);
    Some(ByteString(bundle.into_bytes()))
}

/// `text` with the certificates of `held` (its blocks, in order) at the places `dropped`
/// cut out, each with the line break after it: every other byte kept, so text that is not
/// a certificate (another writer's) stays.
fn cut(text: &str, held: &[String], dropped: &[usize]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    for (at, block) in held.iter().enumerate() {
        let block = block.trim_end_matches('\n');
        let Some(start) = rest.find(block) else { break };
        let end = start + block.len();
        if dropped.contains(&at) {
            out.push_str(&rest[..start]);
            rest = &rest[end..];
            rest = rest.strip_prefix("\r\n").or_else(|| rest.strip_prefix('\n')).unwrap_or(rest);
        } else {
            out.push_str(&rest[..end]);
            rest = &rest[end..];
        }
    }
    out.push_str(rest);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// The places in `held` (a bundle's certificates) of ctrlkit's own CAs that go: those
/// expired at `now`, then the oldest past `keep` with those of `ours` (served, `served` as
/// DER, never dropped).
fn dropped(
    held: &[String],
    served: &[Vec<u8>],
    ours: &str,
    keep: usize,
    now: SystemTime,
) -> Vec<usize> {
    let ours_made_here = tls::blocks(ours).iter().filter(|b| tls::made_here(b).is_some()).count();
    let mut others: Vec<(SystemTime, usize)> = Vec::new();
    let mut dropped = Vec::new();
    for (at, block) in held.iter().enumerate() {
        if ders(block).iter().any(|d| served.contains(d)) {
            continue;
        }
        match tls::made_here(block) {
            Some((_, not_after)) if not_after <= now => dropped.push(at),
            Some((not_before, _)) => others.push((not_before, at)),
            None => {}
        }
    }
    // Newest first.
    others.sort_unstable_by(|a, b| b.cmp(a));
    let room = keep.saturating_sub(ours_made_here);
    dropped.extend(others.iter().skip(room).map(|(_, at)| *at));
    dropped
}

/// The certificates of a PEM bundle, as DER (those that do not decode skipped).
pub(crate) fn ders(pem: &str) -> Vec<Vec<u8>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    CertificateDer::pem_slice_iter(pem.as_bytes())
        .filter_map(Result::ok)
        .map(|d| d.to_vec())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::tls::SelfSignedCa;

    const HOUR: Duration = Duration::from_secs(3600);

    fn bundle(text: &str) -> ByteString {
        ByteString(text.as_bytes().to_vec())
    }

    #[test]
    fn a_bundle_gets_the_cas_it_lacks_appended_and_keeps_the_others() {
        let ca = |name: &str| SelfSignedCa::generate(name, HOUR).unwrap().pem();
        let (ours, theirs, retired) = (ca("ours"), ca("theirs"), ca("retired"));
        let now = SystemTime::now();
        let merged = |current: Option<&ByteString>| merged(current, &ours, 3, now);
        assert_eq!(merged(None), Some(bundle(&ours)), "none yet");
        assert_eq!(merged(Some(&bundle("b3RoZXI="))), Some(bundle(&ours)), "garbage");
        let held = format!("{theirs}{retired}");
        let both = merged(Some(&bundle(&held))).unwrap();
        assert_eq!(both, bundle(&format!("{held}{ours}")), "appended, the others kept");
        assert_eq!(merged(Some(&both)), None, "nothing lacking");
        // Held in another order, or without the last newline: still nothing lacking.
        let reordered = format!("{ours}{theirs}");
        assert_eq!(merged(Some(&bundle(reordered.trim_end()))), None);
    }

    #[test]
    fn ctrlkits_own_cas_are_bounded_newest_first_and_expired_ones_dropped() {
        let own = || SelfSignedCa::generate(tls::CA_NAME, HOUR).unwrap().pem();
        let theirs = SelfSignedCa::generate("theirs", HOUR).unwrap().pem();
        // Named as ctrlkit's, without its random unit: not ctrlkit's, kept.
        let lookalike = {
            let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            params.distinguished_name.push(rcgen::DnType::CommonName, tls::CA_NAME);
            params.self_signed(&rcgen::KeyPair::generate().unwrap()).unwrap().pem()
        };
        let expired = SelfSignedCa::generate(tls::CA_NAME, Duration::ZERO).unwrap().pem();
        // Made in this order, within a second: ties of notBefore, broken by place.
        let (a, b, c, d) = (own(), own(), own(), own());
        let ours = own();
        let now = SystemTime::now();
        let held = format!("{a}{theirs}{expired}{b}{lookalike}{c}{d}");
        let text = |b: ByteString| String::from_utf8(b.0).unwrap();
        let kept = text(merged(Some(&bundle(&held)), &ours, 3, now).unwrap());
        assert_eq!(kept, format!("{theirs}{lookalike}{c}{d}{ours}"), "the newest two beside ours");
        assert_eq!(merged(Some(&bundle(&kept)), &ours, 3, now), None, "settled");
        // A bound of 5: only the expired one goes.
        let kept = text(merged(Some(&bundle(&held)), &ours, 5, now).unwrap());
        assert_eq!(kept, format!("{a}{theirs}{b}{lookalike}{c}{d}{ours}"));
        // Ours is kept whatever the bound, and so is an old one of ours held before others.
        let renewal = format!("{d}{a}");
        let kept = text(merged(Some(&bundle(&held)), &renewal, 1, now).unwrap());
        assert_eq!(kept, format!("{a}{theirs}{lookalike}{d}"));
    }

    #[test]
    fn text_that_is_not_a_certificate_is_kept_when_a_ca_is_dropped() {
        let theirs = SelfSignedCa::generate("theirs", HOUR).unwrap().pem();
        let expired = SelfSignedCa::generate(tls::CA_NAME, Duration::ZERO).unwrap().pem();
        let ours = SelfSignedCa::generate(tls::CA_NAME, HOUR).unwrap().pem();
        let other =
            "# another writer's note\n-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n";
        let held = format!("{theirs}{other}{expired}");
        let kept = merged(Some(&bundle(&held)), &ours, 3, SystemTime::now()).unwrap();
        let kept = String::from_utf8(kept.0).unwrap();
        assert_eq!(kept, format!("{theirs}{other}{ours}"), "only the expired CA taken out");
    }
}

//! The renewal plan of a self-signed CA and the serving certificate it signs, the same for
//! certificates kept in memory (`CertificateSource::SelfSigned`) and in a Secret shared by
//! replicas ([`SecretCertificates`](super::SecretCertificates)).
//!
//! Contract: no client that trusts the bundle last injected is ever refused.
//! - A CA is renewed once less than a third of its lifetime is left. The new CA goes into the
//!   bundle first, before the CA it replaces, and signs nothing yet: the leaf served stays the
//!   old CA's, valid.
//! - One propagation period later (two certificate checks, [`propagation`]: every replica has
//!   read the bundle and injected it by then, as injection passes run at least as often as
//!   checks: 30 s against an hour by default) the new CA issues the leaf. A leaf about to
//!   expire is issued at once, since an expired one is refused whatever the bundle.
//! - One more propagation period after that leaf's issue (every replica serves it by then)
//!   the old CA leaves the bundle (in webhook configurations, injection keeps it among
//!   ctrlkit's newest CAs until newer ones push it out or it expires; see the webhook
//!   module's `inject`).
//! - A leaf is renewed, by the CA that signed it, once less than a third of its lifetime is
//!   left or when it lacks a host a replica serves.

use std::time::{Duration, SystemTime};

use super::certs::{self, CertError, CertificateBundle, Lifetimes, SelfSignedCa};

/// The shortest period of certificate checks and CA injection passes.
pub(crate) const MIN_PERIOD: Duration = Duration::from_millis(10);

/// What a server keeps: the CA that signs (the bundle's first) and the served certificate,
/// whose bundle holds that CA and, during a renewal, the one before it.
#[derive(Debug)]
pub(crate) struct Kept {
    pub(crate) ca: SelfSignedCa,
    pub(crate) served: CertificateBundle,
}

/// One step of the plan: a new CA (when the CA is renewed) and the certificate to serve.
pub(crate) struct Step {
    pub(crate) ca: Option<SelfSignedCa>,
    pub(crate) served: CertificateBundle,
}

impl Kept {
    /// Keeps what `step` made.
    pub(crate) fn apply(&mut self, step: Step) {
        if let Some(ca) = step.ca {
            self.ca = ca;
        }
        self.served = step.served;
    }
}

/// How long a change of the bundle takes to reach every client: two certificate checks.
pub(crate) fn propagation(lifetimes: &Lifetimes) -> Duration {
    lifetimes.check_every.max(MIN_PERIOD) * 2
}

/// The first CA and a leaf it signs for `hosts`.
pub(crate) fn first(hosts: &[String], lifetimes: &Lifetimes) -> Result<Kept, CertError> {
    let ca = SelfSignedCa::generate(certs::CA_NAME, lifetimes.ca)?;
    let served = ca.issue(hosts, lifetimes.leaf)?;
    Ok(Kept { ca, served })
}

/// The next step of the plan for `kept` at `now` (see the module docs), if one is due.
pub(crate) fn next(
    kept: &Kept,
    hosts: &[String],
    lifetimes: &Lifetimes,
    now: SystemTime,
) -> Result<Option<Step>, CertError> {
    let (ca, served) = (&kept.ca, &kept.served);
    let propagated = |since: SystemTime| since + propagation(lifetimes) <= now;
    let leaf_ends = served.not_after.unwrap_or(now);
    let covered = certs::hosts(&served.cert_pem).unwrap_or_default();
    let missing: Vec<String> = hosts.iter().filter(|h| !covered.contains(h)).cloned().collect();
    let mut leaf_hosts = covered;
    leaf_hosts.extend(missing.iter().cloned());
    let issue = |ca: &SelfSignedCa, bundle: &str| -> Result<CertificateBundle, CertError> {
        let mut leaf = ca.issue(&leaf_hosts, lifetimes.leaf)?;
        leaf.ca_pem = bundle.to_owned();
        Ok(leaf)
    };
    if !ca.signed(&served.cert_pem) {
        // A new CA in the bundle, its first leaf not issued yet.
        if propagated(ca.issued_at()) || leaf_ends <= now + propagation(lifetimes) {
            return Ok(Some(Step { ca: None, served: issue(ca, &served.ca_pem)? }));
        }
        return Ok(None);
    }
    if ca.is_due(now) {
        let renewed = SelfSignedCa::generate(certs::CA_NAME, lifetimes.ca)?;
        let bundle = format!("{}{}", renewed.pem(), ca.pem());
        let served = CertificateBundle { ca_pem: bundle, ..served.clone() };
        return Ok(Some(Step { ca: Some(renewed), served }));
    }
    if certs::due(leaf_ends, lifetimes.leaf, now) || !missing.is_empty() {
        return Ok(Some(Step { ca: None, served: issue(ca, &served.ca_pem)? }));
    }
    let retired = certs::blocks(&served.ca_pem).len() > 1;
    if retired && propagated(certs::issued_at(&served.cert_pem)?) {
        let served = CertificateBundle { ca_pem: ca.pem(), ..served.clone() };
        return Ok(Some(Step { ca: None, served }));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    /// Takes the plan's next step from `kept` at `now`, if one is due: whether one was.
    fn step(kept: &mut Kept, hosts: &[String], lifetimes: &Lifetimes, now: SystemTime) -> bool {
        match next(kept, hosts, lifetimes, now).unwrap() {
            Some(step) => {
                kept.apply(step);
                true
            }
            None => false,
        }
    }

    fn lifetimes() -> Lifetimes {
        Lifetimes { ca: 90 * SECOND, leaf: 90 * SECOND, check_every: SECOND }
    }

    #[test]
    fn a_new_ca_is_in_the_bundle_a_propagation_before_its_leaf_and_the_old_one_after() {
        let hosts = ["127.0.0.1".to_owned()];
        let lifetimes = lifetimes();
        let mut kept = first(&hosts, &lifetimes).unwrap();
        let (start, first_ca, first_leaf) =
            (kept.ca.issued_at(), kept.ca.pem(), kept.served.cert_pem.clone());
        assert!(!step(&mut kept, &hosts, &lifetimes, start + SECOND), "nothing due");
        // Due past two thirds of its lifetime: a new CA first in the bundle, the leaf kept.
        assert!(step(&mut kept, &hosts, &lifetimes, start + 61 * SECOND), "the CA renewed");
        assert_eq!(kept.served.cert_pem, first_leaf, "the old leaf still served");
        assert_eq!(certs::blocks(&kept.served.ca_pem), [kept.ca.pem(), first_ca]);
        assert!(!kept.ca.signed(&kept.served.cert_pem));
        // Its leaf waits for the propagation, counted from the new CA's making (now).
        let (made, bundle) = (kept.ca.issued_at(), kept.served.ca_pem.clone());
        assert!(!step(&mut kept, &hosts, &lifetimes, made + SECOND), "too early");
        assert!(step(&mut kept, &hosts, &lifetimes, made + 2 * SECOND), "issued");
        assert!(kept.ca.signed(&kept.served.cert_pem), "a leaf of the new CA");
        assert_eq!(kept.served.ca_pem, bundle, "both CAs still trusted");
        // The old CA leaves the bundle a propagation after that leaf's issue.
        let (issued, leaf) =
            (certs::issued_at(&kept.served.cert_pem).unwrap(), kept.served.cert_pem.clone());
        assert!(!step(&mut kept, &hosts, &lifetimes, issued + SECOND), "too early");
        assert!(step(&mut kept, &hosts, &lifetimes, issued + 2 * SECOND), "settled");
        assert_eq!(kept.served.ca_pem, kept.ca.pem());
        assert_eq!(kept.served.cert_pem, leaf);
    }

    #[test]
    fn a_leaf_about_to_expire_is_issued_by_the_new_ca_at_once() {
        let hosts = ["127.0.0.1".to_owned()];
        let lifetimes = lifetimes();
        let mut kept = first(&hosts, &lifetimes).unwrap();
        let (due, ending) = (kept.ca.issued_at() + 61 * SECOND, kept.served.not_after.unwrap());
        assert!(step(&mut kept, &hosts, &lifetimes, due), "the CA renewed");
        assert!(step(&mut kept, &hosts, &lifetimes, ending - SECOND), "the leaf issued");
        assert!(kept.ca.signed(&kept.served.cert_pem));
    }

    #[test]
    fn a_leaf_is_renewed_by_its_ca_for_a_missing_host() {
        let lifetimes = lifetimes();
        let mut kept = first(&["a.example.com".to_owned()], &lifetimes).unwrap();
        let (ca, now) = (kept.ca.pem(), kept.ca.issued_at() + SECOND);
        assert!(step(&mut kept, &["b.example.com".to_owned()], &lifetimes, now));
        let hosts = certs::hosts(&kept.served.cert_pem).unwrap();
        assert_eq!(hosts, ["a.example.com", "b.example.com"]);
        assert_eq!(kept.ca.pem(), ca);
    }
}

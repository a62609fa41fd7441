//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go does it: the holder renews the lease
//! every `duration / 5`; a candidate takes the lease over only after seeing it unchanged for a whole `duration`
//! on its own clock (so clocks need not agree), and every write carries the resourceVersion it read, so two
//! candidates never both win. A leader that cannot renew for `2/3` of the duration stops leading before any
//! other candidate can start.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};

pub struct Elector {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    /// The lease as last read, and when (locally) its holder or renew time last changed.
    observed: Option<(LeaseSpec, Instant)>,
}

/// The outcome of one attempt.
#[derive(Debug, PartialEq, Eq)]
pub enum Term {
    /// We hold the lease (acquired or renewed).
    Leading,
    /// Someone else does.
    Following(String),
}

impl Elector {
    pub fn new(api: Api<Lease>, name: &str, identity: &str, duration: Duration) -> Self {
        Elector {
            api,
            name: name.into(),
            identity: identity.into(),
            duration,
            observed: None,
        }
    }

    pub fn retry_period(&self) -> Duration {
        self.duration / 5
    }

    /// How long a leader may go without a successful renewal before it must stop leading.
    pub fn renew_deadline(&self) -> Duration {
        self.duration * 2 / 3
    }

    /// Acquires or renews the lease once.
    pub async fn try_acquire_or_renew(&mut self) -> Result<Term, kube::Error> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let seconds = i32::try_from(self.duration.as_secs().max(1)).unwrap_or(i32::MAX);
        let Some(current) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Term::Leading),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Term::Following(String::new())),
                Err(e) => Err(e),
            };
        };
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        let changed = self.observed.as_ref().is_none_or(|(seen, _)| {
            seen.holder_identity != spec.holder_identity || seen.renew_time != spec.renew_time
        });
        if changed {
            self.observed = Some((spec.clone(), Instant::now()));
        }
        let observed_at = self
            .observed
            .as_ref()
            .map(|(_, t)| *t)
            .unwrap_or_else(Instant::now);
        let held_by_us = holder == self.identity;
        let lease_seconds = spec.lease_duration_seconds.unwrap_or(seconds);
        let expired = holder.is_empty()
            || observed_at.elapsed()
                > Duration::from_secs(u64::try_from(lease_seconds).unwrap_or(0));
        if !held_by_us && !expired {
            return Ok(Term::Following(holder));
        }
        let mut lease = current;
        let mut next = spec.clone();
        if !held_by_us {
            next.holder_identity = Some(self.identity.clone());
            next.acquire_time = Some(now.clone());
            next.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        next.lease_duration_seconds = Some(seconds);
        next.renew_time = Some(now);
        lease.spec = Some(next.clone());
        // `replace` sends the resourceVersion we read: a concurrent writer makes this a 409, never a double win.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                self.observed = Some((next, Instant::now()));
                Ok(Term::Leading)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Term::Following(holder)),
            Err(e) => Err(e),
        }
    }

    /// Gives the lease up (on shutdown), so another candidate need not wait for it to expire.
    pub async fn release(&mut self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await {
            if let Some(spec) = lease.spec.as_mut() {
                if spec.holder_identity.as_deref() == Some(self.identity.as_str()) {
                    spec.holder_identity = None;
                    spec.renew_time = None;
                    let _ = self
                        .api
                        .replace(&self.name, &PostParams::default(), &lease)
                        .await;
                }
            }
        }
    }
}

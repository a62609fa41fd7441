//! What every reconciler shares: the context and the finalizer around apply and cleanup ([`Base`], [`run`]),
//! errors, per-object backoff, and in submodules the objects it owns and prunes ([`owned`]), the other writes
//! ([`apply`]), the accounts they run as ([`account`]), the status it reports ([`report`]), the Secrets it reads ([`secrets`]), Jobs ([`jobs`]), what
//! a package installer run reports per host ([`host_report`]) and child names ([`naming`]).

pub mod account;
pub mod apply;
pub mod base;
pub mod document;
pub mod error;
pub mod host_report;
pub mod jobs;
pub mod naming;
pub mod owned;
pub mod report;
pub mod secrets;
#[cfg(test)]
pub mod testing;
pub mod workload;

pub use account::{apply_account, core_rule};
pub use apply::{apply_status, delete_ignoring_missing, MANAGER};
pub use base::{backoff, every, key, run, scoped_api, Base, Failures, Reconciler};
pub use error::Error;
pub use jobs::{job_outcome, JobOutcome, WAITING};
pub use naming::child_name;
pub use owned::{Owned, Ownership};
pub use report::{publish, set_condition, set_conditions};

//! What every reconciler shares: the context and the finalizer around apply and cleanup ([`Base`], [`run`]),
//! errors, per-object backoff, and in submodules the objects it owns ([`apply`]), the status it reports
//! ([`report`]), the Secrets it reads ([`secrets`]), Jobs ([`jobs`]) and child names ([`naming`]).

pub mod apply;
pub mod base;
pub mod document;
pub mod error;
pub mod jobs;
pub mod naming;
pub mod report;
pub mod secrets;
#[cfg(test)]
pub mod testing;

pub use apply::{
    apply_account, apply_status, delete_ignoring_missing, delete_owned, owned_meta,
    server_side_apply, GENERATION_LABEL, MANAGER,
};
pub use base::{backoff, every, key, run, scoped_api, Base, Failures, Reconciler};
pub use error::Error;
pub use jobs::{job_outcome, JobOutcome};
pub use naming::child_name;
pub use report::{publish, set_condition, set_conditions};

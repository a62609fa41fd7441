//! The error of a reconcile, with the cause its metrics count.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("{0} has no namespace")]
    NoNamespace(String),
    #[error("the agent's store: {0}")]
    Store(String),
    /// Not a failure: cleanup waits for something else (a finalizer stays only while cleanup returns an
    /// error), and asks to be run again after `retry`.
    #[error("waiting: {what}")]
    Pending {
        what: String,
        retry: std::time::Duration,
    },
}

impl Error {
    /// When this is [`Error::Pending`] (also inside the finalizer's wrapping): how soon to run again.
    pub fn pending(&self) -> Option<std::time::Duration> {
        match self {
            Error::Pending { retry, .. } => Some(*retry),
            Error::Finalizer(e) => match e.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.pending(),
                _ => None,
            },
            _ => None,
        }
    }

    /// The `cause` label of `foothold_reconcile_errors_total`.
    pub fn cause(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::Kube(_) => "transport",
            Error::Finalizer(e) => match e.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.cause(),
                _ => "finalizer",
            },
            Error::NoNamespace(_) => "invalid",
            Error::Pending { .. } => "pending",
            Error::Store(_) => "store",
        }
    }
}

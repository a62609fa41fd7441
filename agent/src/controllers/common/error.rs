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
}

impl Error {
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
            Error::Store(_) => "store",
        }
    }
}

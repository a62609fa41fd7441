//! Calls to the API of the cluster being installed, whose server may be restarting (kubelet restarts it when a
//! slow host answers its probes late): a failed call is made again until a deadline.

use std::future::Future;
use std::time::{Duration, Instant};

/// Between two tries of a failed call.
const RETRY: Duration = Duration::from_secs(3);

/// `call`, made again every [`RETRY`] while it fails, until `deadline`; then its last error. `step` names it in
/// the warning each failure logs.
pub async fn retrying<T, F: Future<Output = Result<T, kube::Error>>>(
    step: &str,
    deadline: Instant,
    mut call: impl FnMut() -> F,
) -> Result<T, kube::Error> {
    loop {
        match call().await {
            Err(e) if Instant::now() < deadline => {
                tracing::warn!(error = %e, "{step}: the API server did not answer; retrying");
                tokio::time::sleep(RETRY).await;
            }
            done => return done,
        }
    }
}

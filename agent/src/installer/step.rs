//! One host's session in an installer run: the logged-in [`Node`], its steps (a script of `host`, run as root,
//! its `DONE` line or a [`Failure`] naming the host, the step and the output's tail), and how long each kind
//! of step may take.

use std::fmt;
use std::time::Duration;

use crate::installer::host::DONE;
use crate::installer::inventory::Host;
use crate::installer::ssh::{Connection, Output, Target};

/// Why the run stopped: which host, in which step, and what it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The inventory's name and address, or `inventory` for what is wrong before any host is touched.
    pub host: String,
    pub step: &'static str,
    pub reason: String,
    /// Running again with the same inputs cannot help: the inputs or the host's state must change first (a
    /// refused plan or key, a kubeadm preflight check). Otherwise (a host not answering yet, a timeout, an API
    /// server restarting) a retry may succeed.
    pub lasting: bool,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.host, self.step, self.reason)
    }
}

impl std::error::Error for Failure {}

/// Whether `out` is kubeadm's preflight checks failing (`[ERROR Port-6443]: Port 6443 is in use` … `error
/// execution phase preflight`) on facts about the host that stay until someone changes them: a port taken, too
/// little memory, swap on. Not when the container runtime is among them: containerd may be restarting.
pub fn preflight_failed(out: &Output) -> bool {
    out.mentions("error execution phase preflight")
        && !out.mentions("[ERROR CRI]")
        && !out.mentions("[ERROR ContainerRuntimeVersion]")
}

/// A logged-in host.
pub struct Node<'a> {
    pub host: &'a Host,
    pub conn: Connection,
    pub target: Target,
}

impl Node<'_> {
    pub fn fail(&self, step: &'static str, reason: String) -> Failure {
        Failure {
            host: self.target.label(),
            step,
            reason,
            lasting: false,
        }
    }

    /// Runs `script`; its output on success.
    pub async fn capture(
        &self,
        step: &'static str,
        script: &str,
        timeout: Duration,
    ) -> Result<Output, Failure> {
        let out = self
            .conn
            .run(self.target.root_shell(), script.as_bytes(), timeout)
            .await
            .map_err(|e| self.fail(step, e.to_string()))?;
        if out.success() {
            return Ok(out);
        }
        let reason = format!(
            "exit status {}: {}",
            out.status
                .map_or_else(|| format!("signal {:?}", out.signal), |s| s.to_string()),
            out.tail(8)
        );
        Err(Failure {
            lasting: preflight_failed(&out),
            ..self.fail(step, reason)
        })
    }

    /// Runs a step's `script`; what it says it did.
    pub async fn step(
        &self,
        step: &'static str,
        script: &str,
        timeout: Duration,
    ) -> Result<String, Failure> {
        let out = self.capture(step, script, timeout).await?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(DONE).map(|d| d.trim().to_owned()))
            .ok_or_else(|| self.fail(step, format!("the script ended without saying {DONE}")))
    }
}

pub const CONNECT: Duration = Duration::from_secs(60);
/// kubeadm init or join, image pulls included, on a slow host.
pub const KUBEADM: Duration = Duration::from_secs(40 * 60);
/// How long the nodes have to get their pod ranges, and then to be Ready.
pub const NODES: Duration = Duration::from_secs(20 * 60);

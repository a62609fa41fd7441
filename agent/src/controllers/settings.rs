//! What the controllers are told on the command line: which to run, where to watch, who they are in the
//! leader Lease, and what the objects they make run.

use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Bpa,
    Sip,
    Vino,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Bpa, Kind::Sip, Kind::Vino];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Bpa => "bpa",
            Kind::Sip => "sip",
            Kind::Vino => "vino",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Settings {
    /// A kubeconfig file; None: `KUBECONFIG`, `~/.kube/config`, then the in-cluster service account.
    pub kubeconfig: Option<PathBuf>,
    pub controllers: Vec<Kind>,
    /// Watch one namespace; None: all.
    pub namespace: Option<String>,
    /// This agent's name in the Lease.
    pub identity: String,
    pub lease_namespace: String,
    pub lease_duration: Duration,
    /// The image BPA installer Jobs run.
    pub installer_image: String,
    /// Who the installer Jobs log in to the hosts as (their `INSTALLER_SSH_USER`).
    pub installer_ssh_user: String,
    /// Default image of the `vino-builder` container in ViNO DaemonSets (a Vino may name its own).
    pub vino_builder_image: String,
    /// The Secret (in the Provisioning's namespace) with the SSH key installers use (`id_rsa`).
    pub ssh_key_secret: String,
    /// The agent's URL as nodes reach it (`http://10.0.0.1:5000`): package downloads point there.
    pub advertise_url: Option<String>,
}

impl std::str::FromStr for Kind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("{s:?} is not a controller: bpa, sip or vino"))
    }
}

#[cfg(test)]
mod tests {
    use super::Kind;

    #[test]
    fn kinds_parse_from_their_names() {
        for k in Kind::ALL {
            assert_eq!(k.as_str().parse::<Kind>(), Ok(k));
        }
        assert!("ironic"
            .parse::<Kind>()
            .unwrap_err()
            .contains("bpa, sip or vino"));
    }
}

//! `serve`'s flags for the controllers.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::builder::TypedValueParser as _;

/// `serve`'s flags for the Kubernetes side.
#[derive(clap::Args)]
pub struct KubeArgs {
    /// Kubeconfig for the controllers. Default: KUBECONFIG, ~/.kube/config, then the in-cluster service
    /// account. Until the apiserver answers, the HTTP services serve and /readyz says the controllers wait.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Controllers to run, comma separated: bpa (Provisioning and Software), sip (SIPCluster), vino (Vino).
    #[arg(
        long,
        value_parser = clap::builder::PossibleValuesParser::new(super::Kind::ALL.map(|k| k.as_str()))
            .map(|s| s.parse::<super::Kind>().expect("a possible value")),
        value_delimiter = ',',
        default_value = "bpa,sip,vino"
    )]
    pub controllers: Vec<super::Kind>,
    /// Run no controllers (the HTTP services only).
    #[arg(long, conflicts_with = "controllers")]
    pub no_controllers: bool,
    /// Watch only this namespace (default: all).
    #[arg(long)]
    pub namespace: Option<String>,
    /// This agent's identity in the leader Lease (default: host name and process id).
    #[arg(long)]
    pub identity: Option<String>,
    /// Namespace of the leader Lease.
    #[arg(long, default_value = "kube-system")]
    pub lease_namespace: String,
    /// Seconds a leader's lease lasts without renewal before another agent may take over.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..))]
    pub lease_duration_seconds: u64,
    /// Image of the BPA installer Jobs (see the installer contract in docs/controllers.md); the default is the one an
    /// appliance built by foothold-build serves: `foothold-agent install` with the appliance's release file.
    #[arg(long, default_value = foothold_names::INSTALLER_IMAGE)]
    pub installer_image: String,
    /// Who the installer logs in to the hosts as (INSTALLER_SSH_USER of its Jobs); anyone but root needs
    /// password-less sudo there.
    #[arg(long, default_value = "root")]
    pub installer_ssh_user: String,
    /// How long an installer Job's drain of a host leaving a cluster may wait for its pods to go,
    /// PodDisruptionBudgets permitting (DRAIN_TIMEOUT_SECONDS of its Jobs); then the Job fails naming the pods.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..))]
    pub drain_timeout_seconds: u64,
    /// Default image of ViNO's vino-builder container (runs `foothold-agent vino-builder`; needs virsh).
    #[arg(long, default_value = "127.0.0.1:5000/foothold/vino-builder:latest")]
    pub vino_builder_image: String,
    /// Secret (in each Provisioning's namespace) holding the SSH key the installer uses.
    #[arg(long, default_value = "ssh-key-secret")]
    pub ssh_key_secret: String,
    /// The site SSH CA's public key file (the appliance's /etc/foothold/ssh-ca/ca.pub, made by `foothold-agent
    /// ssh-host-key`): installer Jobs get it as SSH_HOST_CA and refuse hosts without a host certificate from it.
    /// Unset: they take host keys on first use.
    #[arg(long, value_name = "FILE")]
    pub ssh_host_ca: Option<PathBuf>,
    /// Secret (in each Provisioning's namespace, key `token`) holding the read credential's token the hosts pull
    /// from this agent with, where reads need one: installer Jobs write it to each host they prepare (their
    /// READ_TOKEN_FILE). For hosts with no config drive to give it (the live ISO). Unset: hosts keep what they
    /// have.
    #[arg(long, value_name = "NAME")]
    pub node_read_token_secret: Option<String>,
    /// Approve kubelets' requests for their serving certificates (signer kubernetes.io/kubelet-serving) when a
    /// node asks for its own addresses, and deny others naming why: what a cluster whose kubelets have
    /// serverTLSBootstrap needs (an appliance's, with the ClusterRole of agent/rbac/kubelet-serving.yaml).
    #[arg(long)]
    pub approve_kubelet_serving: bool,
    /// This agent's URL as compute nodes reach it (e.g. http://10.0.0.1:5000): Software package downloads
    /// point there. Default: the --listen address, unless it is a wildcard (0.0.0.0, ::) or port 0.
    #[arg(long, value_parser = parse_advertise_url)]
    pub advertise_url: Option<String>,
    /// This agent's HTTPS URL as the API server reaches it (e.g. https://127.0.0.1:5000): the leader registers
    /// the admission webhook that holds a BPA cluster's BareMetalHosts (deleted, deprovisioned, re-imaged,
    /// powered off) until their nodes are drained. Needs --admission-ca. Unset: no hold.
    #[arg(long, value_parser = parse_advertise_url, requires = "admission_ca")]
    pub admission_url: Option<String>,
    /// The CA (PEM) that signed this agent's serving certificate, which the API server verifies it with (the
    /// appliance's /etc/foothold/tls/ca.pem).
    #[arg(long, value_name = "FILE", requires = "admission_url")]
    pub admission_ca: Option<PathBuf>,
}

fn parse_advertise_url(s: &str) -> Result<String, String> {
    let rest = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
        .ok_or("must start with http:// or https://")?;
    let host = rest.trim_end_matches('/');
    if host.is_empty() || host.contains(['/', '?', '#']) || host.contains(char::is_whitespace) {
        return Err("must be scheme://host[:port] without a path".into());
    }
    Ok(s.trim_end_matches('/').to_owned())
}

impl KubeArgs {
    pub fn settings(
        self,
        listen: SocketAddr,
        tls: bool,
    ) -> anyhow::Result<Option<super::Settings>> {
        if self.no_controllers {
            return Ok(None);
        }
        let ssh_host_ca = match &self.ssh_host_ca {
            None => None,
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("--ssh-host-ca {}", path.display()))?;
                crate::ssh_ca::HostCa::parse(&text)
                    .map_err(|e| anyhow::anyhow!("--ssh-host-ca {}: {e}", path.display()))?;
                Some(text.trim().to_owned())
            }
        };
        let admission = match (self.admission_url, &self.admission_ca) {
            (Some(url), Some(path)) => {
                if !url.starts_with("https://") {
                    anyhow::bail!(
                        "--admission-url {url}: the API server calls webhooks over HTTPS only"
                    );
                }
                let ca_pem = std::fs::read_to_string(path)
                    .with_context(|| format!("--admission-ca {}", path.display()))?;
                if !ca_pem.contains("-----BEGIN CERTIFICATE-----") {
                    anyhow::bail!(
                        "--admission-ca {}: no PEM certificate in it",
                        path.display()
                    );
                }
                Some(super::settings::Admission { url, ca_pem })
            }
            _ => None,
        };
        let identity = self.identity.unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_else(|_| "foothold".into());
            format!("{host}-{}", std::process::id())
        });
        Ok(Some(super::Settings {
            kubeconfig: self.kubeconfig,
            controllers: self.controllers,
            namespace: self.namespace,
            identity,
            lease_namespace: self.lease_namespace,
            lease_duration: std::time::Duration::from_secs(self.lease_duration_seconds),
            installer_image: self.installer_image,
            installer_ssh_user: self.installer_ssh_user,
            drain_timeout_seconds: self.drain_timeout_seconds,
            vino_builder_image: self.vino_builder_image,
            ssh_key_secret: self.ssh_key_secret,
            ssh_host_ca,
            node_read_token_secret: self.node_read_token_secret,
            approve_kubelet_serving: self.approve_kubelet_serving,
            advertise_url: self.advertise_url.or_else(|| {
                (!listen.ip().is_unspecified() && listen.port() != 0)
                    .then(|| format!("{}://{listen}", if tls { "https" } else { "http" }))
            }),
            admission,
        }))
    }
}

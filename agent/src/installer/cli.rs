//! The installer's commands, `foothold-agent install-software` and `install-cluster`: their arguments (each
//! also from the environment the BPA's Jobs set) and what they print.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _};

use crate::controllers::common::host_report::Report;
use crate::installer::cluster::{self, Params};
use crate::installer::inventory::Inventory;
use crate::installer::release::Release;
use crate::installer::{software, ssh};

/// Where the BPA's Jobs mount the SSH key Secret (ICN's name for the key).
const SSH_KEY: &str = "/etc/foothold/ssh/id_rsa";

/// The hosts and how to reach them: what both commands take.
#[derive(clap::Args)]
pub struct HostsArgs {
    /// The cluster's inventory (the BPA's hosts.ini).
    #[arg(
        long,
        env = "INVENTORY",
        default_value = "/etc/foothold/inventory/hosts.ini"
    )]
    inventory: PathBuf,
    /// The SSH private key (the BPA's key Secret, mounted).
    #[arg(long, default_value = SSH_KEY)]
    ssh_key: PathBuf,
    /// Who to log in as where the inventory has no ansible_user; anyone but root needs password-less sudo.
    #[arg(long, env = "INSTALLER_SSH_USER", default_value = "root")]
    ssh_user: String,
    /// The site SSH CA's public key (one line, as in the appliance's /etc/foothold/ssh-ca/ca.pub): every host
    /// must show a host certificate from it naming its inventory name or address, or it is refused. Unset: host
    /// keys are taken on first use (and held to for the run).
    #[arg(long, env = "SSH_HOST_CA")]
    ssh_host_ca: Option<String>,
    /// A file holding the read credential's token hosts pull from the appliance's agent with, where reads need
    /// one (`foothold-agent credentials reads credential`): written to each host when it is prepared, with apt's
    /// login for the agent (the BPA's --node-read-token-secret, mounted). Unset: hosts keep what they have.
    #[arg(long, env = "READ_TOKEN_FILE", value_name = "FILE")]
    read_token_file: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct SoftwareArgs {
    #[command(flatten)]
    hosts: HostsArgs,
    /// The Software's manifest (the BPA's packages.json).
    #[arg(
        long,
        env = "PACKAGES",
        default_value = "/etc/foothold/packages/packages.json"
    )]
    packages: PathBuf,
    /// How many hosts are updated at a time (the Software's maxUnavailable); the first host that fails stops the
    /// rollout: hosts not yet started are skipped.
    #[arg(long, env = "MAX_UNAVAILABLE", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    max_unavailable: u32,
    /// Also write the per-host report (JSON: each host Updated, Unchanged, Failed or Skipped, and what was done)
    /// to this file; in a pod it is the container's termination message too, which the Software reads.
    #[arg(long)]
    report: Option<PathBuf>,
    /// The workload cluster's kubeconfig: needed when a package asks for a drain.
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// How long the drain before a package that asks for one may wait for the host's pods to go,
    /// PodDisruptionBudgets permitting.
    #[arg(long, env = "DRAIN_TIMEOUT_SECONDS", default_value_t = 600)]
    drain_timeout_seconds: u64,
}

#[derive(clap::Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    hosts: HostsArgs,
    /// The Kubernetes release to install (kubernetes-release.json, written by foothold-build beside the
    /// binaries the appliance serves).
    #[arg(
        long,
        env = "KUBERNETES_RELEASE",
        default_value = foothold_names::INSTALLER_RELEASE
    )]
    release: PathBuf,
    /// The cluster's name (kubeadm's clusterName).
    #[arg(long, env = "CLUSTER_NAME")]
    cluster: String,
    /// Pod addresses; each node gets a /24 of it.
    #[arg(long, env = "POD_SUBNET", default_value = "")]
    pod_subnet: String,
    /// ICN's KUD plugins: Foothold's installer has none, so any named is refused rather than left out.
    #[arg(long, env = "KUD_PLUGINS", default_value = "")]
    kud_plugins: String,
    /// The Secret to write the admin kubeconfig into (key `kubeconfig`), in NAMESPACE, with the Job's service
    /// account (or KUBECONFIG's credentials outside a cluster).
    #[arg(long, env = "KUBECONFIG_SECRET", default_value = "")]
    kubeconfig_secret: String,
    #[arg(long, env = "NAMESPACE", default_value = "")]
    namespace: String,
    /// How long the drain of a host leaving the cluster (one the inventory no longer lists) may wait for its pods
    /// to go, PodDisruptionBudgets permitting.
    #[arg(long, env = "DRAIN_TIMEOUT_SECONDS", default_value_t = 600)]
    drain_timeout_seconds: u64,
    /// Also write the admin kubeconfig to this file (mode 0600).
    #[arg(long)]
    kubeconfig_out: Option<PathBuf>,
}

/// Where Kubernetes reads a container's termination message from (the default `terminationMessagePath`).
const TERMINATION_LOG: &str = "/dev/termination-log";

/// Leaves `text` as the container's termination message when running in a pod (the file exists there), so that
/// the BPA reports the failure itself, not only the Job's `BackoffLimitExceeded`. Kubernetes keeps 4 KiB of it.
fn last_words(text: &str) {
    let path = Path::new(TERMINATION_LOG);
    if path.exists() {
        let mut end = text.len().min(4000);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if let Err(e) = std::fs::write(path, &text[..end]) {
            eprintln!("foothold-agent: writing {TERMINATION_LOG}: {e}");
        }
    }
}

fn read(p: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
}

/// What both commands need to reach the hosts: the inventory, the login key, and the host keys they accept.
struct Hosts {
    inv: Inventory,
    key: std::sync::Arc<russh::keys::PrivateKey>,
    known: ssh::KnownHosts,
    read_token: Option<String>,
}

impl HostsArgs {
    /// The inventory, the key and the site SSH CA, read and checked.
    fn load(&self) -> anyhow::Result<Hosts> {
        let p = &self.inventory;
        let inv =
            Inventory::parse(&read(p)?).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
        let key = ssh::load_key(&self.ssh_key).map_err(anyhow::Error::msg)?;
        let known = match self.ssh_host_ca.as_deref().map(str::trim) {
            None | Some("") => {
                eprintln!(
                    "foothold-agent: no SSH_HOST_CA: host keys are taken on first use, not checked"
                );
                ssh::KnownHosts::default()
            }
            Some(text) => {
                let ca = crate::ssh_ca::HostCa::parse(text)
                    .map_err(|e| anyhow::anyhow!("SSH_HOST_CA: {e}"))?;
                println!(
                    "hosts must show a host certificate from the site SSH CA {}",
                    ca.fingerprint()
                );
                ssh::KnownHosts::vouched_by(ca)
            }
        };
        let read_token = match &self.read_token_file {
            None => None,
            Some(path) => {
                let token = crate::auth::read_token(path)?;
                // It goes into a shell script and apt's netrc-like file: a token as `credentials add` makes.
                if !token
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.~+/=".contains(&b))
                {
                    bail!(
                        "READ_TOKEN_FILE {}: not a token (letters, digits and -_.~+/= only)",
                        path.display()
                    );
                }
                Some(token)
            }
        };
        Ok(Hosts {
            inv,
            key,
            known,
            read_token,
        })
    }
}

fn host_keys(inv: &Inventory, known: &ssh::KnownHosts) {
    for h in inv.members() {
        if let Some(f) = known.fingerprint(&h.address, h.port) {
            println!("{} host key {f}", h.name);
        }
    }
}

/// The arguments of one task, every one from the environment (a Job's) or its default.
#[derive(clap::Parser)]
struct FromEnv<A: clap::Args> {
    #[command(flatten)]
    args: A,
}

fn from_env<A: clap::Args>(task: &str) -> anyhow::Result<A> {
    use clap::Parser as _;
    FromEnv::<A>::try_parse_from([task])
        .map(|f| f.args)
        .map_err(|e| anyhow::anyhow!("{task}: {}", e.render()))
}

/// `foothold-agent install`, the installer image's entrypoint: the task a BPA Job asks for by `INSTALLER_TASK`
/// (unset or `cluster`: [`install_cluster`], as ICN's contract runs a cluster install; `software`:
/// [`install_software`]), every argument from the Job's environment.
pub fn install_from_env() -> anyhow::Result<ExitCode> {
    let task = std::env::var("INSTALLER_TASK").unwrap_or_default();
    let result = match task.as_str() {
        "" | "cluster" => from_env("install-cluster").map_or_else(|e| Ok(refused(&e)), install_cluster),
        "software" => from_env("install-software").map_or_else(|e| Ok(refused(&e)), install_software),
        other => Ok(refused(&anyhow::anyhow!(
            "INSTALLER_TASK {other:?}: not a task of Foothold's installer (unset or \"cluster\": a cluster; \"software\": a Software's packages)"
        ))),
    };
    if let Err(e) = &result {
        last_words(&format!("{e:#}"));
    }
    result
}

/// Says `FAILED: <why>` (on standard output and as the container's last words) and gives the exit status:
/// [`foothold_names::INSTALLER_EXIT_LASTING`] when another run given the same cannot do better, else 1.
fn failed(why: &dyn std::fmt::Display, lasting: bool) -> ExitCode {
    let line = format!("FAILED: {why}");
    println!("{line}");
    last_words(&line);
    match lasting {
        true => ExitCode::from(foothold_names::INSTALLER_EXIT_LASTING),
        false => ExitCode::from(1),
    }
}

/// [`failed`] for inputs that cannot be used (arguments, environment, inventory, key, release file, packages
/// manifest): lasting.
fn refused(e: &anyhow::Error) -> ExitCode {
    failed(&format_args!("{e:#}"), true)
}

pub fn install_software(a: SoftwareArgs) -> anyhow::Result<ExitCode> {
    let inputs = a.hosts.load().and_then(|hosts| {
        let manifest = software::Manifest::parse(&read(&a.packages)?)
            .map_err(|e| anyhow::anyhow!("{}: {e}", a.packages.display()))?;
        Ok((hosts, manifest))
    });
    let (
        Hosts {
            inv, key, known, ..
        },
        manifest,
    ) = match inputs {
        Ok(i) => i,
        Err(e) => return Ok(refused(&e)),
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let drainer = match manifest.packages.iter().find(|p| p.drain) {
        None => None,
        Some(p) => match runtime.block_on(drainer(&a, &p.name)) {
            Ok(d) => Some(d),
            Err(e) => return Ok(refused(&e)),
        },
    };
    let run = runtime.block_on(software::install(
        &inv,
        &manifest,
        (key, &a.hosts.ssh_user, &known),
        drainer.as_ref(),
        usize::try_from(a.max_unavailable).unwrap_or(1),
    ));
    let mut failed = 0;
    for o in &run.outcomes {
        match &o.result {
            Ok(done) => println!("{} {}: {done}", o.host, o.package),
            Err(why) => {
                failed += 1;
                println!("{} {}: FAILED: {why}", o.host, o.package);
            }
        }
    }
    for (host, first) in &run.skipped {
        println!("{host}: skipped: {first} failed first");
    }
    host_keys(&inv, &known);
    let report = Report::encode(&run.report());
    last_words(&report);
    if let Some(path) = &a.report {
        crate::apt::durable::write_file(path, report.as_bytes(), 0o644)
            .with_context(|| format!("writing the report {}", path.display()))?;
    }
    if failed > 0 {
        eprintln!(
            "foothold-agent: {failed} of {} package installs failed{}",
            run.outcomes.len(),
            match run.skipped.len() {
                0 => String::new(),
                n => format!(", {n} host(s) not started"),
            }
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// The workload cluster a drain before package `package` talks to, from `--kubeconfig` (the Job's
/// `KUBECONFIG`).
async fn drainer(a: &SoftwareArgs, package: &str) -> anyhow::Result<software::Drainer> {
    let Some(path) = &a.kubeconfig else {
        bail!("package {package} asks for a drain: set KUBECONFIG (the workload cluster's kubeconfig)");
    };
    let text = read(path)?;
    let cluster = crate::controllers::common::workload::client(&text, Duration::from_secs(20))
        .await
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    Ok(software::Drainer {
        cluster,
        timeout: Duration::from_secs(a.drain_timeout_seconds),
    })
}

/// What `install-cluster` is given, read and checked: the hosts and the release.
fn cluster_inputs(a: &ClusterArgs) -> anyhow::Result<(Hosts, Release)> {
    let hosts = a.hosts.load()?;
    let release = Release::parse(&read(&a.release)?)
        .map_err(|e| anyhow::anyhow!("{}: {e}", a.release.display()))?;
    if !a.kud_plugins.trim().is_empty() {
        bail!(
            "KUD_PLUGINS {:?}: Foothold's installer installs no KUD plugins; remove them from the Provisioning",
            a.kud_plugins
        );
    }
    if a.kubeconfig_secret.is_empty() && a.kubeconfig_out.is_none() {
        bail!("nowhere to put the kubeconfig: set KUBECONFIG_SECRET (and NAMESPACE) or --kubeconfig-out");
    }
    if !a.kubeconfig_secret.is_empty() && a.namespace.is_empty() {
        bail!(
            "KUBECONFIG_SECRET {:?} needs NAMESPACE",
            a.kubeconfig_secret
        );
    }
    Ok((hosts, release))
}

pub fn install_cluster(a: ClusterArgs) -> anyhow::Result<ExitCode> {
    let (
        Hosts {
            inv,
            key,
            known,
            read_token,
        },
        release,
    ) = match cluster_inputs(&a) {
        Ok(i) => i,
        Err(e) => return Ok(refused(&e)),
    };
    let pod_subnet = if a.pod_subnet.is_empty() {
        crate::installer::kubeadm::DEFAULT_POD_SUBNET
    } else {
        &a.pod_subnet
    };
    let params = Params {
        cluster: &a.cluster,
        pod_subnet,
        release: &release,
        drain_timeout: std::time::Duration::from_secs(a.drain_timeout_seconds),
        read_token: read_token.as_deref(),
    };
    let say = |line: String| println!("{line}");
    let runtime = tokio::runtime::Runtime::new()?;
    let result = runtime.block_on(cluster::install(
        &inv,
        &params,
        key,
        &a.hosts.ssh_user,
        &known,
        &say,
    ));
    host_keys(&inv, &known);
    let kubeconfig = match result {
        Ok(k) => k,
        Err(f) => return Ok(failed(&f, f.lasting)),
    };
    if let Some(out) = &a.kubeconfig_out {
        let tmp = out.with_extension("foothold-tmp");
        crate::store::blobs::write_durably_mode(&tmp, out, kubeconfig.as_bytes(), 0o600)
            .with_context(|| format!("writing {}", out.display()))?;
        println!("kubeconfig written to {}", out.display());
    }
    if !a.kubeconfig_secret.is_empty() {
        runtime
            .block_on(async {
                let client = kube::Client::try_default().await?;
                cluster::publish(client, &a.namespace, &a.kubeconfig_secret, &kubeconfig).await
            })
            .with_context(|| {
                format!(
                    "writing the kubeconfig into Secret {}/{}",
                    a.namespace, a.kubeconfig_secret
                )
            })?;
        println!(
            "kubeconfig written to Secret {}/{}",
            a.namespace, a.kubeconfig_secret
        );
    }
    println!("cluster {} installed", a.cluster);
    Ok(ExitCode::SUCCESS)
}

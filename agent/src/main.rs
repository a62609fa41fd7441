//! `foothold-agent`: argument parsing and logging setup; everything else lives in the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use foothold_agent::{
    controllers, fsck, http, import, installer, mirror_config, store, vino_builder,
};

#[derive(Parser)]
#[command(
    name = "foothold-agent",
    version,
    about = "Foothold site agent: for offline compute nodes, a registry mirror, a file server and image upload API over one content store, and the BPA, SIP and ViNO reconcilers"
)]
struct Cli {
    /// How log lines are written on standard error: text, or one JSON object a line for log collectors.
    #[arg(long, global = true, value_enum, env = "FOOTHOLD_LOG_FORMAT", default_value_t = foothold_agent::cli::LogFormat::Text)]
    log_format: foothold_agent::cli::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct DataArg {
    /// Data directory (an OCI image layout plus foothold.db). Default: ./foothold-data, or /var/lib/foothold
    /// when run as a systemd service.
    #[arg(long, env = "FOOTHOLD_DATA")]
    data: Option<PathBuf>,
}

impl DataArg {
    fn dir(&self) -> PathBuf {
        self.data.clone().unwrap_or_else(|| {
            if std::env::var_os("INVOCATION_ID").is_some() {
                PathBuf::from("/var/lib/foothold")
            } else {
                PathBuf::from("foothold-data")
            }
        })
    }
}

/// What one client may hold.
#[derive(clap::Args)]
struct LimitArgs {
    /// Seconds a client has to send a request's headers; also how long an idle keep-alive connection stays.
    #[arg(long, value_name = "SECONDS", default_value_t = http::limits::ClientLimits::default().header_timeout.as_secs())]
    header_timeout: u64,
    /// Seconds a request body may go without a byte before it is cut off (an upload keeps what arrived).
    #[arg(long, value_name = "SECONDS", default_value_t = http::limits::ClientLimits::default().body_idle_timeout.as_secs())]
    body_idle_timeout: u64,
    /// Seconds an unfinished upload (registry, REST record, tus) may go without a byte before its bytes are
    /// freed: the registry session or tus upload is gone, the REST record starts again at offset 0.
    #[arg(long, value_name = "SECONDS", default_value_t = foothold_agent::expiry::DEFAULT_TTL.as_secs())]
    upload_ttl: u64,
    /// Upload chunks (registry, REST, tus) written at once; one more is answered 429.
    #[arg(long, default_value_t = http::limits::ClientLimits::default().max_uploads)]
    max_uploads: usize,
    /// Connections open at once; one more is closed as it is accepted.
    #[arg(long, default_value_t = http::limits::ClientLimits::default().max_connections)]
    max_connections: usize,
}

impl From<LimitArgs> for http::limits::ClientLimits {
    fn from(a: LimitArgs) -> Self {
        use std::time::Duration;
        http::limits::ClientLimits {
            header_timeout: Duration::from_secs(a.header_timeout.max(1)),
            body_idle_timeout: Duration::from_secs(a.body_idle_timeout.max(1)),
            max_connections: a.max_connections.max(1),
            max_uploads: a.max_uploads.max(1),
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Serve the registry, the file server, the BPA upload API (REST and tus), /metrics and /readyz over HTTP or
    /// HTTPS, and run the reconcilers (see --controllers) once the apiserver answers.
    Serve {
        /// Address and port to listen on. Plain HTTP unless --tls-cert/--tls-key are given.
        #[arg(long, default_value = "127.0.0.1:5000")]
        listen: SocketAddr,
        #[command(flatten)]
        data: DataArg,
        #[command(flatten)]
        auth: foothold_agent::auth::cli::AuthArgs,
        /// PEM certificate chain for HTTPS.
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// PEM private key for HTTPS. The pair is loaded again when either file changes (foothold-agent pki
        /// renews them), without a restart.
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// A certificate whose end of validity /metrics reports as
        /// foothold_certificate_expiry_seconds{name="NAME"} (the served one is "agent"), e.g.
        /// site-ca=/etc/foothold/tls/ca.pem. Repeatable.
        #[arg(long = "certificate", value_name = "NAME=FILE", value_parser = http::certs::parse_watched)]
        certificates: Vec<(String, PathBuf)>,
        /// Largest image accepted by the BPA upload API, in bytes.
        #[arg(long, default_value_t = http::DEFAULT_MAX_IMAGE_LENGTH)]
        max_image_size: u64,
        /// Which plain-HTTP/1 connections get blob and file bodies by sendfile, from the file to the socket
        /// without a copy in the agent: "remote" (clients on other hosts; one on this host gets them copied
        /// through a buffer, which costs it less to receive), "always" (alias "true") or "never" (alias
        /// "false": bodies from memory maps as under TLS, for file systems whose sendfile misbehaves).
        #[arg(long, value_enum, default_value_t = http::sendfile::SendfileMode::Remote, value_name = "WHEN")]
        sendfile: http::sendfile::SendfileMode,
        /// A service beside the agent that /readyz probes and reports, as name=http://host:port/path (2xx is
        /// ready), e.g. ironic=http://127.0.0.1:6385/, or https://. Repeatable.
        #[arg(long = "ready-check", value_parser = foothold_agent::neighbors::parse)]
        ready_checks: Vec<foothold_agent::neighbors::Check>,
        /// PEM certificates that https:// ready checks are verified against (and no others).
        #[arg(long, value_name = "FILE")]
        ready_check_ca: Option<PathBuf>,
        #[command(flatten)]
        limits: LimitArgs,
        #[command(flatten)]
        kube: Box<controllers::cli::KubeArgs>,
        /// YAML file of these flags by their long names (`max-uploads: 64`, `certificate: [a=/x, b=/y]`,
        /// `no-controllers: true`). A flag given on the command line, or by its FOOTHOLD_* variable (shown with
        /// each flag), wins over the file. Default: /etc/foothold/agent.yaml when it exists.
        #[arg(long, env = "FOOTHOLD_CONFIG", value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Print the completion script of this command for a shell, e.g. `source <(foothold-agent completion bash)`.
    Completion { shell: foothold_names::cli::Shell },
    /// Write the man pages of this command and each subcommand (foothold-agent-serve.1, ...) into a directory.
    Man {
        dir: PathBuf,
        /// The reference as Markdown instead: every command (foothold-agent.md), /metrics, the REST API and the
        /// CRDs (foothold-agent-metrics.md, -rest.md, -crds.md); docs/reference/ holds them.
        #[arg(long)]
        markdown: bool,
    },
    /// Import an OCI image layout directory (skopeo `oci:`, buildah, foothold-build) into the data directory.
    Import {
        /// The OCI image layout directory (with oci-layout and index.json).
        layout: PathBuf,
        #[command(flatten)]
        data: DataArg,
        /// Repository for entries whose ref.name is a bare tag (skopeo writes `oci:DIR:TAG` that way).
        #[arg(long)]
        repo: Option<String>,
        /// Keep the platforms of a multi-platform index that the layout carries; the index is kept whole, and
        /// its other platforms answer MANIFEST_UNKNOWN (default: every listed manifest must be present).
        #[arg(long)]
        present_platforms: bool,
    },
    /// Record a file as a completed BPA image record, served at /files/<owner>/<cluster>/<kind>/<name> (the image
    /// builder bakes files into the data partition this way).
    AddFile {
        file: PathBuf,
        #[command(flatten)]
        data: DataArg,
        #[arg(long)]
        owner: String,
        #[arg(long)]
        cluster: String,
        /// binary_images or os_images.
        #[arg(long)]
        kind: String,
        #[arg(long)]
        name: String,
        /// Expected hex sha256 of the content.
        #[arg(long)]
        sha256: Option<String>,
    },
    /// Re-hash every blob and check every reference; exits non-zero on any problem.
    Fsck {
        #[command(flatten)]
        data: DataArg,
        #[command(flatten)]
        output: foothold_names::cli::OutputArg,
    },
    /// Print the CustomResourceDefinitions the agent's reconcilers serve (Provisioning, Software, SIPCluster,
    /// Vino, IPPool) as YAML, for `kubectl apply -f -`. Metal3 installs BareMetalHost's.
    Crds,
    /// Print (or write) the containerd or k3s configuration that makes a node pull through this agent.
    MirrorConfig(mirror_config::cli::Args),
    /// Print (or write) the deb822 apt source for this agent's signed package repository, its key inline:
    /// `/etc/apt/sources.list.d/foothold.sources` on a node. The key is the data directory's (made at the first
    /// `serve`, or here when there is none yet).
    AptSource {
        /// The agent's URL as compute nodes reach it, e.g. http://10.0.0.1:5000.
        #[arg(long)]
        endpoint: String,
        #[command(flatten)]
        data: DataArg,
        /// Write the entry to this file instead of printing it.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Make the site CA if there is none, and issue the agent's serving certificate from it when it is due:
    /// missing, not the CA's, for other names, or past two-thirds of its life. Files in --dir: ca.pem,
    /// ca-key.pem, cert.pem (the certificate, then the CA), key.pem. A serving agent reloads the new pair by
    /// itself. The appliance runs it at every boot and daily (foothold-pki.service, foothold-pki.timer).
    Pki {
        /// The directory of the four files.
        #[arg(long, default_value = "/etc/foothold/tls")]
        dir: PathBuf,
        /// Where the serving certificate (then the CA) goes instead of DIR/cert.pem: another service's, such as
        /// Ironic's, issued by the same CA.
        #[arg(long, requires = "key")]
        cert: Option<PathBuf>,
        /// Where its key goes instead of DIR/key.pem.
        #[arg(long, requires = "cert")]
        key: Option<PathBuf>,
        /// A DNS name or IP address the certificate names; the first is its common name. Repeatable.
        #[arg(long = "name", required = true)]
        names: Vec<String>,
        /// More names, as an OpenSSL subjectAltName list (DNS:a,IP:10.0.0.1), e.g. /etc/foothold/tls-names.
        /// A missing file adds none.
        #[arg(long)]
        names_file: Option<PathBuf>,
        /// How long a new certificate is valid: <n>d, h, m or s, at most 397d.
        #[arg(long, default_value = "397d", value_parser = foothold_agent::pki::parse_lifetime)]
        lifetime: std::time::Duration,
        /// The site CA's key (PEM, PKCS#8), when DIR has the CA's certificate without it: a CA made before the
        /// appliance, whose image carries only the certificate. Checked against DIR/ca.pem and kept as
        /// DIR/ca-key.pem (0600); ignored when that file exists.
        #[arg(long, value_name = "FILE")]
        ca_key: Option<PathBuf>,
    },
    /// Make the site SSH CA if there is none (DIR/ca, 0600, and DIR/ca.pub) and print its public key: what the
    /// installer holds compute nodes' host keys to (serve --ssh-host-ca). The appliance runs it at every boot
    /// (foothold-pki.service); it never replaces the CA.
    SshCa {
        #[arg(long, default_value = "/etc/foothold/ssh-ca")]
        dir: PathBuf,
    },
    /// A compute node's SSH host key and its certificate from the site SSH CA (see ssh-ca), printed as the
    /// `#cloud-config` lines that install them on the node at its first boot (cloud-init's ssh_keys; put them in
    /// the BareMetalHost's userData beside your own), or, with --public-key, the certificate of that host key.
    /// The installer refuses a host that does not show such a certificate for its inventory name or address.
    SshHostKey {
        /// The site SSH CA's directory (made if missing).
        #[arg(long, default_value = "/etc/foothold/ssh-ca")]
        ca_dir: PathBuf,
        /// A name or address the installer reaches the node by (the BPA's inventory uses the addresses
        /// inspection found). Repeatable; the first is the certificate's key id.
        #[arg(long = "principal", required = true)]
        principals: Vec<String>,
        /// Certify this host public key (OpenSSH one-line form) instead of making a new one; prints the
        /// certificate, for the host's HostCertificate.
        #[arg(long, value_name = "FILE")]
        public_key: Option<PathBuf>,
        /// How long the certificate is valid: <n>d, h, m or s, at most 397d.
        #[arg(long, default_value = "397d", value_parser = foothold_agent::pki::parse_lifetime)]
        lifetime: std::time::Duration,
    },
    /// Named credentials with scopes (admin; write to repositories and BPA owners; read) in the file a serving
    /// agent follows (serve --credentials), and whether reads need one.
    Credentials(foothold_agent::auth::cli::CredentialsArgs),
    /// The node side of ViNO (the `vino-builder` container of a Vino's DaemonSet): keep libvirt's networks,
    /// volumes and domains equal to this node's VM plan.
    VinoBuilder(Box<VinoBuilderArgs>),
    /// Install a Software's packages on its cluster's hosts over SSH (what the BPA's Software Job runs): each
    /// host downloads its packages from the agent, checks their sha256 and installs them (Debian packages
    /// through apt, anything else into /usr/local/bin), skipping what is already there. One line per host and
    /// package; exit status 1 if any failed.
    InstallSoftware(installer::cli::SoftwareArgs),
    /// Install a Kubernetes cluster on a Provisioning's hosts over SSH with kubeadm (what the BPA's installer
    /// Job runs), from the appliance alone: the release's binaries from the agent's files, its images through
    /// the agent's mirror. Writes the admin kubeconfig into KUBECONFIG_SECRET (or --kubeconfig-out). Re-running
    /// it converges; a failure names the host, the step and the output.
    InstallCluster(installer::cli::ClusterArgs),
    /// The installer image's entrypoint: the task a BPA Job asks for by INSTALLER_TASK (unset or `cluster`:
    /// install-cluster; `software`: install-software), every argument from the Job's environment.
    Install,
}

#[derive(clap::Args)]
struct VinoBuilderArgs {
    /// Kubeconfig (default: KUBECONFIG, ~/.kube/config, then the in-cluster service account).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// This node's name.
    #[arg(long, env = "NODE_NAME")]
    node: String,
    /// The Vino's namespace.
    #[arg(long, env = "VINO_NAMESPACE")]
    namespace: String,
    /// The Vino's name.
    #[arg(long, env = "VINO_NAME")]
    vino: String,
    /// libvirt connection URI.
    #[arg(long, env = "LIBVIRT_URI", default_value = "qemu:///system")]
    connect: String,
    /// Storage pool for the VMs' disks (created as a directory pool when missing).
    #[arg(long, default_value = "vino")]
    pool: String,
    /// The pool's directory.
    #[arg(long, default_value = "/var/lib/libvirt/vino-images")]
    pool_dir: String,
    /// libvirt domain type: kvm, or qemu (emulation) on hosts without KVM.
    #[arg(long, default_value = "kvm")]
    domain_type: String,
    /// The host CPUs VMs may use before cpuExclude (default: /sys/devices/system/cpu/online).
    #[arg(long)]
    host_cpus: Option<String>,
    /// Address the VMs' VNC servers listen on.
    #[arg(long, default_value = "127.0.0.1")]
    vnc_listen: String,
    /// Directory for the rendered XML handed to virsh.
    #[arg(long, default_value = "/var/lib/vino-builder")]
    work_dir: PathBuf,
    /// Seconds between re-applying an unchanged plan (repairs drift in libvirt).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    resync_seconds: u64,
}

/// `serve`'s configuration file, read when it exists and --config names no other.
const CONFIG: &str = "/etc/foothold/agent.yaml";

/// The command line: `serve`'s flags each also a FOOTHOLD_* variable.
fn command() -> clap::Command {
    Cli::command().mut_subcommand("serve", foothold_agent::cli::with_env)
}

fn main() -> ExitCode {
    // One TLS provider for the whole process (served TLS and the kube client), chosen here
    // rather than left to whichever rustls backends the dependency graph happens to enable.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = std::env::args_os().collect();
    let cli = match foothold_agent::cli::matches(command(), args, std::path::Path::new(CONFIG)) {
        Ok(m) => Cli::from_arg_matches(&m).unwrap_or_else(|e| e.exit()),
        Err(e) => {
            eprintln!("foothold-agent: {e}");
            return ExitCode::from(2);
        }
    };
    foothold_agent::cli::init_logging(cli.log_format);
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("foothold-agent: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::VinoBuilder(a) => {
            let cpus_text = match &a.host_cpus {
                Some(c) => c.clone(),
                None => std::fs::read_to_string("/sys/devices/system/cpu/online")
                    .context("reading /sys/devices/system/cpu/online (or give --host-cpus)")?,
            };
            let cpus = vino_builder::xml::parse_cpu_list(cpus_text.trim())
                .map_err(|e| anyhow::anyhow!("--host-cpus: {e}"))?;
            let settings = vino_builder::Settings {
                kubeconfig: a.kubeconfig,
                namespace: a.namespace,
                vino: a.vino,
                node: a.node,
                options: vino_builder::Options {
                    uri: a.connect,
                    pool: a.pool,
                    pool_dir: a.pool_dir,
                    domain_type: a.domain_type,
                    cpus,
                    vnc_listen: a.vnc_listen,
                    work_dir: a.work_dir,
                    command_timeout: std::time::Duration::from_secs(120),
                },
                resync: std::time::Duration::from_secs(a.resync_seconds),
            };
            vino_builder::run_blocking(settings)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::InstallSoftware(a) => installer::cli::install_software(a),
        Command::InstallCluster(a) => installer::cli::install_cluster(a),
        Command::Install => installer::cli::install_from_env(),
        Command::AptSource {
            endpoint,
            data,
            out,
        } => {
            let endpoint = mirror_config::check_endpoint(&endpoint)?;
            let dir = data.dir();
            let key_file = foothold_agent::apt::key::public_path(&dir.join("apt"));
            let key = match std::fs::read_to_string(&key_file) {
                Ok(key) => key,
                // No key yet: make it, holding the data directory's lock as `serve` would.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    let _store = foothold_agent::store::Store::open(&dir)?;
                    foothold_agent::apt::Repo::open(&dir)?
                        .public_key()
                        .to_owned()
                }
                Err(e) => return Err(anyhow::anyhow!("{}: {e}", key_file.display())),
            };
            let entry = foothold_agent::apt::sources_entry(endpoint, &key);
            match out {
                Some(path) => foothold_agent::apt::write_file(&path, entry.as_bytes(), 0o644)
                    .with_context(|| format!("writing {}", path.display()))?,
                None => print!("{entry}"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Pki {
            dir,
            cert,
            key,
            mut names,
            names_file,
            lifetime,
            ca_key,
        } => {
            if let Some(file) = names_file {
                match std::fs::read_to_string(&file) {
                    Ok(text) => names.extend(
                        foothold_agent::pki::parse_san_list(&text)
                            .with_context(|| format!("{}", file.display()))?,
                    ),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(anyhow::anyhow!("{}: {e}", file.display())),
                }
            }
            let mut seen = std::collections::HashSet::new();
            names.retain(|n| seen.insert(n.clone()));
            let mut paths = foothold_agent::pki::Paths::new(&dir);
            if let Some((cert, key)) = cert.zip(key) {
                (paths.cert, paths.key) = (cert, key);
            }
            for d in [Some(dir.as_path()), paths.cert.parent(), paths.key.parent()]
                .into_iter()
                .flatten()
                .filter(|d| !d.as_os_str().is_empty())
            {
                std::fs::create_dir_all(d).with_context(|| format!("making {}", d.display()))?;
            }
            if let Some(file) = ca_key {
                if foothold_agent::pki::import_ca_key(&paths, &file)? {
                    println!(
                        "site CA {}: its key taken from {}",
                        paths.ca.display(),
                        file.display()
                    );
                }
            }
            let report = foothold_agent::pki::ensure(
                &paths,
                &names,
                lifetime,
                std::time::SystemTime::now(),
            )?;
            let when = |t: std::time::SystemTime| httpdate::fmt_http_date(t);
            println!(
                "site CA {}: {}, expires {}",
                paths.ca.display(),
                if report.ca_made { "made" } else { "kept" },
                when(report.ca_expires)
            );
            let what = match report.issued {
                Some(reason) => format!("issued ({reason})"),
                None => "kept".into(),
            };
            println!(
                "serving certificate {}: {what}, expires {}, renewed after {}",
                paths.cert.display(),
                when(report.expires),
                when(report.renew_after)
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::SshCa { dir } => {
            let (ca, made) = foothold_agent::ssh_ca::ensure(&dir)?;
            if made {
                eprintln!("foothold-agent: made the site SSH CA in {}", dir.display());
            }
            println!("{}", ca.public_key().to_openssh()?);
            Ok(ExitCode::SUCCESS)
        }
        Command::SshHostKey {
            ca_dir,
            principals,
            public_key,
            lifetime,
        } => {
            use foothold_agent::ssh_ca;
            let (ca, _) = ssh_ca::ensure(&ca_dir)?;
            let now = std::time::SystemTime::now();
            match public_key {
                Some(path) => {
                    let text = std::fs::read_to_string(&path)
                        .with_context(|| format!("reading {}", path.display()))?;
                    let host = russh::keys::PublicKey::from_openssh(text.trim()).map_err(|e| {
                        anyhow::anyhow!("{}: not an OpenSSH public key: {e}", path.display())
                    })?;
                    let cert = ssh_ca::certify(&ca, host.key_data(), &principals, lifetime, now)?;
                    println!("{}", cert.to_openssh()?);
                }
                None => {
                    let key = ssh_ca::new_key(&principals[0])?;
                    let cert = ssh_ca::certify(
                        &ca,
                        key.public_key().key_data(),
                        &principals,
                        lifetime,
                        now,
                    )?;
                    print!("{}", ssh_ca::cloud_config(&key, &cert)?);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Credentials(args) => {
            foothold_agent::auth::cli::run(args, &mut std::io::stdout().lock())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Completion { shell } => {
            foothold_names::cli::completion(command(), shell, &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Man { dir, markdown } => {
            for page in foothold_agent::cli::write_man_pages(command(), &dir, markdown)
                .with_context(|| format!("writing man pages into {}", dir.display()))?
            {
                println!("{}", page.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Crds => {
            print!("{}", foothold_agent::crd::yaml());
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve {
            listen,
            data,
            auth,
            tls_cert,
            tls_key,
            certificates,
            max_image_size,
            sendfile,
            ready_checks,
            ready_check_ca,
            limits,
            kube,
            config: _,
        } => {
            // clap holds the pair together on the command line and in the environment, not in a configuration
            // file's defaults: one alone would serve plain HTTP.
            if tls_cert.is_some() != tls_key.is_some() {
                anyhow::bail!("--tls-cert and --tls-key go together: one is set without the other");
            }
            let ready_checks =
                foothold_agent::neighbors::Neighbors::new(ready_checks, ready_check_ca.as_deref())?;
            let cfg = http::ServeConfig {
                listen,
                max_image_length: max_image_size,
                sendfile,
                data: data.dir(),
                auth: auth.sources(),
                controllers: kube.settings(listen, tls_cert.is_some())?,
                tls: tls_cert.zip(tls_key),
                certificates,
                ready_checks,
                upload_ttl: std::time::Duration::from_secs(limits.upload_ttl.max(1)),
                client_limits: limits.into(),
            };
            http::serve_blocking(cfg)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Import {
            layout,
            data,
            repo,
            present_platforms,
        } => {
            let dir = data.dir();
            let store = store::Store::open(&dir)
                .with_context(|| format!("opening the data directory {}", dir.display()))?;
            for i in import::import_layout(
                &store,
                &layout,
                repo.as_deref(),
                if present_platforms {
                    import::Children::Present
                } else {
                    import::Children::All
                },
            )? {
                println!(
                    "{}{} {}",
                    i.repo,
                    i.tag.map(|t| format!(":{t}")).unwrap_or_default(),
                    i.digest
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::AddFile {
            file,
            data,
            owner,
            cluster,
            kind,
            name,
            sha256,
        } => {
            let dir = data.dir();
            let store = store::Store::open(&dir)
                .with_context(|| format!("opening the data directory {}", dir.display()))?;
            let digest = import::add_file(
                &store,
                &file,
                (&owner, &cluster, &kind, &name),
                sha256.as_deref(),
            )?;
            println!("/files/{owner}/{cluster}/{kind}/{name} {digest}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Fsck { data, output } => {
            let dir = data.dir();
            let report = fsck::check(&dir)?;
            output.write(&mut std::io::stdout(), &report, |out| {
                for p in &report.problems {
                    writeln!(out, "problem: {p}")?;
                }
                writeln!(
                    out,
                    "fsck {}: {} blobs ({} bytes) hashed, {} unreferenced, {} problems",
                    dir.display(),
                    report.blobs_checked,
                    report.bytes_hashed,
                    report.unreferenced,
                    report.problems.len()
                )
            })?;
            Ok(if report.problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Command::MirrorConfig(args) => {
            mirror_config::cli::run(args)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

//! `foothold-agent mirror-config`: the files written (or printed), each whole.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Target {
    /// `certs.d/<registry>/hosts.toml` files for containerd's config_path.
    Containerd,
    /// `registries.yaml` for k3s (and rke2).
    K3s,
}

#[derive(clap::Args)]
pub struct Args {
    /// Which configuration format.
    #[arg(long = "for", value_enum)]
    target: Target,
    /// The agent's URL as compute nodes reach it, e.g. http://10.0.0.1:5000.
    #[arg(long)]
    endpoint: String,
    /// Upstream registries to mirror, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = super::DEFAULT_REGISTRIES.iter().map(|s| s.to_string()).collect::<Vec<_>>())]
    registries: Vec<String>,
    /// More registries, added to --registries (the image builder adds those of the image's containers).
    #[arg(long, value_delimiter = ',')]
    extra_registries: Vec<String>,
    /// CA certificate path on the node, for an https endpoint with a site CA.
    #[arg(long)]
    ca: Option<String>,
    /// A file holding a read credential's token, for sites whose reads need one (`foothold-agent credentials
    /// reads credential`): the files carry it, and are written mode 0600.
    #[arg(long, value_name = "FILE")]
    read_token_file: Option<PathBuf>,
    /// Write the files under this directory (containerd: <dir>/<registry>/hosts.toml; k3s:
    /// <dir>/registries.yaml) instead of printing them.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let Args {
        target,
        endpoint,
        mut registries,
        extra_registries,
        ca,
        read_token_file,
        out,
    } = args;
    let endpoint = super::check_endpoint(&endpoint)?;
    for r in extra_registries {
        if !r.is_empty() && !registries.contains(&r) {
            registries.push(r);
        }
    }
    for r in &registries {
        super::check_registry(r)?;
    }
    let token = read_token_file
        .as_deref()
        .map(crate::auth::read_token)
        .transpose()?;
    let node = super::Node {
        ca: ca.as_deref(),
        token: token.as_deref(),
    };
    let files: Vec<(PathBuf, String)> = match target {
        Target::Containerd => registries
            .iter()
            .map(|r| {
                (
                    Path::new(r).join("hosts.toml"),
                    super::containerd_hosts_toml(endpoint, r, node),
                )
            })
            .collect(),
        Target::K3s => vec![(
            PathBuf::from("registries.yaml"),
            super::k3s_registries_yaml(endpoint, &registries, node),
        )],
    };
    // A file with a credential in it is readable by root only.
    let mode = if token.is_some() { 0o600 } else { 0o644 };
    for (rel, text) in files {
        match &out {
            None => print!("# ==> {} <==\n{text}\n", rel.display()),
            Some(dir) => {
                let path = dir.join(&rel);
                let parent = path.parent().expect("joined path has a parent");
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("creating {}", parent.display()))?;
                crate::apt::durable::write_file(&path, text.as_bytes(), mode)
                    .with_context(|| format!("writing {}", path.display()))?;
                println!("wrote {}", path.display());
            }
        }
    }
    Ok(())
}

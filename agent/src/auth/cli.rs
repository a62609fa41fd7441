//! The command line of authorisation: `serve`'s flags and `foothold-agent credentials`.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::file::{CredentialsFile, Reads, ScopeName};
use super::Sources;

/// Where the agent's credentials are, by default.
pub const DEFAULT_FILE: &str = "/etc/foothold/credentials.yaml";

/// `serve`'s authorisation flags.
#[derive(clap::Args, Debug, Default)]
pub struct AuthArgs {
    /// File holding the token of the admin credential (named `admin`): Bearer, or the password of Basic auth.
    /// Without it and without --credentials, writes are open: use only on a trusted network.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// The credentials file `foothold-agent credentials` manages: named credentials with scopes (admin, write
    /// to repositories and owners, read) and whether reads need one. Loaded again when it changes; a missing
    /// file is no credentials yet.
    #[arg(long, value_name = "FILE")]
    pub credentials: Option<PathBuf>,
    /// Repository patterns only admin credentials write (one a line; `name` or `prefix/`), e.g. the images the
    /// appliance runs itself.
    #[arg(long, value_name = "FILE")]
    pub protected_repositories: Option<PathBuf>,
    /// Reads (/v2, /files, /apt, BPA records) need a credential whatever the credentials file says.
    #[arg(long)]
    pub files_require_token: bool,
}

impl AuthArgs {
    pub fn sources(self) -> Sources {
        Sources {
            token_file: self.token_file,
            credentials_file: self.credentials,
            protected_file: self.protected_repositories,
            reads_need_credential: self.files_require_token,
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct CredentialsArgs {
    /// The credentials file (made, mode 0600, by the first `add`).
    #[arg(long, default_value = DEFAULT_FILE)]
    pub file: PathBuf,
    #[command(subcommand)]
    pub command: CredentialsCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum CredentialsCommand {
    /// Make a credential with a new random token, printed once on stdout (or written to --token-out); the file
    /// keeps only its SHA-256. A serving agent takes it within seconds.
    Add {
        /// Its name, in logs, errors and foothold_writes_total{credential}.
        name: String,
        #[arg(long, value_enum)]
        scope: ScopeName,
        /// A repository a write credential pushes to: a name, or a prefix ending in / (everything under it).
        /// Repeatable.
        #[arg(long = "repository", value_name = "PATTERN")]
        repositories: Vec<String>,
        /// A BPA owner whose image records a write credential creates and changes. Repeatable.
        #[arg(long = "owner")]
        owners: Vec<String>,
        /// Write the token to this new file (mode 0600) instead of stdout.
        #[arg(long, value_name = "FILE")]
        token_out: Option<PathBuf>,
    },
    /// Remove a credential: its token stops working within seconds.
    Remove { name: String },
    /// The credentials: name, scope, what they write, when made (never their tokens' hashes).
    List {
        #[command(flatten)]
        output: foothold_names::cli::OutputArg,
    },
    /// Whether reads (/v2, /files, /apt, BPA records) need a credential.
    Reads {
        #[arg(value_enum)]
        reads: Reads,
    },
}

/// `credentials list`'s report.
#[derive(serde::Serialize)]
struct Listed<'a> {
    reads: &'a str,
    credentials: Vec<ListedEntry<'a>>,
}

#[derive(serde::Serialize)]
struct ListedEntry<'a> {
    name: &'a str,
    scope: &'a str,
    repositories: &'a [String],
    owners: &'a [String],
    created: Option<&'a str>,
}

/// Runs a `credentials` command; what it prints goes to `out`.
pub fn run(args: CredentialsArgs, out: &mut dyn std::io::Write) -> anyhow::Result<()> {
    let path = &args.file;
    let _lock = lock(path)?;
    let mut file = CredentialsFile::load_or_empty(path)?;
    let fail = |m: String| anyhow::anyhow!("{}: {m}", path.display());
    match args.command {
        CredentialsCommand::List { output } => {
            let listed = Listed {
                reads: reads_name(file.reads),
                credentials: file
                    .credentials
                    .iter()
                    .map(|e| ListedEntry {
                        name: &e.name,
                        scope: e.scope.as_str(),
                        repositories: &e.repositories,
                        owners: &e.owners,
                        created: e.created.as_deref(),
                    })
                    .collect(),
            };
            output.write(out, &listed, |out| {
                writeln!(out, "reads: {}", listed.reads)?;
                for e in &listed.credentials {
                    let writes = [e.repositories, e.owners]
                        .iter()
                        .zip(["repositories", "owners"])
                        .filter(|(l, _)| !l.is_empty())
                        .map(|(l, what)| format!("{what} {}", l.join(",")))
                        .collect::<Vec<_>>()
                        .join("; ");
                    writeln!(
                        out,
                        "{}\t{}\t{}\t{}",
                        e.name,
                        e.scope,
                        if writes.is_empty() { "-" } else { &writes },
                        e.created.unwrap_or("-")
                    )?;
                }
                Ok(())
            })?;
            return Ok(());
        }
        CredentialsCommand::Add {
            name,
            scope,
            repositories,
            owners,
            token_out,
        } => {
            let token = file
                .add(
                    &name,
                    scope,
                    repositories,
                    owners,
                    std::time::SystemTime::now(),
                )
                .map_err(fail)?;
            // The token is out before the file names it: a credential is never in force with its token lost.
            match &token_out {
                Some(t) => write_new_secret(t, &token)?,
                None => writeln!(out, "{token}")?,
            }
            file.save(path)?;
            eprintln!("credential {name} added to {}", path.display());
        }
        CredentialsCommand::Remove { name } => {
            file.remove(&name).map_err(fail)?;
            file.save(path)?;
            eprintln!("credential {name} removed from {}", path.display());
        }
        CredentialsCommand::Reads { reads } => {
            file.reads = reads;
            file.save(path)?;
            eprintln!("reads: {} ({})", reads_name(reads), path.display());
        }
    }
    Ok(())
}

fn reads_name(r: Reads) -> &'static str {
    match r {
        Reads::Anonymous => "anonymous",
        Reads::Credential => "credential",
    }
}

/// Two `credentials` commands at once would each write the file they read: the second waits for the first.
fn lock(path: &Path) -> anyhow::Result<std::fs::File> {
    let lock_path = path.with_extension("lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("opening the lock {}", lock_path.display()))?;
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
        .with_context(|| format!("locking {}", lock_path.display()))?;
    Ok(f)
}

/// A new file holding `secret`, mode 0600 from the start; an existing file is not replaced.
fn write_new_secret(path: &Path, secret: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating the token file {}", path.display()))?;
    writeln!(f, "{secret}")
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing the token file {}", path.display()))?;
    crate::store::blobs::sync_dir(path.parent().unwrap_or(Path::new(".")))
        .with_context(|| format!("syncing the directory of {}", path.display()))
}

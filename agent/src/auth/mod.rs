//! Who may do what. A request presents a token, as a Bearer token or as the password of HTTP Basic auth (what
//! docker/podman/skopeo `login` send; the user name is not looked at: the token names its credential). The
//! token is one credential's, and the credential's scope says what the request may do:
//!
//! - `admin`: everything.
//! - `write`: push and delete in the repositories its patterns match (`apps/`: everything under `apps/`;
//!   `team/app`: that one), create, append and delete BPA image records of its owners, and start tus uploads
//!   (which only become a record through one of its owners). Never in a protected repository: the images the
//!   appliance itself runs (the installer, pause, CoreDNS, Metal3's) are written by admin credentials only.
//! - `read`: read, where reads need a credential.
//!
//! Reads (`/v2`, `/files`, `/apt`, BPA records) are anonymous unless the credentials file says
//! `reads: credential`. Credentials come from `--token-file` (one admin credential, named `admin`) and from the
//! credentials file (`file`), which is looked at every few seconds and loaded again when it changes. That file
//! holds each token's SHA-256, never the token: a presented token is hashed and compared with every
//! credential's hash, in constant time and without stopping at a match.

pub mod cli;
pub mod file;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use axum::http::{header, HeaderMap};
use base64::Engine as _;
use sha2::{Digest as _, Sha256};

pub use file::{CredentialsFile, Entry, FileError, Reads, ScopeName};

/// What a credential may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    Admin,
    /// Repository patterns (a name, or a prefix ending in `/`) and BPA owners.
    Write {
        repositories: Vec<String>,
        owners: Vec<String>,
    },
    Read,
}

/// A named credential: its scope and its token's SHA-256.
#[derive(Debug)]
pub struct Credential {
    pub name: String,
    pub scope: Scope,
    sha256: [u8; 32],
}

impl Credential {
    pub fn new(name: impl Into<String>, scope: Scope, token: &str) -> Self {
        Credential {
            name: name.into(),
            scope,
            sha256: Sha256::digest(token.as_bytes()).into(),
        }
    }
}

/// What is in force: the credentials, whether reads need one, which repositories only admins write.
#[derive(Debug, Default)]
pub struct Policy {
    pub reads: Reads,
    pub credentials: Vec<Arc<Credential>>,
    pub protected: Vec<String>,
}

impl Policy {
    /// The credential whose token this is. Every credential's hash is compared, whether one matched or not.
    fn find(&self, token: &str) -> Option<Arc<Credential>> {
        let presented: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for c in &self.credentials {
            if constant_time_eq(&presented, &c.sha256) {
                found = Some(c.clone());
            }
        }
        found
    }

    fn is_protected(&self, repo: &str) -> bool {
        self.protected.iter().any(|p| pattern_matches(p, repo))
    }
}

/// A repository pattern: a name matches itself; a pattern ending in `/` matches every name under it.
pub fn pattern_matches(pattern: &str, repo: &str) -> bool {
    if pattern.ends_with('/') {
        repo.starts_with(pattern)
    } else {
        repo == pattern
    }
}

/// Where the policy comes from; [`Auth::configure`] reads them.
#[derive(Debug, Default, Clone)]
pub struct Sources {
    /// A file holding one token: the credential `admin`.
    pub token_file: Option<PathBuf>,
    /// The credentials file (see `file`); absent is no credentials yet, and is looked for again.
    pub credentials_file: Option<PathBuf>,
    /// Repository patterns, one a line (`#` comments): written only with an admin credential.
    pub protected_file: Option<PathBuf>,
    /// Reads need a credential whatever the credentials file says (`--files-require-token`).
    pub reads_need_credential: bool,
}

/// The request's authorisation: cheap to clone, shared by every request; [`Auth::none`] lets everything through.
#[derive(Clone, Default)]
pub struct Auth {
    shared: Option<Arc<Shared>>,
}

struct Shared {
    /// The parts that never change: `--token-file`'s credential, the protected patterns, forced reads.
    token: Option<Arc<Credential>>,
    protected: Vec<String>,
    reads_need_credential: bool,
    credentials_file: Option<PathBuf>,
    policy: RwLock<Arc<Policy>>,
}

impl Auth {
    /// No authorisation: every request may do everything (a trusted network only).
    pub fn none() -> Self {
        Auth { shared: None }
    }

    /// One admin credential, named `admin`.
    pub fn from_token(token: impl AsRef<str>) -> Self {
        Auth::fixed(
            vec![Credential::new("admin", Scope::Admin, token.as_ref())],
            Reads::Anonymous,
            Vec::new(),
        )
    }

    /// A policy that no file changes: these credentials, reads, protected repository patterns.
    pub fn fixed(credentials: Vec<Credential>, reads: Reads, protected: Vec<String>) -> Self {
        let shared = Shared {
            token: None,
            protected: protected.clone(),
            reads_need_credential: reads == Reads::Credential,
            credentials_file: None,
            policy: RwLock::new(Arc::new(Policy {
                reads,
                credentials: credentials.into_iter().map(Arc::new).collect(),
                protected,
            })),
        };
        Auth {
            shared: Some(Arc::new(shared)),
        }
    }

    /// The policy of `sources`; none at all is [`Auth::none`].
    pub fn configure(sources: &Sources) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        if sources.token_file.is_none() && sources.credentials_file.is_none() {
            anyhow::ensure!(
                sources.protected_file.is_none() && !sources.reads_need_credential,
                "protected repositories and credentials for reads need --token-file or --credentials"
            );
            return Ok(Auth::none());
        }
        let token = match &sources.token_file {
            None => None,
            Some(path) => Some(Arc::new(Credential::new(
                "admin",
                Scope::Admin,
                &read_token(path)?,
            ))),
        };
        let protected = match &sources.protected_file {
            None => Vec::new(),
            Some(path) => {
                let text = std::fs::read_to_string(path).with_context(|| {
                    format!("reading the protected repositories {}", path.display())
                })?;
                file::parse_protected(&text)
                    .with_context(|| format!("in the protected repositories {}", path.display()))?
            }
        };
        let shared = Shared {
            token,
            protected,
            reads_need_credential: sources.reads_need_credential,
            credentials_file: sources.credentials_file.clone(),
            policy: RwLock::default(),
        };
        let loaded = match &shared.credentials_file {
            Some(path) => CredentialsFile::load_or_empty(path)?,
            None => CredentialsFile::default(),
        };
        shared.install(loaded);
        Ok(Auth {
            shared: Some(Arc::new(shared)),
        })
    }

    /// The credentials file, if the policy has one (the watcher follows it).
    pub fn credentials_file(&self) -> Option<&Path> {
        self.shared.as_ref()?.credentials_file.as_deref()
    }

    /// Reads the credentials file again and puts it in force; on an error the policy stays as it was.
    pub fn reload(&self) -> Result<(), FileError> {
        let Some(shared) = &self.shared else {
            return Ok(());
        };
        let Some(path) = &shared.credentials_file else {
            return Ok(());
        };
        shared.install(CredentialsFile::load_or_empty(path)?);
        Ok(())
    }

    /// The credentials in force, by name and scope (for `/readyz` with an admin credential and the log).
    pub fn policy(&self) -> Arc<Policy> {
        match &self.shared {
            Some(s) => s.policy.read().expect("not poisoned").clone(),
            None => Arc::default(),
        }
    }

    /// Who this request is.
    pub fn identify(&self, headers: &HeaderMap) -> Caller {
        let Some(shared) = &self.shared else {
            return Caller {
                who: Who::Open,
                policy: Arc::default(),
            };
        };
        let policy = shared.policy.read().expect("not poisoned").clone();
        let who = match presented(headers) {
            Presented::Nothing => Who::Anonymous,
            Presented::Malformed => Who::Unknown,
            // An empty one is what clients send after a registry's challenge when they have none
            // (containers/image sends `Basic Og==`): anonymous, as if nothing were presented.
            Presented::Token(t) if t.is_empty() => Who::Anonymous,
            Presented::Token(t) => policy.find(&t).map_or(Who::Unknown, Who::Known),
        };
        Caller { who, policy }
    }
}

/// An entry of the credentials file, checked when it was parsed, as the credential it describes.
fn credential_of(e: &Entry) -> Credential {
    let mut sha256 = [0u8; 32];
    hex::decode_to_slice(&e.sha256, &mut sha256).expect("checked when parsed");
    let scope = match e.scope {
        ScopeName::Admin => Scope::Admin,
        ScopeName::Read => Scope::Read,
        ScopeName::Write => Scope::Write {
            repositories: e.repositories.clone(),
            owners: e.owners.clone(),
        },
    };
    Credential {
        name: e.name.clone(),
        scope,
        sha256,
    }
}

impl Shared {
    fn install(&self, loaded: CredentialsFile) {
        let mut credentials: Vec<Arc<Credential>> = self.token.iter().cloned().collect();
        credentials.extend(
            loaded
                .credentials
                .iter()
                .map(|e| Arc::new(credential_of(e))),
        );
        let reads = if self.reads_need_credential {
            Reads::Credential
        } else {
            loaded.reads
        };
        let policy = Policy {
            reads,
            credentials,
            protected: self.protected.clone(),
        };
        *self.policy.write().expect("not poisoned") = Arc::new(policy);
    }
}

/// Reads a token from `path` (surrounding whitespace trimmed); an empty file is an error, not "no auth".
pub fn read_token(path: &Path) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading token file {}", path.display()))?;
    let token = text.trim();
    anyhow::ensure!(!token.is_empty(), "token file {} is empty", path.display());
    Ok(token.to_owned())
}

enum Presented {
    Nothing,
    Malformed,
    Token(String),
}

fn presented(headers: &HeaderMap) -> Presented {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Presented::Nothing;
    };
    let Ok(value) = value.to_str() else {
        return Presented::Malformed;
    };
    if let Some(t) = value.strip_prefix("Bearer ") {
        return Presented::Token(t.trim().to_owned());
    }
    let Some(b) = value.strip_prefix("Basic ") else {
        return Presented::Malformed;
    };
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(b.trim()) else {
        return Presented::Malformed;
    };
    let Ok(text) = String::from_utf8(decoded) else {
        return Presented::Malformed;
    };
    match text.split_once(':') {
        Some((_user, password)) => Presented::Token(password.to_owned()),
        None => Presented::Malformed,
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[derive(Clone, Debug)]
enum Who {
    /// No authorisation configured.
    Open,
    Anonymous,
    /// Credentials were presented that are no credential's (or could not be read).
    Unknown,
    Known(Arc<Credential>),
}

/// One request's identity with the policy it was identified under: the handlers ask it what they may do.
#[derive(Clone, Debug)]
pub struct Caller {
    who: Who,
    policy: Arc<Policy>,
}

/// Why a request may not do what it asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// No credential, or one that is no credential's: 401, with a challenge.
    #[error("{0}")]
    Unauthenticated(String),
    /// A known credential whose scope does not cover the request: 403.
    #[error("{0}")]
    Forbidden(String),
}

impl Caller {
    /// The credential's name, for logs: `-` for anonymous requests.
    pub fn name(&self) -> &str {
        match &self.who {
            Who::Known(c) => &c.name,
            Who::Open | Who::Anonymous => "-",
            Who::Unknown => "?",
        }
    }

    /// This caller as tus uploads know it (its name, whether it is an admin).
    pub fn uploader(&self) -> Uploader<'_> {
        Uploader {
            name: self.name(),
            admin: self.is_admin(),
        }
    }

    pub fn is_admin(&self) -> bool {
        match &self.who {
            Who::Open => true,
            Who::Known(c) => c.scope == Scope::Admin,
            Who::Anonymous | Who::Unknown => false,
        }
    }

    /// Whether the request presented a credential that is one (or needs none).
    pub fn is_authenticated(&self) -> bool {
        matches!(self.who, Who::Open | Who::Known(_))
    }

    pub fn may_read(&self) -> Result<(), Denied> {
        match &self.who {
            Who::Open | Who::Known(_) => Ok(()),
            Who::Unknown => Err(unknown()),
            Who::Anonymous if self.policy.reads == Reads::Anonymous => Ok(()),
            Who::Anonymous => Err(Denied::Unauthenticated(
                "reads need a credential on this site".into(),
            )),
        }
    }

    /// A writer's name, repository patterns and owners (`None`: it writes everything), or why this request
    /// writes nothing.
    fn writer(&self) -> Result<Option<Writer<'_>>, Denied> {
        match &self.who {
            Who::Open => Ok(None),
            Who::Anonymous => Err(Denied::Unauthenticated("writes need a credential".into())),
            Who::Unknown => Err(unknown()),
            Who::Known(c) => match &c.scope {
                Scope::Admin => Ok(None),
                Scope::Write {
                    repositories,
                    owners,
                } => Ok(Some(Writer {
                    name: &c.name,
                    repositories,
                    owners,
                })),
                Scope::Read => Err(Denied::Forbidden(format!(
                    "credential {} is read-only",
                    c.name
                ))),
            },
        }
    }

    /// Push to, or delete in, repository `repo`.
    pub fn may_write_repository(&self, repo: &str) -> Result<(), Denied> {
        let Some(w) = self.writer()? else {
            return Ok(());
        };
        if self.policy.is_protected(repo) {
            return Err(Denied::Forbidden(format!(
                "repository {repo} is protected: only an admin credential writes it (credential {} is a writer)",
                w.name
            )));
        }
        if w.repositories.iter().any(|p| pattern_matches(p, repo)) {
            Ok(())
        } else {
            Err(Denied::Forbidden(format!(
                "credential {} does not write repository {repo} (it writes {})",
                w.name,
                listed(w.repositories)
            )))
        }
    }

    /// Create, append to or delete a BPA image record of `owner`.
    pub fn may_write_owner(&self, owner: &str) -> Result<(), Denied> {
        let Some(w) = self.writer()? else {
            return Ok(());
        };
        if w.owners.iter().any(|o| o == owner) {
            Ok(())
        } else {
            Err(Denied::Forbidden(format!(
                "credential {} does not write records of owner {owner} (it writes those of {})",
                w.name,
                listed(w.owners)
            )))
        }
    }

    /// Start or continue a tus upload: any writer (the upload becomes a record only through one of its owners).
    pub fn may_upload(&self) -> Result<(), Denied> {
        self.writer().map(|_| ())
    }
}

/// What a write credential writes.
struct Writer<'a> {
    name: &'a str,
    repositories: &'a [String],
    owners: &'a [String],
}

fn unknown() -> Denied {
    Denied::Unauthenticated("the credential presented is not known".into())
}

fn listed(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

/// Follows the credentials file until the process ends: loaded again when it changed; a file that does not
/// load is logged and the credentials before it stay in force.
pub async fn watch(auth: Auth) {
    let Some(path) = auth.credentials_file().map(Path::to_owned) else {
        return;
    };
    let mut seen = crate::watched::stamp(&path);
    let mut tick = tokio::time::interval(crate::watched::CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = crate::watched::stamp(&path);
        if now == seen {
            continue;
        }
        seen = now;
        match auth.reload() {
            Ok(()) => tracing::info!(
                file = %path.display(),
                credentials = auth.policy().credentials.len(),
                "credentials loaded again"
            ),
            Err(e) => tracing::warn!(
                error = %e,
                "the credentials file changed but does not load; the credentials before it stay in force"
            ),
        }
    }
}

/// A writer asking about uploads: its credential's name, and whether it is an admin's.
#[derive(Clone, Copy, Debug)]
pub struct Uploader<'a> {
    pub name: &'a str,
    pub admin: bool,
}

impl Uploader<'_> {
    /// Whether this writer may see (append to, end, bind) an upload the credential `creator` made: its own,
    /// every one for an admin, and one made before creators were recorded (None). To any other writer the
    /// upload does not exist: an id is not a credential.
    pub fn may_see(&self, creator: Option<&str>) -> bool {
        self.admin || creator.is_none_or(|c| c == self.name)
    }
}

#[cfg(test)]
mod tests;

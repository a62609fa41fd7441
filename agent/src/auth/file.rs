//! The credentials file: what `foothold-agent credentials` writes and `serve --credentials` reads, owned by the
//! agent and mode 0600. A token is shown once, when it is made; the file keeps its SHA-256 only.
//!
//! ```yaml
//! reads: anonymous        # or `credential`: /v2, /files, /apt and BPA records need one
//! credentials:
//!   - name: ci
//!     scope: write        # admin, write or read
//!     repositories: [apps/, tools/builder]
//!     owners: [site-a]
//!     sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//!     created: Fri, 27 Nov 2026 21:00:00 GMT
//! ```
//!
//! Parsing is apart from I/O: [`CredentialsFile::parse`] takes the text and names the credential, field and
//! reason of the first thing wrong; the I/O around it adds the file.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// Whether reads need a credential.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Reads {
    /// Anyone on the network may pull, download and list (compute nodes need no credential).
    #[default]
    Anonymous,
    /// Reads need a credential of any scope (nodes pull with a read credential).
    Credential,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ScopeName {
    Admin,
    Write,
    Read,
}

impl ScopeName {
    pub fn as_str(self) -> &'static str {
        match self {
            ScopeName::Admin => "admin",
            ScopeName::Write => "write",
            ScopeName::Read => "read",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub name: String,
    pub scope: ScopeName,
    /// A write credential's repository patterns: a name, or a prefix ending in `/`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repositories: Vec<String>,
    /// A write credential's BPA owners.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<String>,
    /// The token's SHA-256, in hex.
    pub sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
}

#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CredentialsFile {
    #[serde(default)]
    pub reads: Reads,
    #[serde(default)]
    pub credentials: Vec<Entry>,
}

/// A credentials file that cannot be read, parsed or written: the file and the reason.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct FileError {
    pub path: PathBuf,
    pub reason: String,
}

impl FileError {
    fn new(path: &Path, reason: impl Into<String>) -> Self {
        FileError {
            path: path.to_owned(),
            reason: reason.into(),
        }
    }
}

/// The header the file is written with.
const HEADER: &str = "# Foothold agent credentials (foothold-agent credentials add/remove/list/reads).\n\
# Each token is kept as its SHA-256 only. The agent loads this file again within seconds of a change.\n";

/// A credential's name: what logs and errors call it.
fn check_credential_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_' || b == b'.'
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a credential name (1-63 lower-case letters, digits, '.', '-' or '_', starting with a letter or digit)"
        ))
    }
}

/// A repository pattern: a repository name, or one followed by `/` (everything under it).
fn check_pattern(pattern: &str) -> Result<(), String> {
    let name = pattern.strip_suffix('/').unwrap_or(pattern);
    crate::names::validate_name(name).map_err(|e| format!("{pattern:?}: {e}"))
}

impl Entry {
    /// What is wrong with it, as `field: reason`.
    fn check(&self) -> Result<(), (&'static str, String)> {
        check_credential_name(&self.name).map_err(|r| ("name", r))?;
        let hash_ok = self.sha256.len() == 64
            && self
                .sha256
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !hash_ok {
            return Err(("sha256", "is not 64 lower-case hex digits".into()));
        }
        for p in &self.repositories {
            check_pattern(p).map_err(|r| ("repositories", r))?;
        }
        for o in &self.owners {
            foothold_names::check_name(o).map_err(|r| ("owners", r))?;
        }
        match self.scope {
            ScopeName::Write if self.repositories.is_empty() && self.owners.is_empty() => Err((
                "scope",
                "a write credential needs repositories or owners to write".into(),
            )),
            ScopeName::Admin | ScopeName::Read
                if !self.repositories.is_empty() || !self.owners.is_empty() =>
            {
                Err((
                    "scope",
                    "only write credentials have repositories and owners (admin writes all, read none)"
                        .into(),
                ))
            }
            _ => Ok(()),
        }
    }
}

impl CredentialsFile {
    /// Parses and checks a file's text; the error names the credential, the field and the reason.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: CredentialsFile = if text.trim().is_empty() {
            CredentialsFile::default()
        } else {
            serde_saphyr::from_str(text).map_err(|e| e.to_string())?
        };
        for (i, e) in file.credentials.iter().enumerate() {
            e.check().map_err(|(field, reason)| {
                format!("credentials[{i}] ({}): {field}: {reason}", e.name)
            })?;
            if file.credentials[..i].iter().any(|o| o.name == e.name) {
                return Err(format!(
                    "credentials[{i}] ({}): name: another credential has this name",
                    e.name
                ));
            }
            if e.name == "admin" {
                // `--token-file`'s credential is `admin`: one name, one credential in the logs.
                return Err(format!(
                    "credentials[{i}] (admin): name: \"admin\" is the --token-file credential's name"
                ));
            }
        }
        Ok(file)
    }

    /// The file at `path`; a file that does not exist is one with no credentials.
    pub fn load_or_empty(path: &Path) -> Result<Self, FileError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text).map_err(|r| FileError::new(path, r)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(FileError::new(path, format!("cannot be read: {e}"))),
        }
    }

    /// Writes the file whole (temp file, fsync, rename, fsync the directory), mode 0600.
    pub fn save(&self, path: &Path) -> Result<(), FileError> {
        let yaml = serde_saphyr::to_string(self)
            .map_err(|e| FileError::new(path, format!("cannot be serialised: {e}")))?;
        crate::apt::durable::write_file(path, format!("{HEADER}{yaml}").as_bytes(), 0o600)
            .map_err(|e| FileError::new(path, format!("cannot be written: {e}")))
    }

    /// Adds a credential with a new random token, which is returned (and nowhere kept).
    pub fn add(
        &mut self,
        name: &str,
        scope: ScopeName,
        repositories: Vec<String>,
        owners: Vec<String>,
        now: SystemTime,
    ) -> Result<String, String> {
        if self.credentials.iter().any(|e| e.name == name) {
            return Err(format!(
                "a credential named {name} exists already (remove it first to make a new token)"
            ));
        }
        if name == "admin" {
            return Err("\"admin\" is the --token-file credential's name".into());
        }
        let token = new_token();
        let entry = Entry {
            name: name.to_owned(),
            scope,
            repositories,
            owners,
            sha256: hex::encode(Sha256::digest(token.as_bytes())),
            created: Some(httpdate::fmt_http_date(now)),
        };
        entry
            .check()
            .map_err(|(field, reason)| format!("{field}: {reason}"))?;
        self.credentials.push(entry);
        Ok(token)
    }

    /// Removes the credential `name`; its token stops working when the agent loads the file again.
    pub fn remove(&mut self, name: &str) -> Result<(), String> {
        let before = self.credentials.len();
        self.credentials.retain(|e| e.name != name);
        if self.credentials.len() == before {
            return Err(format!("no credential is named {name}"));
        }
        Ok(())
    }
}

/// 32 random bytes, URL-safe base64 without padding: 43 characters, valid in a header and a URL.
fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The protected repositories file: one pattern a line, `#` comments and blank lines ignored.
pub fn parse_protected(text: &str) -> anyhow::Result<Vec<String>> {
    let mut patterns = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        check_pattern(line).map_err(|r| anyhow::anyhow!("line {}: {r}", i + 1))?;
        patterns.push(line.to_owned());
    }
    Ok(patterns)
}

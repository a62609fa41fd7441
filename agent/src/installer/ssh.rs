//! One SSH connection to a compute node, as the installer uses it: public-key login with the key the BPA's
//! Secret holds, commands run with their stdin given and their output and exit status kept, each bounded by a
//! timeout. Given the site SSH CA ([`KnownHosts::vouched_by`]), a host must show a host certificate from it for
//! its name or address ([`crate::ssh_ca`]); one that shows anything else is refused, named with its key's
//! fingerprint, and not sent a command. Without it, host keys are learnt on first use. Either way a host is
//! held to the key it first showed for the rest of the run: one that answers with another key later is refused.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use russh::client::{self, Handle};
use russh::keys::ssh_key::public::KeyData;
use russh::keys::{HashAlg, PrivateKey, PrivateKeyWithHashAlg, PublicKeyOrCertificate};
use russh::ChannelMsg;

use crate::ssh_ca::HostCa;

/// What went wrong, naming the host (its inventory name and address).
#[derive(Debug)]
pub enum SshError {
    Connect {
        host: String,
        reason: String,
    },
    HostKeyChanged {
        host: String,
        was: String,
        now: String,
    },
    Refused {
        host: String,
        user: String,
    },
    /// The host's key is not one the site SSH CA vouched for.
    Unvouched {
        host: String,
        fingerprint: String,
        why: String,
    },
    TimedOut {
        host: String,
        what: String,
        after: Duration,
    },
    Session {
        host: String,
        reason: String,
    },
}

impl fmt::Display for SshError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SshError::Connect { host, reason } => write!(f, "{host}: cannot connect over SSH: {reason}"),
            SshError::HostKeyChanged { host, was, now } => write!(
                f,
                "{host}: the SSH host key changed during the run (was {was}, now {now}): refusing to go on"
            ),
            SshError::Unvouched {
                host,
                fingerprint,
                why,
            } => write!(
                f,
                "{host}: the SSH host key {fingerprint} is not vouched for by the site SSH CA: {why}; refusing to connect"
            ),
            SshError::Refused { host, user } => write!(
                f,
                "{host}: the SSH key in the Secret was refused for user {user}"
            ),
            SshError::TimedOut { host, what, after } => {
                write!(f, "{host}: {what} did not finish within {after:?}")
            }
            SshError::Session { host, reason } => write!(f, "{host}: SSH session failed: {reason}"),
        }
    }
}

impl std::error::Error for SshError {}

impl SshError {
    /// Connecting again with the same key cannot help: the host refused it, or is not the host it was.
    /// A host that does not answer, or a session cut, may well do better on the next try.
    pub fn lasting(&self) -> bool {
        matches!(
            self,
            SshError::Refused { .. } | SshError::HostKeyChanged { .. } | SshError::Unvouched { .. }
        )
    }
}

/// The host keys seen in this run, by address and port (two forwards on one address are two hosts): the first
/// key a host shows is the one it must keep showing; and the site SSH CA hosts must show a certificate of, if
/// there is one.
#[derive(Clone, Default)]
pub struct KnownHosts {
    seen: Arc<Mutex<HashMap<String, KeyData>>>,
    ca: Option<HostCa>,
}

impl KnownHosts {
    /// Hosts are taken only with a host certificate from `ca`.
    pub fn vouched_by(ca: HostCa) -> KnownHosts {
        KnownHosts {
            seen: Arc::default(),
            ca: Some(ca),
        }
    }

    /// The SHA-256 fingerprint of the key the host at `address`:`port` showed, if it showed one.
    pub fn fingerprint(&self, address: &str, port: u16) -> Option<String> {
        let known = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        known
            .get(&endpoint(address, port))
            .map(|k| k.fingerprint(HashAlg::Sha256).to_string())
    }
}

fn endpoint(address: &str, port: u16) -> String {
    format!("{address} port {port}")
}

/// Why a host's key was not taken: the error names it.
enum Rejected {
    /// It differs from the one first seen (that key's fingerprint, this one's).
    Changed(String, String),
    /// The site SSH CA did not vouch for it (its fingerprint, why).
    Unvouched(String, String),
}

/// russh's callbacks for one connection: the host key check.
struct Verifier {
    /// [`endpoint`]: the host's key in [`KnownHosts`].
    endpoint: String,
    /// The names the host is reached by (inventory name, address): one must be a principal of its certificate.
    names: [String; 2],
    known: KnownHosts,
    rejected: Arc<Mutex<Option<Rejected>>>,
}

impl Verifier {
    fn reject(&self, why: Rejected) -> Result<bool, russh::Error> {
        *self.rejected.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
        Ok(false)
    }
}

impl client::Handler for Verifier {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        // A host certificate is held to by the key it certifies.
        let (key, cert) = match key {
            PublicKeyOrCertificate::PublicKey { key, .. } => (key.key_data(), None),
            PublicKeyOrCertificate::Certificate(c) => (c.public_key(), Some(c)),
        };
        let fingerprint = key.fingerprint(HashAlg::Sha256).to_string();
        if let Some(ca) = &self.known.ca {
            let names = [self.names[0].as_str(), self.names[1].as_str()];
            let vouched = match cert {
                None => Err(format!(
                    "it showed a plain host key, no certificate (the site SSH CA is {})",
                    ca.fingerprint()
                )),
                Some(c) => ca.check(c, &names, std::time::SystemTime::now()),
            };
            if let Err(why) = vouched {
                return self.reject(Rejected::Unvouched(fingerprint, why));
            }
        }
        let mut known = self.known.seen.lock().unwrap_or_else(|e| e.into_inner());
        match known.get(&self.endpoint) {
            None => {
                known.insert(self.endpoint.clone(), key.clone());
                Ok(true)
            }
            Some(k) if k == key => Ok(true),
            Some(k) => {
                let was = k.fingerprint(HashAlg::Sha256).to_string();
                drop(known);
                self.reject(Rejected::Changed(was, fingerprint))
            }
        }
    }
}

/// What a command left: its exit status (None if it was ended by a signal, named in `signal`) and output.
#[derive(Debug, Default)]
pub struct Output {
    pub status: Option<u32>,
    pub signal: Option<String>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status == Some(0)
    }

    /// The last `lines` lines of stderr, or of stdout when stderr is empty: what a failure report quotes.
    pub fn tail(&self, lines: usize) -> String {
        let text = if self.stderr.iter().any(|b| !b.is_ascii_whitespace()) {
            &self.stderr
        } else {
            &self.stdout
        };
        let text = String::from_utf8_lossy(text);
        let all: Vec<&str> = text.trim_end().lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Whether stdout or stderr, whole, contains `needle` (which the tail may have cut off).
    pub fn mentions(&self, needle: &str) -> bool {
        [&self.stdout, &self.stderr]
            .iter()
            .any(|text| String::from_utf8_lossy(text).contains(needle))
    }
}

/// Where and as whom to log in.
#[derive(Clone, Debug)]
pub struct Target {
    /// The inventory's name for the host, for messages.
    pub name: String,
    pub address: String,
    pub port: u16,
    pub user: String,
}

impl Target {
    /// How the installer reaches an inventory host: its address and port, as its `ansible_user` or else
    /// `default_user`.
    pub fn of(host: &crate::installer::inventory::Host, default_user: &str) -> Target {
        Target {
            name: host.name.clone(),
            address: host.address.clone(),
            port: host.port,
            user: host.user.as_deref().unwrap_or(default_user).to_owned(),
        }
    }

    /// The host in messages: `name (address)`.
    pub fn label(&self) -> String {
        format!("{} ({})", self.name, self.address)
    }

    /// The command that runs a script given on stdin as root: `sh -s` for root, `sudo -n sh -s` for anyone
    /// else (who needs password-less sudo).
    pub fn root_shell(&self) -> &'static str {
        if self.user == "root" {
            "sh -s"
        } else {
            "sudo -n sh -s"
        }
    }
}

/// A logged-in connection; commands run on it one channel each.
pub struct Connection {
    handle: Handle<Verifier>,
    target: Target,
}

impl Connection {
    /// Connects to `target` and logs in with `key`, within `timeout`.
    pub async fn open(
        target: &Target,
        key: Arc<PrivateKey>,
        known: &KnownHosts,
        timeout: Duration,
    ) -> Result<Connection, SshError> {
        let label = target.label();
        let rejected = Arc::new(Mutex::new(None));
        let verifier = Verifier {
            endpoint: endpoint(&target.address, target.port),
            names: [target.name.clone(), target.address.clone()],
            known: known.clone(),
            rejected: rejected.clone(),
        };
        let mut config = client::Config {
            inactivity_timeout: Some(Duration::from_secs(600)),
            keepalive_interval: Some(Duration::from_secs(15)),
            keepalive_max: 4,
            ..Default::default()
        };
        if known.ca.is_some() {
            // Ask for a certificate first: a host with one shows it rather than its bare key.
            config.preferred.host_key_certificates = config.preferred.key.clone();
        }
        let config = Arc::new(config);
        let addr = (target.address.as_str(), target.port);
        let connect = async {
            let mut handle = client::connect(config, addr, verifier).await.map_err(|e| {
                match rejected.lock().unwrap_or_else(|e| e.into_inner()).take() {
                    Some(Rejected::Changed(was, now)) => SshError::HostKeyChanged {
                        host: label.clone(),
                        was,
                        now,
                    },
                    Some(Rejected::Unvouched(fingerprint, why)) => SshError::Unvouched {
                        host: label.clone(),
                        fingerprint,
                        why,
                    },
                    None => SshError::Connect {
                        host: label.clone(),
                        reason: e.to_string(),
                    },
                }
            })?;
            let hash = handle
                .best_supported_rsa_hash()
                .await
                .map_err(|e| SshError::Session {
                    host: label.clone(),
                    reason: e.to_string(),
                })?
                .flatten();
            let auth = handle
                .authenticate_publickey(&target.user, PrivateKeyWithHashAlg::new(key, hash))
                .await
                .map_err(|e| SshError::Session {
                    host: label.clone(),
                    reason: e.to_string(),
                })?;
            if !auth.success() {
                return Err(SshError::Refused {
                    host: label.clone(),
                    user: target.user.clone(),
                });
            }
            Ok(handle)
        };
        let handle =
            tokio::time::timeout(timeout, connect)
                .await
                .map_err(|_| SshError::TimedOut {
                    host: target.label(),
                    what: "connecting and logging in".into(),
                    after: timeout,
                })??;
        Ok(Connection {
            handle,
            target: target.clone(),
        })
    }

    /// Runs `command` (by the login user's shell) with `stdin`, and waits up to `timeout` for it to end.
    pub async fn run(
        &self,
        command: &str,
        stdin: &[u8],
        timeout: Duration,
    ) -> Result<Output, SshError> {
        let session = |e: russh::Error| SshError::Session {
            host: self.target.label(),
            reason: e.to_string(),
        };
        let work = async {
            let mut channel = self.handle.channel_open_session().await.map_err(session)?;
            channel.exec(true, command).await.map_err(session)?;
            if !stdin.is_empty() {
                channel.data(stdin).await.map_err(session)?;
            }
            channel.eof().await.map_err(session)?;
            let mut out = Output::default();
            while let Some(msg) = channel.wait().await {
                match msg {
                    ChannelMsg::Data { data } => out.stdout.extend_from_slice(&data),
                    ChannelMsg::ExtendedData { data, ext: 1 } => {
                        out.stderr.extend_from_slice(&data)
                    }
                    ChannelMsg::ExitStatus { exit_status } => out.status = Some(exit_status),
                    ChannelMsg::ExitSignal { signal_name, .. } => {
                        out.signal = Some(format!("{signal_name:?}"))
                    }
                    _ => {}
                }
            }
            Ok(out)
        };
        tokio::time::timeout(timeout, work)
            .await
            .map_err(|_| SshError::TimedOut {
                host: self.target.label(),
                what: format!("{command:?}"),
                after: timeout,
            })?
    }

    /// Ends the session politely.
    pub async fn close(self) {
        let _ = self
            .handle
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
    }
}

/// The private key the BPA's SSH Secret holds (OpenSSH format; `id_rsa` by ICN's name, any key type).
pub fn load_key(path: &std::path::Path) -> Result<Arc<PrivateKey>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    russh::keys::decode_secret_key(&text, None)
        .map(Arc::new)
        .map_err(|e| {
            format!(
                "{}: not an unencrypted OpenSSH private key: {e}",
                path.display()
            )
        })
}

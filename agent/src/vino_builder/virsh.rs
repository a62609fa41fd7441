//! One long-lived `virsh` shell per builder: a libvirt connection that lasts across commands (which is also what
//! lets tests run the whole apply loop on libvirt's in-memory test driver, `test:///default`).
//!
//! Each command is followed by `echo <token>`; the output up to the token's line is the command's, and lines
//! starting `error:` (standard error shares the pipe) make it fail.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const PROMPT: &str = "virsh # ";

#[derive(Debug, thiserror::Error)]
pub enum VirshError {
    #[error("virsh {command}: {message}")]
    Failed { command: String, message: String },
    #[error("virsh ({uri}): {0}", uri = .1)]
    Session(String, String),
}

pub struct Virsh {
    uri: String,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    sequence: u64,
    timeout: Duration,
}

impl Virsh {
    /// Starts `virsh -c <uri>` and waits for it to answer.
    pub async fn connect(uri: &str, timeout: Duration) -> Result<Virsh, VirshError> {
        let session = |e: String| VirshError::Session(e, uri.to_owned());
        // Standard error joins standard output so errors arrive in order with the output.
        let mut child = Command::new("sh")
            .args(["-c", "exec virsh -c \"$0\" 2>&1", uri])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| session(format!("cannot run virsh: {e}")))?;
        let stdin = child.stdin.take().expect("piped");
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut v = Virsh {
            uri: uri.to_owned(),
            child,
            stdin,
            stdout,
            sequence: 0,
            timeout,
        };
        // The banner (or a connection error) comes before the first token.
        v.run("uri")
            .await
            .map_err(|e| session(format!("cannot connect: {e}")))?;
        Ok(v)
    }

    /// Runs one virsh command (its words already quoted for virsh's shell), returning its output.
    pub async fn run(&mut self, command: &str) -> Result<String, VirshError> {
        if command.contains('\n') {
            return Err(VirshError::Failed {
                command: command.into(),
                message: "contains a newline".into(),
            });
        }
        self.sequence += 1;
        let token = format!("@@foothold-vino-{}-{}@@", std::process::id(), self.sequence);
        let fail = |message: String| VirshError::Failed {
            command: command.to_owned(),
            message,
        };
        let exchange = async {
            self.stdin
                .write_all(format!("{command}\necho {token}\n").as_bytes())
                .await
                .map_err(|e| fail(format!("writing to virsh: {e}")))?;
            self.stdin
                .flush()
                .await
                .map_err(|e| fail(format!("writing to virsh: {e}")))?;
            let mut output = Vec::new();
            let mut errors = Vec::new();
            let mut line = String::new();
            loop {
                line.clear();
                let n = self
                    .stdout
                    .read_line(&mut line)
                    .await
                    .map_err(|e| fail(format!("reading from virsh: {e}")))?;
                if n == 0 {
                    let mut message = "virsh exited".to_owned();
                    if !errors.is_empty() {
                        message = format!("{message}: {}", errors.join("; "));
                    }
                    return Err(fail(message));
                }
                let mut text = line.trim_end_matches(['\n', '\r']);
                // The prompt and the echoed command (readline echoes what it reads): anything before it is
                // output that did not end its line.
                if let Some(at) = text.find(PROMPT) {
                    text = &text[..at];
                    if text.is_empty() {
                        continue;
                    }
                }
                if text == token {
                    break;
                }
                if let Some(e) = text.strip_prefix("error: ") {
                    errors.push(e.to_owned());
                } else {
                    output.push(text.to_owned());
                }
            }
            if errors.is_empty() {
                Ok(output.join("\n").trim().to_owned())
            } else {
                Err(fail(errors.join("; ")))
            }
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(r) => r,
            Err(_) => {
                // The session is out of step now: end it; the caller reconnects.
                let _ = self.child.start_kill();
                Err(fail(format!("no answer within {:?}", self.timeout)))
            }
        }
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// False once virsh has exited (or been killed after a timeout).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// Quotes one word for virsh's command line; words with a quote, backslash or line break are refused (names and
/// paths never need them).
pub fn quote(word: &str) -> Result<String, VirshError> {
    if word.contains(['\'', '"', '\\', '\n', '\r']) {
        return Err(VirshError::Failed {
            command: word.to_owned(),
            message: "a quote, backslash or line break in a virsh argument".into(),
        });
    }
    Ok(format!("'{word}'"))
}

//! Running the external tools the builder drives (mmdebstrap, mke2fs, debugfs, grub-mkimage, xorriso,
//! qemu-img, go, …). One way to run them: the error names the command, its exit status and the last lines it
//! printed, so a failure deep in a build says what failed without a rerun. A leaf: it knows nothing of specs.

use std::process::{Command, ExitStatus};

/// How many of a failed command's last lines its error keeps.
const TAIL_LINES: usize = 20;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot run {command}: {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("{command} failed ({status}):\n{tail}")]
    Failed {
        command: String,
        status: ExitStatus,
        /// The last lines of stderr (of stdout when stderr is empty).
        tail: String,
    },
}

/// [`Command`] run to completion with its output captured.
pub trait CommandExt {
    /// Runs the command; its stdout (lossy UTF-8), or an [`Error`] keeping the tail of what it printed.
    fn run(&mut self) -> Result<String, Error>;
    /// [`CommandExt::run`], with stdout as bytes.
    fn run_bytes(&mut self) -> Result<Vec<u8>, Error>;
}

impl CommandExt for Command {
    fn run(&mut self) -> Result<String, Error> {
        self.run_bytes()
            .map(|out| String::from_utf8_lossy(&out).into_owned())
    }

    fn run_bytes(&mut self) -> Result<Vec<u8>, Error> {
        let command = format!("{self:?}");
        let out = self.output().map_err(|source| Error::Spawn {
            command: command.clone(),
            source,
        })?;
        if out.status.success() {
            return Ok(out.stdout);
        }
        let printed = if out.stderr.iter().all(u8::is_ascii_whitespace) {
            &out.stdout
        } else {
            &out.stderr
        };
        Err(Error::Failed {
            command,
            status: out.status,
            tail: tail(&String::from_utf8_lossy(printed), TAIL_LINES),
        })
    }
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let skipped = lines.len().saturating_sub(n);
    let mut out = lines[skipped..].join("\n");
    if skipped > 0 {
        out = format!("[{skipped} earlier lines]\n{out}");
    }
    out
}

/// The first line a tool prints for `arg` (on stdout, or on stderr as mke2fs does); "unknown" when it
/// cannot be run. For the build manifest's list of tools.
pub fn tool_version(cmd: &str, arg: &str) -> String {
    Command::new(cmd)
        .arg(arg)
        .output()
        .ok()
        .and_then(|o| {
            [o.stdout, o.stderr].iter().find_map(|out| {
                String::from_utf8_lossy(out)
                    .lines()
                    .next()
                    .map(str::to_owned)
            })
        })
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_keeps_the_command_its_status_and_the_tail_of_stderr() {
        let err = Command::new("sh")
            .args([
                "-c",
                "echo out; for i in $(seq 1 30); do echo line$i >&2; done; exit 3",
            ])
            .run()
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"sh\""), "{err}");
        assert!(err.contains("exit status: 3"), "{err}");
        assert!(err.contains("[10 earlier lines]\nline11\n"), "{err}");
        assert!(err.ends_with("line30"), "{err}");
        assert!(
            !err.contains("\nout\n"),
            "stdout is left out when stderr says something: {err}"
        );
    }

    #[test]
    fn a_failure_with_a_silent_stderr_keeps_stdout() {
        let err = Command::new("sh")
            .args(["-c", "echo why; exit 1"])
            .run()
            .unwrap_err()
            .to_string();
        assert!(err.ends_with("why"), "{err}");
    }

    #[test]
    fn success_returns_stdout_and_a_missing_tool_names_itself() {
        assert_eq!(Command::new("echo").arg("hi").run().unwrap(), "hi\n");
        let err = Command::new("no-such-tool-here")
            .run()
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("cannot run \"no-such-tool-here\""), "{err}");
        assert_eq!(tool_version("no-such-tool-here", "--version"), "unknown");
    }
}

//! Shared test support: the real agent binary on 127.0.0.1, seeded OCI image layouts, external tools.
#![allow(dead_code)]

pub mod containerd;
pub mod inproc;
pub mod kube;
pub mod layout;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Where `scripts/install-test-tools.sh` puts built tools (crane, oci-conformance).
pub fn tools_dir() -> PathBuf {
    std::env::var_os("FOOTHOLD_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/bin"))
}

/// An external tool the test needs. A missing tool fails the test (it is never silently skipped): run
/// `scripts/install-test-tools.sh`.
pub fn tool(name: &str) -> PathBuf {
    let local = tools_dir().join(name);
    if local.is_file() {
        return local;
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "test tool {name:?} not found in {} or PATH: run scripts/install-test-tools.sh (kube-apiserver and \
         etcd: scripts/kube-test-tools.sh, after cargo build)",
        tools_dir().display()
    );
}

/// Runs a command, panicking with its output unless it succeeds.
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawning {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn stdout(cmd: &mut Command) -> String {
    String::from_utf8(run(cmd).stdout).expect("utf-8 output")
}

/// Polls `f` until it returns Some, or panics after `timeout` naming `what`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The value of `series` (a name with its labels) in Prometheus text, which must have it.
pub fn metric(metrics: &str, series: &str) -> u64 {
    let prefix = format!("{series} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {series} in\n{metrics}"))
        .parse()
        .unwrap()
}

/// A 127.0.0.1 port nothing listens on now (bound, then let go).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn agent_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_foothold-agent"))
}

/// The real `foothold-agent serve` on an ephemeral 127.0.0.1 port. Killed on drop.
pub struct Agent {
    pub child: Child,
    pub addr: SocketAddr,
    pub data: PathBuf,
    pub token: Option<String>,
}

impl Agent {
    pub fn start(data: &Path, token: Option<&str>) -> Agent {
        Self::start_on(data, token, "127.0.0.1:0")
    }

    pub fn start_on(data: &Path, token: Option<&str>, listen: &str) -> Agent {
        Self::start_with(data, token, listen, &[])
    }

    /// [`Agent::start_on`] with more `serve` arguments (limits, TTLs).
    pub fn start_with(data: &Path, token: Option<&str>, listen: &str, extra: &[&str]) -> Agent {
        let mut cmd = Command::new(agent_bin());
        cmd.args(["serve", "--no-controllers", "--listen", listen, "--data"])
            .arg(data)
            .args(extra);
        if let Some(t) = token {
            let f = data.with_extension("token");
            std::fs::write(&f, t).unwrap();
            cmd.arg("--token-file").arg(f);
        }
        Self::spawn(cmd, data, token)
    }

    /// Starts a prepared `foothold-agent serve` command and waits for its listen address.
    pub fn spawn(mut cmd: Command, data: &Path, token: Option<&str>) -> Agent {
        cmd.env("FOOTHOLD_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawning foothold-agent");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let log = data.with_extension("log");
        std::thread::spawn(move || {
            use std::io::Write;
            let mut out = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .ok();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line
                    .split("addr=")
                    .nth(1)
                    .filter(|_| line.contains("listening"))
                {
                    let _ = tx.send(addr.split_whitespace().next().unwrap_or("").to_owned());
                }
                if let Some(f) = out.as_mut() {
                    let _ = writeln!(f, "{line}");
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("agent did not report its listen address within 30 s");
        Agent {
            child,
            addr: addr.parse().expect("listen address"),
            data: data.to_owned(),
            token: token.map(str::to_owned),
        }
    }

    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The Prometheus text of `/metrics`.
    pub fn metrics(&self) -> String {
        http()
            .get(&self.url("/metrics"))
            .call()
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap()
    }

    /// The metrics once every one of `lines` is among them. A body's last `sendfile` is counted after it
    /// returns, which can be after the client has read the bytes: counters are waited for, not read once.
    pub fn metrics_with(&self, lines: &[&str]) -> String {
        wait_for(
            &format!("the metrics to show {lines:?}"),
            Duration::from_secs(10),
            || {
                let metrics = self.metrics();
                lines
                    .iter()
                    .all(|want| metrics.lines().any(|l| l == *want))
                    .then_some(metrics)
            },
        )
    }

    /// `skopeo --dest-creds` value when a token is set.
    pub fn creds(&self) -> Option<String> {
        self.token.as_ref().map(|t| format!("foothold:{t}"))
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `sha256:<hex>` of some bytes (a manifest's digest from its raw bytes).
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!(
        "sha256:{}",
        hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes))
    )
}

/// The digest of the manifest `skopeo inspect --raw` fetches for `reference` (extra args before it).
pub fn remote_manifest_digest(extra: &[&str], reference: &str) -> String {
    let raw = run(Command::new(tool("skopeo"))
        .args(["inspect", "--raw"])
        .args(extra)
        .arg(format!("docker://{reference}")))
    .stdout;
    sha256_digest(&raw)
}

/// `foothold-agent fsck` on a data directory; panics with its report unless clean.
pub fn assert_fsck_clean(data: &Path) {
    let out = Command::new(agent_bin())
        .args(["fsck", "--data"])
        .arg(data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fsck of {} found problems:\n{}{}",
        data.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Blocking HTTP client for tests (no redirects followed, errors are responses).
pub fn http() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into()
}

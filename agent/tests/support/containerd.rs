//! A private containerd (own root, state and socket under a temp dir; CRI off) and the mirror configuration
//! the agent generates for it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use super::{agent_bin, run, tool, wait_for, Agent};

pub struct Containerd {
    child: Child,
    sock: PathBuf,
}

impl Containerd {
    pub fn start(dir: &Path) -> Containerd {
        std::fs::create_dir_all(dir).unwrap();
        let sock = dir.join("containerd.sock");
        let config = dir.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "version = 2\nroot = \"{root}\"\nstate = \"{state}\"\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
                 [grpc]\n  address = \"{sock}\"\n[ttrpc]\n  address = \"{sock}.ttrpc\"\n[debug]\n  address = \"{sock}.debug\"\n",
                root = dir.join("root").display(),
                state = dir.join("state").display(),
                sock = sock.display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
        let child = Command::new(tool("containerd"))
            .arg("--config")
            .arg(&config)
            .stderr(log)
            .spawn()
            .unwrap();
        let c = Containerd { child, sock };
        wait_for("containerd to answer", Duration::from_secs(30), || {
            c.ctr(&["version"])
                .output()
                .ok()
                .filter(|o| o.status.success())
        });
        c
    }

    /// `ctr` against this containerd, in the namespace `foothold-test`.
    pub fn ctr(&self, args: &[&str]) -> Command {
        let mut c = Command::new(tool("ctr"));
        c.arg("--address")
            .arg(&self.sock)
            .args(["--namespace", "foothold-test"])
            .args(args);
        c
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `foothold-agent mirror-config --for containerd` for `registries`, written under `dir`; returns the
/// hosts directory to pass to `ctr --hosts-dir`.
pub fn mirror_hosts(agent: &Agent, registries: &str, dir: &Path) -> PathBuf {
    mirror_hosts_with(agent, registries, dir, &[])
}

/// [`mirror_hosts`] with more `mirror-config` arguments (`--read-token-file`), under `dir/certs.d`.
pub fn mirror_hosts_with(agent: &Agent, registries: &str, dir: &Path, extra: &[&str]) -> PathBuf {
    let hosts = dir.join("certs.d");
    run(Command::new(agent_bin())
        .args([
            "mirror-config",
            "--for",
            "containerd",
            "--registries",
            registries,
            "--endpoint",
        ])
        .arg(agent.url(""))
        .arg("--out")
        .arg(&hosts)
        .args(extra));
    hosts
}

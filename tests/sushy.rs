//! sushy-tools (PyPI, installed by `scripts/install-test-tools.sh`) as the Redfish BMC of the tests' compute
//! nodes, on 127.0.0.1 (an isolated VM reaches it through a guest forward, `RunOptions::guest_forwards`). With the fake driver the
//! systems are simulated (power, boot device, virtual media), so Ironic's whole control path runs with no VM.
//! It runs with one change, virtual media kept for a retry of the same InsertMedia (`sushy_media_cache.py`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use foothold_image_builder::site::{self, Bmc};

use crate::{run, tools_dir, workspace};

/// A fake system: its name, UUID (the Redfish id) and the MAC of its NIC (a BareMetalHost's bootMACAddress).
pub struct System {
    pub name: String,
    pub uuid: String,
    pub mac: String,
}

/// A running sushy-emulator; killed on drop.
pub struct Sushy {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Sushy {
    /// Starts the fake driver on `port` with `systems`, all behind one user and password (bcrypt htpasswd),
    /// its configuration and log in `dir`; returns once it answers.
    pub fn fake(dir: &Path, port: u16, systems: &[System], user: &str, password: &str) -> Sushy {
        let htpasswd = dir.join("sushy.htpasswd");
        std::fs::write(&htpasswd, site::htpasswd_line(user, password).unwrap()).unwrap();
        let systems: Vec<String> = systems
            .iter()
            .map(|s| {
                format!(
                    "{{'uuid': '{}', 'name': '{}', 'power_state': 'Off', 'nics': [{{'mac': '{}', 'ip': '172.22.0.100'}}]}}",
                    s.uuid, s.name, s.mac
                )
            })
            .collect();
        // The systems' state (power, media) is kept on disk, by default in the system's temporary directory,
        // where it would outlive this test and meet the next: it stays in `dir`.
        let state = dir.join("sushy-state");
        std::fs::create_dir_all(&state).unwrap();
        let config = dir.join("sushy.conf");
        std::fs::write(
            &config,
            format!(
                "SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\nSUSHY_EMULATOR_LISTEN_PORT = {port}\n\
                 SUSHY_EMULATOR_AUTH_FILE = '{}'\nSUSHY_EMULATOR_FAKE_DRIVER = True\n\
                 SUSHY_EMULATOR_FAKE_SYSTEMS = [{}]\nSUSHY_EMULATOR_STATE_DIR = '{}'\n",
                htpasswd.display(),
                systems.join(", "),
                state.display()
            ),
        )
        .unwrap();
        Sushy::start(dir, &config, &["--fake"], port, &state)
    }

    /// Starts sushy-tools' libvirt driver as `bmc` says, its configuration and log in `dir`, one user and
    /// password; returns once it answers.
    pub fn libvirt(dir: &Path, bmc: &Bmc, user: &str, password: &str) -> Sushy {
        std::fs::write(&bmc.auth_file, site::htpasswd_line(user, password).unwrap()).unwrap();
        std::fs::create_dir_all(&bmc.state_dir).unwrap();
        let config = dir.join(format!("sushy-{}.conf", bmc.port));
        std::fs::write(&config, site::sushy_config(bmc)).unwrap();
        Sushy::start(dir, &config, &[], bmc.port, &bmc.state_dir)
    }

    fn start(dir: &Path, config: &Path, args: &[&str], port: u16, state: &Path) -> Sushy {
        let log = dir.join(format!("sushy-{port}.log"));
        // sushy-emulator, with virtual media kept for retries (`tests/sushy_media_cache.py` says why).
        let child = Command::new(tools_dir().join("../sushy/bin/python3"))
            .arg(workspace().join("tests/sushy_media_cache.py"))
            .arg("--config")
            .arg(config)
            .args(args)
            .env("TMPDIR", state)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::options().append(true).open(&log).unwrap())
            .spawn()
            .expect("sushy-emulator (scripts/install-test-tools.sh installs it)");
        let mut s = Sushy { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = s.child.try_wait().unwrap() {
                panic!(
                    "sushy-emulator exited ({status}): {}",
                    std::fs::read_to_string(&s.log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "sushy-emulator did not listen within 60 s"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        s
    }

    /// A Redfish request to it as `user`, as a BMC client would make it; the body it answers.
    pub fn call(
        &self,
        (user, password): (&str, &str),
        method: &str,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> String {
        let mut c = Command::new("curl");
        c.args([
            "-fsS",
            "--max-time",
            "600",
            "-u",
            &format!("{user}:{password}"),
            "-X",
            method,
        ]);
        if let Some(b) = body {
            c.args(["-H", "Content-Type: application/json", "-d", &b.to_string()]);
        }
        run(c.arg(format!("http://127.0.0.1:{}{path}", self.port)))
    }

    /// The requests it logged whose line contains `what` (`VirtualMedia.InsertMedia`, a system's UUID).
    pub fn requests(&self, what: &str) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(what))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for Sushy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

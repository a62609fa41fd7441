//! libvirt's system daemon for the tests' compute nodes (`foothold_image_builder::site` writes their domains):
//! started by hand when it is not running (PID 1 here is not systemd), with the storage pool sushy-tools copies
//! virtual media into. A [`Site`] removes every domain, NVRAM and volume it made when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use foothold_image_builder::site::{self, ComputeNode, NodeNetwork};

use crate::{run, try_run};

/// Where libvirt keeps images; its qemu user can reach it (the tests' own directories may be private).
const IMAGES: &str = "/var/lib/libvirt/images";

/// `virsh` on the system daemon, bounded in time.
pub fn virsh(args: &[&str]) -> Result<String, String> {
    try_run(
        Command::new("timeout")
            .args(["60", "virsh", "-c", "qemu:///system"])
            .args(args),
    )
    .map_err(|e| format!("virsh {args:?}: {e}"))
}

/// Starts virtlogd and libvirtd unless the daemon answers, and makes the `default` storage pool if missing.
pub fn ensure_daemons() {
    if virsh(&["version"]).is_err() {
        // Either may be running already; a second copy refuses to start and says so, which is fine.
        let _ = Command::new("virtlogd").arg("-d").status();
        let _ = Command::new("libvirtd").arg("-d").status();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match virsh(&["version"]) {
                Ok(_) => break,
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "libvirtd did not answer in 60 s: {e} \
                         (scripts/install-test-tools.sh installs libvirt-daemon-system)"
                    );
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
    }
    if virsh(&["pool-info", "default"]).is_err() {
        virsh(&["pool-define-as", "default", "dir", "--target", IMAGES]).unwrap();
    }
    if !virsh(&["pool-info", "default"])
        .unwrap()
        .contains("running")
    {
        virsh(&["pool-start", "default"]).unwrap();
    }
}

/// The compute nodes one test defined, and their files (the relay, consoles) where libvirt's qemu reaches them.
pub struct Site {
    pub dir: PathBuf,
    pid: u32,
    nodes: Vec<ComputeNode>,
}

fn node_uuid(pid: u32, index: u16) -> String {
    format!("5e7e0000-0000-4000-8000-{pid:08x}{index:04x}")
}

/// Removes the domains, NVRAM, volumes and directory of every site whose test process is gone.
fn remove_stale_sites() {
    let Ok(entries) = std::fs::read_dir(IMAGES) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("foothold-test-")
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let domains = virsh(&["list", "--all", "--name"]).unwrap_or_default();
        for d in domains
            .lines()
            .filter(|d| d.starts_with(&format!("foothold-{pid}-")))
        {
            let _ = virsh(&["destroy", d]);
            let _ = virsh(&["undefine", "--nvram", d]);
        }
        delete_volumes(&node_uuid(pid, 0)[..32]);
        let _ = std::fs::remove_dir_all(e.path());
    }
}

/// Destroys the domains of this process's sites (their files and volumes go with the next [`Site::new`]): for a
/// test that ends where no destructor runs.
pub fn destroy_domains_of_this_process() {
    let prefix = format!("foothold-{}-", std::process::id());
    let domains = virsh(&["list", "--name"]).unwrap_or_default();
    for d in domains.lines().filter(|d| d.starts_with(&prefix)) {
        let _ = virsh(&["destroy", d]);
    }
}

/// The console logs of this process's compute nodes.
pub fn consoles_of_this_process() -> Vec<PathBuf> {
    let dir = Path::new(IMAGES).join(format!("foothold-test-{}", std::process::id()));
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".console.log"))
        .collect();
    out.sort();
    out
}

/// Deletes the volumes in the `default` pool whose names contain `part` (sushy-tools names the media it
/// copies there after the domain's UUID).
fn delete_volumes(part: &str) {
    if let Ok(vols) = virsh(&["vol-list", "default"]) {
        for v in vols.lines().filter_map(|l| l.split_whitespace().next()) {
            if v.contains(part) {
                let _ = virsh(&["vol-delete", "--pool", "default", v]);
            }
        }
    }
}

impl Site {
    /// A site whose relay is a copy of `relay` (`foothold-build`). What a killed test's site left (its process
    /// gone) is removed first.
    pub fn new(relay: &Path) -> Site {
        ensure_daemons();
        remove_stale_sites();
        let pid = std::process::id();
        let dir = Path::new(IMAGES).join(format!("foothold-test-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(relay, dir.join("foothold-build")).unwrap();
        run(Command::new("chmod")
            .arg("755")
            .arg(&dir)
            .arg(dir.join("foothold-build")));
        Site {
            dir,
            pid,
            nodes: Vec::new(),
        }
    }

    /// The site's compute node `index`: named and numbered for this test process, so that sites of tests
    /// running at once never meet.
    pub fn node(&self, index: u16, memory_mib: u32) -> ComputeNode {
        ComputeNode {
            name: format!("foothold-{}-node-{index}", self.pid),
            uuid: node_uuid(self.pid, index),
            mac: format!("02:00:00:00:2{}:{:02x}", index / 256, index % 256),
            memory_mib,
            vcpus: 1,
            disk: None,
        }
    }

    pub fn relay(&self) -> PathBuf {
        self.dir.join("foothold-build")
    }

    pub fn console(&self, node: &ComputeNode) -> PathBuf {
        self.dir.join(format!("{}.console.log", node.name))
    }

    /// Defines `node` (powered off: its BMC powers it on).
    pub fn define(&mut self, node: &ComputeNode, net: &NodeNetwork) {
        let xml = self.dir.join(format!("{}.xml", node.name));
        std::fs::write(&xml, site::domain_xml(node, net, &self.console(node))).unwrap();
        self.nodes.push(node.clone());
        virsh(&["define", xml.to_str().unwrap()]).unwrap();
    }

    /// `running`, `shut off`, …
    pub fn state(&self, node: &ComputeNode) -> Result<String, String> {
        virsh(&["domstate", &node.name]).map(|s| s.trim().to_owned())
    }

    /// The medium in the node's CD, as libvirt says; None when there is none (sushy-tools removes the drive
    /// itself on EjectMedia).
    pub fn cdrom(&self, node: &ComputeNode) -> Result<Option<String>, String> {
        let list = virsh(&["domblklist", &node.name, "--details"])?;
        Ok(list
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some("cdrom"))
            .and_then(|l| l.split_whitespace().nth(3))
            .filter(|source| *source != "-")
            .map(str::to_owned))
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        for n in &self.nodes {
            let _ = virsh(&["destroy", &n.name]);
            let _ = virsh(&["undefine", "--nvram", &n.name]);
            delete_volumes(&n.uuid);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

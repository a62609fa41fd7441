//! A network namespace a test makes for a provisioning network: a bridge with taps for its VMs and the
//! addresses of what stands on that network (the appliance, the BMCs). Nothing in it reaches the host's
//! interfaces; the namespace and everything on it are deleted on drop.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::{run, try_run};

pub struct Namespace {
    pub name: String,
    pub bridge: String,
}

impl Namespace {
    /// `foothold-<what>-<pid>`, loopback up, and a bridge named `bridge` up (a stale one of that name, from a
    /// killed run of this process's PID, is replaced).
    pub fn new(what: &str, bridge: &str) -> Namespace {
        let name = format!("foothold-{what}-{}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output();
        run(Command::new("ip").args(["netns", "add", &name]));
        let ns = Namespace {
            name,
            bridge: bridge.into(),
        };
        ns.ip(&["link", "set", "lo", "up"]);
        ns.ip(&["link", "add", bridge, "type", "bridge"]);
        ns.ip(&["link", "set", bridge, "up"]);
        ns
    }

    /// `ip -n <namespace> <args>`.
    pub fn ip(&self, args: &[&str]) {
        run(Command::new("ip").arg("-n").arg(&self.name).args(args));
    }

    /// A tap device on the bridge, up, for a VM's NIC.
    pub fn add_tap(&self, tap: &str) {
        self.ip(&["tuntap", "add", "dev", tap, "mode", "tap"]);
        self.ip(&["link", "set", tap, "master", &self.bridge]);
        self.ip(&["link", "set", tap, "up"]);
    }

    /// `address` (with its prefix length) on the bridge: a machine of the network that the namespace plays.
    pub fn add_address(&self, address: &str) {
        self.ip(&["addr", "add", address, "dev", &self.bridge]);
    }

    /// A namespace of its own on this one's bridge at `address` (with its prefix length; a veth whose end there
    /// is `eth0`): another machine of the network, which reaches the others through the bridge alone.
    pub fn neighbour(&self, what: &str, link: &str, address: &str) -> Namespace {
        let other = self.on_bridge(what, link);
        other.ip(&["addr", "add", address, "dev", "eth0"]);
        other
    }

    /// A namespace of its own on this one's bridge with no address (its end of the veth `eth0`, with the MAC
    /// `mac`): a machine that asks the network's DHCP for one ([`Namespace::lease`]).
    pub fn dhcp_client(&self, what: &str, link: &str, mac: &str) -> Namespace {
        let other = self.on_bridge(what, link);
        other.ip(&["link", "set", "eth0", "address", mac]);
        other
    }

    fn on_bridge(&self, what: &str, link: &str) -> Namespace {
        let other = self.linked(what, link);
        self.ip(&["link", "set", link, "master", &self.bridge]);
        self.ip(&["link", "set", link, "up"]);
        other
    }

    /// A lease for `eth0` from the network's DHCP server (busybox's udhcpc, five tries two seconds apart): with
    /// `client_id` (option 61) only asked for, without one applied to `eth0` (as a /24); the address, or
    /// udhcpc's output.
    pub fn lease(&self, client_id: Option<&str>) -> Result<String, String> {
        let mut c = self.command("busybox");
        // The script that would apply it does nothing: the address is added below, or (with a client id) only
        // asked for.
        c.args([
            "udhcpc",
            "-i",
            "eth0",
            "-n",
            "-q",
            "-f",
            "-t",
            "5",
            "-T",
            "2",
            "-s",
            "/bin/true",
        ]);
        if let Some(id) = client_id {
            c.args(["-C", "-x", &format!("0x3d:{id}")]);
        }
        let out = c.output().map_err(|e| format!("busybox udhcpc: {e}"))?;
        let log = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        let address = log
            .lines()
            .find_map(|l| l.split("lease of ").nth(1))
            .and_then(|rest| rest.split(' ').next())
            .ok_or_else(|| format!("udhcpc got no lease:\n{log}"))?
            .to_owned();
        if client_id.is_none() {
            self.ip(&["addr", "add", &format!("{address}/24"), "dev", "eth0"]);
        }
        Ok(address)
    }

    /// Keeps taking the tap device `tap` onto this namespace's bridge whenever a process of this host's namespace
    /// (a VM's qemu) holds one of that name open: a VM started in this host's namespace with its NIC on this
    /// network. A qemu started again (a boot retried after a guest panic) makes a new tap of that name here,
    /// which is taken over too, in place of the old one. Stops when the adopter is dropped.
    pub fn adopt_tap(&self, tap: &str) -> TapAdopter {
        let (ns, bridge, tap) = (self.name.clone(), self.bridge.clone(), tap.to_owned());
        let stop = Arc::new(AtomicBool::new(false));
        let adopted = Arc::new(AtomicU32::new(0));
        let (stop2, adopted2) = (stop.clone(), adopted.clone());
        std::thread::spawn(move || {
            let ip = |args: &[&str]| try_run(Command::new("ip").args(args));
            while !stop2.load(Ordering::Relaxed) {
                if tap_is_held_here(&tap) {
                    let _ = ip(&["-n", &ns, "link", "del", &tap]);
                    let moved = ip(&["link", "set", &tap, "netns", &ns])
                        .and_then(|_| ip(&["-n", &ns, "link", "set", &tap, "master", &bridge]))
                        .and_then(|_| ip(&["-n", &ns, "link", "set", &tap, "up"]));
                    match moved {
                        Ok(_) => adopted2.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            eprintln!("netns: taking the tap {tap} into {ns}: {e}");
                            0
                        }
                    };
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        TapAdopter { stop, adopted }
    }

    /// A namespace of its own linked to this one by a veth (`link` here, `eth0` there) off the bridge: a network
    /// of its own beside this one's, `here` and `there` its two addresses (with their prefix length).
    pub fn beyond(&self, what: &str, link: &str, here: &str, there: &str) -> Namespace {
        let other = self.linked(what, link);
        self.ip(&["addr", "add", here, "dev", link]);
        self.ip(&["link", "set", link, "up"]);
        other.ip(&["addr", "add", there, "dev", "eth0"]);
        other
    }

    fn linked(&self, what: &str, link: &str) -> Namespace {
        let other = Namespace::new(what, "unused");
        self.ip(&[
            "link",
            "add",
            link,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &other.name,
        ]);
        other.ip(&["link", "set", "eth0", "up"]);
        other
    }

    /// `program` run inside the namespace.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).arg(program);
        c
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .output();
    }
}

/// Takes a VM's tap into a namespace ([`Namespace::adopt_tap`]) until dropped.
pub struct TapAdopter {
    stop: Arc<AtomicBool>,
    adopted: Arc<AtomicU32>,
}

impl TapAdopter {
    /// How many times the tap was taken into the namespace (one per qemu that opened it).
    pub fn adopted(&self) -> u32 {
        self.adopted.load(Ordering::Relaxed)
    }
}

impl Drop for TapAdopter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Whether the tap `tap` is in this host's namespace and a process holds it open (a tun file descriptor's
/// fdinfo names its interface: `iff:\t<name>`).
fn tap_is_held_here(tap: &str) -> bool {
    if !Path::new("/sys/class/net").join(tap).exists() {
        return false;
    }
    let want = format!("iff:\t{tap}");
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        std::fs::read_dir(p.path().join("fdinfo")).is_ok_and(|fds| {
            fds.flatten().any(|fd| {
                std::fs::read_to_string(fd.path())
                    .is_ok_and(|t| t.lines().any(|l| l.trim_end() == want))
            })
        })
    })
}

/// A tap device in this host's namespace, deleted on drop if it is still here (not yet adopted by a namespace,
/// which deletes it with itself).
pub struct HostTap(pub String);

impl HostTap {
    /// `ip tuntap add <name> mode tap`, down: nothing of this host's goes on it.
    pub fn new(name: &str) -> HostTap {
        let _ = Command::new("ip")
            .args(["tuntap", "del", "dev", name, "mode", "tap"])
            .output();
        run(Command::new("ip").args(["tuntap", "add", "dev", name, "mode", "tap"]));
        HostTap(name.into())
    }
}

impl Drop for HostTap {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["tuntap", "del", "dev", &self.0, "mode", "tap"])
            .output();
    }
}

/// A process killed and reaped on drop.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

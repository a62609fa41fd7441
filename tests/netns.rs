//! A network namespace a test makes for a provisioning network: a bridge with taps for its VMs and the
//! addresses of what stands on that network (the appliance, the BMCs). Nothing in it reaches the host's
//! interfaces; the namespace and everything on it are deleted on drop.

use std::ffi::OsStr;
use std::process::{Child, Command};

use crate::run;

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
        let other = self.linked(what, link);
        self.ip(&["link", "set", link, "master", &self.bridge]);
        self.ip(&["link", "set", link, "up"]);
        other.ip(&["addr", "add", address, "dev", "eth0"]);
        other
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

/// A process killed and reaped on drop.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

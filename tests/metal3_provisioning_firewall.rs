//! The appliance's firewall (`foothold-firewall.service`, loaded into the site's network namespace before
//! anything there listens), seen from an installed node on the provisioning network: the agent answers; the API
//! server, etcd, the kubelet's port and SSH do not — dropped, not refused, so it is the firewall and not a
//! closed port that stops them. And nothing is routed through the appliance: though it routes (`ip_forward`
//! on, as Kubernetes needs it), a node given a route through it reaches no machine of the network beside it,
//! which the appliance itself reaches.

use std::process::Stdio;

use foothold_e2e::native_site::{Site, APPLIANCE};
use foothold_e2e::netns::{Namespace, Running};
use foothold_e2e::run;

/// The network beside the provisioning network: the appliance's address on it, and a machine's.
const HERE: &str = "10.99.0.1";
const THERE: &str = "10.99.0.2";
const THERE_PORT: u16 = 8099;

/// A network of its own beside the provisioning network, linked to the appliance, with a web server on it;
/// dropped with the returned values.
pub(super) fn another_network(ns: &Namespace) -> (Namespace, Running) {
    let beyond = ns.beyond(
        "m3-beyond",
        "beyond0",
        &format!("{HERE}/24"),
        &format!("{THERE}/24"),
    );
    beyond.ip(&["route", "add", "172.22.0.0/24", "via", HERE]);
    run(ns.command("sysctl").args(["-qw", "net.ipv4.ip_forward=1"]));
    let server = Running(
        beyond
            .command("python3")
            .args([
                "-m",
                "http.server",
                "--bind",
                THERE,
                &THERE_PORT.to_string(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    (beyond, server)
}

/// Each `port`: the exit status of a TCP connect to it from the node, bounded by `timeout` (124: no answer),
/// in the order given. The connects run side by side: a dropped one waits out its 5 s.
fn connects(node: &dyn Fn(&str) -> String, host: &str, ports: &[u16]) -> String {
    let list: Vec<String> = ports.iter().map(u16::to_string).collect();
    let list = list.join(" ");
    node(&format!(
        "d=$(mktemp -d); for p in {list}; do \
         (timeout 5 bash -c \"exec 3<>/dev/tcp/{host}/$p\" 2>/dev/null; echo \"$p:$?\" > \"$d/$p\") & done; wait; \
         for p in {list}; do cat \"$d/$p\"; done; rm -r \"$d\""
    ))
}

/// The counter of the rule of `chain` whose comment starts with `comment`, as `nft` lists it in the site.
fn dropped(site: &Site, chain: &str, comment: &str) -> u64 {
    let listed = run(site
        .command("chroot")
        .arg(&site.root)
        .args(["nft", "list", "chain", "inet", "foothold", chain]));
    listed
        .lines()
        .find(|l| l.contains(&format!("comment \"{comment}")))
        .and_then(|l| {
            l.split("packets ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no counted rule {comment:?} in {chain}:\n{listed}"))
}

/// From the node `node` (a command run there over SSH), the appliance and the network beside it.
pub(super) fn the_provisioning_network_reaches_only_what_it_needs(
    site: &Site,
    ns: &Namespace,
    node: &dyn Fn(&str) -> String,
) {
    let before = dropped(site, "provisioning", "everything else");
    let seen = connects(node, APPLIANCE, &[5000, 6443, 2379, 10250, 22]);
    assert_eq!(
        seen, "5000:0\n6443:124\n2379:124\n10250:124\n22:124\n",
        "from the provisioning network: the agent answers, the rest is dropped"
    );
    assert!(
        dropped(site, "provisioning", "everything else") >= before + 4,
        "the firewall's counter did not count the four refusals"
    );

    // The appliance reaches the network beside it; a node routed through the appliance does not.
    run(ns
        .command("curl")
        .args(["-fsS", "-o", "/dev/null", "--max-time", "10"])
        .arg(format!("http://{THERE}:{THERE_PORT}/")));
    node(&format!(
        "sudo ip route replace 10.99.0.0/24 via {APPLIANCE}"
    ));
    let before = dropped(site, "forward", "nothing from the provisioning network");
    assert_eq!(
        connects(node, THERE, &[THERE_PORT]),
        format!("{THERE_PORT}:124\n"),
        "a node reached the network beside the provisioning network through the appliance"
    );
    assert!(dropped(site, "forward", "nothing from the provisioning network") > before);
    node("sudo ip route del 10.99.0.0/24");
}

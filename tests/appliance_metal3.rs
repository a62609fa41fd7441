//! Metal3 on the booted appliance (part of `appliance.rs`'s first boot): baremetal-operator built from source and
//! Debian's Ironic drive BareMetalHosts whose BMCs are sushy-tools' fake systems on this host. A host with a wrong BMC password is in a registration error that names the
//! cause, and recovers when its Secret is fixed (the appliance is isolated: it reaches the BMC through a guest
//! forward, as it would reach BMCs on its provisioning network); SIP claims the real BareMetalHosts; a claimed host is
//! provisioned with a live ISO from the agent's `/files` (Registering → Available → Provisioning →
//! Provisioned, the ISO inserted as virtual media and the system powered on) and deprovisioned (powered off,
//! the media ejected).

use std::path::Path;
use std::time::{Duration, Instant};

use foothold_e2e::sushy::{Sushy, System};

use super::{wait_for, Appliance};

/// The port the appliance reaches the BMC at, on qemu's guest-forward address.
pub const BMC_GUEST_PORT: u16 = 8000;

/// The live ISO the test bakes into the agent's store (`components.files`), and where the agent serves it.
pub const ISO_NAME: &str = "node-live.iso";

/// The systems behind the BMC, named as the SIP fixture's hosts.
fn systems() -> Vec<System> {
    (0..2)
        .map(|i| System {
            name: format!("node-0{i}"),
            uuid: format!("27946b59-9e44-4fa7-8e91-f3527a1ef0{i:02}"),
            mac: format!("02:00:00:00:10:0{i}"),
        })
        .collect()
}

/// The SIP fixture's hosts as real BMO manages them: their BMC the fake systems by UUID with virtual media, no
/// inspection and no cleaning (no IPA ramdisk), UEFI.
fn fixture(ws: &Path) -> String {
    let mut text = std::fs::read_to_string(ws.join("tests/fixtures/sip-two-hosts.yaml")).unwrap();
    for s in systems() {
        text = text.replace(
            &format!(
                "redfish+http://127.0.0.1:8000/redfish/v1/Systems/{}",
                s.name
            ),
            &format!(
                "redfish-virtualmedia+http://{}:{BMC_GUEST_PORT}/redfish/v1/Systems/{}",
                foothold_image_builder::qemu::GUEST_FORWARD_ADDRESS,
                s.uuid
            ),
        );
    }
    text.replace(
        "  online: true\n",
        "  online: true\n  bootMode: UEFI\n  inspectionMode: disabled\n  automatedCleaningMode: disabled\n",
    )
}

fn bmh(a: &Appliance, name: &str, path: &str) -> Result<String, String> {
    a.kubectl(&[
        "-n",
        "site",
        "get",
        "bmh",
        name,
        "-o",
        &format!("jsonpath={{{path}}}"),
    ])
}

fn patch_bmh(a: &Appliance, name: &str, kind: &str, patch: &str) {
    a.kubectl(&[
        "-n",
        "site",
        "patch",
        "bmh",
        name,
        &format!("--type={kind}"),
        "-p",
        patch,
    ])
    .unwrap();
}

fn wait_powered(a: &Appliance, name: &str, want: &str) {
    wait_for(
        &format!("{name} poweredOn {want}"),
        Duration::from_secs(300),
        || {
            let s = bmh(a, name, ".status.poweredOn")?;
            (s == want).then_some(()).ok_or(s)
        },
    );
}

/// Waits for host `name` to reach provisioning state `want`; returns how long it took.
fn wait_state(a: &Appliance, name: &str, want: &str, limit: Duration) -> Duration {
    let started = Instant::now();
    wait_for(&format!("{name} {want}"), limit, || {
        let s = bmh(
            a,
            name,
            ".status.provisioning.state} {.status.errorType} {.status.errorMessage",
        )?;
        (s.split(' ').next() == Some(want)).then_some(()).ok_or(s)
    });
    started.elapsed()
}

/// `bmc_port`: where on this host the appliance's guest forward to the BMC leads.
pub fn check(a: &Appliance, ws: &Path, dir: &Path, bmc_port: u16) {
    // BMO and Ironic, as the agent's /readyz reports them.
    wait_for(
        "Ironic and baremetal-operator ready in the agent's /readyz",
        Duration::from_secs(600),
        || {
            let v = a.readyz()?;
            let s = &v["services"];
            (s["ironic"]["state"] == "ok" && s["baremetal-operator"]["state"] == "ok")
                .then_some(())
                .ok_or(v.to_string())
        },
    );
    let crds = a.kubectl(&["get", "crd", "-o", "name"]).unwrap();
    for crd in [
        "baremetalhosts.metal3.io",
        "hostfirmwaresettings.metal3.io",
        "preprovisioningimages.metal3.io",
        "dataimages.metal3.io",
    ] {
        assert!(crds.contains(crd), "{crd} not applied: {crds}");
    }

    // The fixture's node-01 Secret has another password than the BMC's.
    let sushy = Sushy::fake(dir, bmc_port, &systems(), "admin", "pw-0");
    std::fs::write(dir.join("metal3-hosts.yaml"), fixture(ws)).unwrap();
    let started = Instant::now();
    wait_for(
        "the Metal3 fixture to apply",
        Duration::from_secs(120),
        || {
            a.kubectl(&[
                "apply",
                "-f",
                dir.join("metal3-hosts.yaml").to_str().unwrap(),
            ])
        },
    );
    let available = wait_state(a, "node-00", "available", Duration::from_secs(600));
    eprintln!(
        "metal3: node-00 registered and available {:.0} s after its creation",
        started.elapsed().as_secs_f64().max(available.as_secs_f64())
    );
    let error = wait_for(
        "node-01's registration error",
        Duration::from_secs(300),
        || {
            let s = bmh(a, "node-01", ".status.errorType}|{.status.errorMessage")?;
            s.starts_with("registration error|")
                .then_some(s.clone())
                .ok_or(s)
        },
    );
    assert!(
        error.contains("401") && error.contains("Incorrect username or password"),
        "{error}"
    );
    a.kubectl(&[
        "-n",
        "site",
        "patch",
        "secret",
        "node-01-bmc",
        "--type=merge",
        "-p",
        r#"{"stringData": {"password": "pw-0"}}"#,
    ])
    .unwrap();
    wait_state(a, "node-01", "available", Duration::from_secs(600));
    assert_eq!(bmh(a, "node-01", ".status.errorType").unwrap(), "");

    // SIP claims both real hosts.
    wait_for("the SIPCluster Ready", Duration::from_secs(300), || {
        let s = a.kubectl(&[
            "-n",
            "site",
            "get",
            "sipcluster",
            "edge",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ])?;
        (s == "True").then_some(()).ok_or(s)
    });
    let claimed = a
        .kubectl(&[
            "-n",
            "site",
            "get",
            "bmh",
            "-l",
            "sip.airshipit.org/cluster-name=edge",
            "-o",
            "name",
        ])
        .unwrap();
    assert_eq!(claimed.lines().count(), 2, "{claimed}");

    // A claimed host provisioned with the live ISO the agent serves (as the BMC reaches the agent).
    let url = format!(
        "https://127.0.0.1:{}/files/foothold/site/os_images/{ISO_NAME}",
        a.agent_port
    );
    let node = &systems()[0];
    let patch = serde_json::json!({"spec": {"image": {"url": url, "format": "live-iso"}}});
    patch_bmh(a, "node-00", "merge", &patch.to_string());
    let took = wait_state(a, "node-00", "provisioned", Duration::from_secs(900));
    eprintln!(
        "metal3: node-00 provisioning → provisioned in {:.0} s",
        took.as_secs_f64()
    );
    // BMO records the power state at its next look at the host.
    wait_powered(a, "node-00", "true");
    let inserted = sushy.requests("VirtualMedia.InsertMedia");
    assert!(
        inserted.iter().any(|l| l.contains(&node.uuid)),
        "no InsertMedia for {}: {inserted:?}",
        node.uuid
    );
    let claimed_by = bmh(
        a,
        "node-00",
        ".metadata.labels.sip\\.airshipit\\.org/cluster-name",
    )
    .unwrap();
    assert_eq!(claimed_by, "edge");
    eprintln!(
        "{}",
        a.kubectl(&["-n", "site", "get", "bmh", "-o", "wide"])
            .unwrap()
    );

    // Deprovisioned: the image removed, the host is powered off and its media ejected.
    let ejects = sushy.requests("VirtualMedia.EjectMedia").len();
    patch_bmh(
        a,
        "node-00",
        "json",
        r#"[{"op": "remove", "path": "/spec/image"}]"#,
    );
    wait_state(a, "node-00", "available", Duration::from_secs(900));
    wait_powered(a, "node-00", "false");
    assert!(
        sushy.requests("VirtualMedia.EjectMedia").len() > ejects,
        "no EjectMedia after deprovisioning"
    );
    // Ironic's own log of it, on the appliance.
    let journal = a.ssh("sudo journalctl -u ironic.service --no-pager -o cat | tail -n 400");
    assert!(journal.contains("deploying"), "{journal}");
}

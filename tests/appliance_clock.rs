//! Four hundred days later: the booted appliance's clock moved past the end of every one-year certificate its
//! first boot made, as at a site left alone for more than a year. Its daily timers (`foothold-kube-pki-renew`,
//! `foothold-pki`) are then due; what they start renews Kubernetes' certificates and kubeconfigs from the same
//! CAs and the agent's and Ironic's serving certificates from the site CA; the kubelet renews its client and
//! serving certificates by requests that are approved. The site goes on: the API server, the node `Ready`, a
//! pod's image pulled through the agent, the agent's controllers leading, BMO registering a host through Ironic,
//! and the agent's `/metrics` showing the new ends. Last in the test: nothing runs after it on such a clock.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::{metal3, wait_for, Appliance};

/// How far the clock moves: past the end of a one-year certificate and of the agent's 397 days.
const DAYS: i64 = 400;

/// A year, less the margin a certificate renewed at the moved clock must still have before it ends.
const RENEWED_FOR: i64 = 300 * 86_400;

pub(crate) fn four_hundred_days_later(a: &Appliance, dir: &Path, fake_bmc_port: u16) {
    let before = expiries(&a.metrics());
    let now = epoch(&a.ssh("date +%s"));
    let moved = epoch(&a.ssh(&format!("sudo date -u -s @{} +%s", now + DAYS * 86_400)));
    // The timers are due within a day of any clock (daily, up to an hour late); one a year behind is due now.
    for timer in ["foothold-pki.timer", "foothold-kube-pki-renew.timer"] {
        wait_for(
            &format!("{timer} due within a day of the moved clock"),
            Duration::from_secs(60),
            || {
                let next = super::try_run(&mut a.ssh_command(&format!(
                    "next=$(sudo systemctl show -p NextElapseUSecRealtime --value {timer}) \
                     && [ -n \"$next\" ] && date -d \"$next\" +%s"
                )))?;
                match next.trim().parse::<i64>() {
                    Ok(t) if t > 0 && t <= moved + 25 * 3600 => Ok(()),
                    _ => Err(format!("next elapse {next:?}, the clock at {moved}")),
                }
            },
        );
    }
    // What they start (a oneshot each: this returns once both are done; a renewal that waited for the restarts
    // it asks for never was).
    let log = a.ssh(
        "sudo timeout 600 systemctl start foothold-kube-pki-renew.service foothold-pki.service \
         && sudo journalctl -u foothold-kube-pki-renew.service -o cat --no-pager | grep 'kube-pki-renew:' \
         | tail -n 2",
    );
    foothold_e2e::say!("appliance, {DAYS} days later: {}", log.trim());
    for file in [
        "/etc/kubernetes/pki/apiserver.crt",
        "/etc/kubernetes/pki/etcd/server.crt",
        "/etc/foothold/tls/cert.pem",
        "/etc/ironic/tls/cert.pem",
    ] {
        let end = ends(a, &format!("sudo cat {file}"));
        assert!(
            end > moved + RENEWED_FOR,
            "{file} ends at {end}, the clock is at {moved}"
        );
    }
    // etcd, not restarted by the renewal, serves its renewed certificate: it reads its files for each new
    // connection, one to its IP address (no server name) as the API server's too.
    let etcd = ends(
        a,
        "sudo openssl s_client -connect 127.0.0.1:2379 -CAfile /etc/kubernetes/pki/etcd/ca.crt \
         -cert /etc/kubernetes/pki/apiserver-etcd-client.crt -key /etc/kubernetes/pki/apiserver-etcd-client.key \
         -verify_return_error </dev/null 2>/dev/null",
    );
    assert!(
        etcd > moved + RENEWED_FOR,
        "etcd serves a certificate ending at {etcd}"
    );

    // The API server serves on its renewed certificate, which kubectl on the appliance verifies at its clock
    // with the sudo user's kubeconfig, made again too. kubectl on this host uses that kubeconfig without
    // verifying the server: the renewed certificate begins 400 days after this host's clock. As long as the first
    // boot's start may take: on a slow host the API server's first start under the load of every restarted
    // service failed its post-start hook on timeouts and was started again (first boot: serving after 280 s).
    wait_for(
        "the API server, on its renewed certificates",
        Duration::from_secs(600),
        || {
            let s = super::try_run(
                &mut a.ssh_command("kubectl --request-timeout=30s get --raw /readyz"),
            )?;
            (s.trim() == "ok").then_some(()).ok_or(s)
        },
    );
    a.fetch_kubeconfig(false);
    wait_for(
        "the node Ready, its heartbeat after the moved clock",
        Duration::from_secs(600),
        || {
            let s = a.kubectl(&[
                "get",
                "nodes",
                "-o",
                r#"jsonpath={.items[0].status.conditions[?(@.type=="Ready")].status} {.items[0].status.conditions[?(@.type=="Ready")].lastHeartbeatTime}"#,
            ])?;
            match s.split_once(' ') {
                Some(("True", beat))
                    if epoch(&a.ssh(&format!("date -d '{beat}' +%s"))) >= moved =>
                {
                    Ok(())
                }
                _ => Err(s),
            }
        },
    );

    // The kubelet's client certificate ended: it asked again with the kubeconfig foothold-kube-pki made, and
    // the controller manager approved a node asking for itself (kubeadm's auto-approval binding, an add-on).
    let client = wait_for(
        "the kubelet's client certificate renewed",
        Duration::from_secs(600),
        || {
            let end = try_ends(
                a,
                "sudo cat /var/lib/kubelet/pki/kubelet-client-current.pem",
            )?;
            (end > moved + RENEWED_FOR)
                .then_some(end)
                .ok_or(format!("ends at {end}"))
        },
    );
    let csrs: Value =
        serde_json::from_str(&a.kubectl(&["get", "csr", "-o", "json"]).unwrap()).unwrap();
    let asked = super::kube::decided(&csrs, "kubernetes.io/kube-apiserver-client-kubelet");
    assert!(
        asked
            .iter()
            .any(|c| c.starts_with("\"Approved\" \"AutoApproved\"")),
        "the kubelet's client certificate requests: {asked:?}"
    );
    // Its serving certificate ended too: it asked again, the agent approved, and it serves the new one, verified
    // with the cluster CA for its address at the moved clock.
    let serving = wait_for(
        "the kubelet serving a renewed certificate",
        Duration::from_secs(600),
        || {
            let end = try_ends(
                a,
                "ip=$(sed -n 's/^KUBE_NODE_ADDRESS=//p' /etc/foothold/kubernetes.env); \
                 sudo openssl s_client -connect \"$ip:10250\" -CAfile /etc/kubernetes/pki/ca.crt \
                 -verify_return_error -verify_ip \"$ip\" </dev/null 2>/dev/null",
            )?;
            (end > moved + RENEWED_FOR)
                .then_some(end)
                .ok_or(format!("ends at {end}"))
        },
    );
    foothold_e2e::say!(
        "appliance, {DAYS} days later: the kubelet's client certificate ends in {} days, its serving one in {}",
        (client - moved) / 86_400,
        (serving - moved) / 86_400
    );

    // The agent serves its renewed certificate (it loaded it by itself), verified with the site CA at the moved
    // clock, and containerd pulls through it: a pod whose image is always pulled asks the agent for its manifest.
    let served = ends(
        a,
        "openssl s_client -connect 127.0.0.1:5000 -CAfile /etc/foothold/tls/ca.pem -verify_return_error \
         </dev/null 2>/dev/null",
    );
    assert!(
        served > moved + RENEWED_FOR,
        "the agent serves a certificate ending at {served}"
    );
    // And reads need a credential from here on: an anonymous one is refused (once the agent took its credentials
    // file again, within seconds), and the appliance's containerd pulls with its own (`appliance`, made at the
    // first boot, its token root's only).
    a.ssh("sudo foothold-agent credentials reads credential");
    let url = format!(
        "https://127.0.0.1:{}/v2/docker.io/library/busybox/manifests/1.35",
        a.agent_port
    );
    let accept = "Accept: application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json";
    let manifest = |auth: &str| {
        let mut args = vec!["-k", "-H", accept, &url];
        if !auth.is_empty() {
            args.extend(["-u", auth]);
        }
        foothold_e2e::http_code(&args)
    };
    wait_for(
        "an anonymous read refused",
        Duration::from_secs(60),
        || match manifest("").as_str() {
            "401" => Ok(()),
            code => Err(code.to_owned()),
        },
    );
    let token = a.ssh("sudo cat /etc/foothold/read-token");
    assert_eq!(manifest(&format!("appliance:{}", token.trim())), "200");
    // containerd holds the image: it asks whether the tag still names it, by HEAD.
    let asked = || a.manifest_requests("GET") + a.manifest_requests("HEAD");
    let pulls = asked();
    let pod = super::POD
        .replace(
            "\"name\": \"lookup\", \"namespace\"",
            "\"name\": \"lookup-later\", \"namespace\"",
        )
        .replace(
            "\"image\": \"docker.io/library/busybox:1.35\",",
            "\"image\": \"docker.io/library/busybox:1.35\", \"imagePullPolicy\": \"Always\",",
        );
    assert_ne!(pod, super::POD);
    let phase = a.run_pod(dir, "lookup-later", &pod);
    assert_eq!(
        phase,
        "Succeeded",
        "{}",
        a.kubectl(&["describe", "pod", "lookup-later"])
            .unwrap_or_else(|e| e)
    );
    assert!(
        asked() > pulls,
        "containerd did not ask the agent for the image"
    );

    // The agent's controllers lead again, on its own renewed kubeconfig; BMO, on its own, registers a host
    // through Ironic, whose renewed certificate it verifies.
    a.wait_leading();
    metal3::registers(a, dir, fake_bmc_port);

    // /metrics says so: each renewed certificate's end moved past the clock's. The kubelet's, which only root
    // reads with their keys, through their copies without them (foothold-kubelet-certs.path follows the
    // kubelet's directory); its client certificate may not have been renewed before (its first request waits for
    // the add-on that lets it be approved), so it may have had no end to report then.
    let renewed = |after: &BTreeMap<String, f64>, name: &str| {
        after.get(name).is_some_and(|n| {
            *n > (moved + RENEWED_FOR) as f64 && before.get(name).is_none_or(|b| n > b)
        })
    };
    let names = [
        "agent",
        "kube-apiserver",
        "ironic",
        "kubelet-serving",
        "kubelet-client",
    ];
    for name in &names[..4] {
        assert!(
            before.contains_key(*name),
            "{name} not in /metrics before: {before:?}"
        );
    }
    let after = wait_for(
        "/metrics showing every renewed certificate's new end",
        Duration::from_secs(60),
        || {
            let after = expiries(&a.metrics());
            names
                .iter()
                .all(|n| renewed(&after, n))
                .then_some(after.clone())
                .ok_or(format!(
                    "before {before:?}, now {after:?}, the clock at {moved}"
                ))
        },
    );
    foothold_e2e::say!("appliance, {DAYS} days later: certificates' ends in /metrics: {after:?}");
}

/// Seconds since the epoch, as `date +%s` prints them.
fn epoch(s: &str) -> i64 {
    s.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{s:?}: not a time: {e}"))
}

/// When the certificate `command` prints (first in its output, PEM) ends, by the appliance's clock.
fn try_ends(a: &Appliance, command: &str) -> Result<i64, String> {
    let out = super::try_run(&mut a.ssh_command(&format!(
        "end=$({{ {command}; }} | openssl x509 -noout -enddate | cut -d= -f2) && date -d \"$end\" +%s"
    )))?;
    out.trim().parse().map_err(|e| format!("{out:?}: {e}"))
}

fn ends(a: &Appliance, command: &str) -> i64 {
    try_ends(a, command).unwrap_or_else(|e| panic!("{command}: {e}"))
}

/// `foothold_certificate_expiry_seconds` by name, from the agent's `/metrics`.
fn expiries(metrics: &str) -> BTreeMap<String, f64> {
    metrics
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("foothold_certificate_expiry_seconds{name=\"")?;
            let (name, value) = rest.split_once("\"} ")?;
            Some((name.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiries_are_read_by_name() {
        let m = "# TYPE foothold_certificate_expiry_seconds gauge\n\
                 foothold_certificate_expiry_seconds{name=\"agent\"} 1799999999\n\
                 foothold_certificate_expiry_seconds{name=\"site-ca\"} 2.1e9\n\
                 foothold_http_requests_total{route=\"manifest\"} 3\n";
        let e = expiries(m);
        assert_eq!(e.len(), 2);
        assert_eq!(e["agent"], 1_799_999_999.0);
        assert_eq!(e["site-ca"], 2.1e9);
    }
}

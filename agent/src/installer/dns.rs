//! The workload cluster's DNS on an offline site. kubeadm's CoreDNS forwards every name outside the cluster to
//! the resolvers of the node it runs on (`forward . /etc/resolv.conf`), and CoreDNS exits at start when that file
//! names none ("plugin/forward: no nameservers found"). Foothold's nodes have none (the site is offline; the
//! node image's `/etc/resolv.conf` says so): CoreDNS crash-looped on every cluster the installer made, kubelet
//! starting it again and again on the busiest host of a cluster coming up, and the cluster had no DNS at all.
//!
//! So after the joins, before any node is Ready (CoreDNS's pods wait for a Ready node, so they start once, with
//! the final Corefile), the installer asks every host which resolvers kubelet gives pods there, and when one has
//! none, takes the `forward` out of the Corefile: it keeps the cluster's zone and loses only the upstream it could
//! not use. With resolvers on every host, kubeadm's Corefile stays as it is.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;

use crate::installer::api::retrying;
use crate::installer::host::DONE;

/// The script that prints `FOOTHOLD-STEP <n> <file>`: the number of `nameserver` lines in the resolver file
/// kubelet gives pods of `dnsPolicy: Default` (CoreDNS's): its configuration's `resolvConf`, else
/// `/etc/resolv.conf`.
pub fn resolvers_script() -> String {
    format!(
        "set -u\nf=$(sed -n 's/^resolvConf:[[:space:]]*//p' /var/lib/kubelet/config.yaml 2>/dev/null | tr -d '\"' | head -n 1)\n\
         f=${{f:-/etc/resolv.conf}}\n\
         n=$(grep -cE '^[[:space:]]*nameserver[[:space:]]' \"$f\" 2>/dev/null || true)\n\
         echo \"{DONE} ${{n:-0}} $f\"\n"
    )
}

/// What [`resolvers_script`] said: the number of resolvers and the file, or why that is not what it says.
pub fn parse_resolvers(said: &str) -> Result<(u32, String), String> {
    let (n, file) = said
        .split_once(' ')
        .ok_or_else(|| format!("{said:?}: not `<count> <file>`"))?;
    let n = n
        .parse()
        .map_err(|_| format!("{said:?}: {n:?} is not a count"))?;
    Ok((n, file.to_owned()))
}

/// `corefile` without its `forward . /etc/resolv.conf` (its block included, if it has one); `None` when it has
/// no such line (already taken out, or a Corefile someone wrote).
pub fn without_upstream(corefile: &str) -> Option<String> {
    let mut out = String::with_capacity(corefile.len());
    let mut found = false;
    let mut depth = 0usize;
    for line in corefile.split_inclusive('\n') {
        if depth > 0 {
            depth += line.matches('{').count();
            depth -= line.matches('}').count().min(depth);
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() >= 3 && words[..3] == ["forward", ".", "/etc/resolv.conf"] {
            found = true;
            depth = line
                .matches('{')
                .count()
                .saturating_sub(line.matches('}').count());
            continue;
        }
        out.push_str(line);
    }
    found.then_some(out)
}

/// How long the API server has to take the change: it may be restarting just after the joins.
const PATCH: Duration = Duration::from_secs(10 * 60);

/// Takes the upstream out of the `coredns` ConfigMap's Corefile (kube-system), retrying while the API server
/// does not answer. `Ok(false)` when there was none to take out. The installer is the cluster's only writer
/// while it installs: the Corefile read is the one patched.
pub async fn answer_cluster_names_only(api: &kube::Client) -> Result<bool, String> {
    use kube::api::{Api, Patch, PatchParams};
    const STEP: &str = "cluster DNS";
    let maps: Api<ConfigMap> = Api::namespaced(api.clone(), "kube-system");
    let deadline = Instant::now() + PATCH;
    let map = retrying(STEP, deadline, || maps.get("coredns"))
        .await
        .map_err(|e| format!("the ConfigMap kube-system/coredns: {e}"))?;
    let corefile = map
        .data
        .as_ref()
        .and_then(|d| d.get("Corefile"))
        .ok_or("the ConfigMap kube-system/coredns has no Corefile")?;
    let Some(changed) = without_upstream(corefile) else {
        return Ok(false);
    };
    let patch = Patch::Merge(serde_json::json!({"data": {"Corefile": changed}}));
    let params = PatchParams::default();
    retrying(STEP, deadline, || maps.patch("coredns", &params, &patch))
        .await
        .map_err(|e| format!("patching kube-system/coredns: {e}"))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kubeadm v1.35.4's Corefile (`cmd/kubeadm/app/phases/addons/dns/manifests.go`) for `cluster.local`.
    const KUBEADM: &str = ".:53 {\n    errors\n    health {\n       lameduck 5s\n    }\n    ready\n    \
        kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n       fallthrough in-addr.arpa ip6.arpa\n       ttl 30\n    }\n    \
        prometheus :9153\n    forward . /etc/resolv.conf {\n       max_concurrent 1000\n    }\n    \
        cache 30 {\n       disable success cluster.local\n       disable denial cluster.local\n    }\n    \
        loop\n    reload\n    loadbalance\n}\n";

    #[test]
    fn the_upstream_and_only_it_leaves_kubeadms_corefile() {
        let out = without_upstream(KUBEADM).unwrap();
        assert_eq!(
            out,
            KUBEADM.replace(
                "    forward . /etc/resolv.conf {\n       max_concurrent 1000\n    }\n",
                ""
            )
        );
        assert!(out.contains("    cache 30 {\n       disable success cluster.local\n"));
        assert!(out.ends_with("    loadbalance\n}\n"), "{out}");
        // Once out, there is nothing left to take: a second run changes nothing.
        assert_eq!(without_upstream(&out), None);
    }

    #[test]
    fn a_one_line_forward_goes_and_other_forwards_stay() {
        let one_line = ".:53 {\n    forward . /etc/resolv.conf\n    cache 30\n}\n";
        assert_eq!(
            without_upstream(one_line).as_deref(),
            Some(".:53 {\n    cache 30\n}\n")
        );
        let braces_on_one_line =
            ".:53 {\n    forward . /etc/resolv.conf { max_concurrent 10 }\n    loop\n}\n";
        assert_eq!(
            without_upstream(braces_on_one_line).as_deref(),
            Some(".:53 {\n    loop\n}\n")
        );
        // A Corefile that forwards to named servers is someone's choice: left alone.
        assert_eq!(
            without_upstream(".:53 {\n    forward . 10.0.0.53\n}\n"),
            None
        );
    }

    #[test]
    fn the_resolver_count_is_read_from_the_scripts_line() {
        assert_eq!(
            parse_resolvers("0 /etc/resolv.conf"),
            Ok((0, "/etc/resolv.conf".into()))
        );
        assert_eq!(
            parse_resolvers("2 /run/systemd/resolve/resolv.conf"),
            Ok((2, "/run/systemd/resolve/resolv.conf".into()))
        );
        assert!(parse_resolvers("x /etc/resolv.conf").is_err());
        assert!(parse_resolvers("2").is_err());
    }

    #[test]
    fn the_script_reads_kubelets_resolver_file_and_counts_its_nameservers() {
        let dir = tempfile::tempdir().unwrap();
        let resolv = dir.path().join("resolv.conf");
        std::fs::write(
            &resolv,
            "# no resolver\nsearch example\n nameserver 10.0.0.53\nnameserver 10.0.0.54\n#nameserver 1.1.1.1\n",
        )
        .unwrap();
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            format!(
                "kind: KubeletConfiguration\nresolvConf: \"{}\"\n",
                resolv.display()
            ),
        )
        .unwrap();
        // The script as it runs on a host, with kubelet's configuration at `config`: what it printed.
        let said = |config: &std::path::Path| {
            let script = resolvers_script()
                .replace("/var/lib/kubelet/config.yaml", config.to_str().unwrap());
            let out = std::process::Command::new("sh")
                .args(["-c", &script])
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap()
        };
        let line = said(&config);
        let line = line.trim().strip_prefix(DONE).unwrap().trim();
        assert_eq!(parse_resolvers(line), Ok((2, resolv.display().to_string())));
        // No configuration: /etc/resolv.conf, whatever it holds here.
        let said = said(&dir.path().join("missing"));
        assert!(said.trim().ends_with(" /etc/resolv.conf"), "{said}");
    }
}

//! The agent's service in an image: its user, and `serve`'s flags in the configuration file the unit names.

use super::configure::{Configuration, AGENT_USER};
use crate::spec::{Spec, AGENT_CONFIG};

/// The agent: the token made at first boot is the admin credential, the operator's named ones are in
/// /etc/foothold/credentials.yaml (`foothold-agent credentials`), and the images the build imported only an
/// admin writes; HTTPS if asked, with the certificate the site CA
/// issues for the provisioning address too (foothold-pki.service; reloaded when renewed). `/metrics` reports
/// the expiry of that certificate, of the site CA and of those Kubernetes and Ironic serve with.
pub(super) fn agent(spec: &Spec, c: &mut Configuration) {
    c.system_users.push(AGENT_USER.into());
    let mut args = [
        "--listen",
        "0.0.0.0:5000",
        "--data",
        "/var/lib/foothold",
        "--token-file",
        "/etc/foothold/token",
        "--credentials",
        "/etc/foothold/credentials.yaml",
        "--protected-repositories",
    ]
    .map(String::from)
    .to_vec();
    args.push(format!("/var/lib/foothold/{}", super::data::PROTECTED_FILE));
    if spec.components.agent_tls {
        args.extend(
            [
                "--tls-cert",
                "/etc/foothold/tls/cert.pem",
                "--tls-key",
                "/etc/foothold/tls/key.pem",
                "--certificate",
                "site-ca=/etc/foothold/tls/ca.pem",
            ]
            .map(String::from),
        );
    }
    if spec.components.kubernetes.is_some() {
        args.extend(
            [
                "--certificate",
                "kubernetes-ca=/etc/kubernetes/pki/ca.crt",
                "--certificate",
                "kube-apiserver=/etc/kubernetes/pki/apiserver.crt",
                // The kubelet's, without their keys (foothold-kubelet-certs), as it renews them.
                "--certificate",
                "kubelet-client=/run/foothold/kubelet-certs/client.pem",
                "--certificate",
                "kubelet-serving=/run/foothold/kubelet-certs/server.pem",
                // The kubelet asks for its serving certificate (serverTLSBootstrap); the agent approves it.
                "--approve-kubelet-serving",
            ]
            .map(String::from),
        );
    }
    if spec.components.metal3.is_some() {
        args.extend(crate::metal3::ready_checks(spec));
    }
    // The API server asks the agent before a BPA cluster's host is deprovisioned, deleted or powered off
    // (the drain hold): over HTTPS on loopback, verifying the agent with the site CA.
    if spec.components.agent_tls
        && spec.components.kubernetes.is_some()
        && spec.components.metal3.is_some()
    {
        args.extend(
            [
                "--admission-url",
                "https://127.0.0.1:5000",
                "--admission-ca",
                "/etc/foothold/tls/ca.pem",
            ]
            .map(String::from),
        );
    }
    // Software's package URLs name the agent where the compute nodes reach it.
    if let Some(p) = &spec.network.provisioning {
        let scheme = if spec.components.agent_tls {
            "https"
        } else {
            "http"
        };
        args.push("--advertise-url".into());
        args.push(format!(
            "{scheme}://{}:5000",
            p.address.split('/').next().unwrap_or_default()
        ));
    }
    args.extend(spec.components.agent_args.iter().cloned());
    // `validate` refused agentArgs that are not flags; Foothold's own are.
    let flags = crate::spec::agent_flags(&args).expect("validated agentArgs");
    c.add(AGENT_CONFIG, yaml(&flags), 0o644);
    let names: Vec<String> = spec
        .network
        .provisioning
        .iter()
        .map(|p| format!("IP:{}", p.address.split('/').next().unwrap_or_default()))
        .collect();
    c.add("/etc/foothold/tls-names", names.join(",") + "\n", 0o644);
}

/// `serve`'s configuration file for `flags` (long name, value; none for a flag alone), in their order: a name
/// given once is one value (a flag alone `true`), given more than once a list, as repeating it on the command
/// line would be. Values are quoted: the agent takes them as written.
fn yaml(flags: &[(String, Option<String>)]) -> String {
    let mut keys: Vec<(&str, Vec<String>)> = Vec::new();
    for (name, value) in flags {
        let value = match value {
            Some(v) => serde_json::Value::from(v.as_str()).to_string(),
            None => "true".into(),
        };
        match keys.iter_mut().find(|(k, _)| k == name) {
            Some((_, values)) => values.push(value),
            None => keys.push((name, vec![value])),
        }
    }
    let mut text = String::from(
        "# foothold-agent serve's flags by their long names (`foothold-agent serve --help`), written by\n\
         # foothold-build from the appliance spec. A flag's FOOTHOLD_* variable (a drop-in's Environment=) wins\n\
         # over this file.\n",
    );
    for (k, values) in keys {
        match values.as_slice() {
            [one] => text.push_str(&format!("{k}: {one}\n")),
            many => text.push_str(&format!("{k}: [{}]\n", many.join(", "))),
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(args: &[&str]) -> Vec<(String, Option<String>)> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        crate::spec::agent_flags(&args).unwrap()
    }

    #[test]
    fn repeated_flags_become_lists_and_lone_flags_true() {
        let text = yaml(&flags(&[
            "--listen",
            "0.0.0.0:5000",
            "--certificate",
            "a=/x",
            "--no-controllers",
            "--certificate=b=/y \"quoted\"",
            "--lease-duration-seconds",
            "60",
        ]));
        let body: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            body,
            [
                "listen: \"0.0.0.0:5000\"",
                "certificate: [\"a=/x\", \"b=/y \\\"quoted\\\"\"]",
                "no-controllers: true",
                "lease-duration-seconds: \"60\"",
            ]
        );
    }
}

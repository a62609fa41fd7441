//! What the booted appliance's own Kubernetes shows of trust: the kubelet's serving certificate, issued by the
//! cluster CA on a request the agent approved, and the images the build made (pause, CoreDNS) run by digest.
//! (Its client certificate renewed by its own request: `appliance_clock.rs`.)

use serde_json::Value;

use super::Appliance;

/// The kubelet serves a certificate of the cluster CA for its node's address (which the API server verified to
/// read the pod's logs above: `--kubelet-certificate-authority`), asked for by a request the agent approved.
pub(crate) fn kubelet_serves_an_approved_certificate(a: &Appliance) {
    let served = a.ssh(
        "ip=$(sed -n 's/^KUBE_NODE_ADDRESS=//p' /etc/foothold/kubernetes.env); \
         sudo openssl s_client -connect \"$ip:10250\" -CAfile /etc/kubernetes/pki/ca.crt -verify_return_error \
         -verify_ip \"$ip\" </dev/null 2>&1 | grep -E '^(subject|issuer)=|Verify return code' || true",
    );
    assert!(
        served.contains("Verify return code: 0 (ok)") && served.contains("system:node:"),
        "the kubelet's serving certificate, verified with the cluster CA for its address:\n{served}"
    );
    let csrs: Value =
        serde_json::from_str(&a.kubectl(&["get", "csr", "-o", "json"]).unwrap()).unwrap();
    let serving = decided(&csrs, "kubernetes.io/kubelet-serving");
    assert!(
        serving
            .iter()
            .any(|c| c.starts_with("\"Approved\" \"FootholdNodeAddresses\"")),
        "the kubelet's serving certificate requests: {serving:?}"
    );
}

/// Each condition of the certificate requests to `signer` in `csrs` (a list), as `"type" "reason": "message"`.
pub(crate) fn decided(csrs: &Value, signer: &str) -> Vec<String> {
    csrs["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["spec"]["signerName"] == signer)
        .flat_map(|c| {
            c["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|c| format!("{} {}: {}", c["type"], c["reason"], c["message"]))
        .collect()
}

/// pause and CoreDNS run by the digests of the images the build made (`manifest`, its build manifest), as
/// containerd holds them (`images`: `ctr images ls -q`).
pub(crate) fn system_images_by_digest(a: &Appliance, manifest: &Value, images: &str) {
    // containerd keeps a reference with a tag and a digest by its digest alone.
    for name in ["pause", "coredns"] {
        let made = &manifest["inputs"][format!("kubernetes.{name}.image")];
        let reference = made["reference"].as_str().unwrap_or_default();
        let by_digest = format!(
            "{}@{}",
            reference
                .rsplit_once(':')
                .map_or(reference, |(repo, _)| repo),
            made["digest"].as_str().unwrap_or_default()
        );
        assert!(
            images.lines().any(|l| l == by_digest),
            "{name}: {by_digest} not in containerd: {images}"
        );
    }
    let coredns = a
        .kubectl(&[
            "-n",
            "kube-system",
            "get",
            "deployment/coredns",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ])
        .unwrap();
    assert!(coredns.contains("@sha256:"), "CoreDNS by digest: {coredns}");
}

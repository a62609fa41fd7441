//! A compute node's image (`components.node`): containerd pulling every registry's images through the
//! appliance's agent, and a ready marker once the node's prefetched images are in. Pure: the configuration
//! rendered from the spec as (path, text, mode); the units and scripts are in the overlay (`rootfs/`).

use crate::spec::{Node, SITE_CA};

/// Debian packages a node needs beyond the boot essentials.
pub const PACKAGES: &[&str] = &["containerd", "runc", "ca-certificates"];

/// The units a node enables instead of the agent's.
pub const UNITS: &[&str] = &["containerd.service", "foothold-node-ready.service"];

/// Every file, as (absolute path, text, mode).
pub fn render(n: &Node) -> Vec<(String, String, u32)> {
    let ca = if n.ca.is_some() { SITE_CA } else { "" };
    vec![
        (
            "/etc/foothold/mirror.env".into(),
            format!(
                "# Read by containerd's start (foothold-agent mirror-config) and the node's ready report; written by\n\
                 # foothold-build.\nFOOTHOLD_MIRROR_ENDPOINT={}\nFOOTHOLD_MIRROR_REGISTRIES={}\nFOOTHOLD_MIRROR_CA={ca}\n\
                 FOOTHOLD_PREFETCH=\"{}\"\n",
                n.mirror,
                n.registries.join(","),
                n.prefetch.join(" "),
            ),
            0o644,
        ),
        (
            "/etc/containerd/config.toml".into(),
            "# containerd on a compute node: every registry mirrored by the appliance's agent (certs.d, written at\n\
             # each start by foothold-agent mirror-config).\nversion = 2\n\n\
             [plugins.\"io.containerd.grpc.v1.cri\".registry]\n  config_path = \"/etc/containerd/certs.d\"\n"
                .into(),
            0o644,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_pulls_through_the_mirror_with_the_site_ca() {
        let n: Node = serde_saphyr::from_str(
            "mirror: https://172.22.0.1:5000\nca: {path: site-ca.pem}\nregistries: [quay.io]\nprefetch: [docker.io/library/busybox:1.35]\n",
        )
        .unwrap();
        let files = render(&n);
        let env = &files[0].1;
        for want in [
            "FOOTHOLD_MIRROR_ENDPOINT=https://172.22.0.1:5000\n",
            "FOOTHOLD_MIRROR_REGISTRIES=quay.io\n",
            "FOOTHOLD_MIRROR_CA=/etc/foothold/site-ca.pem\n",
            "FOOTHOLD_PREFETCH=\"docker.io/library/busybox:1.35\"\n",
        ] {
            assert!(env.contains(want), "{want} in {env}");
        }
        assert!(files[1]
            .1
            .contains("config_path = \"/etc/containerd/certs.d\""));
    }
}

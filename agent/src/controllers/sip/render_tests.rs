//! The SIP services' rendering, pure: objects from a spec, the planned roles and what was observed.

use std::collections::BTreeMap;

use serde_json::json;

use super::observe::{AuthSecrets, Observed};
use super::render::*;
use crate::controllers::sip::observe::Bmc;
use crate::crd::metal3::BareMetalHost;
use crate::crd::sip::{RoleHosts, SIPCluster};

fn sip(services: serde_json::Value) -> SIPCluster {
    serde_json::from_value(json!({
        "apiVersion": "airship.airshipit.org/v1", "kind": "SIPCluster",
        "metadata": {"name": "edge", "namespace": "site"},
        "spec": {"nodes": {}, "services": services},
    }))
    .unwrap()
}

fn host(name: &str, ip: &str) -> Observed {
    Observed {
        bmh: BareMetalHost::new(name, Default::default()),
        network_data: Ok(format!(
            r#"{{"networks": [{{"id": "oam", "ip_address": "{ip}/24"}}]}}"#
        )),
        bmc: Ok(Bmc {
            ip: "10.1.0.1".into(),
            username: "admin".into(),
            password: "pw".into(),
        }),
    }
}

fn render(spec: serde_json::Value, auth: &[AuthSecrets]) -> Result<Desired, String> {
    let hosts = [("site/cp-0".to_owned(), host("cp-0", "10.0.0.10"))];
    let by_name: BTreeMap<String, &Observed> = hosts.iter().map(|(k, o)| (k.clone(), o)).collect();
    let roles = BTreeMap::from([(
        "ControlPlane".to_owned(),
        RoleHosts {
            active: vec!["site/cp-0".into()],
            standby: vec![],
        },
    )]);
    services(&sip(spec), "site", &roles, &by_name, auth)
}

#[test]
fn a_control_plane_load_balancer_is_a_config_secret_a_deployment_and_a_node_port_service() {
    let spec = json!({"loadBalancerControlPlane": [{"image": "haproxy:2.8", "nodePort": 30443,
                                                     "nodeLabels": {"role": "lb"}}]});
    let d = render(spec.clone(), &[]).unwrap();
    let cfg = d.secrets[0].string_data.as_ref().unwrap()["haproxy.cfg"].clone();
    assert!(cfg.contains("10.0.0.10:6443"), "{cfg}");
    let dep = &d.deployments[0];
    assert_eq!(dep.metadata.name.as_deref(), Some("edge-lb-control-plane"));
    let pod = dep.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    assert_eq!(pod.node_selector.as_ref().unwrap()["role"], "lb");
    assert_eq!(pod.containers[0].image.as_deref(), Some("haproxy:2.8"));
    let svc = d.services[0].spec.as_ref().unwrap();
    assert_eq!(svc.type_.as_deref(), Some("NodePort"));
    assert_eq!(svc.ports.as_ref().unwrap()[0].node_port, Some(30443));
    assert_eq!(
        d.endpoints[0].address,
        "edge-lb-control-plane.site.svc:30443"
    );
    // Pure: the same inputs, the same objects (the config hash included).
    let again = render(spec, &[]).unwrap();
    assert_eq!(
        format!("{:?}", again.deployments),
        format!("{:?}", d.deployments)
    );
}

#[test]
fn auth_takes_its_users_from_what_was_read_and_names_what_is_missing() {
    let spec =
        json!({"auth": [{"image": "dex:2.41", "staticConnector": {"usersSecret": "users"}}]});
    let users = r#"[{"email": "ops@example.org", "hash": "$2y$10$abc"}]"#;
    let read = AuthSecrets {
        users: Some(Ok(users.into())),
        bind_password: None,
    };
    let d = render(spec.clone(), &[read]).unwrap();
    let config = &d.secrets[0].string_data.as_ref().unwrap()["config.yaml"];
    let config: serde_json::Value = serde_json::from_str(config).unwrap();
    assert_eq!(config["staticPasswords"][0]["username"], "ops");
    assert_eq!(config["issuer"], "http://edge-auth.site.svc:5556/dex");
    let missing = AuthSecrets {
        users: Some(Err("Secret site/users not found".into())),
        bind_password: None,
    };
    assert_eq!(
        render(spec.clone(), &[missing]).unwrap_err(),
        "edge-auth: Secret site/users not found"
    );
    let garbled = AuthSecrets {
        users: Some(Ok("{not a list".into())),
        bind_password: None,
    };
    let e = render(spec, &[garbled]).unwrap_err();
    assert!(
        e.starts_with("edge-auth: Secret site/users key users: not a list"),
        "{e}"
    );
}

#[test]
fn a_worker_range_too_wide_or_a_host_without_its_address_is_an_error_naming_the_service() {
    let wide = json!({"loadBalancerWorker": [{"image": "haproxy", "nodePortRange": {"start": 30000, "end": 30300}}]});
    let e = render(wide, &[]).unwrap_err();
    assert!(
        e.starts_with("edge-lb-worker: nodePortRange 30000-30300"),
        "{e}"
    );
    let other_interface = json!({"loadBalancerControlPlane": [{"image": "haproxy", "nodePort": 30443,
                                                               "nodeInterfaceId": "pxe"}]});
    let e = render(other_interface, &[]).unwrap_err();
    assert!(
        e.starts_with("edge-lb-control-plane: host site/cp-0: "),
        "{e}"
    );
}

#[test]
fn the_jump_host_names_hosts_that_share_an_address_in_one_alias() {
    // Airship's sample hosts rdm9r006o001 and rdm9r007o001 share their oam-ipv4 address.
    let hosts = [
        ("site/cp-0".to_owned(), host("cp-0", "10.0.0.10")),
        ("site/cp-1".to_owned(), host("cp-1", "10.0.0.11")),
        ("site/cp-2".to_owned(), host("cp-2", "10.0.0.10")),
    ];
    let by_name: BTreeMap<String, &Observed> = hosts.iter().map(|(k, o)| (k.clone(), o)).collect();
    let roles = BTreeMap::from([(
        "ControlPlane".to_owned(),
        RoleHosts {
            active: vec!["site/cp-0".into(), "site/cp-1".into()],
            standby: vec!["site/cp-2".into()],
        },
    )]);
    let spec =
        json!({"jumpHost": [{"image": "quay.io/airshipit/jump-host:latest", "nodePort": 30000}]});
    let d = services(&sip(spec), "site", &roles, &by_name, &[]).unwrap();
    let pod = d.deployments[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let aliases: Vec<(String, Vec<String>)> = pod
        .host_aliases
        .as_ref()
        .unwrap()
        .iter()
        .map(|a| (a.ip.clone(), a.hostnames.clone().unwrap()))
        .collect();
    assert_eq!(
        aliases,
        [
            (
                "10.0.0.10".to_owned(),
                vec!["cp-0".to_owned(), "cp-2".to_owned()]
            ),
            ("10.0.0.11".to_owned(), vec!["cp-1".to_owned()]),
        ]
    );
}
